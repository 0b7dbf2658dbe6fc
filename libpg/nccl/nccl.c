/* nccl.c -- the NCCL backend's ops: each pg__comm op is one NCCL call,
 * enqueued on the communicator's stream in order with the caller's stream,
 * and the thread's NCCL group.  The communicator itself is nccl_comm.c's,
 * an op's completion nccl_fence.c's. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "nccl_comm.h"

/* Note [stream model] (as torch's ProcessGroupNCCL)
 *
 * Buffers are device memory of this comm's device.  The comm has its own
 * non-blocking stream.  At submit time (on the caller's thread) an op
 * records an event on the caller's stream (pg_set_stream; the thread's
 * per-thread default stream unless set: unlike the legacy stream it can
 * be captured into a CUDA graph, and it is ordered with the legacy
 * stream's work all the same) and makes the NCCL stream wait for it, so
 * the op runs after the kernels that produced its input and never waits
 * for later, unrelated work; then it enqueues the NCCL call, records a
 * completion event after it, and returns.  The host never waits for the
 * GPU here.  Completion (a fence) is that event: a synchronous pg_ call
 * makes the caller's stream wait for it on the device and returns; an
 * async one hands it to the work handle, whose pg_work_wait does the same
 * (pg_work_synchronize, a barrier, or $PG_NCCL_BLOCKING_WAIT=1,
 * $TORCH_NCCL_BLOCKING_WAIT=1 or $NCCL_BLOCKING_WAIT=1 wait on the host
 * instead; a host wait that times out aborts the communicator, as
 * torch's blocking wait does).  So consecutive buckets pipeline on the
 * device and nothing in this backend blocks the host on the GPU except
 * those host waits and destroy.
 *
 * Note [group per thread]: NCCL's group (ncclGroupStart/End) is the
 * thread's, over every communicator: between pg_group_start(A) and
 * pg_group_end(A) an op on B is deferred too.  Such an op's fence is
 * made at once but recorded on B's stream only at the thread's outermost
 * group end (a "pending" fence: not done; a device wait on it is queued
 * for then, a host wait from the same thread is refused), and A's group
 * fence waits for it.  Device copies that must follow a grouped NCCL
 * call (in-place reduce_scatter) are deferred to the group end as well.
 *
 * Point to point: NCCL has no tags.  A send matches the peer's recv by
 * order alone (per pair of peers); the tag is ignored.  A send and a recv
 * outside a group run one after the other on the stream, so an exchange
 * must be grouped (pg_group_start/end: ncclGroupStart/End).
 *
 * In place: pg.h's in-place forms are NCCL's (all_gather send == recv +
 * me * count, reduce_scatter recv == send + me * count) and pass straight
 * through, no copy.  Plain send == recv aliasing would race inside NCCL
 * for me != 0, so it gets its literal meaning with one device copy:
 * all_gather's input is recv's first block, reduce_scatter's output lands
 * in send's first block. */
/* A device copy deferred to the group end (Note [group per thread]). */
struct group_copy {
  struct nccl_comm *c;
  void *dst;
  const void *src;
  size_t len;
  struct group_copy *next;
};

static __thread int thread_group_depth;
static __thread struct group_copy *thread_copies;

int nccl_group_depth(void)
{
  return thread_group_depth;
}

static int nccl_set_stream(struct pg__comm *base, void *stream)
{
  struct nccl_comm *c = (struct nccl_comm *)base;

  pthread_mutex_lock(&c->mu);
  c->user = stream;
  pthread_mutex_unlock(&c->mu);
  return 0;
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

/* A buffer must be device memory of the comm's device (or managed
 * memory): anything else would kill the CUDA context in the kernel
 * instead of returning an error. */
static int check_buf(struct nccl_comm *c, const void *p, const char *what,
                     const char *which)
{
  struct cudaPointerAttributes a;
  cudaError_t e;

  e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    a.type = cudaMemoryTypeUnregistered;
  }
  if (a.type == cudaMemoryTypeManaged ||
      (a.type == cudaMemoryTypeDevice && a.device == c->device))
    return 0;
  return pg__fail(-EINVAL, "NCCL backend: %s: the %s buffer %p is not "
                  "memory of device %d (%s)", what, which, p, c->device,
                  a.type == cudaMemoryTypeDevice ? "another device's"
                  : "host memory: use pg_mem_alloc or cudaMalloc");
}

