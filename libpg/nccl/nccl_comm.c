/* nccl_comm.c -- the NCCL backend's communicator (nccl_comm.h): making
 * one (pg__nccl_create, a split), its device memory, its end, its
 * failure path, and waiting out NCCL's non-blocking calls.  Its ops are
 * nccl.c's; their completions (fences) nccl_fence.c's.
 *
 * Note [watchdog] (nccl_watchdog.c): failures, timeouts, and a peer's
 * failure through the store.
 *
 * Locking: mu guards the NCCL handle (enqueues, abort); wmu the in-flight
 * list and the failure sentence.  The watchdog takes mu only to abort.
 *
 * Timeouts of calls: the communicator is non-blocking (NCCL >= 2.14), so
 * neither init nor the first collective (where NCCL connects peers
 * lazily) can block the thread past the deadline. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "knobs.h"
#include "nccl_comm.h"
#include "worker_contract.h"

/* Every communicator of the process, for spreading a failure. */
static pthread_mutex_t comms_mu = PTHREAD_MUTEX_INITIALIZER;
static struct nccl_comm *comms;

static void comms_add(struct nccl_comm *c)
{
  pthread_mutex_lock(&comms_mu);
  c->next_comm = comms;
  comms = c;
  pthread_mutex_unlock(&comms_mu);
}

static void comms_del(struct nccl_comm *c)
{
  struct nccl_comm **pp;

  pthread_mutex_lock(&comms_mu);
  for (pp = &comms; *pp; pp = &(*pp)->next_comm)
    if (*pp == c) {
      *pp = c->next_comm;
      break;
    }
  pthread_mutex_unlock(&comms_mu);
}

/* ---- errors --------------------------------------------------------- */

/* Records the sentence for an NCCL failure (with NCCL's own detail, read
 * before an abort frees it). */
int nccl_fail(struct nccl_comm *c, ncclResult_t r, const char *what)
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

int nccl_cuda_fail(struct nccl_comm *c, cudaError_t e, const char *what)
{
  (void)cudaGetLastError();  /* clear it unless sticky */
  return pg__fail(PG_ECUDA(e), "NCCL backend: %s (rank %d of %d, device "
                  "%d): %s", what, c->me, c->n, c->device,
                  cudaGetErrorString(e));
}

int nccl_failed(struct nccl_comm *c)
{
  return __atomic_load_n(&c->failed, __ATOMIC_ACQUIRE);
}

static void mark_failed_as(struct nccl_comm *c, int err, const char *why,
                           bool publish, bool spread);

/* Fails the process's other comms with c's failure (Note [watchdog]):
 * each publishes it to its own peers; its watchdog aborts it. */
static void spread_failure(struct nccl_comm *c, const char *why)
{
  struct nccl_comm *o;
  char msg[600];

  snprintf(msg, sizeof msg, "NCCL backend: another communicator of this "
           "process failed: %s", why);
  pthread_mutex_lock(&comms_mu);
  for (o = comms; o; o = o->next_comm)
    if (o != c && o->spread && !nccl_failed(o)) {
      mark_failed_as(o, PG_EPEERFAIL, msg, true, false);
      pthread_cond_broadcast(&o->wcv);
    }
  pthread_mutex_unlock(&comms_mu);
}

/* Records the comm's first failure (later ones are its consequences),
 * fails every fence in flight with it, and publishes it through the
 * store when it is this rank's own (Note [watchdog]).  The first failure
 * of a comm fails the process's others (spread_failure). */
