/* group.h -- a group's state and one operation's description, shared by
 * the files that make up a group (nothing here is installed):
 *
 *   group.c       a group's making and end (pg_init/pg_destroy are
 *                 init.c's): options and environment, the store, the
 *                 choice of backend (pg__group_create_comm), the rebuild
 *                 registry (hooks.h)
 *   topo.c        which ranks share a host (struct pg__topo)
 *   work.c        the work queue and progress thread: every operation runs
 *                 in issue order, on the thread or inline (pg__work_submit);
 *                 pg_work_*, pg_set_stream, pg_group_start/pg_group_end
 *   work_check.c  an operation's arguments, checked before it is queued
 *   composed.c    one operation run on the backend, directly or composed
 *                 of other backend operations (pg__composed_run)
 *   subgroup.c    pg_new_group and pg_split (Note [sub-groups])
 *   api.c         the public operations: wrappers that describe a pg_work
 *   mem.c         the group's memory functions (pg__mem_*)
 *
 * Locking: g->mu guards the queue (head, tail, busy, stop, failed) and
 * each queued work's result; a backend op runs with g->mu NOT held, one at
 * a time (busy), except on stream-ordered backends where ops are enqueued
 * on the caller's thread under g->mu. */
#ifndef PG_GROUP_H
#define PG_GROUP_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "hooks.h"
#include "pg_internal.h"

enum work_kind {
  W_ALL_REDUCE, W_BROADCAST, W_REDUCE, W_ALL_GATHER, W_REDUCE_SCATTER,
  W_BARRIER, W_SEND, W_RECV, W_ALL_TO_ALL, W_GATHER, W_SCATTER,
};

/* The tag of the point-to-point messages that all_to_all, gather and
 * scatter are made of (Note [composed collectives]); refused from users. */
#define COMPOSED_TAG INT_MIN

struct pg_work {
  struct pg_group *g;
  enum work_kind kind;
  const void *send;
  void *recv;
  size_t count;
  pg_dtype dtype;
  pg_op op;
  int root;             /* root, or peer for send/recv */
  int tag;
  /* all_to_all_v: per-rank counts and displacements (elements); NULL
   * counts: every block is count elements. */
  const size_t *send_counts, *send_displs, *recv_counts, *recv_displs;
  int result;
  bool done;
  int refs;             /* the queue's and the caller's */
  char *why;            /* pg_last_error of a failed async op, for the
                           thread that waits for it */
  struct pg__fence *fence;  /* stream-ordered backends: its completion */
  struct pg_work *next;
};

struct pg_group {
  int rank, size;
  double timeout;
  pg_store *store;
  pg_store_server *server;      /* rank 0 serves the store */
  struct pg__topo topo;         /* the world group's; sub-groups use it */
  const struct pg__topo *wtopo; /* the world's topology */
  struct pg__comm *comm;        /* NULL for a group of one */
  char backend[16];
  int *all_ranks;               /* [size]: each member's world rank */
  /* Sub-groups (Note [sub-groups]): the store key namespace of this
   * group ("pg/" for the world, then "pg/g1/", "pg/g1/g3/", ...), how
   * many children it made, the user's view of the store (a sub-group's
   * keys live under its namespace), and what NCCL needs again. */
  char ns[256];
  int children;
  pg_store *user_store;
  bool is_sub;
  struct pg_group *split_from;  /* the parent whose comm is split */
  int split_color, split_key;
  pg_backend be;
  int device, local_rank;
  char launch_addr[256];        /* MASTER_ADDR derived from srun's env */
  char master_addr[256];        /* rank 0's address, as resolved */
  struct pg__token token;       /* the job token (auth.h); len 0: none */
  /* Note [floors] (hooks.h): the world group's hooks and the state of
   * the mode that attached them (NULL, NULL: a plain group); a
   * sub-group's world, and the mark its world's hooks put on it at its
   * creation (live: the generation it was made in). */
  const struct pg__hooks *hooks;
  void *upper;
  struct pg_group *world;
  uint64_t gen;
  /* The rebuild registry (hooks.h): the world group's. */
  struct pg__rebuild *rebuild;
  size_t nrebuild;

  pthread_mutex_t mu;
  pthread_cond_t queued;        /* work was queued, or stop */
  pthread_cond_t finished;      /* some work finished */
  pthread_t thread;
  struct pg_work *head, *tail;
  bool busy;                    /* an op is executing (thread or inline) */
  bool stop;
  int failed;                   /* first error: later ops fail fast */

  /* pg_group_start/end: the nesting depth; on the CPU backends the
   * grouped sends and receives, run at the end. */
  int grouping;
  struct pg_work *batch, *batch_tail;
};

/* Whether g's backend is stream-ordered (Note [stream model] in nccl.c):
 * its ops enqueue device work and hand back fences. */
static inline bool pg__group_stream_ordered(const pg_group *g)
{
  return g->comm && g->comm->ops->take_fence;
}

