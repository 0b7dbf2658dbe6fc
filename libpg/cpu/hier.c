/* hier.c -- the hierarchical communicator: shared memory within each host,
 * TCP between the host leaders, for members spread over several hosts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

struct hier_comm {
  struct pg__comm base;
  int n, me;
  int nhosts;           /* hosts among the members, numbered by lowest */
  int *host;            /* [n] host of each position */
  int *root_local;      /* [n] each position's index on its host */
  int my_host;
  bool leader;          /* lowest member on its host */
  struct pg__comm *local;    /* shm over this host's members; NULL alone */
  struct pg__comm *leaders;  /* tcp over the leaders; NULL if not one */
  struct pg__comm *all;      /* tcp over every member */
  int dead;
};

static int failed(struct hier_comm *h, const char *name)
{
  return pg__fail(PG_EPEERFAIL, "%s: the hierarchical communicator failed "
                  "earlier (%s)", name, pg_err_name(h->dead));
}

static int done(struct hier_comm *h, int err)
{
  if (err && !h->dead)
    h->dead = err;
  return err;
}

/* All-reduces of at most this many bytes run over the flat TCP comm
 * (log2(n) exchanges, every rank waiting in poll() for its own data) rather
 * than through the leaders: the hierarchical path makes the other ranks of
 * a host wait in shared memory for the whole inter-host exchange, and a
 * wait that outlasts the shared-memory spin-and-yield phase becomes a futex
 * sleep whose wake-up, on a busy host, costs more than the exchange
 * (scripts/bench/net, 2 hosts x 2 ranks: 0.2-7 ms against 0.08-0.1 ms at
 * 4 B-4 KiB). */
#define FLAT_MAX_BYTES (16 * 1024)

/* Shared memory gathers to the leader, the leaders all-reduce over TCP,
 * shared memory spreads the result.  AVG: SUM all the way, the leaders
 * divide by n once, and every rank gets the leaders' identical bits. */
static int hier_all_reduce(struct pg__comm *base, const void *send,
                           void *recv, size_t count, pg_dtype t, pg_op op,
                           double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;
  pg_op sub = op == PG_AVG ? PG_SUM : op;
  int err = 0;

  if (h->dead)
    return failed(h, "all_reduce");
  if (count == 0)
    return 0;
  if (count * pg_dtype_size(t) <= FLAT_MAX_BYTES)
    return done(h, h->all->ops->all_reduce(h->all, send, recv, count, t, op,
                                           deadline));
  if (h->local)
    err = h->local->ops->reduce(h->local, send, recv, count, t, sub, 0,
                                deadline);
  else if (send != recv)
    memcpy(recv, send, count * pg_dtype_size(t));
  if (!err && h->leader) {
    if (h->leaders)
      err = h->leaders->ops->all_reduce(h->leaders, recv, recv, count, t,
                                        sub, deadline);
    if (!err && op == PG_AVG)
      pg__avg_finish(t, recv, count, h->n);
  }
  if (!err && h->local)
    err = h->local->ops->broadcast(h->local, recv, count, t, 0, deadline);
  return done(h, err);
}

/* Root to its leader (shared memory), leader to leaders (TCP), leaders to
 * their hosts (shared memory). */
static int hier_broadcast(struct pg__comm *base, void *buf, size_t count,
                          pg_dtype t, int root, double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;
  bool spread;
  int rh, err = 0;

  if (h->dead)
    return failed(h, "broadcast");
  if (root < 0 || root >= h->n)
    return pg__fail(-EINVAL, "broadcast: root %d is not in 0..%d", root,
                    h->n - 1);
  if (count == 0)
    return 0;
  rh = h->host[root];
  /* A root that is not its host's leader serves its whole host first. */
  spread = h->my_host == rh && h->root_local[root] != 0;
  if (spread)
    err = h->local->ops->broadcast(h->local, buf, count, t,
                                   h->root_local[root], deadline);
  if (!err && h->leaders)
    err = h->leaders->ops->broadcast(h->leaders, buf, count, t, rh,
                                     deadline);
  if (!err && h->local && !spread)
    err = h->local->ops->broadcast(h->local, buf, count, t, 0, deadline);
  return done(h, err);
}

/* Nobody leaves the last local barrier before its leader passed the
 * leaders' one, which needs every host's first local barrier. */
static int hier_barrier(struct pg__comm *base, double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;
  int err = 0;

  if (h->dead)
    return failed(h, "barrier");
  if (h->local)
    err = h->local->ops->barrier(h->local, deadline);
  if (!err && h->leaders)
    err = h->leaders->ops->barrier(h->leaders, deadline);
  if (!err && h->local)
    err = h->local->ops->barrier(h->local, deadline);
  return done(h, err);
}

/* The rest run over the flat TCP comm: correct for any layout, and none
 * is on a training step's critical path the way all_reduce is. */
static int hier_reduce(struct pg__comm *base, const void *send, void *recv,
                       size_t count, pg_dtype t, pg_op op, int root,
                       double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;

  if (h->dead)
    return failed(h, "reduce");
  return done(h, h->all->ops->reduce(h->all, send, recv, count, t, op, root,
                                     deadline));
}

static int hier_all_gather(struct pg__comm *base, const void *send,
                           void *recv, size_t count, pg_dtype t,
                           double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;

  if (h->dead)
    return failed(h, "all_gather");
  return done(h, h->all->ops->all_gather(h->all, send, recv, count, t,
                                         deadline));
}

