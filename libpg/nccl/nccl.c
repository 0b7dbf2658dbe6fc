/* nccl.c -- the NCCL backend: each pg__comm op is one NCCL call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
/* nccl.h declares `ncclGroupStart()` without void; CUDA_HOME is not a
 * system include directory, so -Wstrict-prototypes would reject it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "pg_internal.h"

/* Note [NCCL backend]
 *
 * Buffers are device memory of this comm's device.  Each op enqueues one
 * NCCL call on the comm's own non-blocking stream, records an event after
 * it and polls that event until the collective is complete, so when an op
 * returns its output is ready for every stream and the host.
 *
 * Input ordering: the stream is non-blocking, so it would not wait for the
 * caller's kernels on the legacy default stream; each op makes it wait for
 * that stream (an event record and a stream wait, no host sync), as
 * torch's ProcessGroupNCCL does with the current stream.  Input produced on
 * any other stream must be synchronized by the caller.
 *
 * Timeouts: the communicator is non-blocking (NCCL >= 2.14), so neither
 * init nor the first collective (where NCCL connects peers lazily) can
 * block the thread past the deadline.  On timeout or an NCCL async error
 * the comm is aborted (ncclCommAbort is what takes a stuck NCCL kernel
 * off the GPU) and every later op fails with PG_EPEERFAIL.
 *
 * Point to point: NCCL has no tags.  A send matches the peer's recv by
 * order alone (per pair of peers); the tag is ignored, so callers must
 * issue sends and recvs to a peer in the same order on both sides.
 *
 * In place: pg.h's in-place forms are NCCL's (all_gather send == recv +
 * me * count, reduce_scatter recv == send + me * count) and pass straight
 * through.  Plain send == recv aliasing would race inside NCCL for me !=
 * 0, so it gets its literal meaning with one device copy: all_gather's
 * input is recv's first block, reduce_scatter's output lands in send's
 * first block. */

#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21400
#define PG_NCCL_NONBLOCKING 1  /* ncclConfig_t, ncclCommFinalize */
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21000
#define PG_NCCL_BF16_AVG 1     /* ncclBfloat16, ncclAvg */
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21300
#define PG_NCCL_LAST_ERROR 1   /* ncclGetLastError */
#endif

struct nccl_comm {
  struct pg__comm base;
  ncclComm_t comm;       /* NULL once aborted */
  cudaStream_t stream;
  cudaEvent_t ready;     /* recorded on the legacy stream, waited on */
  cudaEvent_t done;      /* recorded after each NCCL call, polled */
  int *scratch;          /* one device int for barrier */
  int device, n, me;
  double timeout;
  bool poisoned;
};

/* ---- errors --------------------------------------------------------- */

/* Records the sentence for an NCCL failure (with NCCL's own detail, read
 * before an abort frees it). */
static int nccl_fail(struct nccl_comm *c, ncclResult_t r, const char *what)
{
  const char *detail = "";

#ifdef PG_NCCL_LAST_ERROR
  if (c->comm)
    detail = ncclGetLastError(c->comm);
#endif
  return pg__fail(PG_ENCCL(r), "NCCL backend: %s (rank %d of %d, device "
                  "%d): %s%s%s%s", what, c->me, c->n, c->device,
                  ncclGetErrorString(r), *detail ? " (" : "", detail,
                  *detail ? ")" : "");
}

static int cuda_fail(struct nccl_comm *c, cudaError_t e, const char *what)
{
  (void)cudaGetLastError();  /* clear it unless sticky */
  return pg__fail(PG_ECUDA(e), "NCCL backend: %s (rank %d of %d, device "
                  "%d): %s", what, c->me, c->n, c->device,
                  cudaGetErrorString(e));
}

/* After a failure the comm's state is unknown: NCCL kernels may still be
 * waiting on peers.  Aborting is the only safe way out. */
