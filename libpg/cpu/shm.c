/* shm.c -- the shared-memory communicator: every rank of the comm on one
 * host, all data through one POSIX shm segment.
 *
 * Note [shm segment]: local rank 0 creates "/pg-<random>-<pid>" (O_EXCL),
 * reserves its pages (posix_fallocate: a full /dev/shm fails here with
 * ENOSPC, not later with SIGBUS; smaller buffers are tried then) and
 * publishes name and sizes through the store; the others open and map it;
 * after a second exchange (everyone mapped, or someone failed) rank 0
 * unlinks it.  From then on only the mappings hold it: nothing is left in
 * /dev/shm however the processes end.
 *
 * Note [stale segments]: before that unlink the name is the only thing
 * that holds the segment, and a rank 0 SIGKILLed in between (inside
 * pg_init, during pg_recover's rebuild) would leave it in /dev/shm for
 * good.  So whoever can unlinks it: every rank that mapped the segment
 * unlinks the name once the second exchange is over, whether it
 * succeeded (all have mapped it: rank 0 may have died since it said so)
 * or failed (rank 0 may have died before; the first unlink wins, the
 * others find nothing); and
 * every rank 0, before it creates a segment, sweeps /dev/shm for this
 * user's "pg-" segments whose creator's pid is gone, as Note [stale
 * cgroups] does for cgroups.  A name's first 32 bits of "random" are the
 * creator's pid namespace (the low bits of its inode), so that a sweep
 * never judges a pid of another namespace, whose segment it would take
 * from under a setup in progress; a live creator's pid exists, and one
 * that died leaves mappings (if any) that need no name.  Layout, each
 * part aligned to LINE:
 *
 *   header | abort line | rank[n] (seq line + waiters line) |
 *   ring control[n*n] (sender line + receiver line) |
 *   buffers[n][NBUF] (buf bytes each) | rings[n*n] (ring bytes each)
 *
 * Note [phases]: collectives advance in phases.  Every rank runs the same
 * sequence of phases (it depends only on the op, count, dtype and n) and
 * publishes its own counter seq = number of phases it has entered.  A rank
 * writes data only into its own buffers, and only before publishing the
 * phase the data belongs to; a reader waits until the writer's seq reaches
 * that phase, and finishes reading before it publishes its next phase.
 * So data written in phase v is free again once every rank's seq >= v + 1;
 * each buffer remembers that number (free_at) and a writer waits for it
 * before reusing the buffer (with two buffers, alternated, it almost never
 * waits).  Counters are 32-bit (futex words) and compared modulo 2^32.
 *
 * Note [algorithms]: all_reduce up to small_max bytes: everyone copies its
 * input into its buffer, publishes, and reduces all n buffers in rank order
 * (one phase; every rank computes the same bits).  Larger: a reduce-scatter
 * + all-gather, pipelined in chunks of up to n slices (a chunk of every
 * rank fits its buffer, which stays in cache); per chunk, phase A: copy the
 * slices the other ranks reduce into my buffer; phase B: reduce my slice
 * (in rank order: the serial left fold, so every element has one writer
 * and all ranks get the same bits) into my own buffer's slice and, while
 * it is in cache, into my output; then copy the other slices out.  reduce
 * is the same with only the root reducing (small) or copying out (large);
 * reduce_scatter is phase A plus reducing straight into recv; broadcast
 * and all_gather copy through the writer's buffer, one phase per chunk.
 * send/recv use a byte ring per ordered pair (header: tag and length; a
 * message that does not match the tag asked for is moved into a private
 * queue; a message larger than the ring streams through it).  A send
 * waiting for room drains every incoming ring into that queue meanwhile
 * (as the TCP backend does), so ranks that send each other large messages
 * before receiving, in a pair or a cycle, do not wait on each other.
 *
 * Note [waiting]: spin for SPIN_S (only when ranks do not outnumber the
 * CPUs we may run on), then yield with short spins in between until
 * YIELD_S (the peer may need this very CPU), then sleep on the counter
 * word with FUTEX_WAIT (shared futexes: the word lives in the segment)
 * for at most SLEEP_SLICE at a time; a writer calls FUTEX_WAKE only when
 * the word's waiters count says someone sleeps.
 * Between sleeps a waiter checks the deadline, the abort word, and whether
 * the peer it waits for died (a pidfd per peer, readable once the process
 * is gone, zombie or not; kill(pid, 0) where pidfd_open is missing).  The first rank that
 * fails sets the abort word and wakes every sleeper, so the others fail at
 * once instead of at their own deadlines; a failed comm fails every later
 * op. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "knobs.h"
#include "num.h"
#include "pg_internal.h"

#define LINE 128                  /* two cache lines: adjacent-line prefetch */
#define NBUF 2
#define SHM_MAGIC 0x70677368u     /* "pgsh" */
#define SHM_VERSION 1u
#define MSG_MAGIC 0x6d736731u

#define BUF_DEFAULT (512u << 10)
#define BUF_MIN (64u << 10)
#define SEG_CAP ((size_t)256 << 20)   /* n * NBUF * buf at most */
#define RING_TOTAL ((size_t)4 << 20)
#define RING_MAX (256u << 10)
#define RING_MIN (4u << 10)
/* all_reduce/reduce in one phase up to this many bytes (Note
 * [algorithms]).  With a CPU per rank the two-phase path catches up early
 * (it reads less of the peers' data): SMALL_SPIN; when ranks outnumber
 * CPUs every phase costs a context switch, so one phase wins further:
 * SMALL_SLEEP. */
#define SMALL_SPIN 2048u
#define SMALL_SLEEP 8192u

#define SPIN_S 10e-6        /* pure spinning */
#define YIELD_S 1e-3        /* then yielding, then futex sleeps of */
#define SLEEP_SLICE 0.010   /* at most this (liveness checks between) */
#define DRAIN_SLICE 0.001   /* the same for a send draining its inbox */

struct shm_hdr {
  uint32_t magic, version, n, nbuf;
  uint64_t size, buf, ring;
};

struct shm_abort {
  uint32_t word;          /* 0, or 1 + the rank that failed first */
  int32_t err;
};

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