static void mark_failed_as(struct nccl_comm *c, int err, const char *why,
                           bool publish, bool spread)
{
  struct pg__fence *f;
  char msg[640];
  int zero = 0, len;

  err = nccl_live_error(c, err);
  if (!__atomic_compare_exchange_n(&c->failed, &zero, err, false,
                                   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return;
  pthread_mutex_lock(&c->wmu);
  snprintf(c->why, sizeof c->why, "%s", why);
  for (f = c->inflight; f; f = f->next)
    if (!f->finished && !f->result)
      f->result = err;
  pthread_mutex_unlock(&c->wmu);
  if (publish && c->store) {
    len = snprintf(msg, sizeof msg, "rank %d: %s", c->me, why);
    pg_store_set(c->store, c->abort_key, msg,
                 len < (int)sizeof msg ? (size_t)len : sizeof msg - 1);
  }
  if (spread && c->spread)
    spread_failure(c, why);
}

void nccl_mark_failed(struct nccl_comm *c, int err, const char *why,
                        bool publish)
{
  mark_failed_as(c, err, why, publish, true);
}

/* After a failure the comm's state is unknown: NCCL kernels may still be
 * waiting on peers.  Aborting is the only safe way out.  mu held. */
void nccl_abort_locked(struct nccl_comm *c)
{
  if (c->comm)
    ncclCommAbort(c->comm);
  c->comm = NULL;
}

/* The submitting thread's failure (mu held; err's sentence recorded). */
int nccl_fail_locked(struct nccl_comm *c, int err)
{
  nccl_mark_failed(c, err, pg_last_error(), true);
  nccl_stop_locked(c);
  return nccl_live_error(c, err);
}

/* Fails the comm from the watchdog or a host wait (mu not held): publish,
 * then stop it. */
void nccl_fail_abort(struct nccl_comm *c, int err, const char *why,
                          bool publish)
{
  nccl_mark_failed(c, err, why, publish);
  pthread_mutex_lock(&c->mu);
  nccl_stop_locked(c);
  pthread_mutex_unlock(&c->mu);
}

/* ---- polling -------------------------------------------------------- */

/* Note [backoff] in nccl_comm.h. */
void nccl_backoff_init(struct nccl_backoff *b)
{
  b->spin_until = pg__now() + 20e-6;
  b->ns = 0;
}

void nccl_backoff_wait(struct nccl_backoff *b, double now)
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
 * ncclInProgress if the deadline passed first, or ncclRemoteError once
 * the watchdog has failed the comm. */
static ncclResult_t poll_async(struct nccl_comm *c, double deadline)
{
  struct nccl_backoff b;
  ncclResult_t r, ar;
  double now;

  nccl_backoff_init(&b);
  for (;;) {
    r = ncclCommGetAsyncError(c->comm, &ar);
    if (r != ncclSuccess)
      return r;
    if (ar != ncclInProgress)
      return ar;
    if (nccl_failed(c))
      return ncclRemoteError;
    now = pg__now();
    if (now >= deadline)
      return ncclInProgress;
    nccl_backoff_wait(&b, now);
  }
}

/* Note [child handle] (NCCL 2.28.9's source; its documentation does not
 * say this): a non-blocking ncclCommSplit or ncclCommShrink goes through
 * ncclCommInitChildComm (src/init.cc), which sets *newcomm to NULL
 * "until comm split fully complete" and keeps the caller's pointer in a
 * job; the group end (src/group.cc) runs the job on a thread, sets the
 * PARENT's state to ncclInProgress and returns ncclInProgress, also to a
 * rank passing NCCL_SPLIT_NOCOLOR.  When the child's init ends,
 * ncclCommInitRankFunc stores the handle through that pointer
 * (__atomic_store_n(job->newcomm, comm)) -- even when the init failed,
 * and a NULL for NOCOLOR -- and the parent's state becomes the job's
 * result.  Until then ncclCommEnsureReady refuses every call on the
 * parent ("Attempt to use communicator before the previous operation
 * returned ncclSuccess": ncclInvalidArgument), and ncclCommAbort or
 * ncclCommRevoke of the parent stops the job and joins its thread
 * (ncclGroupJobAbort).  ncclCommInitRankConfig is different: it sets the
 * handle at once and the new comm itself says ncclInProgress.
 *
 * So, as PyTorch's ProcessGroupNCCL: the pointer is the child's own
 * c->comm (a non-member's, p->nocolor), which outlives the call; the
 * parent is marked joining (begin and group end wait: nothing else uses
 * it) and polled through ncclCommGetAsyncError until it leaves
 * ncclInProgress or the deadline passes, with mu released between polls
 * so the watchdog keeps watching it; only then is the handle read and
 * the child waited ready.  A timeout, the parent's failure meanwhile (a
 * peer's published abort) or the job's error fails and stops the parent
 * -- which makes NCCL finish the job, so the handle is written by then --
 * and the caller aborts the child if one was written. */
void nccl_wait_joined(struct nccl_comm *c)
{
  while (c->joining)
    pthread_cond_wait(&c->jcv, &c->mu);
}

void nccl_joined(struct nccl_comm *p)
{
  p->joining = false;
  pthread_cond_broadcast(&p->jcv);
}

int nccl_child_join(struct nccl_comm *p, ncclResult_t r, const char *what,
                    double deadline, bool shrink)
{
  struct nccl_backoff b;
  ncclResult_t ar = r;
  double now;
  int err;

  /* A shrink's parent failed before (its reason to be): only its abort
   * or the deadline ends the wait; a split's also fails meanwhile. */
#define STOPPED(p) (!(p)->comm || (!shrink && ((p)->revoked || \
                                              nccl_failed(p))))
  nccl_backoff_init(&b);
  while (ar == ncclInProgress && !STOPPED(p)) {
    if (ncclCommGetAsyncError(p->comm, &ar) != ncclSuccess)
      ar = ncclInternalError;
    if (ar != ncclInProgress)
      break;
    now = pg__now();
    if (now >= deadline)
      break;
    pthread_mutex_unlock(&p->mu);
    nccl_backoff_wait(&b, now);
    pthread_mutex_lock(&p->mu);
  }
  if (ar == ncclSuccess && !STOPPED(p))
    return 0;
  if (STOPPED(p)) {
    pthread_mutex_lock(&p->wmu);
    err = pg__fail(nccl_failed(p) ? nccl_failed(p) : PG_EPEERFAIL,
                   "NCCL backend: %s: the parent communicator failed "
                   "meanwhile: %s", what, p->why[0] ? p->why : "(stopped)");
    pthread_mutex_unlock(&p->wmu);
  } else if (ar == ncclInProgress) {
    err = pg__fail(-ETIMEDOUT, "NCCL backend: %s (rank %d of %d, device "
                   "%d) did not complete by its deadline: a peer is stuck, "
                   "dead or not taking part; the parent communicator and "
                   "the new one were stopped", what, p->me, p->n,
                   p->device);
  } else {
    err = nccl_fail(p, ar, what);
  }