static void poison(struct nccl_comm *c)
{
  if (c->comm)
    ncclCommAbort(c->comm);
  c->comm = NULL;
  c->poisoned = true;
}

static int fail_poison(struct nccl_comm *c, ncclResult_t r,
                       const char *what)
{
  int err = nccl_fail(c, r, what);

  poison(c);
  return err;
}

static int timeout_poison(struct nccl_comm *c, const char *what)
{
  poison(c);
  return pg__fail(-ETIMEDOUT, "NCCL backend: %s (rank %d of %d, device %d) "
                  "did not complete by its deadline: a peer is stuck, "
                  "dead or not running it; the communicator was aborted",
                  what, c->me, c->n, c->device);
}

/* ---- polling -------------------------------------------------------- */

/* A small collective finishes in microseconds and a sleep costs tens of
 * microseconds of timer slack, so spin first; then sleep 20 us doubling
 * to 1 ms, so a long wait costs no CPU. */
struct backoff {
  double spin_until;
  long ns;
};

static void backoff_init(struct backoff *b)
{
  b->spin_until = pg__now() + 20e-6;
  b->ns = 0;
}

static void backoff_wait(struct backoff *b, double now)
{
  struct timespec ts;

  if (now < b->spin_until)
    return;
  b->ns = b->ns ? b->ns * 2 : 20000;
  if (b->ns > 1000000)
    b->ns = 1000000;
  ts.tv_sec = 0;
  ts.tv_nsec = b->ns;
  nanosleep(&ts, NULL);
}

/* Waits for the comm's pending non-blocking call: returns its result, or
 * ncclInProgress if the deadline passed first. */
static ncclResult_t poll_async(ncclComm_t comm, double deadline)
{
  struct backoff b;
  ncclResult_t r, ar;
  double now;

  backoff_init(&b);
  for (;;) {
    r = ncclCommGetAsyncError(comm, &ar);
    if (r != ncclSuccess)
      return r;
    if (ar != ncclInProgress)
      return ar;
    now = pg__now();
    if (now >= deadline)
      return ncclInProgress;
    backoff_wait(&b, now);
  }
}

/* A non-blocking comm may answer ncclInProgress: the call goes on in the
 * background (and only then reaches the stream), and nothing else may be
 * issued until ncclCommGetAsyncError stops saying so. */
static int settle(struct nccl_comm *c, ncclResult_t r, const char *what,
                  double deadline)
{
  if (r == ncclInProgress && c->comm)
    r = poll_async(c->comm, deadline);
  if (r == ncclSuccess)
    return 0;
  if (r == ncclInProgress)
    return timeout_poison(c, what);
  return fail_poison(c, r, what);
}

/* Polls the event recorded after the op, and the comm for async errors
 * (a dead peer shows up there, not on the stream). */
static int wait_done(struct nccl_comm *c, const char *what, double deadline)
{
  struct backoff b;
  cudaError_t e;
  ncclResult_t r, ar;
  double now;
  int err;

  backoff_init(&b);
  for (;;) {
    e = cudaEventQuery(c->done);
    if (e == cudaSuccess)
      return 0;
    if (e != cudaErrorNotReady) {
      err = cuda_fail(c, e, what);
      poison(c);
      return err;
    }
    r = ncclCommGetAsyncError(c->comm, &ar);
    if (r != ncclSuccess)
      return fail_poison(c, r, what);
    if (ar != ncclSuccess && ar != ncclInProgress)
      return fail_poison(c, ar, what);
    now = pg__now();
    if (now >= deadline)
      return timeout_poison(c, what);
    backoff_wait(&b, now);
  }
}

/* ---- ops ------------------------------------------------------------ */

