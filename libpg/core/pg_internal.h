/* pg_internal.h -- what libpg's parts share: the backend (communicator)
 * interface, the setup every backend gets, deadlines, reduction kernels.
 * Nothing here is installed. */
#ifndef PG_INTERNAL_H
#define PG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pg.h"

#define PG__HIDDEN __attribute__((visibility("hidden")))

/* ---- time ---------------------------------------------------------------
 * Deadlines are absolute CLOCK_MONOTONIC seconds. */
PG__HIDDEN double pg__now(void);

/* ---- errors --------------------------------------------------------------
 * Records a sentence for pg_last_error() (thread-local) and returns err,
 * so code can write: return pg__fail(-EINVAL, "MASTER_PORT is '%s'", v); */
PG__HIDDEN int pg__fail(int err, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

/* ---- topology -------------------------------------------------------------
 * Which ranks share a host, computed at init from every rank's host id. */
struct pg__topo {
  int rank, size;
  int nhosts;
  int *host_of;       /* [size]: host index of each rank (0..nhosts-1),
                         hosts numbered by their lowest rank */
  int *leader_of;     /* [nhosts]: lowest global rank on each host */
  int *local;         /* global ranks on this rank's host, ascending */
  int nlocal;
  int local_index;    /* this rank's index in local[] */
  int machine_ranks;  /* ranks under this rank's kernel (same boot id),
                         whatever their host ids: they share its CPUs */
};

/* What a backend needs to set itself up.  A communicator may span a
 * subset of the group: ranks[0..n-1] (global ranks, ascending); the
 * caller's position in it is me.  Ranks, roots and peers in the ops below
 * are positions in ranks[], not global ranks. */
struct pg__token;

struct pg__setup {
  pg_store *store;
  const char *ns;         /* store key namespace unique to this comm,
                             e.g. "pg/0/shm/host1/" */
  const struct pg__topo *topo;
  const int *ranks;
  int n;
  int me;
  double timeout;         /* seconds, default per operation */
  int device;             /* NCCL: pg_options.device, or -1 */
  const char *master_addr;  /* where rank 0 is reached (pg_options or
                               MASTER_ADDR): TCP listens on the address
                               that routes there; NULL: the hostname's */
  int local_rank;         /* NCCL: picks the device when device < 0 */
  const struct pg__token *token;  /* the job token (auth.h): TCP peers
                                     prove it in their hello */
  /* The op watch (hooks.h; live: Note [live sub-groups], live_hooks.c):
   * an op that waits for a peer that nothing else can tell is gone (a
   * connection it never made) calls watch(watch_arg) between slices;
   * nonzero: the error, with its sentence, to end the op with.  NULL: no
   * watch. */
  int (*watch)(void *arg);
  void *watch_arg;
  /* The cut watch (Note [a node cut off], live_cut.c): while *cut_armed,
   * a TCP wait sleeps in slices of PG__CUT_SLICE and asks
   * cut_ask(cut_arg) between them; nonzero: the error (with its
   * sentence) to end the op with.  cut_armed NULL: no cut watch. */
  const bool *cut_armed;
  int (*cut_ask)(void *arg);
  void *cut_arg;
};

/* The CUDA device of a process that sees ndev devices (Note [device
 * rule], device.c): requested >= 0 is taken as is; otherwise one visible
 * device is device 0, else local_rank modulo ndev. */
PG__HIDDEN int pg__pick_device(int requested, int local_rank, int ndev);

/* A stream-ordered backend's completion of one operation
 * (nccl/nccl_fence.c). */
struct pg__fence;

struct pg__comm;

/* A backend.  Every op is blocking, runs on one thread at a time (the
 * group's progress thread or, when the queue is empty, the caller's), and
 * must return by the deadline: -ETIMEDOUT, or -ECONNRESET when it can tell
 * a peer died.  After an error the comm may be unusable; the group then
 * fails every later op with PG_EPEERFAIL.
 *
 * Reductions: op may be PG_AVG (SUM then divide by n, see pg__avg_finish).
 * Buffers: send == recv means in place.  count == 0 must still synchronize
 * nothing and return 0 at once (every rank calls it). */
struct pg__comm_ops {
  const char *name;
  /* Capabilities: what the backend takes as it is, where the group
   * otherwise composes the operation (composed.c).  false on the CPU
   * backends (a zeroed field is the composed path).
   * in_place_gathers: all_gather with send == recv + rank * count and
   * reduce_scatter with recv == send + rank * count (Note [in-place
   * gathers]).  half_reductions: f16/bf16 reductions with its own
   * accumulation (Note [half precision]). */
  bool in_place_gathers;
  bool half_reductions;
  int (*all_reduce)(struct pg__comm *c, const void *send, void *recv,
                    size_t count, pg_dtype t, pg_op op, double deadline);
  int (*broadcast)(struct pg__comm *c, void *buf, size_t count, pg_dtype t,
                   int root, double deadline);
  int (*reduce)(struct pg__comm *c, const void *send, void *recv,
                size_t count, pg_dtype t, pg_op op, int root,
                double deadline);
  int (*all_gather)(struct pg__comm *c, const void *send, void *recv,
                    size_t count, pg_dtype t, double deadline);
  int (*reduce_scatter)(struct pg__comm *c, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_op op, double deadline);
  int (*barrier)(struct pg__comm *c, double deadline);
  int (*send)(struct pg__comm *c, const void *buf, size_t bytes, int peer,
              int tag, double deadline);
  int (*recv)(struct pg__comm *c, void *buf, size_t bytes, int peer,
              int tag, double deadline);
  void (*destroy)(struct pg__comm *c);
  /* Memory the backend's ops take (the reducer's buckets): NULL means host
   * memory (malloc/free/memset/memcpy); NCCL gives device memory. */
  void *(*mem_alloc)(struct pg__comm *c, size_t bytes);
  void (*mem_free)(struct pg__comm *c, void *p);
  int (*mem_zero)(struct pg__comm *c, void *p, size_t bytes);
  int (*mem_copy)(struct pg__comm *c, void *dst, const void *src,
                  size_t bytes);

  /* Stream-ordered backends (NCCL; NULL elsewhere), Note [stream model]
   * in nccl.c: the ops above enqueue their work after what the current
   * stream holds at the call and return without waiting for it.
   * set_stream: the caller's stream (a cudaStream_t; NULL: the legacy
   * default stream).  take_fence: the completion of the op just enqueued,
   * owned by the caller (NULL: the op enqueued nothing).  fence_query: 1
   * done, 0 not yet, or the op's error.  fence_wait: host = false makes
   * the current stream wait for it on the device and returns the error
   * known so far; host = true blocks up to timeout seconds (< 0: no
   * limit; -ETIMEDOUT, the work goes on).  group_start/group_end bracket
   * ops run as one NCCL group (ncclGroupStart/End); group_end's fence is
   * taken like an op's. */
  int (*set_stream)(struct pg__comm *c, void *stream);
  struct pg__fence *(*take_fence)(struct pg__comm *c);
  int (*fence_query)(struct pg__fence *f);
  int (*fence_wait)(struct pg__fence *f, bool host, double timeout);
  void (*fence_free)(struct pg__fence *f);
  int (*group_start)(struct pg__comm *c);
  int (*group_end)(struct pg__comm *c);

  /* A sub-group's communicator split from this one (NCCL: ncclCommSplit;
   * NULL where sub-groups are set up through the store instead).
   * Collective over every rank of c: a member passes its color, key and
   * the child's setup s; the others pass s == NULL and get nothing. */
  int (*split)(struct pg__comm *c, int color, int key,
               const struct pg__setup *s, struct pg__comm **out);

  /* Live recovery (pg_recover).  shrink: the next generation's
   * communicator made from this one when members only left:
   * excluded[0..nexcluded-1] are c's positions that are gone, s
   * describes the new communicator (the survivors, renumbered in their
   * order).  Collective over the survivors.  NULL: the group makes a new
   * communicator through the store instead.  NCCL: ncclCommShrink
   * (NCCL_SHRINK_ABORT after a failure).  revoke: a peer died; make
   * in-flight and later ops return at once so that the comm can be
   * shrunk or destroyed without waiting (NCCL: ncclCommRevoke, else
   * abort); NULL: nothing to do. */
  int (*shrink)(struct pg__comm *c, const int *excluded, int nexcluded,
                const struct pg__setup *s, struct pg__comm **out);
  void (*revoke)(struct pg__comm *c);
};

/* The group's memory functions (mem.c), following the comm's mem_* or
 * host memory (64-byte aligned). */
PG__HIDDEN void *pg__mem_alloc(pg_group *g, size_t bytes);
PG__HIDDEN void pg__mem_free(pg_group *g, void *p);
PG__HIDDEN int pg__mem_zero(pg_group *g, void *p, size_t bytes);
PG__HIDDEN int pg__mem_copy(pg_group *g, void *dst, const void *src,
                            size_t bytes);

struct pg__comm {
  const struct pg__comm_ops *ops;
};

/* Constructors; each is collective over setup->ranks.  Return 0 or an
 * error (with pg__fail's sentence). */
PG__HIDDEN int pg__shm_create(const struct pg__setup *s,
                              struct pg__comm **out);
PG__HIDDEN int pg__tcp_create(const struct pg__setup *s,
                              struct pg__comm **out);
/* Shared memory within each host, TCP between host leaders. */
PG__HIDDEN int pg__hier_create(const struct pg__setup *s,
                               struct pg__comm **out);
/* Returns -ENOTSUP when libpg was built without NCCL, -ENODEV without a
 * GPU. */
PG__HIDDEN int pg__nccl_create(const struct pg__setup *s,
                               struct pg__comm **out);
PG__HIDDEN bool pg__nccl_built(void);

/* ---- reduction kernels (reduce.c) --------------------------------------
 * op PG_AVG reduces like PG_SUM.  f16/bf16 are widened to f32 for each
 * step and rounded back to nearest even. */
PG__HIDDEN void pg__reduce(pg_dtype t, pg_op op, void *dst, const void *src,
                           size_t count);                 /* dst op= src */
PG__HIDDEN void pg__reduce3(pg_dtype t, pg_op op, void *dst, const void *a,
                            const void *b, size_t count); /* dst = a op b */
/* buf /= n, for PG_AVG once the SUM is complete. */
PG__HIDDEN void pg__avg_finish(pg_dtype t, void *buf, size_t count, int n);
PG__HIDDEN float pg__f16_to_f32(uint16_t h);
PG__HIDDEN uint16_t pg__f32_to_f16(float f);
PG__HIDDEN float pg__bf16_to_f32(uint16_t h);
PG__HIDDEN uint16_t pg__f32_to_bf16(float f);

/* pidfd.c: a close-on-exec pidfd for pid (readable once it exits), or
 * -1 (errno set) where the kernel has none. */
PG__HIDDEN int pg__pidfd_open(pid_t pid);

/* The CPUs this process may run on (its affinity mask). */
PG__HIDDEN int pg__usable_cpus(void);

/* ---- store internals ---------------------------------------------------- */
/* An all-gather over the store, used at setup: publishes value under
 * ns+prefix+me, then reads ns+prefix+i for i in 0..n-1 (n may be less
 * than the group: "the first n").  vals[i] are malloc'd; on error
 * nothing is left in vals. */
PG__HIDDEN int pg__store_allgather(pg_store *st, const char *ns,
                                   const char *prefix, int me, int n,
                                   const void *value, size_t len,
                                   double timeout, void **vals,
                                   size_t *lens);
/* A setup watch (live recovery, Note [setup watch] in recover.c): while
 * one is set on this thread, pg__store_allgather waits in slices and
 * asks it between them; a nonzero return (an error code with its
 * sentence) ends the wait with that error.  fn NULL: none. */
typedef int (*pg__setup_watch_fn)(void *arg);
PG__HIDDEN void pg__setup_watch(pg__setup_watch_fn fn, void *arg);
/* Whether a setup watch is set on this thread, and asking it: 0, or its
 * error (with its sentence); 0 without one.  For a backend's own waits
 * during setup (the TCP mesh's accepts and connects). */
PG__HIDDEN bool pg__setup_watched(void);
PG__HIDDEN int pg__setup_watch_ask(void);
/* How often a TCP wait asks an armed cut watch (struct pg__setup). */
#define PG__CUT_SLICE 0.1
/* Deletes every key of st that starts with prefix (a view's prefix
 * first); *n (may be NULL) gets how many.  -ENOTSUP (said) from a server
 * without the request. */
PG__HIDDEN int pg__store_delete_prefix(pg_store *st, const char *prefix,
                                       int64_t *n);
/* How many requests srv has served (a benchmark's count). */
PG__HIDDEN uint64_t pg__store_server_requests(const pg_store_server *srv);
/* Frees vals[0..n-1] (and NULLs them); vals may be NULL. */
PG__HIDDEN void pg__free_vals(void **vals, int n);

#endif