#undef STOPPED
  nccl_mark_failed(p, err, pg_last_error(), true);
  /* Stopping the parent ends NCCL's job (and its thread) -- but a
   * revoke of a comm revoked before is refused: abort that one. */
  if (p->revoked && ar == ncclInProgress)
    nccl_abort_locked(p);
  else
    nccl_stop_locked(p);
  return nccl_live_error(p, err);
}

/* A non-blocking comm may answer ncclInProgress: the call goes on in the
 * background (and only then reaches the stream), and nothing else may be
 * issued until ncclCommGetAsyncError stops saying so.  mu held. */
int nccl_settle(struct nccl_comm *c, ncclResult_t r, const char *what,
                double deadline)
{
  if (r == ncclInProgress && c->comm)
    r = poll_async(c, deadline);
  if (r == ncclSuccess)
    return 0;
  if (r == ncclRemoteError && nccl_failed(c)) {
    /* The watchdog failed the comm meanwhile: say why. */
    pthread_mutex_lock(&c->wmu);
    pg__fail(nccl_failed(c), "NCCL backend: %s (rank %d of %d, device %d): "
             "the communicator failed meanwhile: %s", what, c->me, c->n,
             c->device, c->why[0] ? c->why : "(unknown)");
    pthread_mutex_unlock(&c->wmu);
    nccl_stop_locked(c);
    return nccl_live_error(c, nccl_failed(c));
  }
  if (r == ncclInProgress)
    return nccl_fail_locked(c, pg__fail(-ETIMEDOUT, "NCCL backend: %s (rank %d "
                                   "of %d, device %d) could not be issued "
                                   "by its deadline: a peer is stuck, dead "
                                   "or not running it; the communicator "
                                   "was aborted", what, c->me, c->n,
                                   c->device));
  return nccl_fail_locked(c, nccl_fail(c, r, what));
}

