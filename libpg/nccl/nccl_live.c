/* nccl_live.c -- the NCCL backend's live recovery (Note [live recovery]):
 * a failed comm is revoked rather than aborted, a peer's death is
 * reported as PG_ERR_PEER_LOST, and ncclCommShrink makes the survivors'
 * next communicator. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "nccl_comm.h"

/* Note [live recovery]: revoking stops the comm's kernels as an abort
 * does but keeps the handle, which ncclCommShrink needs.  NCCL without
 * ncclCommRevoke: with ncclCommShrink, the kernels stay until the
 * shrink's NCCL_SHRINK_ABORT (or destroy's abort) stops them; without
 * it, an abort.  mu held. */
static void revoke_locked(struct nccl_comm *c)
{
  if (!c->comm || c->revoked)
    return;
#if defined(PG_NCCL_REVOKE)
  {
    ncclResult_t r = ncclCommRevoke(c->comm, NCCL_REVOKE_DEFAULT);

    if (r == ncclSuccess || r == ncclInProgress) {
      c->revoked = true;
      return;
    }
  }
#elif defined(PG_NCCL_SHRINK)
  c->revoked = true;
  return;
#endif
  nccl_abort_locked(c);
}

void nccl_stop_locked(struct nccl_comm *c)
{
  if (c->live)
    revoke_locked(c);
  else
    nccl_abort_locked(c);
}

int nccl_live_error(const struct nccl_comm *c, int err)
{
  if (!c->live)
    return err;
  switch (err) {
  case -ETIMEDOUT: case -ECONNRESET: case -EPIPE: case PG_EPEERFAIL:
  case PG_ENCCL(ncclRemoteError):
    return PG_ERR_PEER_LOST;
  default:
    return err;
  }
}

/* Note [live recovery] (pg_recover, pg.h): a member's death fails the
 * comm on every survivor with PG_ERR_PEER_LOST (Note [watchdog]: its
 * host's survivors see it through a pidfd, the others through the store
 * key), and the comm is revoked rather than aborted.  pg_recover then
 * makes the next generation's communicator: nccl_shrink when members
 * only left (ncclCommShrink, NCCL >= 2.27: no new unique id, no full
 * init), or pg__nccl_create with a fresh unique id under the new
 * generation's namespace when a process joins (a replacement or a new
 * node; a process may hold any number of communicators one after the
 * other).  The old comm is destroyed after that (an abort, local).
 *
 * nccl_revoke: the group's own news of a death (pg_recover): fails the
 * comm with PG_ERR_PEER_LOST, publishes it, and stops its work at once
 * (ncclCommRevoke, NCCL >= 2.28; else as revoke_locked says), so that
 * in-flight ops return and neither shrink nor destroy waits. */
void nccl_revoke(struct pg__comm *base)
{
  struct nccl_comm *c = (struct nccl_comm *)base;

  nccl_mark_failed(c, PG_ERR_PEER_LOST, "NCCL backend: revoked: a member "
                   "of the group died (live recovery)", true);
  pthread_mutex_lock(&c->mu);
  revoke_locked(c);
  pthread_mutex_unlock(&c->mu);
  pthread_cond_broadcast(&c->wcv);
}

#ifdef PG_NCCL_SHRINK
/* The exclude list, checked against c and the new comm's setup s, as a
 * sorted copy (ncclCommShrink sorts its list in place). */
static int shrink_list(const struct nccl_comm *c, const int *excluded,
                       int nexcluded, const struct pg__setup *s, int **out)
{
  int *l, i, j, below = 0;

  *out = NULL;
  if (!excluded || nexcluded < 1 || nexcluded >= c->n || !s ||
      s->n != c->n - nexcluded)
    return pg__fail(-EINVAL, "NCCL backend: shrink: %d of %d members "
                    "leave, the new communicator has %d", nexcluded, c->n,
                    s ? s->n : 0);
  l = malloc((size_t)nexcluded * sizeof *l);
  if (!l)
    return pg__fail(-ENOMEM, "NCCL backend: out of memory");
  for (i = 0; i < nexcluded; i++) {
    /* Insertion sort: the list is short. */
    for (j = i; j > 0 && l[j - 1] > excluded[i]; j--)
      l[j] = l[j - 1];
    l[j] = excluded[i];
  }
  for (i = 0; i < nexcluded; i++) {
    if (l[i] < 0 || l[i] >= c->n || (i > 0 && l[i] == l[i - 1]) ||
        l[i] == c->me) {
      int bad = l[i];

      free(l);
      return pg__fail(-EINVAL, "NCCL backend: shrink: member %d cannot "
                      "leave a communicator of %d (member %d calls it)",
                      bad, c->n, c->me);
    }
    below += l[i] < c->me;
  }
  if (s->me != c->me - below) {
    free(l);
    return pg__fail(-EINVAL, "NCCL backend: shrink: member %d becomes %d, "
                    "not %d", c->me, c->me - below, s->me);
  }
  *out = l;
  return 0;
}

