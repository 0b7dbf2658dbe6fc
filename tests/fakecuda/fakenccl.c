/* fakenccl.c -- a test-only fake of the NCCL functions libpg's NCCL
 * backend calls: real collectives between ranks that are separate
 * processes, through a POSIX shared-memory segment named after the
 * unique id, run on the fake CUDA streams (fakecuda.c), so a wrong op or
 * dtype mapping gives a wrong result.
 *
 * Semantics kept: every call enqueues its work on the stream and returns;
 * the work of one rank blocks its stream until the peers get there (so a
 * missing peer hangs the stream, as on a GPU, until ncclCommAbort);
 * ncclGroupStart/End run the grouped sends and receives together, so an
 * exchange does not deadlock; ncclCommGetAsyncError reports an injected
 * failure; a non-blocking communicator (config.blocking = 0) finishes
 * ncclCommInitRankConfig in the background (ncclInProgress until then).
 * Arithmetic: every element is reduced in double (integers in int64) and
 * rounded once; ncclAvg divides the sum (integers truncating).  Aborts are
 * local, as in NCCL: the peers of an aborted rank hang.
 *
 * ncclCommSplit and ncclCommShrink as NCCL 2.28's source does them (Note
 * [child job]): on a non-blocking parent they answer ncclInProgress with
 * *newcomm NULL, a job thread writes the handle through the caller's
 * pointer later, and the parent says ncclInProgress meanwhile.  Every
 * call on a comm whose last non-blocking call is in progress is refused,
 * and a pending async error is the next call's answer (ensure_ready, as
 * ncclCommEnsureReady).  Two ranks of one comm on one GPU of one host are
 * refused ("Duplicate GPU detected").  README.md lists what still
 * differs from NCCL.
 *
 * ncclCommRevoke and ncclCommShrink (NCCL 2.28's contract, Note [revoke
 * and shrink] below): revoke stops the communicator's in-flight work
 * locally and refuses new operations (ncclInvalidUsage); a non-blocking
 * communicator reports ncclInProgress until its streams hold none of its
 * work.  Shrink is collective over the survivors, through the parent's
 * segment: every survivor must pass the same exclude list, and the new
 * communicator numbers them in their order.
 *
 * Test hooks: $FAKENCCL_FAIL_RANK and $FAKENCCL_FAIL_OP=k: on that rank
 * the k-th operation (from 1) never completes and the communicator
 * reports ncclSystemError from ncclCommGetAsyncError, as a crashed kernel
 * would.  $FAKENCCL_SUBMIT_FAIL_OP=k: on $FAKENCCL_FAIL_RANK the k-th
 * call fails at once (ncclUnhandledCudaError), never reaching the stream.
 * $FAKENCCL_SHRINK_FAIL_RANK=r: ncclCommShrink on the parent's rank r
 * meets the other survivors and joins the new communicator (so theirs
 * succeed), then fails it (ncclSystemError), as a shrink that fails on
 * one rank only.
 * $FAKENCCL_INPROGRESS=1: on a non-blocking communicator every collective
 * and ncclGroupEnd answers ncclInProgress, and ncclCommGetAsyncError says
 * so twice more, as NCCL may; =hold: it says so until the communicator
 * is aborted, as a launch that waits for a dead peer's connection does.
 *
 * Stricter than NCCL where libpg could go wrong unseen (issue 23):
 * - every rank's operation must agree with rank 0's on kind, count,
 *   dtype, op and root, or the process aborts with a message;
 * - buffers must be the communicator's device's memory (a host pointer
 *   or another device's is ncclInvalidArgument, as the crash it is);
 * - inputs are read as a kernel reads them: all-gather writes the blocks
 *   in rank order and reads its own input as it gets to it, so an input
 *   aliasing an earlier block is overwritten first; reduce-scatter
 *   writes its output before it reads block 0;
 * - floating-point sums and products round to the element type after
 *   every step (f16 sums lose precision as on a GPU);
 * - a handle used after ncclCommDestroy or ncclCommAbort is an error
 *   with a message, not a use after free; fake_live_comms counts the
 *   communicators not destroyed;
 * - one thread's group may hold several communicators (NCCL's group
 *   state is per thread). */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define SLOT ((size_t)1 << 20)     /* per-rank staging for collectives */
#define BOX ((size_t)256 << 10)    /* per ordered pair, point to point */
#define LINE 64

/* phase, then what the rank's current collective is (the agreement
 * check). */
struct rank_line {
  uint64_t phase;
  int32_t kind, dt, rop, root;
  uint64_t count;
  uint64_t host;            /* where the rank runs (join): its host */
  int32_t dev, pad1;        /* and device */
  char pad[LINE - 48];
};

/* ncclCommShrink's meeting of the survivors (Note [revoke and shrink]):
 * each posts its exclude list as a bit mask (n <= 64), double-buffered by
 * the shrink's parity as split_line is. */
struct shrink_line {
  uint64_t seq;             /* the last shrink this rank posted */
  uint64_t mask[2];
  char pad[LINE - 24];
};

/* ncclCommSplit's all-gather of (color, key), double-buffered by the
 * split's parity: a rank posts split k + 1 only after every rank posted
 * k, so nobody still reads the slot it writes. */
struct split_line {
  uint64_t seq;             /* the last split this rank posted */
  int32_t color[2], key[2];
  char pad[LINE - 24];
};

struct box {
  uint64_t put, take, len;
  char pad[LINE - 24];
};

struct seg {
  uint32_t n;
  uint32_t joined;
  char pad[LINE - 8];
  /* then: rank_line[n], split_line[n], shrink_line[n], box[n * n],
   * slots[n][SLOT], boxdata[n*n][BOX] */
};

struct ncclComm {
  int n, me, dev;
  char name[160];
  size_t size;
  struct seg *seg;
  struct rank_line *rl;
  struct split_line *sl;
  uint64_t splits;          /* ncclCommSplit calls on this comm */
  struct shrink_line *shl;
  uint64_t shrinks;         /* ncclCommShrink calls on this comm */
  int revoked;              /* atomic: ncclCommRevoke (or a shrink's
                               NCCL_SHRINK_ABORT) stopped its work */
  int revoking;             /* atomic: a non-blocking revoke not yet
                               seen complete by ncclCommGetAsyncError */
  int inflight;             /* atomic: batches launched, not finished */
  struct ncclComm *parent;  /* a shrink's, until the survivors met */
  struct ncclComm *up;      /* a child's parent while its init runs in
                               the parent's job: aborting it ends that */
  pthread_t job_th;         /* a non-blocking split's or shrink's */
  bool job;                 /* job_th not joined yet */
  int job_stop;             /* atomic: abort or revoke ends the job */
  uint64_t shrink_seq, shrink_mask;
  bool shrink_fail;         /* $FAKENCCL_SHRINK_FAIL_RANK is its parent's */
  struct box *boxes;
  char *slots, *boxdata;
  uint64_t phase;           /* this rank's, touched by its stream only */
  int aborted;              /* atomic */
  int async_err;            /* atomic: ncclResult_t */
  int init_done;            /* atomic */
  int refs;                 /* atomic: the user's, each queued op's */
  int fail_op;              /* FAKENCCL_FAIL_OP on this rank, else 0 */
  unsigned long ops;        /* operations issued */
  int submit_fail_op;       /* FAKENCCL_SUBMIT_FAIL_OP on this rank */
  unsigned long submits;    /* calls that reached submit's check */
  int inprogress;           /* atomic: ncclInProgress answers left */
  bool nonblocking;
  pthread_t init_th;
  bool init_thread;
  char last[256];
  struct ncclComm *live_next;  /* the live handles (live_mu) */
};

