/* nccl.c -- the NCCL backend: each pg__comm op is one NCCL call, enqueued
 * on the communicator's stream in order with the caller's stream. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "knobs.h"
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
 * torch's blocking wait does).  So consecutive buckets pipeline on the device and
 * nothing in this file blocks the host on the GPU except those host waits
 * and destroy.
 *
 * Note [watchdog] (nccl_watchdog.c): failures, timeouts, and a peer's
 * failure through the store.
 *
 * Locking: mu guards the NCCL handle (enqueues, abort); wmu the in-flight
 * list and the failure sentence.  The watchdog takes mu only to abort.
 *
 * Timeouts of calls: the communicator is non-blocking (NCCL >= 2.14), so
 * neither init nor the first collective (where NCCL connects peers
 * lazily) can block the thread past the deadline.
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
static __thread struct pg__fence *thread_pending;
static __thread struct group_copy *thread_copies;

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

static int cuda_fail(struct nccl_comm *c, cudaError_t e, const char *what)
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
static int fail_locked(struct nccl_comm *c, int err)
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
    return fail_locked(c, pg__fail(-ETIMEDOUT, "NCCL backend: %s (rank %d "
                                   "of %d, device %d) could not be issued "
                                   "by its deadline: a peer is stuck, dead "
                                   "or not running it; the communicator "
                                   "was aborted", what, c->me, c->n,
                                   c->device));
  return fail_locked(c, nccl_fail(c, r, what));
}

/* ---- fences ------------------------------------------------------------ */

/* Drops a reference; wmu held.  Returns the fence if it must be freed
 * (outside wmu: destroying an event may wait for its stream). */
struct pg__fence *nccl_fence_unref_locked(struct pg__fence *f)
{
  return --f->refs == 0 ? f : NULL;
}

/* An event for a fence: from the comm's pool, else a new one. */
static cudaError_t event_get(struct nccl_comm *c, cudaEvent_t *e)
{
  pthread_mutex_lock(&c->wmu);
  *e = c->npool ? c->pool[--c->npool] : NULL;
  pthread_mutex_unlock(&c->wmu);
  return *e ? cudaSuccess
            : cudaEventCreateWithFlags(e, cudaEventDisableTiming);
}

/* Back to the pool (re-recording a reached event is fine), else gone.
 * A fence never outlives its comm: work handles are freed before
 * pg_destroy, and free_comm drains the pool. */
void nccl_fence_destroy(struct pg__fence *f)
{
  struct nccl_comm *c = f->c;

  if (f->done && c && !f->pending) {
    pthread_mutex_lock(&c->wmu);
    if (c->npool < EVENT_POOL) {
      c->pool[c->npool++] = f->done;
      f->done = NULL;
    }
    pthread_mutex_unlock(&c->wmu);
  }
  if (f->done)
    cudaEventDestroy(f->done);
  free(f);
}

/* 1 done, 0 not yet, or the op's error (with its sentence). */
static int fence_state(struct pg__fence *f)
{
  struct nccl_comm *c = f->c;
  cudaError_t e;
  int err, prev;

  pthread_mutex_lock(&c->wmu);
  if ((err = f->result) != 0) {
    pg__fail(err, "NCCL backend: %s (#%llu of this communicator) failed: "
             "%s", f->what, f->seq, c->why);
    pthread_mutex_unlock(&c->wmu);
    return err;
  }
  if (f->finished) {
    pthread_mutex_unlock(&c->wmu);
    return 1;
  }
  if (f->pending) {
    pthread_mutex_unlock(&c->wmu);
    return 0;  /* Note [group per thread]: not launched yet */
  }
  pthread_mutex_unlock(&c->wmu);
  /* On the comm's device: a query from a thread that never chose one
   * would make a CUDA context on GPU 0 (Note [contexts], fakecuda.c). */
  if (cudaGetDevice(&prev) != cudaSuccess || prev == c->device)
    prev = -1;
  else
    cudaSetDevice(c->device);
  e = cudaEventQuery(f->done);
  if (prev >= 0)
    cudaSetDevice(prev);
  if (e == cudaErrorNotReady)
    return 0;
  if (e != cudaSuccess)
    return cuda_fail(c, e, "cudaEventQuery");
  pthread_mutex_lock(&c->wmu);
  f->finished = true;
  pthread_mutex_unlock(&c->wmu);
  return 1;
}