static int hier_reduce_scatter(struct pg__comm *base, const void *send,
                               void *recv, size_t count, pg_dtype t,
                               pg_op op, double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;

  if (h->dead)
    return failed(h, "reduce_scatter");
  return done(h, h->all->ops->reduce_scatter(h->all, send, recv, count, t,
                                             op, deadline));
}

static int hier_send(struct pg__comm *base, const void *buf, size_t bytes,
                     int peer, int tag, double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;

  if (h->dead)
    return failed(h, "send");
  return done(h, h->all->ops->send(h->all, buf, bytes, peer, tag,
                                   deadline));
}

static int hier_recv(struct pg__comm *base, void *buf, size_t bytes,
                     int peer, int tag, double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;

  if (h->dead)
    return failed(h, "recv");
  return done(h, h->all->ops->recv(h->all, buf, bytes, peer, tag,
                                   deadline));
}

static void hier_destroy(struct pg__comm *base)
{
  struct hier_comm *h = (struct hier_comm *)base;

  if (!h)
    return;
  if (h->local)
    h->local->ops->destroy(h->local);
  if (h->leaders)
    h->leaders->ops->destroy(h->leaders);
  if (h->all)
    h->all->ops->destroy(h->all);
  free(h->host);
  free(h->root_local);
  free(h);
}

static const struct pg__comm_ops hier_ops = {
  .name = "cpu-hier",
  .all_reduce = hier_all_reduce,
  .broadcast = hier_broadcast,
  .reduce = hier_reduce,
  .all_gather = hier_all_gather,
  .reduce_scatter = hier_reduce_scatter,
  .barrier = hier_barrier,
  .send = hier_send,
  .recv = hier_recv,
  .destroy = hier_destroy,
};

/* A sub-communicator over the global ranks sub[0..k-1] (ascending), under
 * ns + suffix. */
static int sub_create(const struct pg__setup *s, const char *suffix,
                      const int *sub, int k, int me,
                      int (*create)(const struct pg__setup *,
                                    struct pg__comm **),
                      struct pg__comm **out)
{
  struct pg__setup ss = *s;
  char ns[4096];

  snprintf(ns, sizeof ns, "%s%s", s->ns, suffix);
  ss.ns = ns;
  ss.ranks = sub;
  ss.n = k;
  ss.me = me;
  return create(&ss, out);
}

/* Creation order is the same on every member (this host's shm, the
 * leaders' TCP, everyone's TCP), and each waits only for comms created
 * before it: no rank waits on one that waits on it. */
int pg__hier_create(const struct pg__setup *s, struct pg__comm **out)
{
  struct hier_comm *h = calloc(1, sizeof *h);
  int *hid = NULL, *mine = NULL, *lead = NULL;
  int i, j, nmine = 0, me_local = 0, me_lead = -1, err;
  char suffix[32];

  *out = NULL;
  if (!h)
    return pg__fail(-ENOMEM, "hier setup: out of memory");
  h->base.ops = &hier_ops;
  h->n = s->n;
  h->me = s->me;
  h->host = calloc((size_t)s->n, sizeof *h->host);
  h->root_local = calloc((size_t)s->n, sizeof *h->root_local);
  hid = calloc((size_t)s->n, sizeof *hid);    /* topo host of host k */
  mine = calloc((size_t)s->n, sizeof *mine);
  lead = calloc((size_t)s->n, sizeof *lead);
  if (!h->host || !h->root_local || !hid || !mine || !lead) {
    err = pg__fail(-ENOMEM, "hier setup: out of memory");
    goto fail;
  }
  /* Hosts among the members only, numbered by their lowest member. */
  for (i = 0; i < s->n; i++) {
    int th = s->topo->host_of[s->ranks[i]];

    for (j = 0; j < h->nhosts && hid[j] != th; j++)
      ;
    if (j == h->nhosts) {
      hid[h->nhosts++] = th;
      lead[j] = s->ranks[i];
      h->root_local[i] = 0;
    } else {
      int k, c = 0;

      for (k = 0; k < i; k++)
        c += h->host[k] == j;
      h->root_local[i] = c;
    }
    h->host[i] = j;
  }
  h->my_host = h->host[s->me];
  h->leader = h->root_local[s->me] == 0;
  for (i = 0; i < s->n; i++)
    if (h->host[i] == h->my_host) {
      if (i == s->me)
        me_local = nmine;
      mine[nmine++] = s->ranks[i];
    }
  if (h->leader)
    for (j = 0; j < h->nhosts; j++)
      if (lead[j] == s->ranks[s->me])
        me_lead = j;

  if (nmine > 1) {
    snprintf(suffix, sizeof suffix, "h%d/", h->my_host);
    err = sub_create(s, suffix, mine, nmine, me_local, pg__shm_create,
                     &h->local);
    if (err)
      goto fail;
  }
  if (h->leader && h->nhosts > 1) {
    err = sub_create(s, "leaders/", lead, h->nhosts, me_lead,
                     pg__tcp_create, &h->leaders);
    if (err)
      goto fail;
  }
  err = sub_create(s, "all/", s->ranks, s->n, s->me, pg__tcp_create,
                   &h->all);
  if (err)
    goto fail;
  free(hid);
  free(mine);
  free(lead);
  *out = &h->base;
  return 0;
fail:
  free(hid);
  free(mine);
  free(lead);
  hier_destroy(&h->base);
  return err;
}