/* Handles not yet destroyed or aborted. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *live;
static int nlive;

static void live_add(struct ncclComm *c)
{
  pthread_mutex_lock(&live_mu);
  c->live_next = live;
  live = c;
  nlive++;
  pthread_mutex_unlock(&live_mu);
}

/* Takes c off the live list; false if it was not on it. */
static bool live_del(struct ncclComm *c)
{
  struct ncclComm **pp;
  bool found = false;

  pthread_mutex_lock(&live_mu);
  for (pp = &live; *pp; pp = &(*pp)->live_next)
    if (*pp == c) {
      *pp = c->live_next;
      nlive--;
      found = true;
      break;
    }
  pthread_mutex_unlock(&live_mu);
  return found;
}

static bool is_live(const struct ncclComm *c)
{
  struct ncclComm *x;

  pthread_mutex_lock(&live_mu);
  for (x = live; x && x != c; x = x->live_next)
    ;
  pthread_mutex_unlock(&live_mu);
  return x != NULL;
}

int fake_live_comms(void)
{
  int n;

  pthread_mutex_lock(&live_mu);
  n = nlive;
  pthread_mutex_unlock(&live_mu);
  return n;
}

/* A destroyed or aborted handle: the clean error NCCL does not give. */
static ncclResult_t dead_handle(const char *fn)
{
  fprintf(stderr, "fakenccl: %s on a communicator already destroyed or "
          "aborted\n", fn);
  return ncclInvalidUsage;
}

/* ---- helpers ---------------------------------------------------------- */

static uint64_t ld(const uint64_t *p)
{
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void st(uint64_t *p, uint64_t v)
{
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static bool aborted(struct ncclComm *c)
{
  return __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE) != 0;
}

/* The parent's split or shrink job must end (ncclGroupJobAbort). */
static bool job_stopped(struct ncclComm *c)
{
  return __atomic_load_n(&c->job_stop, __ATOMIC_ACQUIRE) != 0;
}

static bool revoked(struct ncclComm *c)
{
  return __atomic_load_n(&c->revoked, __ATOMIC_ACQUIRE) != 0;
}

/* Whether the comm's kernels must quit: aborted, destroyed or revoked. */
static bool halted(struct ncclComm *c)
{
  return aborted(c) || revoked(c);
}

static void join_job(struct ncclComm *c);

static void comm_unref(struct ncclComm *c)
{
  if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  if (c->init_thread)
    pthread_join(c->init_th, NULL);
  if (c->parent)
    comm_unref(c->parent);
  if (c->seg)
    munmap(c->seg, c->size);
  free(c);
}

/* The comm's state as ncclCommGetAsyncError gives it, without using up
 * a $FAKENCCL_INPROGRESS answer: a non-blocking revoke is over once no
 * batch of the comm runs (Note [revoke and shrink]). */
static ncclResult_t state(struct ncclComm *c)
{
  if (__atomic_load_n(&c->revoking, __ATOMIC_ACQUIRE) &&
      __atomic_load_n(&c->inflight, __ATOMIC_ACQUIRE) == 0) {
    __atomic_store_n(&c->async_err, ncclSuccess, __ATOMIC_RELEASE);
    __atomic_store_n(&c->revoking, 0, __ATOMIC_RELEASE);
  }
  return (ncclResult_t)__atomic_load_n(&c->async_err, __ATOMIC_ACQUIRE);
}

/* ncclCommEnsureReady (src/init.cc, NCCL 2.28), which every operation,
 * split and shrink calls first: while the comm's last non-blocking call
 * is in progress the call is refused (ncclInvalidArgument, and NCCL's
 * warning); a pending async error is returned as the call's. */
static ncclResult_t ensure_ready(struct ncclComm *c, const char *fn)
{
  ncclResult_t e = state(c);

  if (e == ncclSuccess && __atomic_load_n(&c->inprogress, __ATOMIC_ACQUIRE))
    e = ncclInProgress;
  if (e != ncclInProgress)
    return e;
  fprintf(stderr, "fakenccl: %s on rank %d: Attempt to use communicator "
          "before the previous operation returned ncclSuccess\n", fn,
          c->me);
  snprintf(c->last, sizeof c->last, "fake: %s: Attempt to use "
           "communicator before the previous operation returned "
           "ncclSuccess", fn);
  return ncclInvalidArgument;
}

static size_t type_size(ncclDataType_t t)
{
  switch (t) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: return 0;
  }
}

static bool is_float(ncclDataType_t t)
{
  return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32 ||
         t == ncclFloat64;
}

static double h2d(uint16_t h)
{
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                               : ldexp(m | 0x400, e - 25);

  return h & 0x8000 ? -v : v;
}

static uint16_t d2h(double d)
{
  float f = (float)d;
  uint32_t x, sign, mant, h, rem, half;
  int32_t exp;
  int shift;

  memcpy(&x, &f, sizeof x);
  sign = (x >> 16) & 0x8000;
  exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff)
    return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31)
    return (uint16_t)(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10)
      return (uint16_t)sign;
    mant |= 0x800000;
    shift = 14 - exp;
    h = mant >> shift;
    rem = mant & ((1u << shift) - 1);
    half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1)))
      h++;
    return (uint16_t)(sign | h);
  }
  h = ((uint32_t)exp << 10) | (mant >> 13);
  rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
    h++;
  return (uint16_t)(sign | h);
}

static double b2d(uint16_t b)
{
  uint32_t x = (uint32_t)b << 16;
  float f;

  memcpy(&f, &x, sizeof f);
  return f;
}

static uint16_t d2b(double d)
{
  float f = (float)d;
  uint32_t x;

  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffff) > 0x7f800000)
    return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static double getf(ncclDataType_t t, const void *p, size_t i)
{
  switch (t) {
  case ncclFloat16: return h2d(((const uint16_t *)p)[i]);
  case ncclBfloat16: return b2d(((const uint16_t *)p)[i]);
  case ncclFloat32: return ((const float *)p)[i];
  default: return ((const double *)p)[i];
  }
}

static void putf(ncclDataType_t t, void *p, size_t i, double v)
{
  switch (t) {
  case ncclFloat16: ((uint16_t *)p)[i] = d2h(v); break;
  case ncclBfloat16: ((uint16_t *)p)[i] = d2b(v); break;
  case ncclFloat32: ((float *)p)[i] = (float)v; break;
  default: ((double *)p)[i] = v; break;
  }
}

static int64_t geti(ncclDataType_t t, const void *p, size_t i)
{
  switch (t) {
  case ncclInt8: return ((const int8_t *)p)[i];
  case ncclUint8: return ((const uint8_t *)p)[i];
  case ncclInt32: return ((const int32_t *)p)[i];
  case ncclUint32: return ((const uint32_t *)p)[i];
  case ncclInt64: return ((const int64_t *)p)[i];
  default: return (int64_t)((const uint64_t *)p)[i];
  }
}

static void puti(ncclDataType_t t, void *p, size_t i, int64_t v)
{
  switch (t) {
  case ncclInt8: ((int8_t *)p)[i] = (int8_t)v; break;
  case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
  case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case ncclInt64: ((int64_t *)p)[i] = v; break;
  default: ((uint64_t *)p)[i] = (uint64_t)v; break;
  }
}