/* ---- the device guard ---------------------------------------------- */

/* The caller's stream (pg_set_stream), else its per-thread default one
 * (Note [stream model] in nccl.c). */
cudaStream_t nccl_user_stream(struct nccl_comm *c)
{
  return c->user ? c->user : cudaStreamPerThread;
}

/* Gives the thread back the device it had (prev < 0: unchanged). */
int nccl_leave(int prev, int err)
{
  if (prev >= 0)
    cudaSetDevice(prev);
  return err;
}

/* Switches to the comm's device; *prev gets the caller's (-1: same), as
 * torch's device guard, so an op has no visible side effect. */
int nccl_enter(struct nccl_comm *c, int *prev)
{
  cudaError_t e;
  int cur = -1;

  *prev = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == c->device)
    return 0;
  e = cudaSetDevice(c->device);
  if (e != cudaSuccess)
    return nccl_cuda_fail(c, e, "cudaSetDevice");
  *prev = cur;
  return 0;
}

/* ---- setup and teardown --------------------------------------------- */

/* Frees what exists; the comm is gone or never was by now. */
static void free_comm(struct nccl_comm *c)
{
  struct pg__fence *f;

  while ((f = c->inflight) != NULL) {
    c->inflight = f->next;
    if (--f->refs == 0)
      nccl_fence_destroy(f);
    else
      f->listed = false;  /* a work handle still holds it */
  }
  if (c->last && --c->last->refs == 0)
    nccl_fence_destroy(c->last);
  while (c->npool > 0)
    cudaEventDestroy(c->pool[--c->npool]);
  /* Stream-ordered: cudaFree would wait for the whole device, where
   * another communicator's kernel may be stuck. */
  if (c->scratch && (c->sync_free || !c->stream ||
                     cudaFreeAsync(c->scratch, c->stream) != cudaSuccess))
    cudaFree(c->scratch);
  if (c->ready)
    cudaEventDestroy(c->ready);
  if (c->stream)
    cudaStreamDestroy(c->stream);
  nccl_peers_free(c);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->wmu);
  pthread_cond_destroy(&c->wcv);
  pthread_cond_destroy(&c->jcv);
  free(c);
}

/* Waits (bounded) for the stream to run dry: returns false if it did not
 * by the deadline or the comm failed meanwhile (the watchdog still runs:
 * a peer's published failure ends the wait). */
static bool drain(struct nccl_comm *c, double deadline)
{
  struct nccl_backoff b;
  cudaError_t e;
  double now;

  nccl_backoff_init(&b);
  for (;;) {
    if (nccl_failed(c))
      return false;
    e = cudaStreamQuery(c->stream);
    if (e == cudaSuccess)
      return true;
    if (e != cudaErrorNotReady)
      return false;
    now = pg__now();
    if (now >= deadline)
      return false;
    nccl_backoff_wait(&b, now);
  }
}

/* Flushes and frees the communicator.  Work still in flight gets the
 * timeout to finish (the peers are finishing theirs); after that, or
 * after a failure, the comm is aborted. */
void nccl_destroy(struct pg__comm *base)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  ncclResult_t r = ncclSuccess;
  int prev = -1;

  if (!c)
    return;
  comms_del(c);
  if (cudaGetDevice(&prev) == cudaSuccess && prev == c->device)
    prev = -1;
  cudaSetDevice(c->device);
  /* Drained with the watchdog running, outside mu (its abort takes it):
   * a peer's failure published meanwhile ends the wait. */
  if (c->comm && (nccl_failed(c) || !drain(c, pg__now() + c->timeout)))
    r = ncclInternalError;
  nccl_watchdog_stop(c);
  pthread_mutex_lock(&c->mu);
#ifdef PG_NCCL_NONBLOCKING
  /* Finalize may wait on peers: bound it, then abort instead. */
  if (c->comm && r == ncclSuccess) {
    r = ncclCommFinalize(c->comm);
    if (r == ncclInProgress)
      r = poll_async(c, pg__now() + c->timeout);
  }