/* Both buffers of an op (recv may be NULL where the op allows it). */
static int check_bufs(struct nccl_comm *c, const void *send,
                      const void *recv, const char *what)
{
  int err = send ? check_buf(c, send, what, "send") : 0;

  if (!err && recv && recv != send)
    err = check_buf(c, recv, what, "receive");
  return err;
}

/* Locks the handle and orders the NCCL stream after the caller's stream
 * as it is now (Note [stream model]).  On success mu is held and *prev
 * is for nccl_leave(); on failure neither. */
static int begin(struct nccl_comm *c, const char *what, int *prev)
{
  cudaError_t e;
  int err;

  if ((err = nccl_enter(c, prev)) != 0)
    return err;
  pthread_mutex_lock(&c->mu);
  nccl_wait_joined(c);
  if (nccl_failed(c) || !c->comm) {
    /* Note [live recovery]: a peer's death stays what it is. */
    pthread_mutex_lock(&c->wmu);
    err = pg__fail(nccl_failed(c) == PG_ERR_PEER_LOST ? PG_ERR_PEER_LOST
                   : PG_EPEERFAIL, "NCCL backend: %s: the communicator was "
                   "aborted by an earlier failure: %s", what,
                   c->why[0] ? c->why : "(unknown)");
    pthread_mutex_unlock(&c->wmu);
    pthread_mutex_unlock(&c->mu);
    return nccl_leave(*prev, err);
  }
  e = cudaEventRecord(c->ready, nccl_user_stream(c));
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(c->stream, c->ready, 0);
  if (e != cudaSuccess) {
    err = nccl_cuda_fail(c, e, "ordering after the caller's stream");
    pthread_mutex_unlock(&c->mu);
    return nccl_leave(*prev, err);
  }
  return 0;
}

/* Settles NCCL call r, queues the optional copy after it and its fence
 * (none inside a group: group_end has the group's), then unlocks. */