static int map_dtype(pg_dtype t, ncclDataType_t *dt)
{
  switch (t) {
  case PG_F32: *dt = ncclFloat32; return 0;
  case PG_F64: *dt = ncclFloat64; return 0;
  case PG_F16: *dt = ncclFloat16; return 0;
#ifdef PG_NCCL_BF16_AVG
  case PG_BF16: *dt = ncclBfloat16; return 0;
#else
  case PG_BF16:
    return pg__fail(-ENOTSUP, "NCCL backend: bf16 needs NCCL >= 2.10");
#endif
  case PG_I32: *dt = ncclInt32; return 0;
  case PG_I64: *dt = ncclInt64; return 0;
  case PG_U8: *dt = ncclUint8; return 0;
  default:
    return pg__fail(-EINVAL, "NCCL backend: unknown dtype %d", (int)t);
  }
}

static int map_op(pg_op op, ncclRedOp_t *rop)
{
  switch (op) {
  case PG_SUM: *rop = ncclSum; return 0;
#ifdef PG_NCCL_BF16_AVG
  /* NCCL divides by n itself (integers: truncating, as pg.h says). */
  case PG_AVG: *rop = ncclAvg; return 0;
#else
  case PG_AVG:
    return pg__fail(-ENOTSUP, "NCCL backend: AVG needs NCCL >= 2.10");
#endif
  case PG_MIN: *rop = ncclMin; return 0;
  case PG_MAX: *rop = ncclMax; return 0;
  case PG_PROD: *rop = ncclProd; return 0;
  default:
    return pg__fail(-EINVAL, "NCCL backend: unknown reduction %d", (int)op);
  }
}

static int check_rank(struct nccl_comm *c, int r, const char *what)
{
  if (r < 0 || r >= c->n)
    return pg__fail(-EINVAL, "NCCL backend: %s: rank %d is not in 0..%d",
                    what, r, c->n - 1);
  return 0;
}

/* Gives the thread back the device begin() found (prev < 0: none). */
static int leave(int prev, int err)
{
  if (prev >= 0)
    cudaSetDevice(prev);
  return err;
}

/* Prepares the stream for the next NCCL call.  The thread may be the
 * caller's or the progress thread and the current device is per-thread:
 * switch to the comm's and note the caller's in *prev (-1: unchanged) for
 * leave(), like torch's device guard, so an op has no visible side
 * effect. */
static int begin(struct nccl_comm *c, const char *what, int *prev)
{
  cudaError_t e;
  int cur = -1;

  *prev = -1;
  if (c->poisoned)
    return pg__fail(PG_EPEERFAIL, "NCCL backend: %s: the communicator "
                    "was aborted by an earlier error", what);
  if (cudaGetDevice(&cur) != cudaSuccess || cur != c->device) {
    e = cudaSetDevice(c->device);
    if (e != cudaSuccess)
      return cuda_fail(c, e, "cudaSetDevice");
    *prev = cur;
  }
  e = cudaEventRecord(c->ready, cudaStreamLegacy);
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(c->stream, c->ready, 0);
  if (e != cudaSuccess)
    return leave(*prev, cuda_fail(c, e, "ordering after the default "
                                  "stream"));
  return 0;
}

/* Settles NCCL call r, queues the optional copy after it, and waits for
 * the stream to get there. */
static int finish(struct nccl_comm *c, ncclResult_t r, const char *what,
                  double deadline, void *dst, const void *src, size_t len)
{
  cudaError_t e = cudaSuccess;
  int err;

  err = settle(c, r, what, deadline);
  if (err)
    return err;
  if (len)
    e = cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToDevice, c->stream);
  if (e == cudaSuccess)
    e = cudaEventRecord(c->done, c->stream);
  if (e != cudaSuccess) {
    /* Whether the NCCL call completed is now unknown. */
    err = cuda_fail(c, e, what);
    poison(c);
    return err;
  }
  return wait_done(c, what, deadline);
}

