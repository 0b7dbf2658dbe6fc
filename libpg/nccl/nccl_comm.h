/* nccl_comm.h -- what the NCCL backend's files share (libpg/nccl/): a
 * communicator, an operation's completion (fence), and the failure path.
 * Internal to libpg; nothing here is part of pg.h.
 *
 * Contract: nccl_comm.c owns a comm's life (create, split, destroy) and
 * its failure path; nccl.c its ops, one NCCL call each, and the thread's
 * NCCL group; nccl_fence.c the ops' completions (fences); nccl_live.c
 * revokes and shrinks it for live recovery (Note [live
 * recovery]), and maps its errors then; nccl_watchdog.c runs
 * its watchdog thread (Note [watchdog]) between nccl_watchdog_start and
 * nccl_watchdog_stop; nccl_peers.c knows which members share this
 * machine and whether one died (live mode).  Errors are negative errno
 * (or PG_E* codes) with their sentence set through pg__fail. */
#ifndef NCCL_COMM_H
#define NCCL_COMM_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include <cuda_runtime.h>
/* nccl.h declares `ncclGroupStart()` without void; CUDA_HOME is not a
 * system include directory, so -Wstrict-prototypes would reject it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "pg_internal.h"

#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21400
#define PG_NCCL_NONBLOCKING 1  /* ncclConfig_t, ncclCommFinalize */
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21000
#define PG_NCCL_BF16_AVG 1     /* ncclBfloat16, ncclAvg */
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21300
#define PG_NCCL_LAST_ERROR 1   /* ncclGetLastError */
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21800
#define PG_NCCL_SPLIT 1        /* ncclCommSplit */
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22703 && \
    defined(NCCL_SHRINK_ABORT)
#define PG_NCCL_SHRINK 1       /* ncclCommShrink */
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22807 && \
    defined(NCCL_REVOKE_DEFAULT)
#define PG_NCCL_REVOKE 1       /* ncclCommRevoke */
#endif

#define WATCH_TICK_S 0.05      /* the watchdog's event polling period */
#define STORE_POLL_S 1.0       /* how often it reads <ns>abort, busy */
#define STORE_IDLE_S 5.0       /* and with nothing in flight */
#define STORE_POLL_LIVE_S 0.2  /* both, in live mode: a peer's death is
                                  news the survivors wait for */
#define EVENT_POOL 64          /* completion events kept for reuse */

struct nccl_comm;

/* One enqueued operation's completion (a pg__fence). */
struct pg__fence {
  struct nccl_comm *c;
  cudaEvent_t done;
  unsigned long long seq;
  const char *what;
  double deadline;
  double limit;          /* seconds from submit to deadline */
  int refs;              /* the in-flight list's, the holder's (wmu) */
  int result;            /* the failure, once known (wmu) */
  bool finished;         /* the event was reached (wmu) */
  bool listed;
  bool pending;          /* Note [group per thread]: not yet recorded */
  bool user_wait;        /* a device wait queued for the group end */
  struct pg__fence *next;
  struct pg__fence *group_next;  /* the thread's pending fences */
};

struct nccl_comm {
  struct pg__comm base;
  pthread_mutex_t mu;    /* the NCCL handle */
  ncclComm_t comm;       /* NULL once aborted; a split's or shrink's
                            child: NCCL writes it later (Note [child
                            handle]) */
  bool joining;          /* a split or shrink of this parent is in
                            progress: nothing else may use it (mu) */
  pthread_cond_t jcv;    /* joining ended (mu) */
  ncclComm_t nocolor;    /* where NCCL writes a non-member's (NULL)
                            child handle (Note [child handle]) */
  cudaStream_t stream;
  cudaEvent_t ready;     /* recorded on the caller's stream at submit */
  int *scratch;          /* one device int for barrier */
  int device, n, me;
  double timeout;
  bool blocking_wait;    /* $PG_NCCL_BLOCKING_WAIT=1 (or torch's) */
  bool spread;           /* $TORCH_NCCL_ASYNC_ERROR_HANDLING != 0 */
  bool sync_free;        /* no memory pools: cudaMalloc/cudaFree */
  cudaStream_t user;     /* the caller's stream; NULL: legacy */
  unsigned long long seq;
  int group_depth;
  struct pg__fence *last;  /* the last op's fence, not yet taken */