/* Waits (bounded; mu held) until a revoke has stopped c's kernels:
 * ncclCommGetAsyncError says ncclInProgress until then. */
static int revoke_settled(struct nccl_comm *c, double deadline)
{
  struct nccl_backoff b;
  ncclResult_t r, ar = ncclSuccess;
  double now;

  nccl_backoff_init(&b);
  for (;;) {
    r = ncclCommGetAsyncError(c->comm, &ar);
    if (r != ncclSuccess || ar != ncclInProgress)
      return 0;
    now = pg__now();
    if (now >= deadline)
      return pg__fail(PG_ERR_PEER_LOST, "NCCL backend: shrink: the revoked "
                      "communicator's work did not stop by the deadline");
    nccl_backoff_wait(&b, now);
  }
}

/* Note [live recovery]: ncclCommShrink, collective over the survivors,
 * each passing the same list.  NCCL_SHRINK_ABORT after a failure (the
 * parent's kernels may be stuck on the dead), NCCL_SHRINK_DEFAULT when
 * planned.  The new comm has its own stream, watchdog and abort key
 * (s->ns), as a split's.  A survivor whose CUDA setup failed still takes
 * part, so the others' membership stays what they computed, then fails
 * (as nccl_split does).  A failed shrink leaves c as it was: make a new
 * communicator rather than shrink c again (the survivors' shrinks of c
 * must match one for one). */
int nccl_shrink(struct pg__comm *base, const int *excluded,
                int nexcluded, const struct pg__setup *s,
                struct pg__comm **out)
{
  struct nccl_comm *p = (struct nccl_comm *)base, *c;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclResult_t r = ncclSuccess;
  double deadline = pg__now() + (s && s->timeout > 0 ? s->timeout
                                 : p->timeout);
  int *list, prev, err, joined;

  *out = NULL;
  if ((err = shrink_list(p, excluded, nexcluded, s, &list)) != 0)
    return err;
  if ((err = nccl_enter(p, &prev)) != 0) {
    free(list);
    return err;
  }
  c = nccl_comm_alloc(s, p->device);
  if (!c) {
    free(list);
    return nccl_leave(prev, pg__fail(-ENOMEM, "NCCL backend: out of memory"));
  }
  err = nccl_init_cuda(c);
  cfg.blocking = 0;
  pthread_mutex_lock(&p->mu);
  nccl_wait_joined(p);
  if (!p->comm) {
    pthread_mutex_unlock(&p->mu);
    free(list);
    err = pg__fail(-ENOTSUP, "NCCL backend: shrink: the communicator was "
                   "aborted (this NCCL has no ncclCommRevoke): make a new "
                   "one");
    return nccl_comm_start(c, err, prev, out);
  }
  joined = p->revoked ? revoke_settled(p, deadline) : 0;
  if (!joined) {
    /* Note [child handle]: NCCL writes c->comm when the job ends; the
     * parent says ncclInProgress until then. */
    p->joining = true;
    r = ncclCommShrink(p->comm, list, nexcluded, &c->comm, &cfg,
                       nccl_failed(p) || p->revoked ? NCCL_SHRINK_ABORT
                                                    : NCCL_SHRINK_DEFAULT);
    joined = nccl_child_join(p, r, "ncclCommShrink", deadline, true);
    nccl_joined(p);
  }
  pthread_mutex_unlock(&p->mu);
  c->comm = __atomic_load_n(&c->comm, __ATOMIC_ACQUIRE);
  if (!joined && !c->comm)
    joined = pg__fail(PG_EPEERFAIL, "NCCL backend: ncclCommShrink gave "
                      "no communicator");
  if (!joined) {
    pthread_mutex_lock(&c->mu);
    joined = nccl_settle(c, ncclInProgress, "ncclCommShrink", deadline);
    pthread_mutex_unlock(&c->mu);
  }
  if (!err)
    err = joined;
  /* The other members' new comms learn of it through its abort key. */
  if (err)
    nccl_mark_failed(c, err, pg_last_error(), true);
  if (!err)
    err = nccl_peers_inherit(c, p, list, nexcluded);
  free(list);
  return nccl_comm_start(c, err, prev, out);
}
#endif
