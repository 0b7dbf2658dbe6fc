/* hier.c -- the hierarchical communicator, for members spread over several
 * hosts: shared memory within each host, TCP between hosts only over
 * connections whose number grows with the hosts, never with the ranks --
 * the host leaders' comm, and on equal hosts the rails (Note [rails]);
 * point-to-point across hosts connects on first use (hier_p2p.c).  No
 * full mesh: at 1,000 hosts x 8 ranks one would be 7,999 sockets a rank. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hier_p2p.h"
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
  struct pg__comm *rail;     /* tcp over the ranks of this local index on
                                every host (Note [rails]); the leaders' comm
                                on leaders; NULL when the hosts differ */
  struct pg__comm *near;     /* HIER_NEAR_TCP: tcp over this host's
                                members, for small all-reduces */
  struct hier_p2p *p2p;      /* across hosts, connected on first use */
  int lmax;             /* members on the largest host */
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

/* Note [hier pipeline]: a large all-reduce goes in segments of PIPE_SEG
 * bytes through three stages -- the shared-memory reduce to the leader,
 * the leaders' TCP all-reduce, the shared-memory broadcast -- and the
 * leader runs the TCP stage on a thread of its own, so segment k is on
 * the wire while the host reduces segment k + 1 and receives segment
 * k - 1.  Every local rank issues the same shared-memory sequence: reduce
 * 0, then for each k reduce k + 1 and broadcast k.  Each segment's TCP
 * all-reduce gives every leader the same bits, and the broadcasts give
 * them to every rank.  AVG: SUM all the way, the leaders divide by n. */
#define PIPE_SEG ((size_t)1 << 20)

struct pipe {
  struct hier_comm *h;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char *buf;
  size_t count, seg;    /* elements */
  size_t nseg;
  pg_dtype t;
  pg_op op;             /* the leaders' (AVG: SUM) */
  bool avg;
  double deadline;
  size_t reduced;       /* segments ready for the wire */
  size_t sent;          /* segments all-reduced by the leaders */
  bool stop;            /* the main thread failed */
  int err;              /* the TCP stage's error */
  char msg[256];        /* ... and its sentence */
};

static void seg_range(const struct pipe *p, size_t k, size_t *off,
                      size_t *cnt)
{
  *off = k * p->seg;
  *cnt = p->count - *off < p->seg ? p->count - *off : p->seg;
}