  pthread_mutex_t wmu;
  pthread_cond_t wcv;
  struct pg__fence *inflight;
  int failed;            /* first error (atomic) */
  char why[512];         /* its sentence (wmu) */
  bool stop;
  bool watching;
  pthread_t watchdog;
  pg_store *store;       /* NULL: a single member */
  char abort_key[512];
  bool live;             /* $CDRUN_RECOVERY=live (Note [live recovery]) */
  bool revoked;          /* stopped, handle kept for a shrink (mu) */
  pid_t *peer_pid;       /* [n]: members under this kernel and pid
                            namespace (nccl_peers.c), else 0 */
  int *peer_fd;          /* [n]: their pidfds, or -1 */
  cudaEvent_t pool[EVENT_POOL];  /* free completion events (wmu) */
  int npool;
  struct nccl_comm *next_comm;   /* the process's comms (comms_mu) */
};

/* ---- nccl_comm.c: the failure path ------------------------------------ */

/* The comm's first failure (0: none). */
int nccl_failed(struct nccl_comm *c);
/* Records an NCCL failure's sentence; returns its error. */
int nccl_fail(struct nccl_comm *c, ncclResult_t r, const char *what);
/* Records a CUDA failure's sentence (clearing it unless sticky); returns
 * its error. */
int nccl_cuda_fail(struct nccl_comm *c, cudaError_t e, const char *what);
/* The submitting thread's failure (mu held; err's sentence recorded):
 * marks, publishes and stops the comm; returns err as c reports it. */
int nccl_fail_locked(struct nccl_comm *c, int err);
/* Records the comm's first failure, fails its fences, publishes it
 * (publish: under <ns>abort) and fails the process's other comms. */
void nccl_mark_failed(struct nccl_comm *c, int err, const char *why,
                      bool publish);
/* Aborts the NCCL communicator (mu held). */
void nccl_abort_locked(struct nccl_comm *c);
/* nccl_mark_failed, then the stop (mu not held). */
void nccl_fail_abort(struct nccl_comm *c, int err, const char *why,
                     bool publish);

/* ---- nccl_comm.c: what nccl_live.c shares with setup ------------------ */

/* Note [backoff]: a small collective finishes in microseconds and a
 * sleep costs tens of microseconds of timer slack, so spin first; then
 * sleep 20 us doubling to 1 ms, so a long wait costs no CPU. */
struct nccl_backoff {
  double spin_until;
  long ns;
};
void nccl_backoff_init(struct nccl_backoff *b);
void nccl_backoff_wait(struct nccl_backoff *b, double now);
/* Switches to c's device; *prev gets the caller's (-1: same).  0 or an
 * error with its sentence. */
int nccl_enter(struct nccl_comm *c, int *prev);
/* Gives the thread back the device it had (prev < 0: unchanged); err. */
int nccl_leave(int prev, int err);
/* The stream c's ops are ordered after: the caller's (pg_set_stream),
 * else its per-thread default stream (Note [stream model] in nccl.c). */
cudaStream_t nccl_user_stream(struct nccl_comm *c);
/* A communicator's host side, before NCCL or CUDA know of it (NULL:
 * out of memory). */
struct nccl_comm *nccl_comm_alloc(const struct pg__setup *s, int dev);
/* c's stream, event and scratch buffer on its device. */
int nccl_init_cuda(struct nccl_comm *c);
/* Waits out an ncclInProgress answer r (mu held): 0, or the comm fails. */
int nccl_settle(struct nccl_comm *c, ncclResult_t r, const char *what,
                double deadline);
/* Note [child handle]: waits out parent p's split or shrink whose NCCL
 * call answered r, the child's handle going to *slot (c->comm of the
 * child, or p->nocolor).  Entered and left with p->mu held and
 * p->joining set; mu is released while waiting.  0 once the job ended
 * well (*slot then holds the child, not yet ready), else p is failed and
 * stopped (NCCL has written *slot by then) and the error returned.
 * shrink: p failed before, as a shrink's parent does; a split's parent
 * failing meanwhile ends the wait. */
int nccl_child_join(struct nccl_comm *p, ncclResult_t r, const char *what,
                    double deadline, bool shrink);
/* Waits (mu held) until no split or shrink of c is in progress. */
void nccl_wait_joined(struct nccl_comm *c);
/* Ends p's split or shrink (mu held): wakes the waiting users. */
void nccl_joined(struct nccl_comm *p);
/* The last step of making c: its watchdog, or on err its end; restores
 * the device prev and sets *out on success. */