static bool is_signed_int(ncclDataType_t t)
{
  return t == ncclInt8 || t == ncclInt32 || t == ncclInt64;
}

/* dst[i] = op over srcs[0..n-1][i], for m elements. */
static void reduce(ncclDataType_t t, ncclRedOp_t op, void *dst,
                   const void *const *srcs, int n, size_t m)
{
  size_t i;
  int r;

  for (i = 0; i < m; i++) {
    if (is_float(t)) {
      double acc = getf(t, srcs[0], i), v;

      unsigned char tmp[8];

      for (r = 1; r < n; r++) {
        v = getf(t, srcs[r], i);
        switch (op) {
        case ncclSum: case ncclAvg: acc += v; break;
        case ncclProd: acc *= v; break;
        case ncclMin: acc = v < acc || isnan(v) ? v : acc; break;
        default: acc = v > acc || isnan(v) ? v : acc; break;
        }
        /* Each step in the element type, as a kernel adds. */
        putf(t, tmp, 0, acc);
        acc = getf(t, tmp, 0);
      }
      if (op == ncclAvg)
        acc /= n;
      putf(t, dst, i, acc);
    } else {
      uint64_t acc = (uint64_t)geti(t, srcs[0], i), v;
      bool sgn = is_signed_int(t);

      for (r = 1; r < n; r++) {
        v = (uint64_t)geti(t, srcs[r], i);
        switch (op) {
        case ncclSum: case ncclAvg: acc += v; break;
        case ncclProd: acc *= v; break;
        case ncclMin:
          acc = sgn ? ((int64_t)v < (int64_t)acc ? v : acc)
                    : (v < acc ? v : acc);
          break;
        default:
          acc = sgn ? ((int64_t)v > (int64_t)acc ? v : acc)
                    : (v > acc ? v : acc);
          break;
        }
      }
      /* The sum wraps in the element type first (pg.h's rule). */
      puti(t, dst, i, (int64_t)acc);
      if (op == ncclAvg)
        puti(t, dst, i, sgn ? geti(t, dst, i) / n
                            : (int64_t)((uint64_t)geti(t, dst, i) /
                                        (uint64_t)n));
    }
  }
}

/* ---- phases: every rank's stream meets the others' ------------------- */

static char *slot(struct ncclComm *c, int r)
{
  return c->slots + (size_t)r * SLOT;
}

/* Publishes the next phase and waits for every rank to reach it. */
static ncclResult_t meet(struct ncclComm *c)
{
  unsigned spins = 0;
  int r;

  c->phase++;
  st(&c->rl[c->me].phase, c->phase);
  for (r = 0; r < c->n; r++)
    while (ld(&c->rl[r].phase) < c->phase) {
      if (halted(c))
        return ncclInvalidUsage;
      fake_backoff(&spins);
    }
  return ncclSuccess;
}

/* ---- operations ------------------------------------------------------- */

enum kind { K_ALLREDUCE, K_BCAST, K_REDUCE, K_ALLGATHER, K_REDSCAT,
            K_SEND, K_RECV };

struct op {
  enum kind kind;
  const void *send;
  void *recv;
  size_t count;
  ncclDataType_t dt;
  ncclRedOp_t rop;
  int root;                 /* or peer */
  size_t done;              /* p2p progress, bytes */
  struct op *next;
};

struct batch {
  struct ncclComm *c;
  struct op *ops;
  bool fail;                /* the injected failure: never finishes */
};

static const char *const kind_names[] = {
  "ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather",
  "ncclReduceScatter", "ncclSend", "ncclRecv"
};

/* Every rank must call the same collective with the same arguments; a
 * GPU would compute garbage or hang, the fake stops the process. */
static ncclResult_t agree(struct ncclComm *c, const struct op *o)
{
  struct rank_line *me = &c->rl[c->me], *r0 = &c->rl[0];
  ncclResult_t res;
  int r;

  me->kind = (int32_t)o->kind;
  me->dt = (int32_t)o->dt;
  me->rop = o->kind == K_ALLREDUCE || o->kind == K_REDUCE ||
            o->kind == K_REDSCAT ? (int32_t)o->rop : -1;
  me->root = o->kind == K_BCAST || o->kind == K_REDUCE ? o->root : -1;
  me->count = o->count;
  if ((res = meet(c)) != ncclSuccess)
    return res;
  for (r = 0; r < c->n; r++)
    if (c->rl[r].kind != r0->kind || c->rl[r].dt != r0->dt ||
        c->rl[r].rop != r0->rop || c->rl[r].root != r0->root ||
        c->rl[r].count != r0->count) {
      fprintf(stderr, "fakenccl: ranks disagree: rank %d called %s count "
              "%llu dtype %d op %d root %d, rank 0 %s count %llu dtype %d "
              "op %d root %d\n", r, kind_names[c->rl[r].kind],
              (unsigned long long)c->rl[r].count, c->rl[r].dt,
              c->rl[r].rop, c->rl[r].root, kind_names[r0->kind],
              (unsigned long long)r0->count, r0->dt, r0->rop, r0->root);
      abort();
    }
  /* Nobody overwrites its line before everyone compared. */
  return meet(c);
}

/* Collectives in chunks that fit a slot; rank r's contribution to a
 * chunk lies in slot r. */
static ncclResult_t run_collective(struct ncclComm *c, struct op *o)
{
  size_t es = type_size(o->dt), per = SLOT / es, off, m, b;
  const void *srcs[64];
  ncclResult_t res;
  int r, nb;

  if ((res = agree(c, o)) != ncclSuccess)
    return res;
  for (r = 0; r < c->n; r++)
    srcs[r] = slot(c, r);
  /* reduce_scatter: one pass per block, the last block first, so an
   * output that aliases an earlier block's input (block 0's) overwrites
   * it before it is read, as on a GPU; the others: one pass. */
  nb = o->kind == K_REDSCAT ? c->n : 1;
  for (b = (size_t)nb; b-- > 0;) {
    for (off = 0; off < o->count; off += m) {
      const char *in = (const char *)o->send + (b * o->count + off) * es;

      m = o->count - off < per ? o->count - off : per;
      switch (o->kind) {
      case K_BCAST:
        if (c->me == o->root)
          memcpy(slot(c, c->me), in, m * es);
        break;
      default:
        memcpy(slot(c, c->me), in, m * es);
        break;
      }
      if ((res = meet(c)) != ncclSuccess)
        return res;
      switch (o->kind) {
      case K_ALLREDUCE:
        reduce(o->dt, o->rop, (char *)o->recv + off * es, srcs, c->n, m);
        break;
      case K_REDUCE:
        if (c->me == o->root)
          reduce(o->dt, o->rop, (char *)o->recv + off * es, srcs, c->n, m);
        break;
      case K_REDSCAT:
        if ((int)b == c->me)
          reduce(o->dt, o->rop, (char *)o->recv + off * es, srcs, c->n, m);
        break;
      case K_BCAST:
        memcpy((char *)o->recv + off * es, slot(c, o->root), m * es);
        break;
      case K_ALLGATHER:
        /* In rank order, the own block read from the input now: an
         * input inside an earlier block is overwritten, as on a GPU. */
        for (r = 0; r < c->n; r++)
          memmove((char *)o->recv + ((size_t)r * o->count + off) * es,
                  r == c->me ? in : slot(c, r), m * es);
        break;
      default:
        break;
      }
      if ((res = meet(c)) != ncclSuccess)
        return res;
    }
  }
  return ncclSuccess;
}