/* Replaces the fence take_fence hands out; wmu held.  Returns the old
 * one if it must be freed. */
static struct pg__fence *set_last_locked(struct nccl_comm *c,
                                         struct pg__fence *f)
{
  struct pg__fence *old = c->last ? nccl_fence_unref_locked(c->last) : NULL;

  c->last = f;
  return old;
}

/* True while the NCCL stream is being captured into a CUDA graph (it
 * joined the caller's capture through the ready event). */
static bool capturing(struct nccl_comm *c)
{
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;

  return cudaStreamIsCapturing(c->stream, &st) == cudaSuccess &&
         st != cudaStreamCaptureStatusNone;
}

/* The fence of c's next op (mu held). */
static void fence_init(struct nccl_comm *c, struct pg__fence *f,
                       const char *what, double deadline)
{
  f->c = c;
  f->seq = ++c->seq;
  f->what = what;
  f->deadline = deadline;
  f->limit = deadline - pg__now();
}

/* Note [group per thread]: an op on c inside another comm's group (this
 * thread's): its fence, recorded at the thread's group end.  mu held. */
static int track_pending(struct nccl_comm *c, const char *what,
                         double deadline)
{
  struct pg__fence *f = calloc(1, sizeof *f), *old;
  cudaError_t e;

  if (!f)
    return fail_locked(c, pg__fail(-ENOMEM, "NCCL backend: out of "
                                   "memory tracking %s", what));
  e = event_get(c, &f->done);
  if (e != cudaSuccess) {
    free(f);
    return fail_locked(c, cuda_fail(c, e, what));
  }
  fence_init(c, f, what, deadline);
  f->refs = 3;           /* the list, the holder, the thread's list */
  f->pending = true;
  pthread_mutex_lock(&c->wmu);
  old = set_last_locked(c, f);
  pthread_mutex_unlock(&c->wmu);
  if (old)
    nccl_fence_destroy(old);
  f->group_next = thread_pending;
  thread_pending = f;
  return 0;
}

/* Records the fence of the op just enqueued on the NCCL stream.  mu
 * held. */
static int track(struct nccl_comm *c, const char *what, double deadline)
{
  struct pg__fence *f, *old = NULL;
  cudaError_t e;

  if (capturing(c)) {
    /* Runs at the graph's launch: nothing to watch or wait for now. */
    pthread_mutex_lock(&c->wmu);
    old = set_last_locked(c, NULL);
    pthread_mutex_unlock(&c->wmu);
    if (old)
      nccl_fence_destroy(old);
    return 0;
  }
  f = calloc(1, sizeof *f);
  if (!f)
    return fail_locked(c, pg__fail(-ENOMEM, "NCCL backend: out of "
                                   "memory tracking %s", what));
  e = event_get(c, &f->done);
  if (e == cudaSuccess)
    e = cudaEventRecord(f->done, c->stream);
  if (e != cudaSuccess) {
    if (f->done)
      cudaEventDestroy(f->done);
    free(f);
    /* Whether the NCCL call completed is now unknown. */
    return fail_locked(c, cuda_fail(c, e, what));
  }
  fence_init(c, f, what, deadline);
  f->refs = 2;
  f->listed = true;
  pthread_mutex_lock(&c->wmu);
  f->next = c->inflight;
  c->inflight = f;
  old = set_last_locked(c, f);
  pthread_mutex_unlock(&c->wmu);
  if (old)
    nccl_fence_destroy(old);
  return 0;
}

static struct pg__fence *nccl_take_fence(struct pg__comm *base)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  struct pg__fence *f;

  pthread_mutex_lock(&c->wmu);
  f = c->last;
  c->last = NULL;
  pthread_mutex_unlock(&c->wmu);
  return f;
}

static int nccl_fence_query(struct pg__fence *f)
{
  return fence_state(f);
}

static void nccl_fence_free(struct pg__fence *f)
{
  struct pg__fence *dead;

  if (!f)
    return;
  pthread_mutex_lock(&f->c->wmu);
  dead = nccl_fence_unref_locked(f);
  pthread_mutex_unlock(&f->c->wmu);
  if (dead)
    nccl_fence_destroy(dead);
}

static cudaStream_t user_stream(struct nccl_comm *c)
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
    return cuda_fail(c, e, "cudaSetDevice");
  *prev = cur;
  return 0;
}