static int nccl_all_reduce(struct pg__comm *base, const void *send,
                           void *recv, size_t count, pg_dtype t, pg_op op,
                           double deadline)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  ncclDataType_t dt = ncclFloat32;
  ncclRedOp_t rop = ncclSum;
  int err, prev;

  if (count == 0)
    return 0;
  if ((err = map_dtype(t, &dt)) || (err = map_op(op, &rop)) ||
      (err = begin(c, "ncclAllReduce", &prev)))
    return err;
  err = finish(c, ncclAllReduce(send, recv, count, dt, rop, c->comm,
                                c->stream),
               "ncclAllReduce", deadline, NULL, NULL, 0);
  return leave(prev, err);
}

static int nccl_broadcast(struct pg__comm *base, void *buf, size_t count,
                          pg_dtype t, int root, double deadline)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  ncclDataType_t dt = ncclFloat32;
  int err, prev;

  if (count == 0)
    return 0;
  if ((err = map_dtype(t, &dt)) ||
      (err = check_rank(c, root, "ncclBroadcast")) ||
      (err = begin(c, "ncclBroadcast", &prev)))
    return err;
  err = finish(c, ncclBroadcast(buf, buf, count, dt, root, c->comm,
                                c->stream),
               "ncclBroadcast", deadline, NULL, NULL, 0);
  return leave(prev, err);
}

static int nccl_reduce(struct pg__comm *base, const void *send, void *recv,
                       size_t count, pg_dtype t, pg_op op, int root,
                       double deadline)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  ncclDataType_t dt = ncclFloat32;
  ncclRedOp_t rop = ncclSum;
  int err, prev;

  if (count == 0)
    return 0;
  if ((err = map_dtype(t, &dt)) || (err = map_op(op, &rop)) ||
      (err = check_rank(c, root, "ncclReduce")) ||
      (err = begin(c, "ncclReduce", &prev)))
    return err;
  /* recv may be NULL off the root: NCCL uses recvbuff on the root only. */
  err = finish(c, ncclReduce(send, recv, count, dt, rop, root, c->comm,
                             c->stream),
               "ncclReduce", deadline, NULL, NULL, 0);
  return leave(prev, err);
}

static int nccl_all_gather(struct pg__comm *base, const void *send,
                           void *recv, size_t count, pg_dtype t,
                           double deadline)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  size_t bytes = count * pg_dtype_size(t);
  char *mine = (char *)recv + (size_t)c->me * bytes;
  ncclDataType_t dt = ncclFloat32;
  cudaError_t e;
  int err, prev;

  if (count == 0)
    return 0;
  if ((err = map_dtype(t, &dt)) ||
      (err = begin(c, "ncclAllGather", &prev)))
    return err;
  if (send == recv && c->me != 0) {
    /* Note [NCCL backend], in place; me >= 1: the blocks are apart. */
    e = cudaMemcpyAsync(mine, recv, bytes, cudaMemcpyDeviceToDevice,
                        c->stream);
    if (e != cudaSuccess)
      return leave(prev, cuda_fail(c, e, "ncclAllGather (in-place "
                                   "copy)"));
    send = mine;
  }
  err = finish(c, ncclAllGather(send, recv, count, dt, c->comm,
                                c->stream),
               "ncclAllGather", deadline, NULL, NULL, 0);
  return leave(prev, err);
}

static int nccl_reduce_scatter(struct pg__comm *base, const void *send,
                               void *recv, size_t count, pg_dtype t,
                               pg_op op, double deadline)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  size_t bytes = count * pg_dtype_size(t);
  void *out = recv;
  ncclDataType_t dt = ncclFloat32;
  ncclRedOp_t rop = ncclSum;
  int err, prev;

  if (count == 0)
    return 0;
  if ((err = map_dtype(t, &dt)) || (err = map_op(op, &rop)) ||
      (err = begin(c, "ncclReduceScatter", &prev)))
    return err;
  /* Note [NCCL backend], in place: reduce into NCCL's in-place block,
   * then copy it to block 0. */
  if (send == recv && c->me != 0)
    out = (char *)recv + (size_t)c->me * bytes;
  err = finish(c, ncclReduceScatter(send, out, count, dt, rop, c->comm,
                                    c->stream),
               "ncclReduceScatter", deadline, recv, out,
               out != recv ? bytes : 0);
  return leave(prev, err);
}