struct msg_hdr {
  uint64_t len;
  int32_t tag;
  uint32_t magic;
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

static const struct pg__comm_ops shm_ops;

/* ---- small helpers ----------------------------------------------------------- */

static inline bool ge32(uint32_t a, uint32_t b)
{
  return (int32_t)(a - b) >= 0;
}

static inline uint32_t load_acq(const uint32_t *w)
{
  return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

static void futex_wake(uint32_t *w)
{
  syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait(uint32_t *w, uint32_t val, double secs)
{
  struct timespec ts;

  if (secs < 0)
    secs = 0;
  ts.tv_sec = (time_t)secs;
  ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
  syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0);
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

static inline char *buf_of(struct shm_comm *c, int r, int b)
{
  return c->bufs + ((size_t)r * NBUF + (size_t)b) * c->buf;
}

static inline struct shm_ring *ring_ctl(struct shm_comm *c, int s, int d)
{
  return &c->rc[(size_t)s * (size_t)c->n + (size_t)d];
}

static inline char *ring_data(struct shm_comm *c, int s, int d)
{
  return c->rings + ((size_t)s * (size_t)c->n + (size_t)d) * c->ring;
}

/* ---- failure -------------------------------------------------------------- */

static void wake_everyone(struct shm_comm *c)
{
  int i;

  for (i = 0; i < c->n; i++)
    futex_wake(&c->rk[i].seq);
  for (i = 0; i < c->n * c->n; i++) {
    futex_wake(&c->rc[i].tail);
    futex_wake(&c->rc[i].head);
  }
}

/* Marks the comm failed, here and for every peer, and returns err (the
 * caller has set the sentence). */
static int poison(struct shm_comm *c, int err)
{
  uint32_t zero = 0;

  c->err = err;
  if (__atomic_compare_exchange_n(&c->ab->word, &zero, (uint32_t)c->me + 1,
                                  false, __ATOMIC_SEQ_CST,
                                  __ATOMIC_SEQ_CST)) {
    __atomic_store_n(&c->ab->err, err, __ATOMIC_RELAXED);
    wake_everyone(c);
  }
  return err;
}

static int check_abort(struct shm_comm *c)
{
  uint32_t w = __atomic_load_n(&c->ab->word, __ATOMIC_ACQUIRE);
  int r, err;

  if (w == 0)
    return 0;
  r = (int)w - 1;
  err = __atomic_load_n(&c->ab->err, __ATOMIC_RELAXED);
  c->err = -ECONNRESET;
  return pg__fail(-ECONNRESET,
                  "shm: rank %d (pid %d) failed (%s) and aborted the "
                  "communicator during %s",
                  r, (int)c->pid[r], pg_err_name(err), c->what);
}

/* Whether rank r's process is gone (exited, killed, a zombie).  Only the
 * rank waited for is checked: a rank that finished its part and exited is
 * no failure, and one that waits for a dead rank finds out itself and
 * aborts the comm. */
static bool peer_dead(struct shm_comm *c, int r)
{
  struct pollfd pfd;

  if (r == c->me || c->pid[r] <= 0)
    return false;
  if (c->pidfd[r] >= 0) {
    pfd.fd = c->pidfd[r];
    pfd.events = POLLIN;
    pfd.revents = 0;
    return poll(&pfd, 1, 0) > 0 && pfd.revents != 0;
  }
  return kill(c->pid[r], 0) < 0 && errno == ESRCH;
}

static int ok_before(struct shm_comm *c)
{
  if (c->err)
    return pg__fail(PG_EPEERFAIL, "shm: the communicator failed earlier (%s)",
                    pg_err_name(c->err));
  return 0;
}

static int drain_all(struct shm_comm *c);

/* Waits until *w >= target (mod 2^32); peer is whose word it is. */
static int wait_ge(struct shm_comm *c, uint32_t *w, uint32_t *waiters,
                   uint32_t target, int peer, double deadline)
{
  double start, now;
  int i, err;
  bool slept_out = false;

  if (ge32(load_acq(w), target))
    return 0;
  start = pg__now();
  /* Spin, when every rank can have a CPU of its own. */
  while (c->spin) {
    for (i = 0; i < 64; i++) {
      if (ge32(load_acq(w), target))
        return 0;
      cpu_relax();
    }
    if ((err = check_abort(c)) != 0)
      return err;
    now = pg__now();
    if (now - start > SPIN_S || now >= deadline)
      break;
  }
  /* Yield with short spins in between: the peer may be waiting for this
   * very CPU (other load, or more ranks than CPUs). */
  for (;;) {
    sched_yield();
    for (i = 0; i < 16; i++) {
      if (ge32(load_acq(w), target))
        return 0;
      cpu_relax();
    }
    if ((err = check_abort(c)) != 0)
      return err;
    if (c->draining && (err = drain_all(c)) < 0)
      return err;
    now = pg__now();
    if (now - start > YIELD_S || now >= deadline)
      break;
  }
  for (;;) {
    uint32_t v;

    if ((err = check_abort(c)) != 0)
      return err;
    if (c->draining && (err = drain_all(c)) < 0)
      return err;
    now = pg__now();
    if (now >= deadline) {
      if (ge32(load_acq(w), target))
        return 0;
      pg__fail(-ETIMEDOUT, "shm: %s timed out waiting for rank %d (pid %d)",
               c->what, peer, (int)c->pid[peer]);
      return poison(c, -ETIMEDOUT);
    }
    if (slept_out && peer_dead(c, peer)) {
      if (ge32(load_acq(w), target))
        return 0;
      pg__fail(-ECONNRESET, "shm: rank %d (pid %d) died during %s", peer,
               (int)c->pid[peer], c->what);
      return poison(c, -ECONNRESET);
    }
    if (__atomic_load_n(&c->rk[peer].left, __ATOMIC_ACQUIRE)) {
      if (ge32(load_acq(w), target))
        return 0;
      pg__fail(-ECONNRESET, "shm: rank %d (pid %d) left the communicator "
               "(pg_destroy) during %s", peer, (int)c->pid[peer], c->what);
      return poison(c, -ECONNRESET);
    }
    __atomic_add_fetch(waiters, 1, __ATOMIC_SEQ_CST);
    v = __atomic_load_n(w, __ATOMIC_SEQ_CST);
    if (!ge32(v, target)) {
      /* A draining sender is not woken by incoming data: look often. */
      double cap = c->draining ? DRAIN_SLICE : SLEEP_SLICE;
      double slice = deadline - now < cap ? deadline - now : cap;

      futex_wait(w, v, slice);
      slept_out = pg__now() - now >= slice * 0.9;
    }
    __atomic_sub_fetch(waiters, 1, __ATOMIC_SEQ_CST);
    if (ge32(load_acq(w), target))
      return 0;
  }
}

/* ---- phases (Note [phases]) ----------------------------------------------- */

static inline void phase(struct shm_comm *c)
{
  c->seq++;
  publish(&c->rk[c->me].seq, &c->rk[c->me].waiters, c->seq);
}

static int wait_rank(struct shm_comm *c, int r, uint32_t target,
                     double deadline)
{
  return wait_ge(c, &c->rk[r].seq, &c->rk[r].waiters, target, r, deadline);
}

static int wait_all(struct shm_comm *c, uint32_t target, double deadline)
{
  int r, err;

  for (r = 0; r < c->n; r++)
    if (r != c->me && (err = wait_rank(c, r, target, deadline)) != 0)
      return err;
  return 0;
}

/* The next buffer index, once every reader of its last contents is done. */
static int next_buf(struct shm_comm *c, double deadline, int *err)
{
  int b = (int)(c->chunk++ % NBUF);

  *err = wait_all(c, c->free_at[b], deadline);
  return b;
}

/* dst = srcs[0] op srcs[1] op ... in that order.  dst must not alias a
 * source other than srcs[0] or srcs[1] (the callers give disjoint ones). */
static void reduce_n(pg_dtype t, pg_op op, void *dst, const void *const *srcs,
                     int n, size_t count)
{
  int i;

  if (n == 1) {
    if (dst != srcs[0])
      memmove(dst, srcs[0], count * pg_dtype_size(t));
    return;
  }
  pg__reduce3(t, op, dst, srcs[0], srcs[1], count);
  for (i = 2; i < n; i++)
    pg__reduce(t, op, dst, srcs[i], count);
}

static bool valid(pg_dtype t, pg_op op)
{
  return (unsigned)t < PG_DTYPE_COUNT && (unsigned)op < PG_OP_COUNT;
}

/* Slices of a chunk: elements [r * s, min((r + 1) * s, c)) for rank r. */
static inline size_t slice_len(size_t c, size_t s, int r)
{
  size_t lo = (size_t)r * s;

  return lo >= c ? 0 : (c - lo < s ? c - lo : s);
}

/* Elements per slice for a chunk of c, at most smax, a multiple of 16
 * where that fits (whole vectors, whole cache lines). */
static inline size_t slice_of(size_t c, int n, size_t smax)
{
  size_t s = (c + (size_t)n - 1) / (size_t)n;

  s = (s + 15) & ~(size_t)15;
  return s < smax ? s : smax;
}

static size_t slice_max(struct shm_comm *c, size_t esz)
{
  size_t s = c->buf / ((size_t)c->n * esz);

  return s >= 16 ? s & ~(size_t)15 : s;
}

/* ---- all_reduce / reduce -------------------------------------------------------- */

/* One phase: everyone publishes its whole input; all (or only root >= 0)
 * reduce all n buffers in rank order. */
static int reduce_small(struct shm_comm *c, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_op op, int root,
                        double deadline)
{
  size_t bytes = count * pg_dtype_size(t);
  const void *srcs[c->n];
  int b, r, err;

  b = next_buf(c, deadline, &err);
  if (err)
    return err;
  memcpy(buf_of(c, c->me, b), send, bytes);
  phase(c);
  c->free_at[b] = c->seq + 1;
  if (root >= 0 && root != c->me)
    return 0;
  if ((err = wait_all(c, c->seq, deadline)) != 0)
    return err;
  for (r = 0; r < c->n; r++)
    srcs[r] = buf_of(c, r, b);
  reduce_n(t, op, recv, srcs, c->n, count);
  if (op == PG_AVG)
    pg__avg_finish(t, recv, count, c->n);
  return 0;
}

/* Chunked reduce-scatter + all-gather (root < 0) or + gather to root. */
static int reduce_large(struct shm_comm *c, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_op op, int root,
                        double deadline)
{
  size_t esz = pg_dtype_size(t), smax = slice_max(c, esz);
  size_t chunk = smax * (size_t)c->n, off, cn, s, lo, m;
  const char *in = send;
  char *out = recv;
  const void *srcs[c->n];
  int b, r, err, me = c->me;

  for (off = 0; off < count; off += cn) {
    char *mine;

    cn = count - off < chunk ? count - off : chunk;
    s = slice_of(cn, c->n, smax);
    b = next_buf(c, deadline, &err);
    if (err)
      return err;
    mine = buf_of(c, me, b);
    /* Phase A: the slices the others reduce. */
    for (r = 0; r < c->n; r++)
      if (r != me && (m = slice_len(cn, s, r)) != 0)
        memcpy(mine + (size_t)r * s * esz, in + (off + (size_t)r * s) * esz,
               m * esz);
    phase(c);
    if ((err = wait_all(c, c->seq, deadline)) != 0)
      return err;
    /* Phase B: my slice, in rank order, into my own buffer (and, while
     * it is still in cache, into my output). */
    lo = (size_t)me * s;
    if ((m = slice_len(cn, s, me)) != 0) {
      for (r = 0; r < c->n; r++)
        srcs[r] = r == me ? in + (off + lo) * esz : buf_of(c, r, b) + lo * esz;
      reduce_n(t, op, mine + lo * esz, srcs, c->n, m);
      if (op == PG_AVG)
        pg__avg_finish(t, mine + lo * esz, m, c->n);
      if (root < 0 || root == me)
        memcpy(out + (off + lo) * esz, mine + lo * esz, m * esz);
    }
    phase(c);
    c->free_at[b] = c->seq + 1;
    if (root >= 0 && root != me)
      continue;
    if ((err = wait_all(c, c->seq, deadline)) != 0)
      return err;
    for (r = 0; r < c->n; r++)
      if (r != me && (m = slice_len(cn, s, r)) != 0)
        memcpy(out + (off + (size_t)r * s) * esz,
               buf_of(c, r, b) + (size_t)r * s * esz, m * esz);
  }
  return 0;
}

static int shm_all_reduce(struct pg__comm *pc, const void *send, void *recv,
                          size_t count, pg_dtype t, pg_op op, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  size_t bytes = count * pg_dtype_size(t);
  int err;

  if (!valid(t, op))
    return pg__fail(-EINVAL, "shm: all_reduce: bad dtype or op");
  if ((err = ok_before(c)) != 0 || count == 0)
    return err;
  c->what = "all_reduce";
  if (c->n == 1) {
    if (recv != send)
      memmove(recv, send, bytes);
    return 0;
  }
  if (bytes <= c->small_max)
    return reduce_small(c, send, recv, count, t, op, -1, deadline);
  return reduce_large(c, send, recv, count, t, op, -1, deadline);
}

static int shm_reduce(struct pg__comm *pc, const void *send, void *recv,
                      size_t count, pg_dtype t, pg_op op, int root,
                      double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  size_t bytes = count * pg_dtype_size(t);
  int err;

  if (!valid(t, op) || root < 0 || root >= c->n)
    return pg__fail(-EINVAL, "shm: reduce: bad dtype, op or root %d", root);
  if ((err = ok_before(c)) != 0 || count == 0)
    return err;
  c->what = "reduce";
  if (c->n == 1) {
    if (recv != send)
      memmove(recv, send, bytes);
    return 0;
  }
  if (bytes <= c->small_max)
    return reduce_small(c, send, recv, count, t, op, root, deadline);
  return reduce_large(c, send, recv, count, t, op, root, deadline);
}

/* ---- reduce_scatter ------------------------------------------------------------ */

static int shm_reduce_scatter(struct pg__comm *pc, const void *send,
                              void *recv, size_t count, pg_dtype t, pg_op op,
                              double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  size_t esz = pg_dtype_size(t), cap, off, m;
  const char *in = send;
  char *out = recv;
  const void *srcs[c->n];
  int b, r, err, me = c->me;

  if (!valid(t, op))
    return pg__fail(-EINVAL, "shm: reduce_scatter: bad dtype or op");
  if ((err = ok_before(c)) != 0 || count == 0)
    return err;
  c->what = "reduce_scatter";
  if (c->n == 1) {
    if (recv != send)
      memmove(recv, send, count * esz);
    return 0;
  }
  cap = c->buf / ((size_t)c->n * esz);
  for (off = 0; off < count; off += m) {
    char *mine, *dst = out + off * esz;
    bool overlap;

    m = count - off < cap ? count - off : cap;
    b = next_buf(c, deadline, &err);
    if (err)
      return err;
    mine = buf_of(c, me, b);
    for (r = 0; r < c->n; r++)
      if (r != me)
        memcpy(mine + (size_t)r * cap * esz,
               in + ((size_t)r * count + off) * esz, m * esz);
    phase(c);
    c->free_at[b] = c->seq + 1;
    if ((err = wait_all(c, c->seq, deadline)) != 0)
      return err;
    for (r = 0; r < c->n; r++)
      srcs[r] = r == me ? in + ((size_t)me * count + off) * esz
                        : buf_of(c, r, b) + (size_t)me * cap * esz;
    /* recv overlapping send: accumulate in my own (unused) slice. */
    overlap = (uintptr_t)out < (uintptr_t)in + (size_t)c->n * count * esz &&
              (uintptr_t)in < (uintptr_t)out + count * esz;
    if (overlap) {
      char *acc = mine + (size_t)me * cap * esz;

      reduce_n(t, op, acc, srcs, c->n, m);
      memcpy(dst, acc, m * esz);
    } else
      reduce_n(t, op, dst, srcs, c->n, m);
    if (op == PG_AVG)
      pg__avg_finish(t, dst, m, c->n);
  }
  return 0;
}

/* ---- broadcast / all_gather ---------------------------------------------------- */

static int shm_broadcast(struct pg__comm *pc, void *buf, size_t count,
                         pg_dtype t, int root, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  size_t bytes = count * pg_dtype_size(t), off, m;
  char *p = buf;
  int b, err;

  if ((unsigned)t >= PG_DTYPE_COUNT || root < 0 || root >= c->n)
    return pg__fail(-EINVAL, "shm: broadcast: bad dtype or root %d", root);
  if ((err = ok_before(c)) != 0 || count == 0 || c->n == 1)
    return err;
  c->what = "broadcast";
  for (off = 0; off < bytes; off += m) {
    m = bytes - off < c->buf ? bytes - off : c->buf;
    if (c->me == root) {
      b = next_buf(c, deadline, &err);
      if (err)
        return err;
      memcpy(buf_of(c, root, b), p + off, m);
      phase(c);
      c->free_at[b] = c->seq + 1;
    } else {
      b = (int)(c->chunk++ % NBUF);
      phase(c);
      if ((err = wait_rank(c, root, c->seq, deadline)) != 0)
        return err;
      memcpy(p + off, buf_of(c, root, b), m);
    }
  }
  return 0;
}

static int shm_all_gather(struct pg__comm *pc, const void *send, void *recv,
                          size_t count, pg_dtype t, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  size_t bytes = count * pg_dtype_size(t), off, m;
  const char *in = send;
  char *out = recv;
  int b, r, err;

  if ((unsigned)t >= PG_DTYPE_COUNT)
    return pg__fail(-EINVAL, "shm: all_gather: bad dtype");
  if ((err = ok_before(c)) != 0 || count == 0)
    return err;
  c->what = "all_gather";
  for (off = 0; off < bytes; off += m) {
    char *own = out + (size_t)c->me * bytes + off;

    m = bytes - off < c->buf ? bytes - off : c->buf;
    if (c->n > 1) {
      b = next_buf(c, deadline, &err);
      if (err)
        return err;
      memcpy(buf_of(c, c->me, b), in + off, m);
      phase(c);
      c->free_at[b] = c->seq + 1;
    } else
      b = 0;
    if (own != in + off)
      memmove(own, in + off, m);
    for (r = 0; r < c->n; r++) {
      if (r == c->me)
        continue;
      if ((err = wait_rank(c, r, c->seq, deadline)) != 0)
        return err;
      memcpy(out + (size_t)r * bytes + off, buf_of(c, r, b), m);
    }
  }
  return 0;
}

static int shm_barrier(struct pg__comm *pc, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  int err;

  if ((err = ok_before(c)) != 0 || c->n == 1)
    return err;
  c->what = "barrier";
  phase(c);
  return wait_all(c, c->seq, deadline);
}

/* ---- send / recv ------------------------------------------------------------------ */

/* Copies len bytes into ring s->d at position pos (wrapping). */
static void ring_put(struct shm_comm *c, char *ring, uint32_t pos,
                     const char *src, size_t len)
{
  size_t at = pos & (c->ring - 1), first = c->ring - at;

  if (first > len)
    first = len;
  memcpy(ring + at, src, first);
  if (len > first)
    memcpy(ring, src + first, len - first);
}

static void ring_get(struct shm_comm *c, const char *ring, uint32_t pos,
                     char *dst, size_t len)
{
  size_t at = pos & (c->ring - 1), first = c->ring - at;

  if (!dst)
    return;
  if (first > len)
    first = len;
  memcpy(dst, ring + at, first);
  if (len > first)
    memcpy(dst + first, ring, len - first);
}

static void queue_unexpected(struct shm_comm *c, int peer,
                             struct unexpected *u)
{
  struct unexpected **pu;

  for (pu = &c->uq[peer]; *pu; pu = &(*pu)->next)
    ;
  *pu = u;
}

/* Moves what peer has written to this rank so far into the unexpected
 * queue, without waiting (a message may be moved in several calls).
 * Returns 1 if it moved anything, 0 if not, or an error. */
static int drain_peer(struct shm_comm *c, int peer)
{
  struct shm_ring *rc = ring_ctl(c, peer, c->me);
  const char *ring = ring_data(c, peer, c->me);
  uint32_t head = c->rx_head[peer], avail;
  struct unexpected *u;
  struct msg_hdr h;
  size_t m;

  for (;;) {
    avail = load_acq(&rc->tail) - head;
    u = c->part[peer];
    if (!u) {
      if (avail < sizeof h)
        break;
      ring_get(c, ring, head, (char *)&h, sizeof h);
      if (h.magic != MSG_MAGIC) {
        pg__fail(-EPROTO, "shm: garbage in the ring from rank %d", peer);
        return poison(c, -EPROTO);
      }
      u = malloc(sizeof *u + h.len);
      if (!u) {
        pg__fail(-ENOMEM, "shm: no memory to queue a %" PRIu64 "-byte "
                 "message from rank %d", h.len, peer);
        return poison(c, -ENOMEM);
      }
      u->next = NULL;
      u->tag = h.tag;
      u->len = h.len;
      c->part[peer] = u;
      c->part_got[peer] = 0;
      head += (uint32_t)sizeof h;
      avail -= (uint32_t)sizeof h;
    }
    m = u->len - c->part_got[peer];
    if (m > avail)
      m = avail;
    ring_get(c, ring, head, u->data + c->part_got[peer], m);
    head += (uint32_t)m;
    c->part_got[peer] += m;
    if (c->part_got[peer] < u->len)
      break;
    c->part[peer] = NULL;
    queue_unexpected(c, peer, u);
  }
  if (head == c->rx_head[peer])
    return 0;
  c->rx_head[peer] = head;
  publish(&rc->head, &rc->head_waiters, head);
  return 1;
}

static int drain_all(struct shm_comm *c)
{
  int r, moved = 0, err;

  for (r = 0; r < c->n; r++) {
    if (r == c->me)
      continue;
    if ((err = drain_peer(c, r)) < 0)
      return err;
    moved |= err;
  }
  return moved;
}

static int shm_send(struct pg__comm *pc, const void *buf, size_t bytes,
                    int peer, int tag, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  struct shm_ring *rc;
  struct msg_hdr h = { bytes, tag, MSG_MAGIC };
  const char *parts[2] = { (const char *)&h, buf };
  size_t left[2] = { sizeof h, bytes };
  char *ring;
  uint32_t tail;
  int part = 0, err;

  if (peer < 0 || peer >= c->n || peer == c->me)
    return pg__fail(-EINVAL, "shm: send: bad peer %d", peer);
  if ((err = ok_before(c)) != 0)
    return err;
  c->what = "send";
  rc = ring_ctl(c, c->me, peer);
  ring = ring_data(c, c->me, peer);
  tail = c->tx_tail[peer];
  while (part < 2) {
    size_t want = left[0] + left[1], space, m;

    if (want > c->ring / 2)
      want = c->ring / 2;
    /* Room for want bytes: head >= tail + want - ring. */
    c->draining = true;
    err = wait_ge(c, &rc->head, &rc->head_waiters,
                  tail + (uint32_t)want - (uint32_t)c->ring, peer, deadline);
    c->draining = false;
    if (err)
      return err;
    space = c->ring - (uint32_t)(tail - load_acq(&rc->head));
    while (part < 2 && space > 0) {
      m = left[part] < space ? left[part] : space;
      ring_put(c, ring, tail, parts[part], m);
      tail += (uint32_t)m;
      parts[part] += m;
      left[part] -= m;
      space -= m;
      if (left[part] == 0)
        part++;
    }
    c->tx_tail[peer] = tail;
    publish(&rc->tail, &rc->tail_waiters, tail);
  }
  return 0;
}

/* Reads len bytes from peer's ring into dst (NULL: discard). */
static int ring_read(struct shm_comm *c, int peer, char *dst, size_t len,
                     double deadline)
{
  struct shm_ring *rc = ring_ctl(c, peer, c->me);
  const char *ring = ring_data(c, peer, c->me);
  uint32_t head = c->rx_head[peer];
  int err;

  while (len > 0) {
    size_t avail, m;

    err = wait_ge(c, &rc->tail, &rc->tail_waiters, head + 1, peer, deadline);
    if (err)
      return err;
    avail = (uint32_t)(load_acq(&rc->tail) - head);
    m = avail < len ? avail : len;
    ring_get(c, ring, head, dst, m);
    if (dst)
      dst += m;
    len -= m;
    head += (uint32_t)m;
    c->rx_head[peer] = head;
    publish(&rc->head, &rc->head_waiters, head);
  }
  return 0;
}

static int shm_recv(struct pg__comm *pc, void *buf, size_t bytes, int peer,
                    int tag, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  struct unexpected **pu, *u;
  struct msg_hdr h;
  int err;

  if (peer < 0 || peer >= c->n || peer == c->me)
    return pg__fail(-EINVAL, "shm: recv: bad peer %d", peer);
  if ((err = ok_before(c)) != 0)
    return err;
  c->what = "recv";
  if ((u = c->part[peer]) != NULL) {
    /* A send drained part of this message: read the rest first. */
    err = ring_read(c, peer, u->data + c->part_got[peer],
                    u->len - c->part_got[peer], deadline);
    if (err)
      return err;
    c->part[peer] = NULL;
    queue_unexpected(c, peer, u);
  }
  for (pu = &c->uq[peer]; (u = *pu) != NULL; pu = &u->next)
    if (u->tag == tag) {
      *pu = u->next;
      if (u->len != bytes) {
        err = pg__fail(-EMSGSIZE, "shm: recv from rank %d, tag %d: %zu bytes "
                       "sent, %zu expected", peer, tag, u->len, bytes);
        free(u);
        return err;
      }
      memcpy(buf, u->data, bytes);
      free(u);
      return 0;
    }
  for (;;) {
    if ((err = ring_read(c, peer, (char *)&h, sizeof h, deadline)) != 0)
      return err;
    if (h.magic != MSG_MAGIC) {
      pg__fail(-EPROTO, "shm: garbage in the ring from rank %d", peer);
      return poison(c, -EPROTO);
    }
    if (h.tag == tag) {
      if (h.len != bytes) {
        err = ring_read(c, peer, NULL, h.len, deadline);
        if (err)
          return err;
        return pg__fail(-EMSGSIZE, "shm: recv from rank %d, tag %d: %" PRIu64
                        " bytes sent, %zu expected", peer, tag, h.len, bytes);
      }
      return ring_read(c, peer, buf, bytes, deadline);
    }
    u = malloc(sizeof *u + h.len);
    if (!u) {
      pg__fail(-ENOMEM, "shm: no memory to queue a %" PRIu64 "-byte message "
               "from rank %d", h.len, peer);
      return poison(c, -ENOMEM);
    }
    u->next = NULL;
    u->tag = h.tag;
    u->len = h.len;
    if ((err = ring_read(c, peer, u->data, h.len, deadline)) != 0) {
      free(u);
      return err;
    }
    queue_unexpected(c, peer, u);
  }
}

/* ---- create / destroy ---------------------------------------------------------- */

/* Note [left]: a rank that destroys the comm says so before it unmaps.
 * Whatever it contributed is there; a peer that still waits for more
 * from it (it left mid-collective: an error outside libpg, a failed
 * checkpoint write) would wait for its death or the timeout, while the
 * leaver's pg_destroy waits for that peer's exit: both stuck for up to
 * 30 s.  The peer fails at once instead. */
static void shm_destroy(struct pg__comm *pc)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  int i;

  if (!c)
    return;
  if (c->map && c->rk) {
    __atomic_store_n(&c->rk[c->me].left, 1, __ATOMIC_RELEASE);
    wake_everyone(c);
  }
  if (c->map)
    munmap(c->map, c->map_len);
  for (i = 0; c->pidfd && i < c->n; i++)
    if (c->pidfd[i] >= 0)
      close(c->pidfd[i]);
  for (i = 0; c->uq && i < c->n; i++)
    while (c->uq[i]) {
      struct unexpected *u = c->uq[i];

      c->uq[i] = u->next;
      free(u);
    }
  for (i = 0; c->part && i < c->n; i++)
    free(c->part[i]);
  free(c->uq);
  free(c->part);
  free(c->part_got);
  free(c->pid);
  free(c->pidfd);
  free(c->tx_tail);
  free(c->rx_head);
  free(c);
}

static size_t align_up(size_t x, size_t a)
{
  return (x + a - 1) & ~(a - 1);
}

/* Segment offsets for n ranks and the given sizes. */
struct layout {
  size_t abort_off, rank_off, ring_ctl_off, buf_off, ring_off, size;
};

static struct layout layout_of(int n, size_t buf, size_t ring)
{
  struct layout l;
  size_t nn = (size_t)n * (size_t)n;

  l.abort_off = LINE;
  l.rank_off = 2 * LINE;
  l.ring_ctl_off = l.rank_off + (size_t)n * sizeof(struct shm_rank);
  l.buf_off = align_up(l.ring_ctl_off + nn * sizeof(struct shm_ring), 4096);
  l.ring_off = l.buf_off + (size_t)n * NBUF * buf;
  l.size = align_up(l.ring_off + nn * ring, 4096);
  return l;
}

static size_t pow2_floor(size_t x)
{
  size_t p = 1;

  while (p * 2 <= x)
    p *= 2;
  return p;
}

/* Buffer bytes: want ($PG_SHM_BUF, a tuning knob, see shm_buf_knob; 0:
 * unset), else BUF_DEFAULT (chunks that stay in L2/L3 while they are
 * reduced); capped so the buffers of all ranks
 * stay within SEG_CAP, at least 16 elements of 8 bytes per rank.  Local
 * rank 0 sizes the segment: its value counts. */
static size_t default_buf(int n, size_t want)
{
  size_t buf = want ? want : BUF_DEFAULT,
         cap = SEG_CAP / ((size_t)n * NBUF);

  if (buf > cap)
    buf = cap;
  if (buf < (size_t)n * 128)
    buf = (size_t)n * 128;
  return align_up(buf, 4096);
}

/* The low 32 bits of this process's pid namespace inode (0 unknown). */
static uint32_t pidns32(void)
{
  struct stat st;

  return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

/* A segment name of ours: "pg-<16 hex>-<pid>" (no leading slash), its
 * namespace bits and creator; false for anything else. */
static bool parse_name(const char *name, uint32_t *ns, pid_t *pid)
{
  uint64_t rnd;
  long p;
  int used = 0;

  if (strlen(name) > 48 ||
      sscanf(name, "pg-%16" SCNx64 "-%ld%n", &rnd, &p, &used) != 2 ||
      used != (int)strlen(name) || strlen(name) < 20 || name[19] != '-' ||
      p <= 0 || p > INT_MAX)
    return false;
  *ns = (uint32_t)(rnd >> 32);
  *pid = (pid_t)p;
  return true;
}

#define STALE_SWEEP_MAX 4096

/* Note [stale segments]: unlinks this user's segments of this pid
 * namespace whose creator is gone.  Best effort, a bounded look. */
static void sweep_stale(uint32_t ns)
{
  char path[300];
  struct dirent *e;
  struct stat st;
  uint32_t their_ns;
  pid_t pid;
  int seen = 0;
  DIR *d;

  if (ns == 0 || (d = opendir("/dev/shm")) == NULL)
    return;
  while (seen++ < STALE_SWEEP_MAX && (e = readdir(d)) != NULL) {
    if (!parse_name(e->d_name, &their_ns, &pid) || their_ns != ns ||
        pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    snprintf(path, sizeof path, "/%s", e->d_name);
    shm_unlink(path);
  }
  closedir(d);
}

/* Rank 0: creates, sizes and maps the segment; *name gets its name. */
static int create_segment(struct shm_comm *c, char *name, size_t name_len)
{
  size_t buf = default_buf(c->n, c->buf_knob), ring;
  struct layout l;
  uint32_t ns = pidns32(), r32;
  uint64_t rnd;
  int fd = -1, tries, err;

  ring = c->n > 1 ? pow2_floor(RING_TOTAL / ((size_t)c->n * (size_t)c->n))
                  : RING_MIN;
  if (ring > RING_MAX)
    ring = RING_MAX;
  if (ring < RING_MIN)
    ring = RING_MIN;
  sweep_stale(ns);
  for (tries = 0; tries < 8 && fd < 0; tries++) {
    if (getrandom(&r32, sizeof r32, 0) != (ssize_t)sizeof r32)
      r32 = (uint32_t)(pg__now() * 1e9) ^ (uint32_t)tries;
    rnd = (uint64_t)ns << 32 | r32;
    snprintf(name, name_len, "/pg-%016" PRIx64 "-%d", rnd, (int)getpid());
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  if (fd < 0)
    return pg__fail(-errno, "shm: cannot create a shared memory segment "
                    "(%s): %s", name, strerror(errno));
  /* Reserve the pages now; on ENOSPC try smaller buffers and rings. */
  for (;;) {
    l = layout_of(c->n, buf, ring);
    if (ftruncate(fd, (off_t)l.size) < 0) {
      err = -errno;
    } else {
      err = -posix_fallocate(fd, 0, (off_t)l.size);
      if (err == -EOPNOTSUPP || err == -EINVAL || err == -ENOSYS)
        err = 0;
    }
    if (err == 0 || buf <= BUF_MIN || (err != -ENOSPC && err != -EFBIG))
      break;
    if (ftruncate(fd, 0) < 0) {
      err = -errno;
      break;
    }
    buf /= 2;
    if (ring > RING_MIN)
      ring /= 2;
  }
  if (err == 0) {
    c->map = mmap(NULL, l.size, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_POPULATE, fd, 0);
    if (c->map == MAP_FAILED) {
      c->map = NULL;
      err = -errno;
    }
  }
  close(fd);
  if (err) {
    shm_unlink(name);
    return pg__fail(err, "shm: cannot size a %zu-byte shared memory segment "
                    "in /dev/shm: %s", l.size, strerror(-err));
  }
  c->map_len = l.size;
  c->buf = buf;
  c->ring = ring;
  c->hdr = (struct shm_hdr *)c->map;
  c->hdr->n = (uint32_t)c->n;
  c->hdr->nbuf = NBUF;
  c->hdr->size = l.size;
  c->hdr->buf = buf;
  c->hdr->ring = ring;
  c->hdr->version = SHM_VERSION;
  __atomic_store_n(&c->hdr->magic, SHM_MAGIC, __ATOMIC_RELEASE);
  return 0;
}

static int open_segment(struct shm_comm *c, const char *name, size_t size)
{
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0), err;
  struct shm_hdr *h;

  if (fd < 0)
    return pg__fail(-errno, "shm: cannot open rank 0's segment %s: %s", name,
                    strerror(errno));
  c->map = mmap(NULL, size, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_POPULATE, fd, 0);
  err = errno;
  close(fd);
  if (c->map == MAP_FAILED) {
    c->map = NULL;
    return pg__fail(-err, "shm: cannot map %s: %s", name, strerror(err));
  }
  c->map_len = size;
  h = (struct shm_hdr *)c->map;
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC ||
      h->version != SHM_VERSION || h->n != (uint32_t)c->n ||
      h->nbuf != NBUF || h->size != size || (h->ring & (h->ring - 1)) != 0)
    return pg__fail(-EPROTO, "shm: segment %s does not match this "
                    "communicator", name);
  c->hdr = h;
  c->buf = h->buf;
  c->ring = h->ring;
  return 0;
}

static struct shm_comm *comm_alloc(int n, int me)
{
  struct shm_comm *c = calloc(1, sizeof *c);
  int i;

  if (!c)
    return NULL;
  c->base.ops = &shm_ops;
  c->n = n;
  c->me = me;
  c->what = "setup";
  c->tx_tail = calloc((size_t)n, sizeof *c->tx_tail);
  c->rx_head = calloc((size_t)n, sizeof *c->rx_head);
  c->uq = calloc((size_t)n, sizeof *c->uq);
  c->part = calloc((size_t)n, sizeof *c->part);
  c->part_got = calloc((size_t)n, sizeof *c->part_got);
  c->pid = calloc((size_t)n, sizeof *c->pid);
  c->pidfd = malloc((size_t)n * sizeof *c->pidfd);
  for (i = 0; c->pidfd && i < n; i++)
    c->pidfd[i] = -1;
  if (!c->tx_tail || !c->rx_head || !c->uq || !c->part || !c->part_got ||
      !c->pid || !c->pidfd) {
    shm_destroy(&c->base);
    return NULL;
  }
  return c;
}

/* Setup exchange 1: rank 0 creates the segment and publishes its name
 * (or its failure); the others map it.  name gets the segment's name on
 * rank 0 and on the others that mapped it (to unlink: Note [stale
 * segments]), "" elsewhere. */
static int share_segment(struct shm_comm *c, const struct pg__setup *s,
                         double timeout, char *name, size_t namelen)
{
  char val[160], seg[64];
  void *v0 = NULL;
  size_t len0 = 0, size = 0;
  int err = 0, e2;

  if (c->me == 0) {
    err = create_segment(c, name, namelen);
    if (err)
      snprintf(val, sizeof val, "! %d", err);
    else
      snprintf(val, sizeof val, "%s %zu", name, c->map_len);
  } else {
    snprintf(val, sizeof val, "-");
  }
  /* Everyone publishes, only rank 0's is read: the first 1. */
  e2 = pg__store_allgather(s->store, s->ns, "seg", c->me, 1, val,
                           strlen(val) + 1, timeout, &v0, &len0);
  if (e2 && !err)
    err = e2;
  if (!err && c->me != 0) {
    const char *v = v0;

    if (len0 == 0 || v[len0 - 1] != '\0' || v[0] == '!' ||
        sscanf(v, "%63s %zu", seg, &size) != 2)
      err = pg__fail(-ECONNRESET, "shm: rank 0 could not create the "
                     "shared memory segment");
    else
      err = open_segment(c, seg, size);
    if (c->map)
      snprintf(name, namelen, "%s", seg);
  }
  free(v0);
  return err;
}

/* Setup exchange 2: everyone's pid and pid namespace (for the peers'
 * liveness), or the failure to attach (err, if not 0). */
static int share_pids(struct shm_comm *c, const struct pg__setup *s,
                      double timeout, int err)
{
  int i, n = c->n;
  unsigned long long pidns = 0;
  struct stat nsst;
  char val[160];
  void **vals = calloc((size_t)n, sizeof *vals);
  size_t *lens = calloc((size_t)n, sizeof *lens);

  if (stat("/proc/self/ns/pid", &nsst) == 0)
    pidns = (unsigned long long)nsst.st_ino;
  if (err)
    snprintf(val, sizeof val, "! %d", err);
  else
    snprintf(val, sizeof val, "%d %llu", (int)getpid(), pidns);
  if (!vals || !lens) {
    err = err ? err : pg__fail(-ENOMEM, "shm: out of memory");
  } else {
    int e2 = pg__store_allgather(s->store, s->ns, "att", c->me, n, val,
                                 strlen(val) + 1, timeout, vals, lens);
    if (e2 && !err)
      err = e2;
  }
  for (i = 0; !err && i < n; i++) {
    const char *v = vals[i];
    unsigned long long ns;
    int pid;

    if (!v || lens[i] == 0 || v[lens[i] - 1] != '\0' || v[0] == '!' ||
        sscanf(v, "%d %llu", &pid, &ns) != 2)
      err = pg__fail(-ECONNRESET, "shm: rank %d could not attach the "
                     "shared memory segment", i);
    else  /* A pid from another pid namespace means nothing here. */
      c->pid[i] = ns == pidns ? (pid_t)pid : 0;
  }
  pg__free_vals(vals, n);
  free(vals);
  free(lens);
  return err;
}

/* The segment's parts, the spin mode, and pidfds on the peers. */
static void comm_attach(struct shm_comm *c)
{
  struct layout l = layout_of(c->n, c->buf, c->ring);
  int i;

  c->ab = (struct shm_abort *)(c->map + l.abort_off);
  c->rk = (struct shm_rank *)(c->map + l.rank_off);
  c->rc = (struct shm_ring *)(c->map + l.ring_ctl_off);
  c->bufs = c->map + l.buf_off;
  c->rings = c->map + l.ring_off;
  c->spin = c->n <= pg__usable_cpus();
  c->small_max = c->spin ? SMALL_SPIN : SMALL_SLEEP;
  if (c->small_max > c->buf)
    c->small_max = c->buf;
  __atomic_store_n(&c->rk[c->me].pid, (int32_t)getpid(), __ATOMIC_RELAXED);
  for (i = 0; i < c->n; i++)
    if (i != c->me && c->pid[i] > 0)
      c->pidfd[i] = pg__pidfd_open(c->pid[i]);
}

/* Rank 0 makes the segment, everyone maps it and learns the others'
 * pids; the segment is unlinked as soon as all have it. */
/* $PG_SHM_BUF in [BUF_MIN, SEG_CAP] (0: unset), read by every rank at
 * once, so a bad value fails every rank alike instead of the one that
 * sizes the segment while the others wait for it. */
static int shm_buf_knob(size_t *out)
{
  const char *v = pg__knob(PG_KNOB_SHM_BUF);

  *out = 0;
  if (v && num_parse_count(v, BUF_MIN, SEG_CAP, out))
    return pg__fail(-EINVAL, "PG_SHM_BUF is '%s', expected bytes %u..%zu",
                    v, BUF_MIN, SEG_CAP);
  return 0;
}

int pg__shm_create(const struct pg__setup *s, struct pg__comm **out)
{
  struct shm_comm *c;
  char name[64] = "";
  double timeout = s->timeout > 0 ? s->timeout : 300;
  size_t buf_knob;
  int err;

  *out = NULL;
  if (s->n < 1 || s->me < 0 || s->me >= s->n)
    return pg__fail(-EINVAL, "shm: bad communicator (%d of %d)", s->me,
                    s->n);
  if ((err = shm_buf_knob(&buf_knob)))
    return err;
  c = comm_alloc(s->n, s->me);
  if (!c)
    return pg__fail(-ENOMEM, "shm: out of memory");
  c->buf_knob = buf_knob;
  err = share_segment(c, s, timeout, name, sizeof name);
  err = share_pids(c, s, timeout, err);
  /* Everyone that mapped it, rank 0 perhaps dead (Note [stale
   * segments]). */
  if (name[0])
    shm_unlink(name);
  if (err) {
    shm_destroy(&c->base);
    return err;
  }
  comm_attach(c);
  *out = &c->base;
  return 0;
}

/* Host memory: the mem_* hooks stay NULL. */
static const struct pg__comm_ops shm_ops = {
  .name = "cpu-shm",
  .all_reduce = shm_all_reduce,
  .broadcast = shm_broadcast,
  .reduce = shm_reduce,
  .all_gather = shm_all_gather,
  .reduce_scatter = shm_reduce_scatter,
  .barrier = shm_barrier,
  .send = shm_send,
  .recv = shm_recv,
  .destroy = shm_destroy,
};