static struct box *box_of(struct ncclComm *c, int from, int to)
{
  return &c->boxes[from * c->n + to];
}

static char *boxdata(struct ncclComm *c, int from, int to)
{
  return c->boxdata + (size_t)(from * c->n + to) * BOX;
}

/* One step of a send or receive without waiting; true when it is done. */
static bool p2p_step(struct ncclComm *c, struct op *o)
{
  size_t bytes = o->count * type_size(o->dt), m;
  struct box *bx;

  if (o->kind == K_SEND) {
    bx = box_of(c, c->me, o->root);
    if (o->done >= bytes && ld(&bx->put) == ld(&bx->take))
      return true;
    if (o->done >= bytes || ld(&bx->put) != ld(&bx->take))
      return false;
    m = bytes - o->done < BOX ? bytes - o->done : BOX;
    memcpy(boxdata(c, c->me, o->root), (const char *)o->send + o->done, m);
    bx->len = m;
    st(&bx->put, ld(&bx->put) + 1);
    o->done += m;
    return false;
  }
  bx = box_of(c, o->root, c->me);
  if (o->done >= bytes)
    return true;
  if (ld(&bx->put) == ld(&bx->take))
    return false;
  m = bx->len;
  if (m > bytes - o->done)
    m = bytes - o->done;   /* a size mismatch: NCCL's is undefined */
  memcpy((char *)o->recv + o->done, boxdata(c, o->root, c->me), m);
  o->done += m;
  st(&bx->take, ld(&bx->take) + 1);
  return o->done >= bytes;
}

/* Collectives in order, then every send and receive of the batch
 * together (a group's exchange cannot deadlock). */
static void run_batch(void *arg)
{
  struct batch *bt = arg;
  struct ncclComm *c = bt->c;
  struct op *o, *next;
  unsigned spins = 0;
  bool all;

  fake_work_delay();
  if (bt->fail) {
    while (!halted(c))
      fake_backoff(&spins);
    goto out;
  }
  for (o = bt->ops; o && !halted(c); o = o->next)
    if (o->kind != K_SEND && o->kind != K_RECV && o->count)
      run_collective(c, o);
  for (;;) {
    all = true;
    for (o = bt->ops; o; o = o->next)
      if ((o->kind == K_SEND || o->kind == K_RECV) && o->count &&
          !p2p_step(c, o))
        all = false;
    if (all || halted(c))
      break;
    fake_backoff(&spins);
  }
out:
  for (o = bt->ops; o; o = next) {
    next = o->next;
    free(o);
  }
  __atomic_sub_fetch(&c->inflight, 1, __ATOMIC_ACQ_REL);
  comm_unref(c);
  free(bt);
}

/* ---- groups ---------------------------------------------------------- */

/* One communicator's and stream's part of the thread's open group. */
struct pending {
  struct ncclComm *c;
  cudaStream_t stream;
  struct op *head, *tail;
  struct pending *next;
};

static __thread int group_depth;
static __thread struct pending *group_ops;

/* Frees a batch's operations that will never run. */
static void free_ops(struct op *o)
{
  struct op *next;

  for (; o; o = next) {
    next = o->next;
    free(o);
  }
}

static ncclResult_t launch(struct ncclComm *c, cudaStream_t s, struct op *ops)
{
  struct batch *bt;
  const char *fr = getenv("FAKENCCL_FAIL_RANK");

  if (revoked(c)) {
    /* Revoked between the group's calls and its end. */
    free_ops(ops);
    snprintf(c->last, sizeof c->last, "fake: ncclGroupEnd on a revoked "
             "communicator");
    return ncclInvalidUsage;
  }
  bt = calloc(1, sizeof *bt);
  if (!bt)
    return ncclSystemError;
  bt->c = c;
  bt->ops = ops;
  c->ops++;
  if (c->fail_op && fr && atoi(fr) == c->me &&
      c->ops == (unsigned long)c->fail_op) {
    bt->fail = true;
    __atomic_store_n(&c->async_err, ncclSystemError, __ATOMIC_RELEASE);
    snprintf(c->last, sizeof c->last, "fake: injected failure of "
             "operation %lu on rank %d", c->ops, c->me);
  }
  __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
  __atomic_add_fetch(&c->inflight, 1, __ATOMIC_ACQ_REL);
  if (fake_stream_enqueue(s, run_batch, bt) != cudaSuccess) {
    __atomic_sub_fetch(&c->inflight, 1, __ATOMIC_ACQ_REL);
    comm_unref(c);
    free(bt);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* $FAKENCCL_INPROGRESS: the call went to the background. */
static ncclResult_t maybe_in_progress(struct ncclComm *c)
{
  const char *v = getenv("FAKENCCL_INPROGRESS");

  if (!c->nonblocking || !v || (strcmp(v, "1") != 0 &&
                                strcmp(v, "hold") != 0))
    return ncclSuccess;
  __atomic_store_n(&c->inprogress, strcmp(v, "hold") == 0 ? INT_MAX : 2,
                   __ATOMIC_RELEASE);
  return ncclInProgress;
}

/* A buffer NCCL would read or write must be the comm's device's. */
static bool bad_buffer(const struct ncclComm *c, const void *p,
                       const char *what)
{
  int dev = fake_ptr_device(p);

  if (dev == c->dev)
    return false;
  fprintf(stderr, "fakenccl: %s buffer %p is %s (communicator of rank %d "
          "on device %d)\n", what, p, dev < 0 ? "not device memory"
          : "another device's memory", c->me, c->dev);
  snprintf(((struct ncclComm *)c)->last, sizeof c->last, "fake: %s buffer "
           "%p is not device %d's memory", what, p, c->dev);
  return true;
}

static ncclResult_t submit(struct ncclComm *c, cudaStream_t s, struct op *proto)
{
  struct pending *p;
  struct op *o;
  const char *fr = getenv("FAKENCCL_FAIL_RANK");
  ncclResult_t r;

  if (!c)
    return ncclInvalidArgument;
  if (!is_live(c))
    return dead_handle(kind_names[proto->kind]);
  if (aborted(c))
    return ncclInvalidArgument;
  if (revoked(c)) {
    snprintf(c->last, sizeof c->last, "fake: %s on a revoked communicator",
             kind_names[proto->kind]);
    return ncclInvalidUsage;
  }
  if ((r = ensure_ready(c, kind_names[proto->kind])) != ncclSuccess)
    return r;
  if (!type_size(proto->dt))
    return ncclInvalidArgument;
  if ((proto->kind == K_BCAST || proto->kind == K_REDUCE ||
       proto->kind == K_SEND || proto->kind == K_RECV) &&
      (proto->root < 0 || proto->root >= c->n))
    return ncclInvalidArgument;
  if ((unsigned)proto->rop > (unsigned)ncclAvg)
    return ncclInvalidArgument;
  if (proto->count &&
      ((proto->kind != K_RECV && bad_buffer(c, proto->send, "send")) ||
       (proto->kind != K_SEND &&
        (proto->kind != K_REDUCE || c->me == proto->root) &&
        bad_buffer(c, proto->recv, "receive"))))
    return ncclInvalidArgument;
  if (c->submit_fail_op && fr && atoi(fr) == c->me &&
      ++c->submits == (unsigned long)c->submit_fail_op) {
    snprintf(c->last, sizeof c->last, "fake: injected submission failure "
             "of call %lu on rank %d", c->submits, c->me);
    return ncclUnhandledCudaError;
  }
  o = malloc(sizeof *o);
  if (!o)
    return ncclSystemError;
  *o = *proto;
  o->done = 0;
  o->next = NULL;
  if (group_depth == 0) {
    r = launch(c, s, o);
    return r == ncclSuccess ? maybe_in_progress(c) : r;
  }
  for (p = group_ops; p && (p->c != c || p->stream != s); p = p->next)
    ;
  if (!p) {
    p = calloc(1, sizeof *p);
    if (!p) {
      free(o);
      return ncclSystemError;
    }
    p->c = c;
    p->stream = s;
    p->next = group_ops;
    group_ops = p;
  }
  if (p->tail)
    p->tail->next = o;
  else
    p->head = o;
  p->tail = o;
  return ncclSuccess;
}

/* nccl.h declares these without (void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
ncclResult_t ncclGroupStart()
{
  group_depth++;
  return ncclSuccess;
}

/* Launches every communicator's part of the thread's group. */
ncclResult_t ncclGroupEnd()
{
  ncclResult_t r = ncclSuccess, e;
  struct pending *p;

  if (group_depth == 0)
    return ncclInvalidUsage;
  if (--group_depth > 0)
    return ncclSuccess;
  while ((p = group_ops) != NULL) {
    group_ops = p->next;
    e = launch(p->c, p->stream, p->head);
    if (e == ncclSuccess)
      e = maybe_in_progress(p->c);
    if (r == ncclSuccess)
      r = e;
    free(p);
  }
  return r;
}
#pragma GCC diagnostic pop

#define OP(k, s, r, n, d, o, rt) \
  (struct op){ .kind = (k), .send = (s), .recv = (r), .count = (n), \
               .dt = (d), .rop = (o), .root = (rt) }

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n,
                           ncclDataType_t d, ncclRedOp_t o, ncclComm_t c,
                           cudaStream_t st_)
{
  struct op p = OP(K_ALLREDUCE, s, r, n, d, o, 0);

  return submit(c, st_, &p);
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n,
                           ncclDataType_t d, int root, ncclComm_t c,
                           cudaStream_t st_)
{
  struct op p = OP(K_BCAST, s, r, n, d, ncclSum, root);

  return submit(c, st_, &p);
}

ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t d,
                        ncclRedOp_t o, int root, ncclComm_t c,
                        cudaStream_t st_)
{
  struct op p = OP(K_REDUCE, s, r, n, d, o, root);

  return submit(c, st_, &p);
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n,
                           ncclDataType_t d, ncclComm_t c, cudaStream_t st_)
{
  struct op p = OP(K_ALLGATHER, s, r, n, d, ncclSum, 0);

  return submit(c, st_, &p);
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n,
                               ncclDataType_t d, ncclRedOp_t o,
                               ncclComm_t c, cudaStream_t st_)
{
  struct op p = OP(K_REDSCAT, s, r, n, d, o, 0);

  return submit(c, st_, &p);
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t d, int peer,
                      ncclComm_t c, cudaStream_t st_)
{
  struct op p = OP(K_SEND, s, NULL, n, d, ncclSum, peer);

  return submit(c, st_, &p);
}

ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t d, int peer,
                      ncclComm_t c, cudaStream_t st_)
{
  struct op p = OP(K_RECV, NULL, r, n, d, ncclSum, peer);

  return submit(c, st_, &p);
}

