/* nccl_fence.c -- an NCCL op's completion (struct pg__fence,
 * nccl_comm.h): the event recorded after it on the comm's stream, the
 * comm's in-flight list that the watchdog watches (Note [watchdog] in
 * nccl_watchdog.c), the thread's pending fences (Note [group per thread]
 * in nccl.c), and the pg__comm fence ops: take, query, wait, free. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "nccl_comm.h"

/* Note [group per thread]: the fences of this thread's grouped ops on
 * comms other than the group's, recorded at its outermost group end. */
static __thread struct pg__fence *thread_pending;

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
    return nccl_cuda_fail(c, e, "cudaEventQuery");
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
int nccl_track_pending(struct nccl_comm *c, const char *what,
                       double deadline)
{
  struct pg__fence *f = calloc(1, sizeof *f), *old;
  cudaError_t e;

  if (!f)
    return nccl_fail_locked(c, pg__fail(-ENOMEM, "NCCL backend: out of "
                                   "memory tracking %s", what));
  e = event_get(c, &f->done);
  if (e != cudaSuccess) {
    free(f);
    return nccl_fail_locked(c, nccl_cuda_fail(c, e, what));
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
int nccl_track(struct nccl_comm *c, const char *what, double deadline)
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
    return nccl_fail_locked(c, pg__fail(-ENOMEM, "NCCL backend: out of "
                                   "memory tracking %s", what));
  e = event_get(c, &f->done);
  if (e == cudaSuccess)
    e = cudaEventRecord(f->done, c->stream);
  if (e != cudaSuccess) {
    if (f->done)
      cudaEventDestroy(f->done);
    free(f);
    /* Whether the NCCL call completed is now unknown. */
    return nccl_fail_locked(c, nccl_cuda_fail(c, e, what));
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
struct pg__fence *nccl_take_fence(struct pg__comm *base)
{
  struct nccl_comm *c = (struct nccl_comm *)base;
  struct pg__fence *f;

  pthread_mutex_lock(&c->wmu);
  f = c->last;
  c->last = NULL;
  pthread_mutex_unlock(&c->wmu);
  return f;
}

int nccl_fence_query(struct pg__fence *f)
{
  return fence_state(f);
}

void nccl_fence_free(struct pg__fence *f)
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
int nccl_fence_wait(struct pg__fence *f, bool host, double timeout)
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
  if (f->pending && nccl_group_depth() > 0)
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
    e = cudaStreamWaitEvent(nccl_user_stream(c), f->done, 0);
    pthread_mutex_unlock(&c->mu);
    return nccl_leave(prev, e == cudaSuccess ? 0 :
                 nccl_cuda_fail(c, e, "cudaStreamWaitEvent (the caller's "
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

/* Note [group per thread]: at the thread's outermost group end, records
 * its pending fences on their comms' streams (and queues their device
 * waits), makes c's stream (whose fence the group end hands out) wait for
 * them, and lists them for the watchdog.  launched false or err set: the
 * group failed, and so do they (with err, else PG_EPEERFAIL).  c's mu
 * held; the other comms' NCCL streams are only enqueued on. */
void nccl_fences_flush(struct nccl_comm *c, bool launched, int err)
{
  struct pg__fence *f, *dead;
  cudaError_t e;

  while ((f = thread_pending) != NULL) {
    struct nccl_comm *o = f->c;

    thread_pending = f->group_next;
    e = launched && !err ? cudaEventRecord(f->done, o->stream)
                         : cudaErrorNotReady;
    if (e == cudaSuccess && f->user_wait)
      e = cudaStreamWaitEvent(nccl_user_stream(o), f->done, 0);
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
}