static int nccl_barrier(struct pg__comm *base, double deadline)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  int err, prev;

  if ((err = begin(c, "barrier (ncclAllReduce)", &prev)))
    return err;
  err = finish(c, ncclAllReduce(c->scratch, c->scratch, 1, ncclInt32,
                                ncclSum, c->comm, c->stream),
               "barrier (ncclAllReduce)", deadline, NULL, NULL, 0);
  return leave(prev, err);
}

/* Checks a point-to-point peer.  A send to oneself would wait forever
 * outside an NCCL group, so it is refused. */
static int check_peer(struct nccl_comm *c, int peer, const char *what)
{
  int err = check_rank(c, peer, what);

  if (!err && peer == c->me)
    err = pg__fail(-EINVAL, "NCCL backend: %s: peer %d is this rank",
                   what, peer);
  return err;
}

/* The tag is ignored: see Note [NCCL backend], point to point. */
static int nccl_send(struct pg__comm *base, const void *buf, size_t bytes,
                     int peer, int tag, double deadline)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  int err, prev;

  (void)tag;
  if (bytes == 0)
    return 0;
  if ((err = check_peer(c, peer, "ncclSend")) ||
      (err = begin(c, "ncclSend", &prev)))
    return err;
  err = finish(c, ncclSend(buf, bytes, ncclUint8, peer, c->comm,
                           c->stream),
               "ncclSend", deadline, NULL, NULL, 0);
  return leave(prev, err);
}

static int nccl_recv(struct pg__comm *base, void *buf, size_t bytes,
                     int peer, int tag, double deadline)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  int err, prev;

  (void)tag;
  if (bytes == 0)
    return 0;
  if ((err = check_peer(c, peer, "ncclRecv")) ||
      (err = begin(c, "ncclRecv", &prev)))
    return err;
  err = finish(c, ncclRecv(buf, bytes, ncclUint8, peer, c->comm,
                           c->stream),
               "ncclRecv", deadline, NULL, NULL, 0);
  return leave(prev, err);
}

/* ---- setup and teardown --------------------------------------------- */

/* Frees what exists; the comm is gone or never was by now. */
static void free_comm(struct nccl_comm *c)
{
  if (c->scratch)
    cudaFree(c->scratch);
  if (c->done)
    cudaEventDestroy(c->done);
  if (c->ready)
    cudaEventDestroy(c->ready);
  if (c->stream)
    cudaStreamDestroy(c->stream);
  free(c);
}

/* Flushes and frees the communicator.  Ops wait for their work, so the
 * stream is idle unless an op failed, and then the comm was aborted. */
static void nccl_destroy(struct pg__comm *base)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  ncclResult_t r = ncclSuccess;
  int prev = -1;

  if (!c)
    return;
  if (cudaGetDevice(&prev) == cudaSuccess && prev == c->device)
    prev = -1;
  cudaSetDevice(c->device);
  if (c->comm && cudaStreamSynchronize(c->stream) != cudaSuccess)
    r = ncclUnhandledCudaError;
#ifdef PG_NCCL_NONBLOCKING
  /* Finalize may wait on peers: bound it, then abort instead. */
  if (c->comm && r == ncclSuccess) {
    r = ncclCommFinalize(c->comm);
    if (r == ncclInProgress)
      r = poll_async(c->comm, pg__now() + c->timeout);
  }
#endif
  if (c->comm) {
    if (r == ncclSuccess)
      ncclCommDestroy(c->comm);
    else
      ncclCommAbort(c->comm);
    c->comm = NULL;
  }
  free_comm(c);
  leave(prev, 0);
}