static int finish(struct nccl_comm *c, ncclResult_t r, const char *what,
                  double deadline, void *dst, const void *src, size_t len,
                  int prev)
{
  cudaError_t e = cudaSuccess;
  int err;

  err = nccl_settle(c, r, what, deadline);
  if (!err && len && thread_group_depth > 0) {
    /* Note [group per thread]: the NCCL call runs at the group end. */
    struct group_copy *gc = calloc(1, sizeof *gc);

    if (!gc) {
      err = nccl_fail_locked(c, pg__fail(-ENOMEM, "NCCL backend: out of "
                                    "memory deferring a copy"));
    } else {
      *gc = (struct group_copy){ c, dst, src, len, thread_copies };
      thread_copies = gc;
    }
  } else if (!err && len) {
    e = cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToDevice, c->stream);
    if (e != cudaSuccess)
      err = nccl_fail_locked(c, nccl_cuda_fail(c, e, what));
  }
  if (!err && thread_group_depth == 0)
    err = nccl_track(c, what, deadline);
  else if (!err && c->group_depth == 0)
    err = nccl_track_pending(c, what, deadline);
  pthread_mutex_unlock(&c->mu);
  return nccl_leave(prev, err);
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
      (err = check_bufs(c, send, recv, "ncclAllReduce")) ||
      (err = begin(c, "ncclAllReduce", &prev)))
    return err;
  return finish(c, ncclAllReduce(send, recv, count, dt, rop, c->comm,
                                 c->stream),
                "ncclAllReduce", deadline, NULL, NULL, 0, prev);
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
      (err = check_bufs(c, buf, NULL, "ncclBroadcast")) ||
      (err = begin(c, "ncclBroadcast", &prev)))
    return err;
  return finish(c, ncclBroadcast(buf, buf, count, dt, root, c->comm,
                                 c->stream),
                "ncclBroadcast", deadline, NULL, NULL, 0, prev);
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
      (err = check_bufs(c, send, c->me == root ? recv : NULL,
                        "ncclReduce")) ||
      (err = begin(c, "ncclReduce", &prev)))
    return err;
  /* recv may be NULL off the root: NCCL uses recvbuff on the root only. */
  return finish(c, ncclReduce(send, recv, count, dt, rop, root, c->comm,
                              c->stream),
                "ncclReduce", deadline, NULL, NULL, 0, prev);
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
      (err = check_bufs(c, send, recv, "ncclAllGather")) ||
      (err = begin(c, "ncclAllGather", &prev)))
    return err;
  if (send == recv && c->me != 0) {
    /* Note [stream model], in place; me >= 1: the blocks are apart. */
    e = cudaMemcpyAsync(mine, recv, bytes, cudaMemcpyDeviceToDevice,
                        c->stream);
    if (e != cudaSuccess) {
      err = nccl_cuda_fail(c, e, "ncclAllGather (in-place copy)");
      pthread_mutex_unlock(&c->mu);
      return nccl_leave(prev, err);
    }
    send = mine;
  }
  return finish(c, ncclAllGather(send, recv, count, dt, c->comm,
                                 c->stream),
                "ncclAllGather", deadline, NULL, NULL, 0, prev);
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
      (err = check_bufs(c, send, recv, "ncclReduceScatter")) ||
      (err = begin(c, "ncclReduceScatter", &prev)))
    return err;
  /* Note [stream model], in place: send == recv reduces into NCCL's
   * in-place block, then copies it to block 0. */
  if (send == recv && c->me != 0)
    out = (char *)recv + (size_t)c->me * bytes;
  return finish(c, ncclReduceScatter(send, out, count, dt, rop, c->comm,
                                     c->stream),
                "ncclReduceScatter", deadline, recv, out,
                out != recv ? bytes : 0, prev);
}

static int nccl_barrier(struct pg__comm *base, double deadline)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  int err, prev;

  if ((err = begin(c, "barrier (ncclAllReduce)", &prev)))
    return err;
  return finish(c, ncclAllReduce(c->scratch, c->scratch, 1, ncclInt32,
                                 ncclSum, c->comm, c->stream),
                "barrier (ncclAllReduce)", deadline, NULL, NULL, 0, prev);
}

/* Checks a point-to-point peer.  A send to oneself would wait forever
 * outside an NCCL group, so it is refused there; inside one NCCL pairs it
 * with the receive (all_to_all's own block, composed.c). */
static int check_peer(struct nccl_comm *c, int peer, const char *what)
{
  int err = check_rank(c, peer, what);

  if (!err && peer == c->me && thread_group_depth == 0)
    err = pg__fail(-EINVAL, "NCCL backend: %s: peer %d is this rank",
                   what, peer);
  return err;
}

/* The tag is ignored: see Note [stream model], point to point. */
static int nccl_send(struct pg__comm *base, const void *buf, size_t bytes,
                     int peer, int tag, double deadline)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  int err, prev;

  (void)tag;
  if (bytes == 0)
    return 0;
  if ((err = check_peer(c, peer, "ncclSend")) ||
      (err = check_bufs(c, buf, NULL, "ncclSend")) ||
      (err = begin(c, "ncclSend", &prev)))
    return err;
  return finish(c, ncclSend(buf, bytes, ncclUint8, peer, c->comm,
                            c->stream),
                "ncclSend", deadline, NULL, NULL, 0, prev);
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
      (err = check_bufs(c, NULL, buf, "ncclRecv")) ||
      (err = begin(c, "ncclRecv", &prev)))
    return err;
  return finish(c, ncclRecv(buf, bytes, ncclUint8, peer, c->comm,
                            c->stream),
                "ncclRecv", deadline, NULL, NULL, 0, prev);
}
/* Note [group per thread]: at the thread's outermost group end, queues
 * the deferred copies, then has the pending fences recorded
 * (nccl_fences_flush).  launched false: the group failed; the pending
 * fences fail with c.  c's mu held; the other comms' NCCL streams are
 * only enqueued on. */