/* The hooks of g's world (NULL: none, or a sub-group destroyed after its
 * world). */
static inline const struct pg__hooks *pg__hooks_of(const pg_group *g)
{
  const pg_group *w = g->is_sub ? g->world : g;

  return w ? w->hooks : NULL;
}

/* The error an operation of g ends with (hooks.h, op_err). */
static inline int pg__group_op_err(const pg_group *g, int err)
{
  const struct pg__hooks *h = err ? pg__hooks_of(g) : NULL;

  return h ? h->op_err(g, err) : err;
}

/* Whether two byte ranges share a byte (empty ranges share none). */
static inline bool pg__group_overlap(const void *a, size_t alen,
                                     const void *b, size_t blen)
{
  const char *x = a, *y = b;

  return alen && blen && x < y + blen && y < x + alen;
}

/* ---- group.c ---------------------------------------------------------------
 * pg_init's parts (init.c): start makes the group from the options and
 * the environment and starts its progress thread (*out NULL on an error,
 * everything undone); setup then gives it its store, topology and
 * communicator, the plain way (a mode above the core may do its own
 * instead).  An error from setup leaves g for pg__group_setup_failed.
 * destroy is pg_destroy's body. */
struct pg__group_init {
  const char *addr;     /* MASTER_ADDR (NULL: none, a group of one) */
  int port;
  pg_backend be;
  int local_rank;
};
PG__HIDDEN int pg__group_start(const struct pg_options *o,
                               struct pg__group_init *in, pg_group **out);
PG__HIDDEN int pg__group_setup(pg_group *g, const struct pg_options *o,
                               const struct pg__group_init *in);
PG__HIDDEN void pg__group_destroy(pg_group *g);
/* Sets up g->comm for g's members (g->all_ranks, made 0..size-1 for the
 * world when NULL): NCCL (split from g->split_from when set), shared
 * memory when the members share one host, TCP when each is on a host of
 * its own, hierarchical otherwise; names g->backend.  Collective over the
 * members.  0 or an error with pg__fail's sentence. */
PG__HIDDEN int pg__group_create_comm(pg_group *g, pg_backend be, int device,
                                     int local_rank);
/* The setup of a communicator for g's members (g->all_ranks, g->wtopo,
 * g->device, ...) with store key namespace ns. */
PG__HIDDEN void pg__group_fill_setup(pg_group *g, const char *ns,
                                     struct pg__setup *s);
/* A group whose setup failed with err after its progress thread started:
 * torn down (pg_destroy), its sentence kept and prefixed by "what: " when
 * what is not NULL.  Returns err. */
PG__HIDDEN int pg__group_setup_failed(pg_group *g, int err,
                                      const char *what);
/* A group whose setup failed before its progress thread started: freed. */
PG__HIDDEN void pg__group_free_early(pg_group *g);

/* ---- topo.c ----------------------------------------------------------------
 * This kernel's boot id ("" if unknown): processes that share it share
 * the machine's CPUs, even in network namespaces posing as hosts. */
PG__HIDDEN void pg__topo_boot_id(char *out, size_t len);
/* The default host id: hostname plus boot id, so two containers with the
 * same hostname on different machines are not taken for one host. */
PG__HIDDEN void pg__topo_default_host_id(const char *boot, char *out,
                                         size_t len);
/* All-gathers every rank's host id and boot id over g->store and fills
 * g->topo.  Collective over the world.  0 or an error. */
PG__HIDDEN int pg__topo_build(pg_group *g, const char *host_id,
                              const char *boot);
/* Frees what pg__topo_build allocated and zeroes t. */
PG__HIDDEN void pg__topo_free(struct pg__topo *t);

/* ---- work.c ----------------------------------------------------------------
 * The progress thread's body (pthread_create's start routine, arg: the
 * group): runs queued work until g->stop and the queue is empty. */
PG__HIDDEN void *pg__work_progress_main(void *arg);
/* Checks proto and submits it: with out, queued (or enqueued on the
 * stream) and a handle in *out, owned by the caller (pg_work_free);
 * without, run to completion (inline when the queue is idle).  Between
 * pg_group_start and pg_group_end on a CPU backend, kept for the end.
 * proto is copied.  0 or an error with pg__fail's sentence. */
PG__HIDDEN int pg__work_submit(pg_group *g, const struct pg_work *proto,
                               pg_work **out);

/* ---- work_check.c ----------------------------------------------------------
 * 0 when w's arguments are valid for g (NULL g included), else -EINVAL
 * with a sentence naming the argument. */
PG__HIDDEN int pg__work_check(pg_group *g, const struct pg_work *w);

/* ---- composed.c ------------------------------------------------------------
 * Runs w on g's backend (or locally for a group of one) with the group's
 * timeout; called by one thread at a time.  0 or the backend's error. */
PG__HIDDEN int pg__composed_run(pg_group *g, struct pg_work *w);

#endif