#endif
  if (c->comm) {
    if (r == ncclSuccess)
      ncclCommDestroy(c->comm);
    else
      ncclCommAbort(c->comm);
    c->comm = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  free_comm(c);
  nccl_leave(prev, 0);
}

/* Device memory that cudaFreeAsync may free: from the stream-ordered
 * allocator, usable on any stream once the NCCL stream has run the
 * allocation (waited for here: allocations are setup, not the hot path);
 * cudaMalloc where the device has no memory pools (then freed with
 * cudaFree). */
static cudaError_t dev_alloc(struct nccl_comm *c, void **p, size_t bytes)
{
  cudaError_t e = cudaMallocAsync(p, bytes, c->stream);

  if (e == cudaSuccess)
    return cudaStreamSynchronize(c->stream);
  (void)cudaGetLastError();
  c->sync_free = true;
  return cudaMalloc(p, bytes);
}

/* Device memory for the reducer's buckets, on the comm's device. */
void *nccl_mem_alloc(struct pg__comm *base, size_t bytes)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  void *p = NULL;
  int prev = -1;

  cudaError_t e;

  if (nccl_enter(c, &prev) != 0)
    return NULL;
  e = dev_alloc(c, &p, bytes ? bytes : 64);
  if (e != cudaSuccess) {
    nccl_cuda_fail(c, e, "cudaMallocAsync");
    p = NULL;
  }
  nccl_leave(prev, 0);
  return p;
}

/* Stream-ordered (cudaFreeAsync on the NCCL stream, after the caller's
 * stream as it is now): cudaFree would wait for the whole device. */
void nccl_mem_free(struct pg__comm *base, void *p)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  cudaError_t e;
  int prev = -1;

  if (!p)
    return;
  if (nccl_enter(c, &prev) != 0)
    return;
  pthread_mutex_lock(&c->mu);
  e = cudaEventRecord(c->ready, nccl_user_stream(c));
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(c->stream, c->ready, 0);
  if (e == cudaSuccess)
    e = c->sync_free ? cudaErrorNotSupported : cudaFreeAsync(p, c->stream);
  pthread_mutex_unlock(&c->mu);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    cudaFree(p);
  }
  nccl_leave(prev, 0);
}

/* Stream-ordered on the caller's stream, as a kernel writing the memory
 * would be (host-synchronized under $PG_NCCL_BLOCKING_WAIT). */
int nccl_mem_zero(struct pg__comm *base, void *p, size_t bytes)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  cudaError_t e;
  int prev, err;

  if ((err = nccl_enter(c, &prev)) != 0)
    return err;
  e = cudaMemsetAsync(p, 0, bytes, nccl_user_stream(c));
  if (e == cudaSuccess && c->blocking_wait)
    e = cudaStreamSynchronize(nccl_user_stream(c));
  return nccl_leave(prev, e == cudaSuccess ? 0 : nccl_cuda_fail(c, e, "cudaMemset"));
}

/* Either side may be host memory: ordered on the caller's stream, then
 * waited for (the host reads or reuses it next). */
int nccl_mem_copy(struct pg__comm *base, void *dst, const void *src,
                  size_t bytes)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  cudaError_t e;
  int prev, err;

  if ((err = nccl_enter(c, &prev)) != 0)
    return err;
  e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, nccl_user_stream(c));
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(nccl_user_stream(c));
  return nccl_leave(prev, e == cudaSuccess ? 0 : nccl_cuda_fail(c, e, "cudaMemcpy"));
}


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
  int err;

#ifdef PG_NCCL_NONBLOCKING
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;

  cfg.blocking = 0;
  r = ncclCommInitRankConfig(&c->comm, c->n, id, c->me, &cfg);
#else
  /* Old NCCL: init blocks until every member joins; no timeout. */
  r = ncclCommInitRank(&c->comm, c->n, id, c->me);
