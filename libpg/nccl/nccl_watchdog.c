/* nccl_watchdog.c -- the NCCL backend's watchdog thread: one per
 * communicator, it watches the fences in flight, NCCL's async errors and
 * the peers' failures published in the store (Note [watchdog]). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nccl_comm.h"

/* Note [watchdog]: every fence is also on the comm's in-flight list.  A
 * watchdog thread polls the list's events, ncclCommGetAsyncError and,
 * every STORE_POLL_S, the store key <ns>abort.  A fence past its deadline
 * (the group's timeout from submit) fails with -ETIMEDOUT naming the op and
 * its sequence number; an async NCCL error fails with it.  The first
 * failure of a rank, whatever found it, is published under <ns>abort
 * ("rank R: what happened"), and every rank's watchdog that sees the key
 * aborts its own communicator, so a failure reaches every rank within
 * about STORE_POLL_S plus the abort, instead of the peers hanging in
 * NCCL kernels until their own timeouts.  ncclCommAbort is what takes a
 * stuck NCCL kernel off the GPU; after it every fence and every later op
 * fails (PG_EPEERFAIL, or the error itself).
 *
 * A failure of one communicator fails every other communicator of the
 * process too (each publishes it under its own key), as
 * ProcessGroupNCCL's async error handling brings the process down: the
 * peers blocked in another group's collective would otherwise wait out
 * its timeout.  $TORCH_NCCL_ASYNC_ERROR_HANDLING=0 keeps failures inside
 * their communicator.  The watchdog reads the store every STORE_POLL_S
 * while work is in flight, every STORE_IDLE_S otherwise.
 *
 * Live mode (Note [live recovery] in nccl_live.c): the failure detector of
 * pg_recover.  Every tick it also polls the pidfds of the members on this
 * machine (Note [peer liveness], nccl_peers.c): a dead one fails the comm
 * with PG_ERR_PEER_LOST and is published like any failure; it reads the
 * store every STORE_POLL_LIVE_S; a failure caused by a peer is
 * PG_ERR_PEER_LOST; and a failed comm is revoked, not aborted, so that
 * the survivors can shrink it.
 *
 * CUDA graphs: the watchdog queries events in the relaxed capture mode
 * (a global-mode query during someone's capture would invalidate it), and
 * an op captured into a graph gets no fence: it runs when the graph is
 * launched, which the watchdog cannot see. */

/* Checks the fences in flight; returns an error and its sentence for the
 * first that failed or ran past its deadline.  wmu held. */
static int scan_fences(struct nccl_comm *c, struct pg__fence **dead,
                       char *why, size_t len)
{
  struct pg__fence **pp = &c->inflight, *f, *d;
  double now = pg__now();
  cudaError_t e;
  int err = 0;

  while ((f = *pp) != NULL) {
    if (!f->finished && !f->result) {
      e = cudaEventQuery(f->done);
      if (e == cudaSuccess) {
        f->finished = true;
      } else if (e != cudaErrorNotReady && !err) {
        err = PG_ECUDA(e);
        snprintf(why, len, "NCCL backend: %s (#%llu of this communicator; "
                 "rank %d of %d, device %d): %s", f->what, f->seq, c->me,
                 c->n, c->device, cudaGetErrorString(e));
      } else if (now > f->deadline && !err) {
        err = -ETIMEDOUT;
        snprintf(why, len, "NCCL backend: %s (#%llu of this communicator; "
                 "rank %d of %d, device %d) did not complete within %.3g "
                 "s: a peer is stuck, dead or not running it; the "
                 "communicator was aborted", f->what, f->seq, c->me, c->n,
                 c->device, f->limit);
      }
    }
    if (f->finished || f->result) {
      *pp = f->next;
      f->listed = false;
      if ((d = nccl_fence_unref_locked(f)) != NULL) {
        d->next = *dead;
        *dead = d;
      }
    } else {
      pp = &f->next;
    }
  }
  return err;
}