static int nccl_fence_wait(struct pg__fence *f, bool host, double timeout)
{
  struct nccl_comm *c = f->c;
  double until = timeout >= 0 ? pg__now() + timeout : 0, now;
  struct nccl_backoff b;
  cudaError_t e;
  int st, prev, err;

  pthread_mutex_lock(&c->wmu);
  if (f->pending && (!host && !c->blocking_wait)) {
    f->user_wait = true;  /* queued at the group end */
    pthread_mutex_unlock(&c->wmu);
    return 0;
  }
  pthread_mutex_unlock(&c->wmu);
  if (f->pending && thread_group_depth > 0)
    return pg__fail(-EDEADLK, "NCCL backend: %s (#%llu of this "
                    "communicator) runs at this thread's pg_group_end "
                    "(NCCL groups are per thread): wait for it after "
                    "that", f->what, f->seq);
  if (!host && !c->blocking_wait) {
    st = fence_state(f);
    if (st != 0)
      return st < 0 ? st : 0;
    if ((err = nccl_enter(c, &prev)) != 0)
      return err;
    pthread_mutex_lock(&c->mu);
    e = cudaStreamWaitEvent(user_stream(c), f->done, 0);
    pthread_mutex_unlock(&c->mu);
    return nccl_leave(prev, e == cudaSuccess ? 0 :
                 cuda_fail(c, e, "cudaStreamWaitEvent (the caller's "
                           "stream on a collective)"));
  }
  nccl_backoff_init(&b);
  for (;;) {
    st = fence_state(f);
    if (st != 0)
      return st < 0 ? st : 0;
    now = pg__now();
    if (timeout >= 0 && now >= until) {
      /* As torch's blocking wait: the comm's state is unknown now. */
      err = pg__fail(-ETIMEDOUT, "NCCL backend: %s (#%llu of this "
                     "communicator) still running after %.3g s of "
                     "waiting; the communicator was aborted", f->what,
                     f->seq, timeout);
      nccl_fail_abort(c, err, pg_last_error(), true);
      return nccl_live_error(c, err);
    }
    nccl_backoff_wait(&b, now);
  }
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
  e = cudaEventRecord(c->ready, user_stream(c));
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(c->stream, c->ready, 0);
  if (e != cudaSuccess) {
    err = cuda_fail(c, e, "ordering after the caller's stream");
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
      err = fail_locked(c, pg__fail(-ENOMEM, "NCCL backend: out of "
                                    "memory deferring a copy"));
    } else {
      *gc = (struct group_copy){ c, dst, src, len, thread_copies };
      thread_copies = gc;
    }
  } else if (!err && len) {
    e = cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToDevice, c->stream);
    if (e != cudaSuccess)
      err = fail_locked(c, cuda_fail(c, e, what));
  }
  if (!err && thread_group_depth == 0)
    err = track(c, what, deadline);
  else if (!err && c->group_depth == 0)
    err = track_pending(c, what, deadline);
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
      err = cuda_fail(c, e, "ncclAllGather (in-place copy)");
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
 * the deferred copies, then records the pending fences on their comms'
 * streams (and queues their device waits), and makes c's stream (whose
 * fence the group end hands out) wait for them.  launched false: the
 * group failed; the pending fences fail with c.  c's mu held; the
 * other comms' NCCL streams are only enqueued on. */