/* ---- communicators ------------------------------------------------------ */

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
  memset(id, 0, sizeof *id);
  if (getrandom(id->internal, 16, 0) != 16)
    return ncclSystemError;
  return ncclSuccess;
}

static void name_of(const ncclUniqueId *id, char *out, size_t len)
{
  const unsigned char *b = (const unsigned char *)id->internal;
  size_t i, k;

  k = (size_t)snprintf(out, len, "/fakenccl-");
  for (i = 0; i < 16 && k + 2 < len; i++)
    k += (size_t)snprintf(out + k, len - k, "%02x", b[i]);
}

/* The host's identity, as NCCL's host hash: $NCCL_HOSTID if set, else
 * the host name. */
static uint64_t host_hash(void)
{
  const char *id = getenv("NCCL_HOSTID");
  char name[256] = "";
  uint64_t h = 1469598103934665603ull;
  const char *p;

  if (!id || !*id) {
    gethostname(name, sizeof name - 1);
    id = name;
  }
  for (p = id; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

/* Maps the segment and waits for every rank to join.  Two ranks of one
 * communicator on one GPU of one host are refused as NCCL's init does
 * ("Duplicate GPU detected", ncclInvalidUsage, src/init.cc); ranks of
 * different communicators may share a GPU. */
static ncclResult_t join(struct ncclComm *c)
{
  unsigned spins = 0;
  int fd, r;

  fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
  if (fd < 0)
    return ncclSystemError;
  if (ftruncate(fd, (off_t)c->size) != 0) {
    close(fd);
    return ncclSystemError;
  }
  c->seg = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (c->seg == MAP_FAILED) {
    c->seg = NULL;
    return ncclSystemError;
  }
  c->rl = (struct rank_line *)((char *)c->seg + sizeof *c->seg);
  c->sl = (struct split_line *)(c->rl + c->n);
  c->shl = (struct shrink_line *)(c->sl + c->n);
  c->boxes = (struct box *)(c->shl + c->n);
  c->slots = (char *)(c->boxes + c->n * c->n);
  c->boxdata = c->slots + (size_t)c->n * SLOT;
  c->rl[c->me].host = host_hash();
  c->rl[c->me].dev = c->dev;
  __atomic_add_fetch(&c->seg->joined, 1, __ATOMIC_ACQ_REL);
  while (__atomic_load_n(&c->seg->joined, __ATOMIC_ACQUIRE) <
         (uint32_t)c->n) {
    if (aborted(c) || (c->up && job_stopped(c->up)))
      return ncclInvalidUsage;
    fake_backoff(&spins);
  }
  if (c->me == 0)
    shm_unlink(c->name);
  for (r = 0; r < c->n; r++)
    if (r != c->me && c->rl[r].host == c->rl[c->me].host &&
        c->rl[r].dev == c->dev) {
      fprintf(stderr, "fakenccl: Duplicate GPU detected : rank %d and "
              "rank %d both on CUDA device %d\n", c->me, r, c->dev);
      snprintf(c->last, sizeof c->last, "fake: Duplicate GPU detected : "
               "rank %d and rank %d both on CUDA device %d", c->me, r,
               c->dev);
      return ncclInvalidUsage;
    }
  return ncclSuccess;
}

/* Note [revoke and shrink]: a shrink's new communicator first waits for
 * every survivor of the parent to post the same exclude list. */
static ncclResult_t shrink_meet(struct ncclComm *c)
{
  struct ncclComm *p = c->parent;
  uint64_t k = c->shrink_seq, seq, theirs;
  unsigned spins = 0;
  int r, b = (int)(k & 1);

  if (!p)
    return ncclSuccess;
  for (r = 0; r < p->n; r++) {
    if (r == p->me || (c->shrink_mask >> r & 1))
      continue;
    while ((seq = ld(&p->shl[r].seq)) < k) {
      if (aborted(c) || job_stopped(p))
        return ncclInvalidUsage;
      fake_backoff(&spins);
    }
    theirs = ld(&p->shl[r].mask[b]);
    if (seq != k || theirs != c->shrink_mask) {
      fprintf(stderr, "fakenccl: ncclCommShrink: survivors disagree: rank "
              "%d (its shrink #%llu) excludes %#llx, rank %d (#%llu) "
              "%#llx: every survivor must pass the same list\n", p->me,
              (unsigned long long)k, (unsigned long long)c->shrink_mask, r,
              (unsigned long long)seq, (unsigned long long)theirs);
      snprintf(c->last, sizeof c->last, "fake: ncclCommShrink: rank %d's "
               "exclude list differs from rank %d's", p->me, r);
      return ncclInvalidUsage;
    }
  }
  c->parent = NULL;
  comm_unref(p);
  return ncclSuccess;
}

/* $FAKENCCL_SHRINK_FAIL_RANK: the shrink fails here, after the join. */
static ncclResult_t shrink_failed(struct ncclComm *c, ncclResult_t r)
{
  if (r != ncclSuccess || !c->shrink_fail)
    return r;
  snprintf(c->last, sizeof c->last, "fake: injected failure of "
           "ncclCommShrink (FAKENCCL_SHRINK_FAIL_RANK)");
  return ncclSystemError;
}

/* The whole init of c: a shrink's meeting of the survivors, then the
 * segment's.  Its result is c's state. */
static ncclResult_t init_run(struct ncclComm *c)
{
  ncclResult_t r = shrink_meet(c);

  if (r == ncclSuccess)
    r = shrink_failed(c, join(c));
  __atomic_store_n(&c->async_err, r, __ATOMIC_RELEASE);
  __atomic_store_n(&c->init_done, r == ncclSuccess, __ATOMIC_RELEASE);
  return r;
}

static void *init_main(void *arg)
{
  init_run(arg);
  return NULL;
}

/* A communicator of n ranks over the segment called name, not yet
 * initialized; shrunk from parent (its reference taken) when not NULL. */
static struct ncclComm *comm_new(int n, int rank, const char *name,
                                 const ncclConfig_t *cfg,
                                 struct ncclComm *parent,
                                 uint64_t shrink_seq, uint64_t shrink_mask)
{
  struct ncclComm *c = calloc(1, sizeof *c);
  const char *fo = getenv("FAKENCCL_FAIL_OP");

  if (!c)
    return NULL;
  c->n = n;
  c->me = rank;
  cudaGetDevice(&c->dev);
  c->refs = 1;
  c->fail_op = fo && *fo ? atoi(fo) : 0;
  fo = getenv("FAKENCCL_SUBMIT_FAIL_OP");
  c->submit_fail_op = fo && *fo ? atoi(fo) : 0;
  c->nonblocking = cfg && cfg->blocking == 0;
  snprintf(c->name, sizeof c->name, "%s", name);
  if (parent) {
    __atomic_add_fetch(&parent->refs, 1, __ATOMIC_ACQ_REL);
    c->parent = parent;
    c->shrink_seq = shrink_seq;
    c->shrink_mask = shrink_mask;
    fo = getenv("FAKENCCL_SHRINK_FAIL_RANK");
    c->shrink_fail = fo && *fo && atoi(fo) == parent->me;
  }
  c->size = sizeof(struct seg) + (size_t)n * sizeof(struct rank_line) +
            (size_t)n * sizeof(struct split_line) +
            (size_t)n * sizeof(struct shrink_line) +
            (size_t)n * n * sizeof(struct box) + (size_t)n * SLOT +
            (size_t)n * n * BOX;
  return c;
}

/* ncclCommInitRankConfig: *out is set at once; a non-blocking comm
 * initializes in the background and says ncclInProgress until then. */
static ncclResult_t comm_make(ncclComm_t *out, int n, int rank,
                              const char *name, ncclConfig_t *cfg)
{
  struct ncclComm *c;
  ncclResult_t r;

  *out = NULL;
  if (n < 1 || n > 64 || rank < 0 || rank >= n)
    return ncclInvalidArgument;
  c = comm_new(n, rank, name, cfg, NULL, 0, 0);
  if (!c)
    return ncclSystemError;
  *out = c;
  if (c->nonblocking) {
    __atomic_store_n(&c->async_err, ncclInProgress, __ATOMIC_RELEASE);
    if (pthread_create(&c->init_th, NULL, init_main, c) != 0) {
      comm_unref(c);
      *out = NULL;
      return ncclSystemError;
    }
    c->init_thread = true;
    live_add(c);
    return ncclInProgress;
  }
  live_add(c);
  r = init_run(c);
  if (r != ncclSuccess) {
    live_del(c);
    comm_unref(c);
    *out = NULL;
  }
  return r;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int n, ncclUniqueId id,
                                    int rank, ncclConfig_t *cfg)
{
  char name[64];

  name_of(&id, name, sizeof name);
  return comm_make(out, n, rank, name, cfg);
}

/* Note [child job] (NCCL 2.28's source, not its documentation):
 * ncclCommSplit and ncclCommShrink go through ncclCommInitChildComm
 * (src/init.cc), which sets *newcomm = NCCL_COMM_NULL "until comm split
 * fully complete" and hands the caller's pointer to a job.  On a
 * non-blocking parent the group end (src/group.cc) runs that job on a
 * thread, sets the PARENT's state to ncclInProgress and returns
 * ncclInProgress; the job's end (ncclCommInitRankFunc) stores the child
 * into the caller's pointer (__atomic_store_n(job->newcomm, comm)) --
 * also when the child's init failed -- and then the parent's state
 * becomes the job's result.  Until then every call on the parent is
 * refused (ensure_ready).  A rank passing NCCL_SPLIT_NOCOLOR runs the
 * job too (no child).  Aborting or destroying the parent stops the job
 * and waits for it (ncclGroupJobAbort).  A blocking parent runs the job
 * before returning.  The fake's job does the split's all-gather or the
 * shrink's meeting, then the child's whole init, so the child is ready
 * (or failed, its state saying why) once its handle is stored. */
struct child_job {
  struct ncclComm *parent;  /* its reference taken */
  ncclComm_t *newcomm;      /* the caller's pointer */
  bool shrink;
  int color, key;           /* a split's */
  uint64_t seq, mask;       /* the split's or shrink's number; excluded */
  int nlist;
  ncclConfig_t cfg;
  bool has_cfg;
};

static ncclResult_t split_gather(struct child_job *j, int *n, int *me);
static void trace_split(const struct ncclComm *c, int color, int key);

/* The child's init, its handle stored through the caller's pointer. */
static ncclResult_t job_run(struct child_job *j)
{
  struct ncclComm *p = j->parent, *c;
  char name[sizeof p->name + 48];
  int n = p->n - j->nlist, me = 0, r;
  ncclResult_t res;
  const char *ms = getenv("FAKENCCL_JOB_MS");
  struct timespec ts;

  /* NCCL's split or shrink takes bootstrap rounds (tens of ms): the
   * fake's takes at least $FAKENCCL_JOB_MS (default 20), so that a
   * caller using the parent too early meets its refusal every time. */
  ts.tv_sec = 0;
  ts.tv_nsec = (ms && *ms ? atol(ms) : 20) % 1000 * 1000000L;
  nanosleep(&ts, NULL);

  if (j->shrink) {
    for (r = 0; r < p->me; r++)
      me += !(j->mask >> r & 1);
    snprintf(name, sizeof name, "%s-x%llu", p->name,
             (unsigned long long)j->seq);
  } else {
    res = split_gather(j, &n, &me);
    if (res != ncclSuccess || j->color == NCCL_SPLIT_NOCOLOR)
      return res;
    snprintf(name, sizeof name, "%s-s%llu-c%d", p->name,
             (unsigned long long)j->seq, j->color);
  }
  c = comm_new(n, me, name, j->has_cfg ? &j->cfg : NULL,
               j->shrink ? p : NULL, j->seq, j->mask);
  if (!c)
    return ncclSystemError;
  c->dev = p->dev;          /* job->cudaDev = comm->cudaDev */
  c->up = p;
  live_add(c);
  res = init_run(c);
  c->up = NULL;
  __atomic_store_n(j->newcomm, c, __ATOMIC_RELEASE);
  return res;
}

static void *job_main(void *arg)
{
  struct child_job *j = arg;
  struct ncclComm *p = j->parent;
  ncclResult_t r = job_run(j);

  __atomic_store_n(&p->async_err, r, __ATOMIC_RELEASE);
  comm_unref(p);
  free(j);
  return NULL;
}

/* Runs j: on a thread for a non-blocking parent (ncclInProgress). */
static ncclResult_t job_start(struct child_job *j)
{
  struct ncclComm *p = j->parent;
  ncclResult_t r;

  __atomic_add_fetch(&p->refs, 1, __ATOMIC_ACQ_REL);
  if (!p->nonblocking) {
    r = job_run(j);
    comm_unref(p);
    free(j);
    return r;
  }
  join_job(p);
  __atomic_store_n(&p->async_err, ncclInProgress, __ATOMIC_RELEASE);
  if (pthread_create(&p->job_th, NULL, job_main, j) != 0) {
    __atomic_store_n(&p->async_err, ncclSuccess, __ATOMIC_RELEASE);
    comm_unref(p);
    free(j);
    return ncclSystemError;
  }
  p->job = true;
  return ncclInProgress;
}

/* Waits for c's split or shrink job (c aborted first: it ends soon). */
static void join_job(struct ncclComm *c)
{
  if (!c->job)
    return;
  pthread_join(c->job_th, NULL);
  c->job = false;
}

/* $FAKENCCL_TRACE: a file that gets a line per ncclCommSplit call, so a
 * test sees that sub-groups were split from their parent. */
static void trace_split(const struct ncclComm *c, int color, int key)
{
  const char *path = getenv("FAKENCCL_TRACE");
  FILE *f = path && *path ? fopen(path, "ae") : NULL;

  if (!f)
    return;
  fprintf(f, "ncclCommSplit rank=%d n=%d color=%d key=%d\n", c->me, c->n,
          color, key);
  fclose(f);
}

/* The split's all-gather of (color, key) over the parent: the child's
 * size and this rank's place in it (by key, then by parent rank). */
static ncclResult_t split_gather(struct child_job *j, int *n, int *me)
{
  struct ncclComm *comm = j->parent;
  unsigned spins = 0;
  int b = (int)(j->seq & 1), r;

  comm->sl[comm->me].color[b] = j->color;
  comm->sl[comm->me].key[b] = j->key;
  st(&comm->sl[comm->me].seq, j->seq);
  for (r = 0; r < comm->n; r++)
    while (ld(&comm->sl[r].seq) < j->seq) {
      if (job_stopped(comm))
        return ncclInvalidUsage;
      fake_backoff(&spins);
    }
  trace_split(comm, j->color, j->key);
  *n = *me = 0;
  for (r = 0; r < comm->n; r++) {
    int kr = comm->sl[r].key[b];

    if (comm->sl[r].color[b] != j->color)
      continue;
    ++*n;
    if (kr < j->key || (kr == j->key && r < comm->me))
      ++*me;
  }
  return ncclSuccess;
}

/* Collective over comm (Note [child job]): the ranks of one color form a
 * communicator, ordered by key, then by rank in comm; its segment is
 * named after comm's, the split's number and the color. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *cfg)
{
  struct child_job *j;
  ncclResult_t r;

  if (!newcomm)
    return ncclInvalidArgument;
  if (comm && !is_live(comm))
    return dead_handle("ncclCommSplit");
  if (!comm || (color < 0 && color != NCCL_SPLIT_NOCOLOR))
    return ncclInvalidArgument;
  if ((r = ensure_ready(comm, "ncclCommSplit")) != ncclSuccess)
    return r;
  *newcomm = NULL;
  j = calloc(1, sizeof *j);
  if (!j)
    return ncclSystemError;
  j->parent = comm;
  j->newcomm = newcomm;
  j->color = color;
  j->key = key;
  j->seq = ++comm->splits;
  if (cfg) {
    j->cfg = *cfg;
    j->has_cfg = true;
  }
  return job_start(j);
}

/* Note [revoke and shrink] (NCCL 2.28's documented contract)
 *
 * ncclCommRevoke(comm, 0) is local: it sets the flag the comm's kernels
 * poll (halted), so in-flight work returns (its output undefined), and
 * every later operation is ncclInvalidUsage.  A blocking comm returns once
 * none of its batches runs; a non-blocking one returns ncclInProgress and
 * ncclCommGetAsyncError says ncclInProgress until then, ncclSuccess after
 * (whatever error it held before).  Then destroy, abort, split and shrink
 * may proceed; ncclCommFinalize is ncclInvalidArgument.  Misuse: flags other
 * than NCCL_REVOKE_DEFAULT, a second revoke, a comm still initializing:
 * ncclInvalidArgument; a NULL comm: nothing, ncclSuccess.
 *
 * ncclCommShrink(comm, list, n, &new, config, flags) is collective over
 * the ranks not in list: each posts its list (sorted in place, as NCCL
 * does) in the parent's segment and the new comm's init waits for every
 * other survivor's (in the background on a non-blocking comm: the new
 * comm says ncclInProgress until then, and aborting it ends the wait).
 * The survivors keep their order, renumbered from 0.  config NULL
 * inherits the parent's blocking mode.  NCCL_SHRINK_ABORT first stops the
 * parent's in-flight work and waits for it to return.  Errors: a NULL or
 * empty list, a rank out of range or twice, the caller in its own list,
 * unknown flags: ncclInvalidArgument; a non-blocking revoke not yet seen
 * complete: ncclInvalidUsage.
 *
 * Stricter than NCCL where libpg could go wrong unseen: survivors whose
 * lists (or numbers of shrinks of this parent) differ fail the new comm
 * with ncclInvalidUsage and a message, instead of hanging or mixing ranks;
 * after NCCL_SHRINK_ABORT the parent stays revoked (its ranks stopped at
 * different points: any later operation on it is ncclInvalidUsage). */

/* Waits until none of c's batches runs (they quit once halted). */
static void quiesce(struct ncclComm *c)
{
  unsigned spins = 0;

  while (__atomic_load_n(&c->inflight, __ATOMIC_ACQUIRE) > 0)
    fake_backoff(&spins);
}

ncclResult_t ncclCommRevoke(ncclComm_t c, int flags)
{
  if (!c)
    return ncclSuccess;
  if (!is_live(c)) {
    dead_handle("ncclCommRevoke");
    return ncclInvalidArgument;
  }
  if (flags != NCCL_REVOKE_DEFAULT || revoked(c) ||
      !__atomic_load_n(&c->init_done, __ATOMIC_ACQUIRE)) {
    snprintf(c->last, sizeof c->last, "fake: ncclCommRevoke: %s",
             flags != NCCL_REVOKE_DEFAULT ? "flags must be 0"
             : revoked(c) ? "already revoked" : "still initializing");
    return ncclInvalidArgument;
  }
  __atomic_store_n(&c->revoked, 1, __ATOMIC_RELEASE);
  /* Its split or shrink in progress ends first (ncclCommEnsureReady
   * under the abort flag: ncclGroupJobAbort). */
  __atomic_store_n(&c->job_stop, 1, __ATOMIC_RELEASE);
  join_job(c);
  __atomic_store_n(&c->job_stop, 0, __ATOMIC_RELEASE);
  if (!c->nonblocking) {
    quiesce(c);
    return ncclSuccess;
  }
  __atomic_store_n(&c->async_err, ncclInProgress, __ATOMIC_RELEASE);
  __atomic_store_n(&c->revoking, 1, __ATOMIC_RELEASE);
  return ncclInProgress;
}

static int compare_ints(const void *a, const void *b)
{
  int x = *(const int *)a, y = *(const int *)b;

  return (x > y) - (x < y);
}

/* The exclude list as a mask, or a reason it is invalid (c->last). */
static bool exclude_mask(struct ncclComm *c, int *list, int n,
                         uint64_t *mask)
{
  int i;

  *mask = 0;
  if (!list || n <= 0 || n >= c->n) {
    snprintf(c->last, sizeof c->last, "fake: ncclCommShrink: %d ranks "
             "excluded of %d", list ? n : 0, c->n);
    return false;
  }
  qsort(list, (size_t)n, sizeof *list, compare_ints);
  for (i = 0; i < n; i++) {
    if (list[i] < 0 || list[i] >= c->n || (*mask >> list[i] & 1)) {
      snprintf(c->last, sizeof c->last, "fake: ncclCommShrink: rank %d "
               "excluded is out of range or twice", list[i]);
      return false;
    }
    *mask |= (uint64_t)1 << list[i];
  }
  if (*mask >> c->me & 1) {
    snprintf(c->last, sizeof c->last, "fake: ncclCommShrink: rank %d is "
             "in its own exclude list", c->me);
    return false;
  }
  return true;
}

/* $FAKENCCL_TRACE: a line per ncclCommShrink call too. */
static void trace_shrink(const struct ncclComm *c, uint64_t mask, int flags)
{
  const char *path = getenv("FAKENCCL_TRACE");
  FILE *f = path && *path ? fopen(path, "ae") : NULL;

  if (!f)
    return;
  fprintf(f, "ncclCommShrink rank=%d n=%d excluded=%#llx flags=%d\n", c->me,
          c->n, (unsigned long long)mask, flags);
  fclose(f);
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int *list, int nlist,
                            ncclComm_t *newcomm, ncclConfig_t *cfg,
                            int flags)
{
  struct child_job *j;
  uint64_t mask;
  ncclResult_t r;

  if (!newcomm)
    return ncclInvalidArgument;
  if (comm && !is_live(comm))
    return dead_handle("ncclCommShrink");
  if (!comm || (flags & ~NCCL_SHRINK_ABORT) != 0 ||
      !exclude_mask(comm, list, nlist, &mask))
    return ncclInvalidArgument;
  if (__atomic_load_n(&comm->revoking, __ATOMIC_ACQUIRE) &&
      state(comm) == ncclInProgress) {
    snprintf(comm->last, sizeof comm->last, "fake: ncclCommShrink: the "
             "revoke is not complete (poll ncclCommGetAsyncError first)");
    return ncclInvalidArgument;
  }
  if ((r = ensure_ready(comm, "ncclCommShrink")) != ncclSuccess)
    return r;
  *newcomm = NULL;
  if (flags & NCCL_SHRINK_ABORT) {
    __atomic_store_n(&comm->revoked, 1, __ATOMIC_RELEASE);
    quiesce(comm);
  }
  trace_shrink(comm, mask, flags);
  j = calloc(1, sizeof *j);
  if (!j)
    return ncclSystemError;
  j->parent = comm;
  j->newcomm = newcomm;
  j->shrink = true;
  j->seq = ++comm->shrinks;
  j->mask = mask;
  j->nlist = nlist;
  st(&comm->shl[comm->me].mask[j->seq & 1], mask);
  st(&comm->shl[comm->me].seq, j->seq);
  /* config NULL: the child inherits the parent's. */
  j->cfg = cfg ? *cfg : (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  if (!cfg)
    j->cfg.blocking = comm->nonblocking ? 0 : 1;
  j->has_cfg = true;
  return job_start(j);
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int n, ncclUniqueId id,
                              int rank)
{
  return ncclCommInitRankConfig(out, n, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err)
{
  int left;

  if (!c)
    return ncclInvalidArgument;
  if (!is_live(c))
    return dead_handle("ncclCommGetAsyncError");
  *err = state(c);
  left = __atomic_load_n(&c->inprogress, __ATOMIC_ACQUIRE);
  if (*err == ncclSuccess && left > 0) {
    __atomic_store_n(&c->inprogress, left - 1, __ATOMIC_RELEASE);
    *err = ncclInProgress;
  }
  return ncclSuccess;
}

/* Takes the stuck work off the streams; local, as NCCL's. */
ncclResult_t ncclCommAbort(ncclComm_t c)
{
  if (!c)
    return ncclSuccess;
  if (!live_del(c))
    return dead_handle("ncclCommAbort");
  __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&c->job_stop, 1, __ATOMIC_RELEASE);
  join_job(c);
  if (c->me == 0)
    shm_unlink(c->name);
  comm_unref(c);
  return ncclSuccess;
}

/* NCCL 2.28: a finalize after a revoke is ncclInvalidArgument, and one
 * on a comm with a pending async error returns that error
 * (ncclCommEnsureReady). */
ncclResult_t ncclCommFinalize(ncclComm_t c)
{
  if (c && !is_live(c))
    return dead_handle("ncclCommFinalize");
  if (c && revoked(c)) {
    snprintf(c->last, sizeof c->last, "fake: ncclCommFinalize on a "
             "revoked communicator (destroy or abort it)");
    return ncclInvalidArgument;
  }
  return c ? ensure_ready(c, "ncclCommFinalize") : ncclInvalidArgument;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
  if (!c)
    return ncclInvalidArgument;
  if (!live_del(c))
    return dead_handle("ncclCommDestroy");
  if (c->me == 0 && !__atomic_load_n(&c->init_done, __ATOMIC_ACQUIRE))
    shm_unlink(c->name);
  __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&c->job_stop, 1, __ATOMIC_RELEASE);
  join_job(c);
  comm_unref(c);
  return ncclSuccess;
}

const char *ncclGetLastError(ncclComm_t c)
{
  return c ? c->last : "";
}

const char *ncclGetErrorString(ncclResult_t r)
{
  switch (r) {
  case ncclSuccess: return "no error (fake)";
  case ncclUnhandledCudaError: return "unhandled cuda error (fake)";
  case ncclSystemError: return "unhandled system error (fake)";
  case ncclInternalError: return "internal error (fake)";
  case ncclInvalidArgument: return "invalid argument (fake)";
  case ncclInvalidUsage: return "invalid usage (fake)";
  case ncclRemoteError: return "remote process exited or there was a "
                               "network error (fake)";
  case ncclInProgress: return "NCCL operation in progress (fake)";
  default: return "unknown result code (fake)";
  }
}