#endif
  pthread_mutex_lock(&c->mu);
  err = nccl_settle(c, r, "ncclCommInitRank", deadline);
  pthread_mutex_unlock(&c->mu);
  return err;
}

/* Device resources first: failing there costs the peers nothing. */
int nccl_init_cuda(struct nccl_comm *c)
{
  cudaError_t e;

  e = cudaSetDevice(c->device);
  if (e != cudaSuccess)
    return nccl_cuda_fail(c, e, "cudaSetDevice");
  e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess)
    return nccl_cuda_fail(c, e, "cudaStreamCreateWithFlags");
  e = cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming);
  if (e != cudaSuccess)
    return nccl_cuda_fail(c, e, "cudaEventCreateWithFlags");
  e = dev_alloc(c, (void **)&c->scratch, sizeof *c->scratch);
  if (e == cudaSuccess)
    e = cudaMemset(c->scratch, 0, sizeof *c->scratch);
  if (e != cudaSuccess)
    return nccl_cuda_fail(c, e, "cudaMallocAsync (barrier buffer)");
  return 0;
}

/* A communicator's host side, before NCCL or CUDA know of it. */
struct nccl_comm *nccl_comm_alloc(const struct pg__setup *s, int dev)
{
  const char *bw = pg__knob(PG_KNOB_NCCL_BLOCKING_WAIT);
  const char *tbw = getenv("TORCH_NCCL_BLOCKING_WAIT");
  const char *nbw = getenv("NCCL_BLOCKING_WAIT");
  const char *aeh = getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  const char *naeh = getenv("NCCL_ASYNC_ERROR_HANDLING");
  const char *recovery = getenv(WORKER_ENV_RECOVERY);
  struct nccl_comm *c = calloc(1, sizeof *c);

  if (!c)
    return NULL;
  c->base.ops = &nccl_ops;
  c->device = dev;
  c->n = s->n;
  c->me = s->me;
  c->timeout = s->timeout > 0 ? s->timeout : 300;
  /* torch's names too: cdrun exports them (Note [stream model]). */
  c->blocking_wait = (bw && strcmp(bw, "1") == 0) ||
                     (tbw && strcmp(tbw, "1") == 0) ||
                     (nbw && strcmp(nbw, "1") == 0);
  /* torch's precedence: the TORCH_ name, then the old one. */
  if (!aeh || !*aeh)
    aeh = naeh;
  c->spread = !(aeh && strcmp(aeh, "0") == 0);
  c->live = recovery && strcmp(recovery, WORKER_RECOVERY_LIVE) == 0;
  c->store = s->n > 1 ? s->store : NULL;
  snprintf(c->abort_key, sizeof c->abort_key, "%sabort", s->ns ? s->ns
           : "");
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->wmu, NULL);
  pthread_cond_init(&c->wcv, NULL);
  pthread_cond_init(&c->jcv, NULL);
  return c;
}

/* The last step of making c: its watchdog, or on any error its end.
 * Restores the caller's device (prev, from nccl_enter's convention). */
int nccl_comm_start(struct nccl_comm *c, int err, int prev,
                    struct pg__comm **out)
{
  if (!err) {
    err = nccl_watchdog_start(c);
    if (!err)
      comms_add(c);
  }
  if (err) {
    pthread_mutex_lock(&c->mu);
    nccl_abort_locked(c);
    pthread_mutex_unlock(&c->mu);
    free_comm(c);
    return nccl_leave(prev, err);
  }
  *out = &c->base;
  return nccl_leave(prev, 0);
}

#ifdef PG_NCCL_SPLIT
/* Note [split]: ncclCommSplit, collective over every rank of the parent
 * (as torch's new_group does when the parent is NCCL): members pass
 * their color and key, the others (s == NULL) NCCL_SPLIT_NOCOLOR.  NCCL
 * orders the members by key, then by parent rank, as pg_split says and
 * as subgroup.c numbers them (s->me).  The child shares the parent's device
 * and has its own stream, watchdog and abort key (s->ns).  A member whose
 * CUDA setup failed still takes part with its color, so the others'
 * membership stays what they computed, then aborts (its failure reaches
 * them through the store). */