static int group_flush(struct nccl_comm *c, bool launched)
{
  struct group_copy *gc;
  struct pg__fence *f, *dead;
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
    err = fail_locked(c, cuda_fail(c, e, "a copy after ncclGroupEnd"));
  while ((f = thread_pending) != NULL) {
    struct nccl_comm *o = f->c;

    thread_pending = f->group_next;
    e = launched && !err ? cudaEventRecord(f->done, o->stream)
                         : cudaErrorNotReady;
    if (e == cudaSuccess && f->user_wait)
      e = cudaStreamWaitEvent(user_stream(o), f->done, 0);
    if (e == cudaSuccess && o != c)
      e = cudaStreamWaitEvent(c->stream, f->done, 0);
    pthread_mutex_lock(&o->wmu);
    f->pending = false;
    if (e != cudaSuccess)
      f->result = err ? err : PG_EPEERFAIL;
    f->listed = true;
    f->next = o->inflight;
    o->inflight = f;
    dead = nccl_fence_unref_locked(f);  /* the thread's list's */
    pthread_mutex_unlock(&o->wmu);
    if (dead)
      nccl_fence_destroy(dead);
  }
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
    err = track(c, "ncclGroupEnd", deadline);
  else if (!err && c->group_depth == 0)
    err = track_pending(c, "ncclGroupEnd", deadline);  /* nested */
  pthread_mutex_unlock(&c->mu);
  return nccl_leave(prev, err);
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
static void nccl_destroy(struct pg__comm *base)
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
static void *nccl_mem_alloc(struct pg__comm *base, size_t bytes)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  void *p = NULL;
  int prev = -1;

  cudaError_t e;

  if (nccl_enter(c, &prev) != 0)
    return NULL;
  e = dev_alloc(c, &p, bytes ? bytes : 64);
  if (e != cudaSuccess) {
    cuda_fail(c, e, "cudaMallocAsync");
    p = NULL;
  }
  nccl_leave(prev, 0);
  return p;
}

/* Stream-ordered (cudaFreeAsync on the NCCL stream, after the caller's
 * stream as it is now): cudaFree would wait for the whole device. */
static void nccl_mem_free(struct pg__comm *base, void *p)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  cudaError_t e;
  int prev = -1;

  if (!p)
    return;
  if (nccl_enter(c, &prev) != 0)
    return;
  pthread_mutex_lock(&c->mu);
  e = cudaEventRecord(c->ready, user_stream(c));
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
static int nccl_mem_zero(struct pg__comm *base, void *p, size_t bytes)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  cudaError_t e;
  int prev, err;

  if ((err = nccl_enter(c, &prev)) != 0)
    return err;
  e = cudaMemsetAsync(p, 0, bytes, user_stream(c));
  if (e == cudaSuccess && c->blocking_wait)
    e = cudaStreamSynchronize(user_stream(c));
  return nccl_leave(prev, e == cudaSuccess ? 0 : cuda_fail(c, e, "cudaMemset"));
}

/* Either side may be host memory: ordered on the caller's stream, then
 * waited for (the host reads or reuses it next). */
static int nccl_mem_copy(struct pg__comm *base, void *dst, const void *src,
                         size_t bytes)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  cudaError_t e;
  int prev, err;

  if ((err = nccl_enter(c, &prev)) != 0)
    return err;
  e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, user_stream(c));
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(user_stream(c));
  return nccl_leave(prev, e == cudaSuccess ? 0 : cuda_fail(c, e, "cudaMemcpy"));
}

#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21800
static int nccl_split(struct pg__comm *base, int color, int key,
                      const struct pg__setup *s, struct pg__comm **out);
#endif

static const struct pg__comm_ops nccl_ops = {
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
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21800
  .split = nccl_split,
#endif
#ifdef PG_NCCL_SHRINK
  .shrink = nccl_shrink,
#endif
  .revoke = nccl_revoke,
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
    return cuda_fail(c, e, "cudaSetDevice");
  e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess)
    return cuda_fail(c, e, "cudaStreamCreateWithFlags");
  e = cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming);
  if (e != cudaSuccess)
    return cuda_fail(c, e, "cudaEventCreateWithFlags");
  e = dev_alloc(c, (void **)&c->scratch, sizeof *c->scratch);
  if (e == cudaSuccess)
    e = cudaMemset(c->scratch, 0, sizeof *c->scratch);
  if (e != cudaSuccess)
    return cuda_fail(c, e, "cudaMallocAsync (barrier buffer)");
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
  const char *recovery = getenv("CDRUN_RECOVERY");
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
  c->live = recovery && strcmp(recovery, "live") == 0;
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

#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21800
/* Note [split]: ncclCommSplit, collective over every rank of the parent
 * (as torch's new_group does when the parent is NCCL): members pass
 * their color and key, the others (s == NULL) NCCL_SPLIT_NOCOLOR.  NCCL
 * orders the members by key, then by parent rank, as pg_split says and
 * as subgroup.c numbers them (s->me).  The child shares the parent's device
 * and has its own stream, watchdog and abort key (s->ns).  A member whose
 * CUDA setup failed still takes part with its color, so the others'
 * membership stays what they computed, then aborts (its failure reaches
 * them through the store). */
static int nccl_split(struct pg__comm *base, int color, int key,
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