/* Device memory for the reducer's buckets, on the comm's device.  Copies
 * use cudaMemcpyDefault (unified addressing), so host <-> device works
 * too. */
static void *nccl_mem_alloc(struct pg__comm *base, size_t bytes)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  void *p = NULL;
  int prev = -1;

  if (cudaGetDevice(&prev) == cudaSuccess && prev == c->device)
    prev = -1;
  cudaSetDevice(c->device);
  if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess) {
    cuda_fail(c, cudaGetLastError(), "cudaMalloc");
    p = NULL;
  }
  if (prev >= 0)
    cudaSetDevice(prev);
  return p;
}

static void nccl_mem_free(struct pg__comm *base, void *p)
{
  (void)base;
  if (p)
    cudaFree(p);
}

static int nccl_mem_zero(struct pg__comm *base, void *p, size_t bytes)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  cudaError_t e = cudaMemset(p, 0, bytes);

  return e == cudaSuccess ? 0 : cuda_fail(c, e, "cudaMemset");
}

static int nccl_mem_copy(struct pg__comm *base, void *dst, const void *src,
                         size_t bytes)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);

  return e == cudaSuccess ? 0 : cuda_fail(c, e, "cudaMemcpy");
}

static const struct pg__comm_ops nccl_ops = {
  .name = "nccl",
  .mem_alloc = nccl_mem_alloc,
  .mem_free = nccl_mem_free,
  .mem_zero = nccl_mem_zero,
  .mem_copy = nccl_mem_copy,
  .all_reduce = nccl_all_reduce,
  .broadcast = nccl_broadcast,
  .reduce = nccl_reduce,
  .all_gather = nccl_all_gather,
  .reduce_scatter = nccl_reduce_scatter,
  .barrier = nccl_barrier,
  .send = nccl_send,
  .recv = nccl_recv,
  .destroy = nccl_destroy,
};

bool pg__nccl_built(void)
{
  return true;
}

/* Member 0 makes the id and shares it through the store; a single member
 * needs no store.  On failure member 0 publishes an empty id so the others
 * fail at once instead of at the timeout. */
static int share_id(struct nccl_comm *c, const struct pg__setup *s,
                    ncclUniqueId *id, double deadline)
{
  char key[4096];
  ncclResult_t r;
  void *val = NULL;
  size_t len = 0;
  double left;
  int err;

  snprintf(key, sizeof key, "%snccl_id", s->ns ? s->ns : "");
  if (s->me == 0) {
    r = ncclGetUniqueId(id);
    if (s->n > 1 && s->store)
      err = pg_store_set(s->store, key, id, r == ncclSuccess ? sizeof *id
                         : 0);
    else
      err = 0;
    if (r != ncclSuccess)
      return nccl_fail(c, r, "ncclGetUniqueId");
    if (err)
      return pg__fail(err, "NCCL backend: cannot publish the NCCL id "
                      "under '%s': %s", key, pg_strerror(err));
    return 0;
  }
  if (!s->store)
    return pg__fail(-EINVAL, "NCCL backend: %d members but no store",
                    s->n);
  left = deadline - pg__now();
  err = pg_store_get(s->store, key, left > 0.001 ? left : 0.001, &val,
                     &len);
  if (err)
    return pg__fail(err, "NCCL backend: waiting for member 0's NCCL id "
                    "('%s'): %s", key, pg_strerror(err));
  if (len != sizeof *id) {
    free(val);
    return pg__fail(PG_EPEERFAIL, "NCCL backend: member 0 failed to set "
                    "up NCCL (its own error says why)");
  }
  memcpy(id, val, sizeof *id);
  free(val);
  return 0;
}

/* Tells the others not to wait for an id that will never come. */
static void abandon_id(const struct pg__setup *s)
{
  char key[4096];

  if (s->me != 0 || s->n < 2 || !s->store)
    return;
  snprintf(key, sizeof key, "%snccl_id", s->ns ? s->ns : "");
  pg_store_set(s->store, key, "", 0);
}