static int group_flush(struct nccl_comm *c, bool launched)
{
  struct group_copy *gc;
  cudaError_t e = cudaSuccess;
  int err = 0;

  while ((gc = thread_copies) != NULL) {
    thread_copies = gc->next;
    if (launched && e == cudaSuccess)
      e = cudaMemcpyAsync(gc->dst, gc->src, gc->len,
                          cudaMemcpyDeviceToDevice, gc->c->stream);
    free(gc);
  }
  if (e != cudaSuccess)
    err = nccl_fail_locked(c, nccl_cuda_fail(c, e, "a copy after ncclGroupEnd"));
  nccl_fences_flush(c, launched, err);
  return err;
}
/* Point to point inside a group may not deadlock: NCCL launches the
 * group's sends and receives together at ncclGroupEnd. */
static int nccl_group_start(struct pg__comm *base)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  int err, prev;

  if ((err = begin(c, "ncclGroupStart", &prev)))
    return err;
  err = nccl_settle(c, ncclGroupStart(), "ncclGroupStart", pg__now() + 1e9);
  if (!err) {
    c->group_depth++;
    thread_group_depth++;
  }
  pthread_mutex_unlock(&c->mu);
  return nccl_leave(prev, err);
}

static int nccl_group_end(struct pg__comm *base)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  double deadline = pg__now() + c->timeout;
  int err = 0, prev;

  if ((err = nccl_enter(c, &prev)) != 0)
    return err;
  pthread_mutex_lock(&c->mu);
  nccl_wait_joined(c);
  if (c->group_depth == 0) {
    pthread_mutex_unlock(&c->mu);
    return nccl_leave(prev, pg__fail(-EINVAL, "NCCL backend: group end without "
                                "a group start"));
  }
  c->group_depth--;
  thread_group_depth--;
  if (nccl_failed(c) || !c->comm) {
    /* NCCL's group state is per thread: close it even so. */
    ncclGroupEnd();
    if (thread_group_depth == 0)
      group_flush(c, false);
    pthread_mutex_unlock(&c->mu);
    return nccl_leave(prev, pg__fail(PG_EPEERFAIL, "NCCL backend: group end: "
                                "the communicator was aborted"));
  }
  err = nccl_settle(c, ncclGroupEnd(), "ncclGroupEnd", deadline);
  if (thread_group_depth == 0)
    err = group_flush(c, !err) ?: err;
  if (!err && thread_group_depth == 0)
    err = nccl_track(c, "ncclGroupEnd", deadline);
  else if (!err && c->group_depth == 0)
    err = nccl_track_pending(c, "ncclGroupEnd", deadline);  /* nested */
  pthread_mutex_unlock(&c->mu);
  return nccl_leave(prev, err);
}

const struct pg__comm_ops nccl_ops = {
  .name = "nccl",
  .in_place_gathers = true, .half_reductions = true,
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
  .set_stream = nccl_set_stream,
  .take_fence = nccl_take_fence,
  .fence_query = nccl_fence_query,
  .fence_wait = nccl_fence_wait,
  .fence_free = nccl_fence_free,
  .group_start = nccl_group_start,
  .group_end = nccl_group_end,
#ifdef PG_NCCL_SPLIT
  .split = nccl_split,
#endif
#ifdef PG_NCCL_SHRINK
  .shrink = nccl_shrink,
#endif
  .revoke = nccl_revoke,
};
