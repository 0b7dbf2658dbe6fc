/* shm_internal.h -- what the shared-memory backend's files share
 * (libpg/cpu/shm*.c): a communicator and the parts of its segment that
 * more than one of them touches, the futex words' helpers, and the calls
 * that cross.  shm.c makes the segment (Note [shm segment]), waits on
 * it (Note [waiting]) and fails it; shm_coll.c runs the collectives (Note
 * [phases], Note [algorithms]); shm_ring.c sends and receives. */
#ifndef PG_SHM_INTERNAL_H
#define PG_SHM_INTERNAL_H

#include <limits.h>
#include <linux/futex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "pg_internal.h"

#define LINE 128                  /* two cache lines: adjacent-line prefetch */
#define NBUF 2

struct shm_hdr;
struct shm_abort;

struct shm_rank {
  uint32_t seq;           /* phases entered (futex word), written by owner */
  int32_t pid;
  uint32_t left;          /* 1: the owner destroyed the comm (Note [left]) */
  char pad1[LINE - 12];
  uint32_t waiters;       /* ranks sleeping on seq */
  char pad2[LINE - 4];
};

/* Control of the ring s -> d. */
struct shm_ring {
  uint32_t tail;          /* bytes written, by s */
  uint32_t head_waiters;  /* s sleeping on head */
  char pad1[LINE - 8];
  uint32_t head;          /* bytes consumed, by d */
  uint32_t tail_waiters;  /* d sleeping on tail */
  char pad2[LINE - 8];
};

/* A message read from a ring before anyone asked for its tag. */
struct unexpected {
  struct unexpected *next;
  int tag;
  size_t len;
  char data[];
};

struct shm_comm {
  struct pg__comm base;
  int n, me;
  char *map;
  size_t map_len;
  struct shm_hdr *hdr;
  struct shm_abort *ab;
  struct shm_rank *rk;
  struct shm_ring *rc;
  char *bufs, *rings;
  size_t buf, ring, small_max;
  size_t buf_knob;                 /* $PG_SHM_BUF, 0: unset */
  uint32_t seq;
  uint64_t chunk;
  uint32_t free_at[NBUF];
  uint32_t *tx_tail, *rx_head;     /* [n]: my ends of each ring */
  struct unexpected **uq;          /* [n]: per sender, in arrival order */
  struct unexpected **part;        /* [n]: message being drained, or NULL */
  size_t *part_got;                /* [n]: its bytes read so far */
  bool draining;                   /* a send waits: drain_all while waiting */
  pid_t *pid;
  int *pidfd;
  bool spin;
  int err;
  const char *what;                /* the op running, for messages */
};

static inline uint32_t load_acq(const uint32_t *w)
{
  return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

static inline void futex_wake(uint32_t *w)
{
  syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Stores v in w and wakes its sleepers, if any.  The seq_cst store and
 * load pair with the waiter's seq_cst increment and load (Dekker): either
 * the waiter sees v, or we see it counted. */
static inline void publish(uint32_t *w, uint32_t *waiters, uint32_t v)
{
  __atomic_store_n(w, v, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(waiters, __ATOMIC_SEQ_CST))
    futex_wake(w);
}

/* ---- shm.c ------------------------------------------------------------- */

/* Marks the comm failed, here and for every peer, and returns err (the
 * caller has set the sentence). */
int shm_poison(struct shm_comm *c, int err);
/* 0, or PG_EPEERFAIL with its sentence once the comm failed. */
int shm_ok_before(struct shm_comm *c);
/* Waits until *w >= target (mod 2^32) (Note [waiting]); peer is whose
 * word it is.  0, or the comm fails with -ETIMEDOUT or -ECONNRESET. */
int shm_wait_ge(struct shm_comm *c, uint32_t *w, uint32_t *waiters,
                uint32_t target, int peer, double deadline);

/* ---- shm_coll.c: the collective ops (shm_ops) -------------------------- */

int shm_all_reduce(struct pg__comm *pc, const void *send, void *recv,
                   size_t count, pg_dtype t, pg_op op, double deadline);
int shm_reduce(struct pg__comm *pc, const void *send, void *recv,
               size_t count, pg_dtype t, pg_op op, int root,
               double deadline);
int shm_reduce_scatter(struct pg__comm *pc, const void *send, void *recv,
                       size_t count, pg_dtype t, pg_op op, double deadline);
int shm_broadcast(struct pg__comm *pc, void *buf, size_t count, pg_dtype t,
                  int root, double deadline);
int shm_all_gather(struct pg__comm *pc, const void *send, void *recv,
                   size_t count, pg_dtype t, double deadline);
int shm_barrier(struct pg__comm *pc, double deadline);

/* ---- shm_ring.c: point to point (shm_ops) ------------------------------ */

/* Moves what every peer has written to this rank so far into its
 * unexpected queue, without waiting: a send waiting for room does so
 * meanwhile.  >= 0, or an error. */
int shm_drain_all(struct shm_comm *c);
int shm_send(struct pg__comm *pc, const void *buf, size_t bytes, int peer,
             int tag, double deadline);
int shm_recv(struct pg__comm *pc, void *buf, size_t bytes, int peer, int tag,
             double deadline);

#endif