static int init_comm(struct nccl_comm *c, ncclUniqueId id, double deadline)
{
  ncclResult_t r;

#ifdef PG_NCCL_NONBLOCKING
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;

  cfg.blocking = 0;
  r = ncclCommInitRankConfig(&c->comm, c->n, id, c->me, &cfg);
#else
  /* Old NCCL: init blocks until every member joins; no timeout. */
  r = ncclCommInitRank(&c->comm, c->n, id, c->me);
#endif
  return settle(c, r, "ncclCommInitRank", deadline);
}

/* Device resources first: failing there costs the peers nothing. */
static int init_cuda(struct nccl_comm *c)
{
  cudaError_t e;

  e = cudaSetDevice(c->device);
  if (e != cudaSuccess)
    return cuda_fail(c, e, "cudaSetDevice");
  e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess)
    return cuda_fail(c, e, "cudaStreamCreateWithFlags");
  e = cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming);
  if (e == cudaSuccess)
    e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
  if (e != cudaSuccess)
    return cuda_fail(c, e, "cudaEventCreateWithFlags");
  e = cudaMalloc((void **)&c->scratch, sizeof *c->scratch);
  if (e == cudaSuccess)
    e = cudaMemset(c->scratch, 0, sizeof *c->scratch);
  if (e != cudaSuccess)
    return cuda_fail(c, e, "cudaMalloc (barrier buffer)");
  return 0;
}

int pg__nccl_create(const struct pg__setup *s, struct pg__comm **out)
{
  struct nccl_comm *c;
  ncclUniqueId id;
  cudaError_t e;
  double timeout = s->timeout > 0 ? s->timeout : 300;
  double deadline = pg__now() + timeout;
  int ndev = 0, dev, prev, err;

  *out = NULL;
  if (s->n < 1 || s->me < 0 || s->me >= s->n)
    return pg__fail(-EINVAL, "NCCL backend: member %d of %d", s->me, s->n);
  e = cudaGetDeviceCount(&ndev);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
#if CUDART_VERSION >= 11010
      e == cudaErrorStubLibrary ||  /* libcuda.so is the toolkit's stub */
#endif
      (e == cudaSuccess && ndev < 1)) {
    (void)cudaGetLastError();
    abandon_id(s);
    return pg__fail(-ENODEV, "NCCL backend: no CUDA device "
                    "(cudaGetDeviceCount: %s)",
                    e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    abandon_id(s);
    return pg__fail(PG_ECUDA(e), "NCCL backend: cudaGetDeviceCount: %s",
                    cudaGetErrorString(e));
  }
  dev = s->device >= 0 ? s->device : s->me % ndev;
  if (dev >= ndev) {
    abandon_id(s);
    return pg__fail(-ENODEV, "NCCL backend: CUDA device %d requested "
                    "(LOCAL_RANK or pg_options.device) but there are "
                    "only %d", dev, ndev);
  }
  c = calloc(1, sizeof *c);
  if (!c) {
    abandon_id(s);
    return pg__fail(-ENOMEM, "NCCL backend: out of memory");
  }
  c->base.ops = &nccl_ops;
  c->device = dev;
  c->n = s->n;
  c->me = s->me;
  c->timeout = timeout;
  /* Like the ops, leave the caller's current device as it was. */
  if (cudaGetDevice(&prev) != cudaSuccess || prev == dev)
    prev = -1;
  err = init_cuda(c);
  if (err)
    abandon_id(s);
  else
    err = share_id(c, s, &id, deadline);
  if (!err)
    err = init_comm(c, id, deadline);
  if (err) {
    poison(c);
    free_comm(c);
    return leave(prev, err);
  }
  *out = &c->base;
  return leave(prev, 0);
}