static void *tcp_stage(void *arg)
{
  struct pipe *p = arg;
  struct hier_comm *h = p->h;
  size_t es = pg_dtype_size(p->t), k, off, cnt;
  int err = 0;

  for (k = 0; k < p->nseg && !err; k++) {
    pthread_mutex_lock(&p->mu);
    while (p->reduced <= k && !p->stop)
      pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    if (p->stop)
      break;
    seg_range(p, k, &off, &cnt);
    err = h->leaders->ops->all_reduce(h->leaders, p->buf + off * es,
                                      p->buf + off * es, cnt, p->t, p->op,
                                      p->deadline);
    if (!err && p->avg)
      pg__avg_finish(p->t, p->buf + off * es, cnt, h->n);
    pthread_mutex_lock(&p->mu);
    if (err) {
      p->err = err;
      snprintf(p->msg, sizeof p->msg, "%s", pg_last_error());
    } else
      p->sent = k + 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
  return NULL;
}

static int pipelined(struct hier_comm *h, const void *send, void *recv,
                     size_t count, pg_dtype t, pg_op op, double deadline)
{
  size_t es = pg_dtype_size(t), k, off, cnt;
  const char *in = send;
  struct pipe p;
  pthread_t th;
  int err = 0, terr;

  memset(&p, 0, sizeof p);
  p.h = h;
  p.buf = recv;
  p.count = count;
  p.seg = PIPE_SEG / es;
  p.nseg = (count + p.seg - 1) / p.seg;
  p.t = t;
  p.op = op == PG_AVG ? PG_SUM : op;
  p.avg = op == PG_AVG;
  p.deadline = deadline;
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  if (h->leader) {
    err = pthread_create(&th, NULL, tcp_stage, &p);
    if (err) {
      err = pg__fail(-err, "all_reduce: cannot start the leader's TCP "
                     "thread: %s", strerror(err));
      goto out;
    }
  }
  for (k = 0; k <= p.nseg && !err; k++) {
    if (k < p.nseg) {
      seg_range(&p, k, &off, &cnt);
      if (h->local)
        err = h->local->ops->reduce(h->local, in + off * es,
                                    p.buf + off * es, cnt, t, p.op, 0,
                                    deadline);
      else if (in != p.buf)
        memcpy(p.buf + off * es, in + off * es, cnt * es);
      if (err)
        break;
      pthread_mutex_lock(&p.mu);
      p.reduced = k + 1;
      pthread_cond_broadcast(&p.cv);
      pthread_mutex_unlock(&p.mu);
    }
    if (k == 0)
      continue;
    if (h->leader) {
      pthread_mutex_lock(&p.mu);
      while (p.sent < k && !p.err)
        pthread_cond_wait(&p.cv, &p.mu);
      terr = p.err;
      pthread_mutex_unlock(&p.mu);
      if (terr) {
        err = pg__fail(terr, "%s", p.msg);
        break;
      }
    }
    seg_range(&p, k - 1, &off, &cnt);
    if (h->local)
      err = h->local->ops->broadcast(h->local, p.buf + off * es, cnt, t,
                                     0, deadline);
  }
  if (h->leader) {
    pthread_mutex_lock(&p.mu);
    p.stop = true;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    pthread_join(th, NULL);
  }
out:
  pthread_cond_destroy(&p.cv);
  pthread_mutex_destroy(&p.mu);
  return err;
}

/* Note [rails]: when every host has the same number L of members (and
 * they are numbered alike), local rank i of each host is connected to
 * local rank i of every other host -- rail i, NCCL's rings per NIC -- and
 * rail 0 is the leaders' comm: nhosts - 1 sockets a rank, as the leaders
 * alone would have.  All-reduces up to RAIL_MAX: the host's members
 * all-reduce among themselves over a host-local TCP comm ("near": L - 1
 * loopback sockets a rank; shared memory when HIER_NEAR_TCP is 0), then
 * every member all-reduces the host sums over its own rail and divides
 * (AVG) itself.  Nobody waits in shared memory for another rank's TCP
 * exchange (a wait that, on a busy host, falls asleep on a futex and
 * costs a wake-up): every rank waits in poll() for its own data, as on a
 * flat TCP comm.  Each rail gets the same operands in the same host order
 * through the same algorithm, so every rank gets the same bits.  Larger
 * ones (RAILS_LARGE): a shared-memory reduce-scatter leaves host slice i
 * in local rank i, rail i all-reduces it, a shared-memory all-gather
 * assembles the result -- every rank drives 1/L of the inter-host
 * traffic at once, the stages of different ranks overlapping; each
 * element is reduced in one place, so the bits agree.  The leaders'
 * pipeline (Note [hier pipeline]) serves uneven hosts. */
#define RAIL_MAX ((size_t)8 << 10)
/* Why these defaults (scripts/bench has the measurements): the host's
 * step over loopback TCP waits in poll() rather than on a futex, which
 * wins on a busy host; rails for large messages beat the leaders'
 * pipeline because every rank drives its share of the inter-host
 * traffic; and the slices through the rails beat the whole buffer
 * through near + rail once messages are a few KiB (RAIL_MAX), where
 * below that the two are even. */
#ifndef HIER_NEAR_TCP
#define HIER_NEAR_TCP 1
#endif
/* Up to this many bytes the host step stays in shared memory even with
 * the near comm: shm's one-phase path for small messages (SMALL_SPIN in
 * shm.c) beats loopback TCP there; from shm's two-phase path on, TCP
 * wins. */
#define NEAR_SHM_MAX 2048u
#ifndef RAILS_LARGE
#define RAILS_LARGE 1
#endif

static int rails_all_reduce(struct hier_comm *h, const void *send,
                            void *recv, size_t count, pg_dtype t, pg_op op,
                            double deadline)
{
  size_t es = pg_dtype_size(t), blk = count / (size_t)h->lmax, done_n = 0;
  pg_op sub = op == PG_AVG ? PG_SUM : op;
  const char *in = send;
  char *out = recv, *tmp;
  int err = 0;

  if (count * es > RAIL_MAX && blk > 0) {
    tmp = malloc(blk * es);
    if (!tmp)
      return pg__fail(-ENOMEM, "all_reduce: out of memory");
    err = h->local->ops->reduce_scatter(h->local, send, tmp, blk, t, sub,
                                        deadline);
    if (!err)
      err = h->rail->ops->all_reduce(h->rail, tmp, tmp, blk, t, sub,
                                     deadline);
    if (!err && op == PG_AVG)
      pg__avg_finish(t, tmp, blk, h->n);
    if (!err)
      err = h->local->ops->all_gather(h->local, tmp, recv, blk, t,
                                      deadline);
    free(tmp);
    done_n = blk * (size_t)h->lmax;
  }
  if (err || done_n == count)
    return err;
  if (h->near && (count - done_n) * es > NEAR_SHM_MAX)
    err = h->near->ops->all_reduce(h->near, in + done_n * es,
                                   out + done_n * es, count - done_n, t,
                                   sub, deadline);
  else
    err = h->local->ops->all_reduce(h->local, in + done_n * es,
                                    out + done_n * es, count - done_n, t,
                                    sub, deadline);
  if (!err)
    err = h->rail->ops->all_reduce(h->rail, out + done_n * es,
                                   out + done_n * es, count - done_n, t, sub,
                                   deadline);
  if (!err && op == PG_AVG)
    pg__avg_finish(t, out + done_n * es, count - done_n, h->n);
  return err;
}

/* Shared memory gathers to the leader, the leaders all-reduce over TCP,
 * shared memory spreads the result; large ones pipelined (Note [hier
 * pipeline]). */
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
  /* The same choice on every rank: it depends on the count and on the
   * layout only. */
  if (h->rail && (count * pg_dtype_size(t) <= RAIL_MAX || RAILS_LARGE))
    return done(h, rails_all_reduce(h, send, recv, count, t, op, deadline));
  if (h->nhosts > 1 && count * pg_dtype_size(t) > PIPE_SEG)
    return done(h, pipelined(h, send, recv, count, t, op, deadline));
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

/* Each host reduces to its leader, the leaders to the root's leader, which
 * hands the result to the root over shared memory (tag INT_MIN, libpg's
 * own: no user message can match it). */
static int hier_reduce(struct pg__comm *base, const void *send, void *recv,
                       size_t count, pg_dtype t, pg_op op, int root,
                       double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;
  size_t bytes = count * pg_dtype_size(t);
  pg_op sub = op == PG_AVG ? PG_SUM : op;
  bool root_host, is_root = h->me == root;
  char *acc, *tmp = NULL;
  int rl, err = 0;

  if (h->dead)
    return failed(h, "reduce");
  if (root < 0 || root >= h->n)
    return pg__fail(-EINVAL, "reduce: root %d is not in 0..%d", root,
                    h->n - 1);
  if (count == 0)
    return 0;
  root_host = h->host[root] == h->my_host;
  rl = h->root_local[root];
  acc = recv;
  if (h->leader && !is_root) {
    acc = tmp = malloc(bytes);
    if (!tmp)
      return pg__fail(-ENOMEM, "reduce: out of memory");
  }
  if (h->local)
    err = h->local->ops->reduce(h->local, send, acc, count, t, sub, 0,
                                deadline);
  else if (send != acc)
    memcpy(acc, send, bytes);
  if (!err && h->leader) {
    if (h->leaders)
      err = h->leaders->ops->reduce(h->leaders, acc, acc, count, t, sub,
                                    h->host[root], deadline);
    if (!err && root_host && op == PG_AVG)
      pg__avg_finish(t, acc, count, h->n);
    if (!err && root_host && rl != 0)
      err = h->local->ops->send(h->local, acc, bytes, rl, INT_MIN,
                                deadline);
  } else if (!err && is_root) {
    err = h->local->ops->recv(h->local, recv, bytes, 0, INT_MIN, deadline);
  }
  free(tmp);
  return done(h, err);
}

/* The hosts' blocks, padded to the largest host's: each host gathers its
 * ranks' blocks, the leaders all-gather the hosts', every leader puts the
 * blocks in rank order and broadcasts them on its host. */
static int hier_all_gather(struct pg__comm *base, const void *send,
                           void *recv, size_t count, pg_dtype t,
                           double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;
  size_t blk = count * pg_dtype_size(t), hb = blk * (size_t)h->lmax;
  char *mine = NULL, *all = NULL, *out = recv;
  int i, err = 0;

  if (h->dead)
    return failed(h, "all_gather");
  if (count == 0)
    return 0;
  mine = calloc(1, hb);
  if (h->leader)
    all = malloc(hb * (size_t)h->nhosts);
  if (!mine || (h->leader && !all)) {
    err = pg__fail(-ENOMEM, "all_gather: out of memory");
    goto out;
  }
  if (h->local)
    err = h->local->ops->all_gather(h->local, send, mine, count, t,
                                    deadline);
  else
    memcpy(mine, send, blk);
  if (!err && h->leader) {
    if (h->leaders)
      err = h->leaders->ops->all_gather(h->leaders, mine, all,
                                        count * (size_t)h->lmax, t,
                                        deadline);
    else
      memcpy(all, mine, hb);
    for (i = 0; !err && i < h->n; i++)
      memcpy(out + (size_t)i * blk,
             all + (size_t)h->host[i] * hb + (size_t)h->root_local[i] * blk,
             blk);
  }
  if (!err && h->local)
    err = h->local->ops->broadcast(h->local, recv, count * (size_t)h->n, t,
                                   0, deadline);
out:
  free(mine);
  free(all);
  return done(h, err);
}

/* The whole buffer all-reduced, this rank's block kept: n times the
 * traffic of a direct reduce-scatter, but through the leaders only. */
static int hier_reduce_scatter(struct pg__comm *base, const void *send,
                               void *recv, size_t count, pg_dtype t,
                               pg_op op, double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;
  size_t blk = count * pg_dtype_size(t);
  char *tmp;
  int err;

  if (h->dead)
    return failed(h, "reduce_scatter");
  if (count == 0)
    return 0;
  tmp = malloc(blk * (size_t)h->n);
  if (!tmp)
    return pg__fail(-ENOMEM, "reduce_scatter: out of memory");
  err = hier_all_reduce(base, send, tmp, count * (size_t)h->n, t, op,
                        deadline);
  if (!err)
    memcpy(recv, tmp + (size_t)h->me * blk, blk);
  free(tmp);
  return err;
}

static int bad_peer(struct hier_comm *h, const char *op, int peer)
{
  if (peer < 0 || peer >= h->n)
    return pg__fail(-EINVAL, "%s: peer %d is not in 0..%d", op, peer,
                    h->n - 1);
  return pg__fail(-EINVAL, "%s: peer %d is this rank", op, peer);
}

/* Same host: shared memory; another host: a connection of its own, made
 * on first use (Note [lazy p2p], hier_p2p.c). */
static int hier_send(struct pg__comm *base, const void *buf, size_t bytes,
                     int peer, int tag, double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;

  if (h->dead)
    return failed(h, "send");
  if (peer < 0 || peer >= h->n || peer == h->me)
    return bad_peer(h, "send", peer);
  if (h->host[peer] == h->my_host)
    return done(h, h->local->ops->send(h->local, buf, bytes,
                                       h->root_local[peer], tag, deadline));
  return done(h, pg__hier_p2p_send(h->p2p, buf, bytes, peer, tag,
                                   deadline));
}

static int hier_recv(struct pg__comm *base, void *buf, size_t bytes,
                     int peer, int tag, double deadline)
{
  struct hier_comm *h = (struct hier_comm *)base;

  if (h->dead)
    return failed(h, "recv");
  if (peer < 0 || peer >= h->n || peer == h->me)
    return bad_peer(h, "recv", peer);
  if (h->host[peer] == h->my_host)
    return done(h, h->local->ops->recv(h->local, buf, bytes,
                                       h->root_local[peer], tag, deadline));
  return done(h, pg__hier_p2p_recv(h->p2p, buf, bytes, peer, tag,
                                   deadline));
}

static void hier_destroy(struct pg__comm *base)
{
  struct hier_comm *h = (struct hier_comm *)base;

  if (!h)
    return;
  if (h->local)
    h->local->ops->destroy(h->local);
  if (h->near)
    h->near->ops->destroy(h->near);
  if (h->rail && h->rail != h->leaders)
    h->rail->ops->destroy(h->rail);
  if (h->leaders)
    h->leaders->ops->destroy(h->leaders);
  pg__hier_p2p_destroy(h->p2p);
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

/* Whether rails fit (Note [rails]): every host has lmax members, and on
 * every rail the members' positions rise with their hosts' numbers (so a
 * rail's positions are the hosts, in the same order on every rail). */
static bool regular(const struct hier_comm *h)
{
  int *last = calloc((size_t)h->lmax, sizeof *last), *cnt;
  bool ok = last != NULL;
  int i;

  cnt = calloc((size_t)h->nhosts, sizeof *cnt);
  ok = ok && cnt;
  for (i = 0; ok && i < h->lmax; i++)
    last[i] = -1;
  for (i = 0; ok && i < h->n; i++) {
    int li = h->root_local[i];

    cnt[h->host[i]]++;
    if (h->host[i] != last[li] + 1)
      ok = false;
    last[li] = h->host[i];
  }
  for (i = 0; ok && i < h->nhosts; i++)
    ok = cnt[i] == h->lmax;
  free(last);
  free(cnt);
  return ok;
}

/* Hosts among the members only, numbered by their lowest member: each
 * member's host and local index, the largest host, and this rank's place;
 * hid[k] gets host k's topology host, lead[k] its leader's rank. */
static void hier_number_hosts(struct hier_comm *h, const struct pg__setup *s,
                              int *hid, int *lead)
{
  int i, j;

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
  for (i = 0; i < s->n; i++)
    if (h->root_local[i] + 1 > h->lmax)
      h->lmax = h->root_local[i] + 1;
  h->my_host = h->host[s->me];
  h->leader = h->root_local[s->me] == 0;
}

/* Creation order is the same on every member (this host's shm, then the
 * leaders' TCP), and each waits only for comms created before it: no rank
 * waits on one that waits on it.  The point-to-point listener waits for
 * nobody. */
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
  hier_number_hosts(h, s, hid, lead);
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
  if (h->lmax > 1 && regular(h)) {
    if (h->leader) {
      h->rail = h->leaders;
    } else {
      int li = h->root_local[s->me], k = 0;

      for (i = 0; i < s->n; i++)
        if (h->root_local[i] == li)
          mine[k++] = s->ranks[i];
      snprintf(suffix, sizeof suffix, "rail%d/", li);
      err = sub_create(s, suffix, mine, k, h->my_host, pg__tcp_create,
                       &h->rail);
      if (err)
        goto fail;
    }
  }
  if (HIER_NEAR_TCP && h->rail) {
    for (i = 0, j = 0; i < s->n; i++)
      if (h->host[i] == h->my_host)
        mine[j++] = s->ranks[i];
    snprintf(suffix, sizeof suffix, "near%d/", h->my_host);
    err = sub_create(s, suffix, mine, j, me_local, pg__tcp_create,
                     &h->near);
    if (err)
      goto fail;
  }
  err = pg__hier_p2p_create(s, &h->p2p);
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