int nccl_comm_start(struct nccl_comm *c, int err, int prev,
                    struct pg__comm **out);

/* ---- nccl_comm.c: the pg__comm ops of a comm's life (nccl_ops) -------- */

void nccl_destroy(struct pg__comm *base);
void *nccl_mem_alloc(struct pg__comm *base, size_t bytes);
void nccl_mem_free(struct pg__comm *base, void *p);
int nccl_mem_zero(struct pg__comm *base, void *p, size_t bytes);
int nccl_mem_copy(struct pg__comm *base, void *dst, const void *src,
                  size_t bytes);
#ifdef PG_NCCL_SPLIT
int nccl_split(struct pg__comm *base, int color, int key,
               const struct pg__setup *s, struct pg__comm **out);
#endif

/* ---- nccl_fence.c -------------------------------------------------------- */

/* Drops a fence reference (wmu held): the fence, if it must be freed by
 * nccl_fence_destroy (outside wmu). */
struct pg__fence *nccl_fence_unref_locked(struct pg__fence *f);
void nccl_fence_destroy(struct pg__fence *f);
/* Records the fence of the op just enqueued on c's stream, or (Note
 * [group per thread]) of one inside another comm's group, recorded at
 * the thread's group end.  mu held; 0, or the comm fails. */
int nccl_track(struct nccl_comm *c, const char *what, double deadline);
int nccl_track_pending(struct nccl_comm *c, const char *what,
                       double deadline);
/* At the thread's outermost group end: records its pending fences, each
 * failing with err (else PG_EPEERFAIL) unless launched and err is 0. */
void nccl_fences_flush(struct nccl_comm *c, bool launched, int err);
/* The pg__comm fence ops (nccl_ops). */
struct pg__fence *nccl_take_fence(struct pg__comm *base);
int nccl_fence_query(struct pg__fence *f);
int nccl_fence_wait(struct pg__fence *f, bool host, double timeout);
void nccl_fence_free(struct pg__fence *f);

/* ---- nccl.c -------------------------------------------------------------- */

/* The backend's op table (nccl_comm_alloc gives it to every comm). */
extern const struct pg__comm_ops nccl_ops;
/* How deep this thread is in pg_group_start (Note [group per thread]). */
int nccl_group_depth(void);

/* ---- nccl_live.c (Note [live recovery]) -------------------------------- */

/* Stops a failed comm's NCCL work (mu held): in live mode revokes it
 * (the handle stays, to be shrunk), else aborts it. */
void nccl_stop_locked(struct nccl_comm *c);
/* err as c reports it: in live mode an error caused by a peer (a
 * timeout, a peer's published failure, ncclRemoteError, a reset) is
 * PG_ERR_PEER_LOST; otherwise err. */
int nccl_live_error(const struct nccl_comm *c, int err);
/* The pg__comm_ops revoke and shrink hooks (pg_recover). */
void nccl_revoke(struct pg__comm *base);
#ifdef PG_NCCL_SHRINK
int nccl_shrink(struct pg__comm *base, const int *excluded, int nexcluded,
                const struct pg__setup *s, struct pg__comm **out);
#endif

/* ---- nccl_peers.c (live mode; nothing elsewhere) ----------------------- */

/* Collective over s's members: learns which of them run under this
 * kernel and pid namespace, and opens a pidfd for each (through the
 * store, under <ns>peer/).  0, or an error with its sentence. */
int nccl_peers_share(struct nccl_comm *c, const struct pg__setup *s,
                     double deadline);
/* c's members from its shrunk parent p (excluded: sorted positions of
 * p that left).  0 or -ENOMEM. */
int nccl_peers_inherit(struct nccl_comm *c, const struct nccl_comm *p,
                       const int *excluded, int nexcluded);
/* The first member whose process is gone (exited or killed), or -1. */
int nccl_peers_dead(const struct nccl_comm *c);
void nccl_peers_free(struct nccl_comm *c);

/* ---- nccl_watchdog.c ------------------------------------------------------ */

/* Starts c's watchdog thread: 0, or -EAGAIN with its sentence. */
int nccl_watchdog_start(struct nccl_comm *c);
/* Stops and joins it (nothing if it never started). */
void nccl_watchdog_stop(struct nccl_comm *c);

#endif