static void *watchdog_main(void *arg)
{
  struct nccl_comm *c = arg;
  struct pg__fence *dead, *f;
  double last_store = pg__now();
  char why[640], *peer;
  ncclResult_t ar;
  struct timespec ts;
  size_t len;
  int err, dead_peer, dead_ticks = 0;

  enum cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
  bool busy;

  cudaSetDevice(c->device);
  /* Note [watchdog], CUDA graphs: this thread's queries must not
   * invalidate a capture running on another thread. */
  cudaThreadExchangeStreamCaptureMode(&relaxed);
  pthread_mutex_lock(&c->wmu);
  while (!c->stop) {
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(WATCH_TICK_S * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&c->wcv, &c->wmu, &ts);
    if (c->stop)
      break;
    dead = NULL;
    err = scan_fences(c, &dead, why, sizeof why);
    busy = c->inflight != NULL;
    pthread_mutex_unlock(&c->wmu);
    while ((f = dead) != NULL) {
      dead = f->next;
      nccl_fence_destroy(f);
    }
    if (err && !nccl_failed(c))
      nccl_fail_abort(c, err, why, true);
    /* Failed from elsewhere (another comm of this process): stop. */
    if (nccl_failed(c)) {
      pthread_mutex_lock(&c->mu);
      nccl_stop_locked(c);
      pthread_mutex_unlock(&c->mu);
    }
    /* Live mode: a member on this machine died (Note [peer liveness])
     * and work is still unfinished a tick later. */
    if (!nccl_failed(c) && busy && (dead_peer = nccl_peers_dead(c)) >= 0) {
      if (++dead_ticks >= 2) {
        snprintf(why, sizeof why, "NCCL backend: member %d of %d (pid %d) "
                 "died", dead_peer, c->n, (int)c->peer_pid[dead_peer]);
        nccl_fail_abort(c, PG_ERR_PEER_LOST, why, true);
      }
    } else {
      dead_ticks = 0;
    }
    /* An async error of NCCL's (a dead peer shows up there). */
    if (!nccl_failed(c) && pthread_mutex_trylock(&c->mu) == 0) {
      ar = ncclSuccess;
      if (c->comm && ncclCommGetAsyncError(c->comm, &ar) != ncclSuccess)
        ar = ncclInternalError;
      if (ar != ncclSuccess && ar != ncclInProgress) {
        pg__fail(0, "%s", "");
        nccl_fail(c, ar, "asynchronous error");
        snprintf(why, sizeof why, "%s", pg_last_error());
        nccl_mark_failed(c, PG_ENCCL(ar), why, true);
        nccl_stop_locked(c);
      }
      pthread_mutex_unlock(&c->mu);
    }
    /* Another rank's failure. */
    if (!nccl_failed(c) && c->store &&
        pg__now() - last_store >= (c->live ? STORE_POLL_LIVE_S
                                   : busy ? STORE_POLL_S : STORE_IDLE_S)) {
      last_store = pg__now();
      peer = NULL;
      err = pg_store_get(c->store, c->abort_key, 0, (void **)&peer, &len);
      if (err == 0) {
        snprintf(why, sizeof why, "NCCL backend: aborted because %.*s",
                 (int)len, peer);
        nccl_fail_abort(c, PG_EPEERFAIL, why, false);
      } else if (err == -ECONNRESET || err == -EPIPE ||
                 err == -ECONNREFUSED) {
        /* Rank 0 (the store) is gone: so is the group. */
        snprintf(why, sizeof why, "NCCL backend: aborted because the "
                 "store (rank 0) went away: %s", pg_strerror(err));
        nccl_fail_abort(c, PG_EPEERFAIL, why, false);
      }
      free(peer);
    }
    pthread_mutex_lock(&c->wmu);
  }
  pthread_mutex_unlock(&c->wmu);
  return NULL;
}

int nccl_watchdog_start(struct nccl_comm *c)
{
  if (pthread_create(&c->watchdog, NULL, watchdog_main, c) != 0)
    return pg__fail(-EAGAIN, "NCCL backend: cannot start the watchdog "
                    "thread");
  c->watching = true;
  return 0;
}

void nccl_watchdog_stop(struct nccl_comm *c)
{
  if (!c->watching)
    return;
  pthread_mutex_lock(&c->wmu);
  c->stop = true;
  pthread_cond_broadcast(&c->wcv);
  pthread_mutex_unlock(&c->wmu);
  pthread_join(c->watchdog, NULL);
  c->watching = false;
}