int nccl_split(struct pg__comm *base, int color, int key,
               const struct pg__setup *s, struct pg__comm **out)
{
  struct nccl_comm *p = (struct nccl_comm *)base, *c = NULL;
  ncclResult_t r;
  double deadline = pg__now() + (s && s->timeout > 0 ? s->timeout
                                 : p->timeout);
  int prev, err = 0, joined;
#ifdef PG_NCCL_NONBLOCKING
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;

  cfg.blocking = 0;
#endif

  *out = NULL;
  err = nccl_enter(p, &prev);
  if (err)
    return err;
  if (s) {
    c = nccl_comm_alloc(s, p->device);
    if (!c)
      return nccl_leave(prev, pg__fail(-ENOMEM, "NCCL backend: out of memory"));
    err = nccl_init_cuda(c);
  }
  pthread_mutex_lock(&p->mu);
  nccl_wait_joined(p);
  if (!p->comm || p->revoked) {
    pthread_mutex_unlock(&p->mu);
    err = pg__fail(PG_EPEERFAIL, "NCCL backend: the parent communicator "
                   "was aborted; no sub-group can be split from it");
    return c ? nccl_comm_start(c, err, prev, out) : nccl_leave(prev, err);
  }
  /* Note [child handle]: NCCL writes the handle later, through a pointer
   * that must outlive this call. */
  p->joining = true;
#ifdef PG_NCCL_NONBLOCKING
  r = ncclCommSplit(p->comm, s ? color : NCCL_SPLIT_NOCOLOR, key,
                    c ? &c->comm : &p->nocolor, &cfg);
#else
  r = ncclCommSplit(p->comm, s ? color : NCCL_SPLIT_NOCOLOR, key,
                    c ? &c->comm : &p->nocolor, NULL);
#endif
  joined = nccl_child_join(p, r, "ncclCommSplit", deadline, false);
  nccl_joined(p);
  pthread_mutex_unlock(&p->mu);
  if (!c)
    return nccl_leave(prev, joined);
  /* The job is over: the handle is what NCCL wrote (a failed child's
   * too, which nccl_comm_start aborts). */
  c->comm = __atomic_load_n(&c->comm, __ATOMIC_ACQUIRE);
  if (!joined && !c->comm)
    joined = pg__fail(PG_EPEERFAIL, "NCCL backend: ncclCommSplit gave no "
                      "communicator");
  if (!joined) {
    pthread_mutex_lock(&c->mu);
    joined = nccl_settle(c, ncclInProgress, "ncclCommSplit", deadline);
    pthread_mutex_unlock(&c->mu);
  }
  if (!err)
    err = joined;
  /* Live mode: the members' pids, as a created comm has (Note [peer
   * liveness]): a sub-group learns of a death as the world does. */
  if (!err)
    err = nccl_peers_share(c, s, pg__now() + c->timeout);
  /* The other members' new comms learn of a failure through its abort
   * key. */
  if (err)
    nccl_mark_failed(c, err, pg_last_error(), true);
  return nccl_comm_start(c, err, prev, out);
}
#endif

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
  /* Note [device rule] in device.c. */
  dev = pg__pick_device(s->device, s->local_rank, ndev);
  if (dev >= ndev) {
    abandon_id(s);
    return pg__fail(-ENODEV, "NCCL backend: CUDA device %d requested "
                    "(pg_options.device) but this process sees only %d",
                    dev, ndev);
  }
  c = nccl_comm_alloc(s, dev);
  if (!c) {
    abandon_id(s);
    return pg__fail(-ENOMEM, "NCCL backend: out of memory");
  }
  /* Like the ops, leave the caller's current device as it was. */
  if (cudaGetDevice(&prev) != cudaSuccess || prev == dev)
    prev = -1;
  err = nccl_init_cuda(c);
  if (err)
    abandon_id(s);
  else
    err = share_id(c, s, &id, deadline);
  if (!err)
    err = init_comm(c, id, deadline);
  if (!err)
    err = nccl_peers_share(c, s, deadline);
  return nccl_comm_start(c, err, prev, out);
}
