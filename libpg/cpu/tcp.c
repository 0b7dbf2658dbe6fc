/* tcp.c -- the TCP communicator: a mesh of non-blocking sockets, and the
 * collectives and point-to-point operations over it (latency-optimal
 * algorithms for small messages, tcp_ring.c's for large ones). */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "knobs.h"
#include "num.h"
#include "tcp_internal.h"

/* ---- the operations --------------------------------------------------- */

static int begin(struct tcp_comm *c, const char *name, bool coll)
{
  c->opname = name;
  if (coll)
    c->seq++;
  if (c->dead)
    return pg__fail(PG_EPEERFAIL, "%s: the TCP communicator failed "
                    "earlier (%s)", name, pg_err_name(c->dead));
  return 0;
}

/* After an error the streams are out of step: poison the comm, and shut
 * every socket so the peers' operations fail now instead of at their
 * deadline. */
static int end(struct tcp_comm *c, int err)
{
  int i;

  if (c->scratch_len > SCRATCH_KEEP) {
    free(c->scratch);
    c->scratch = NULL;
    c->scratch_len = 0;
  }
  if (err == 0)
    return 0;
  c->dead = err;
  for (i = 0; i < c->n; i++)
    if (c->peers[i].fd >= 0)
      shutdown(c->peers[i].fd, SHUT_RDWR);
  return err;
}

static int bad_root(struct tcp_comm *c, int root)
{
  return pg__fail(-EINVAL, "%s: root %d is not in 0..%d", c->opname, root,
                  c->n - 1);
}

/* Position of virtual rank v in the recursive-doubling core, where the
 * first 2 * rem ranks are paired down to rem. */
static int rd_real(int v, int rem)
{
  return v < rem ? 2 * v + 1 : v + rem;
}

/* Recursive doubling (Thakur et al.): log2(n) exchanges of the whole
 * buffer.  For n not a power of two, the first 2 * rem ranks pair up
 * first (even gives its data to odd) and get the result back at the end.
 * Both partners of an exchange compute lower op higher, operands in that
 * order, so every rank ends with the same bits. */
static int ar_doubling(struct tcp_comm *c, const void *send, char *dst,
                       size_t count, pg_dtype t, pg_op op, double deadline)
{
  size_t bytes = count * pg_dtype_size(t);
  uint16_t code = code_of(C_ALL_REDUCE, t, op);
  struct frame h = coll_frame(c, code, -1, bytes);
  int n = c->n, me = c->me, p2 = 1, rem, vr, round = 0, err;
  char *tmp = tcp_scratch(c, bytes);

  if (!tmp)
    return pg__fail(-ENOMEM, "%s: out of memory", c->opname);
  if (send != dst)
    memcpy(dst, send, bytes);
  while (p2 * 2 <= n)
    p2 *= 2;
  rem = n - p2;
  vr = me - rem;
  if (me < 2 * rem) {
    if (me % 2 == 0) {
      err = tcp_send1(c, me + 1, &h, dst, deadline);
      vr = -1;
    } else {
      err = tcp_recv1(c, me - 1, &h, tmp, deadline);
      pg__reduce(t, op, tmp, dst, count);     /* lower op higher */
      memcpy(dst, tmp, bytes);
      vr = me / 2;
    }
    if (err)
      return err;
  }
  if (vr >= 0) {
    int mask;

    for (mask = 1; mask < p2; mask <<= 1) {
      int partner = rd_real(vr ^ mask, rem);

      h.tag = round++;
      err = tcp_sendrecv(c, partner, &h, dst, partner, &h, tmp, deadline);
      if (err)
        return err;
      if (partner > me) {
        pg__reduce(t, op, dst, tmp, count);
      } else {
        pg__reduce(t, op, tmp, dst, count);
        memcpy(dst, tmp, bytes);
      }
    }
    if (op == PG_AVG)
      pg__avg_finish(t, dst, count, n);
  }
  h.tag = -2;
  if (me < 2 * rem)
    return me % 2 ? tcp_send1(c, me - 1, &h, dst, deadline)
                  : tcp_recv1(c, me + 1, &h, dst, deadline);
  return 0;
}

static int tcp_all_reduce(struct pg__comm *base, const void *send,
                          void *recv, size_t count, pg_dtype t, pg_op op,
                          double deadline)
{
  struct tcp_comm *c = (struct tcp_comm *)base;
  size_t bytes = count * pg_dtype_size(t);
  struct ring r;
  int err = begin(c, "all_reduce", true);

  if (err || count == 0)
    return err;
  if (c->n == 1) {
    if (send != recv)
      memcpy(recv, send, bytes);
    if (op == PG_AVG)
      pg__avg_finish(t, recv, count, 1);
    return 0;
  }
  if (bytes <= (c->n == 2 ? PAIR_SMALL_BYTES : SMALL_BYTES) ||
      count < (size_t)c->n)
    return end(c, ar_doubling(c, send, recv, count, t, op, deadline));
  memset(&r, 0, sizeof r);
  r.kind = RING_AR;
  r.t = t;
  r.op = op;
  r.count = count;
  r.rsteps = c->n - 1;
  r.src = send;
  r.dst = recv;
  return end(c, tcp_ring_run(c, &r, 2 * (c->n - 1),
                             code_of(C_ALL_REDUCE, t, op), deadline));
}

/* Binomial tree from the root: ceil(log2(n)) rounds, children fed at
 * once. */
static int bcast_tree(struct tcp_comm *c, char *buf, struct frame *h,
                      int root, double deadline)
{
  int n = c->n, vr = wrap(c->me - root, n), mask = 1, ns = 0, err;

  while (mask < n) {
    if (vr & mask) {
      err = tcp_recv1(c, wrap(vr - mask + root, n), h, buf, deadline);
      if (err)
        return err;
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n)
      tcp_stream_buf(c, &c->ss[ns++], wrap(vr + mask + root, n), true, h, buf);
  return ns ? tcp_run(c, c->ss, ns, deadline) : 0;
}

static int tcp_broadcast(struct pg__comm *base, void *buf, size_t count,
                         pg_dtype t, int root, double deadline)
{
  struct tcp_comm *c = (struct tcp_comm *)base;
  size_t bytes = count * pg_dtype_size(t);
  struct frame h;
  struct chain ch;
  int err = begin(c, "broadcast", true), ns = 0;

  if (err)
    return err;
  if (root < 0 || root >= c->n)
    return bad_root(c, root);
  if (count == 0 || c->n == 1)
    return 0;
  h = coll_frame(c, code_of(C_BROADCAST, t, 0), root, bytes);
  if (bytes <= SMALL_BYTES)
    return end(c, bcast_tree(c, buf, &h, root, deadline));
  memset(&ch, 0, sizeof ch);
  ch.es = pg_dtype_size(t);
  ch.count = count;
  ch.nseg = nseg_for(bytes);
  ch.n = c->n;
  ch.vr = wrap(c->me - root, c->n);
  ch.dst = buf;
  if (ch.vr > 0)
    tcp_stream_units(c, &c->ss[ns++], wrap(c->me - 1, c->n), false, &h,
                     ch.nseg, tcp_bc_rx_unit, tcp_chain_rx_done, &ch);
  if (ch.vr < c->n - 1)
    tcp_stream_units(c, &c->ss[ns++], wrap(c->me + 1, c->n), true, &h,
                     ch.nseg, tcp_bc_tx_unit, tcp_chain_tx_done, &ch);
  return end(c, tcp_run(c, c->ss, ns, deadline));
}

/* Binomial tree toward the root; acc holds this rank's partial. */
static int reduce_tree(struct tcp_comm *c, const void *send, void *recv,
                       size_t count, pg_dtype t, pg_op op, int root,
                       double deadline)
{
  size_t bytes = count * pg_dtype_size(t);
  struct frame h = coll_frame(c, code_of(C_REDUCE, t, op), root, bytes);
  int n = c->n, vr = wrap(c->me - root, n), mask, err;
  char *acc, *tmp = tcp_scratch(c, 2 * bytes);

  if (!tmp)
    return pg__fail(-ENOMEM, "%s: out of memory", c->opname);
  acc = vr == 0 ? recv : tmp + bytes;
  if (acc != send)
    memcpy(acc, send, bytes);
  for (mask = 1; mask < n; mask <<= 1) {
    if (vr & mask)
      return tcp_send1(c, wrap(vr - mask + root, n), &h, acc, deadline);
    if (vr + mask < n) {
      err = tcp_recv1(c, wrap(vr + mask + root, n), &h, tmp, deadline);
      if (err)
        return err;
      pg__reduce(t, op, acc, tmp, count);
    }
  }
  if (op == PG_AVG)
    pg__avg_finish(t, acc, count, n);
  return 0;
}

static int tcp_reduce(struct pg__comm *base, const void *send, void *recv,
                      size_t count, pg_dtype t, pg_op op, int root,
                      double deadline)
{
  struct tcp_comm *c = (struct tcp_comm *)base;
  size_t bytes = count * pg_dtype_size(t);
  struct frame h;
  struct chain ch;
  int err = begin(c, "reduce", true), ns = 0;

  if (err)
    return err;
  if (root < 0 || root >= c->n)
    return bad_root(c, root);
  if (count == 0)
    return 0;
  if (c->n == 1) {
    if (send != recv)
      memcpy(recv, send, bytes);
    if (op == PG_AVG)
      pg__avg_finish(t, recv, count, 1);
    return 0;
  }
  if (bytes <= SMALL_BYTES)
    return end(c, reduce_tree(c, send, recv, count, t, op, root, deadline));
  memset(&ch, 0, sizeof ch);
  ch.t = t;
  ch.op = op;
  ch.es = pg_dtype_size(t);
  ch.count = count;
  ch.nseg = nseg_for(bytes);
  ch.n = c->n;
  ch.vr = wrap(c->me - root, c->n);
  ch.src = send;
  ch.dst = recv;
  ch.slot_bytes = (count / ch.nseg + 1) * ch.es;
  ch.slots = tcp_scratch(c, CHAIN_SLOTS * ch.slot_bytes);
  if (!ch.slots)
    return end(c, pg__fail(-ENOMEM, "%s: out of memory", c->opname));
  h = coll_frame(c, code_of(C_REDUCE, t, op), root, bytes);
  if (ch.vr < c->n - 1)
    tcp_stream_units(c, &c->ss[ns++], wrap(c->me + 1, c->n), false, &h,
                     ch.nseg, tcp_rd_rx_unit, tcp_rd_rx_done, &ch);
  if (ch.vr > 0)
    tcp_stream_units(c, &c->ss[ns++], wrap(c->me - 1, c->n), true, &h,
                     ch.nseg, tcp_rd_tx_unit, tcp_chain_tx_done, &ch);
  return end(c, tcp_run(c, c->ss, ns, deadline));
}

static int tcp_all_gather(struct pg__comm *base, const void *send,
                          void *recv, size_t count, pg_dtype t,
                          double deadline)
{
  struct tcp_comm *c = (struct tcp_comm *)base;
  size_t es = pg_dtype_size(t), blk = count * es;
  char *out = recv, *mine = out + (size_t)c->me * blk;
  uint16_t code = code_of(C_ALL_GATHER, t, 0);
  struct frame h;
  struct ring r;
  int err = begin(c, "all_gather", true), i, ns = 0;

  if (err || count == 0)
    return err;
  if (mine != send)
    memmove(mine, send, blk);
  if (c->n == 1)
    return 0;
  if (blk * (size_t)c->n <= SMALL_BYTES && c->n <= DIRECT_MAX) {
    /* Everyone sends its block to everyone: one round. */
    h = coll_frame(c, code, 0, blk);
    for (i = 0; i < c->n; i++) {
      if (i == c->me)
        continue;
      tcp_stream_buf(c, &c->ss[ns++], i, true, &h, mine);
      tcp_stream_buf(c, &c->ss[ns++], i, false, &h, out + (size_t)i * blk);
    }
    return end(c, tcp_run(c, c->ss, ns, deadline));
  }
  memset(&r, 0, sizeof r);
  r.kind = RING_AG;
  r.t = t;
  r.count = count * (size_t)c->n;
  r.rsteps = 0;
  r.dst = recv;
  return end(c, tcp_ring_run(c, &r, c->n - 1, code, deadline));
}

/* Direct reduce-scatter: block b goes straight to rank b, which folds the
 * n contributions in rank order. */
static int rs_direct(struct tcp_comm *c, const char *send, char *recv,
                     size_t count, pg_dtype t, pg_op op, double deadline)
{
  size_t blk = count * pg_dtype_size(t);
  struct frame h = coll_frame(c, code_of(C_REDUCE_SCATTER, t, op), 0, blk);
  char *tmp = tcp_scratch(c, blk * (size_t)c->n);
  int i, ns = 0, err;

  if (!tmp)
    return pg__fail(-ENOMEM, "%s: out of memory", c->opname);
  for (i = 0; i < c->n; i++) {
    if (i == c->me)
      continue;
    tcp_stream_buf(c, &c->ss[ns++], i, true, &h, send + (size_t)i * blk);
    tcp_stream_buf(c, &c->ss[ns++], i, false, &h, tmp + (size_t)i * blk);
  }
  err = tcp_run(c, c->ss, ns, deadline);
  if (err)
    return err;
  memcpy(tmp + (size_t)c->me * blk, send + (size_t)c->me * blk, blk);
  memcpy(recv, tmp, blk);
  for (i = 1; i < c->n; i++)
    pg__reduce(t, op, recv, tmp + (size_t)i * blk, count);
  if (op == PG_AVG)
    pg__avg_finish(t, recv, count, c->n);
  return 0;
}

static int tcp_reduce_scatter(struct pg__comm *base, const void *send,
                              void *recv, size_t count, pg_dtype t,
                              pg_op op, double deadline)
{
  struct tcp_comm *c = (struct tcp_comm *)base;
  size_t blk = count * pg_dtype_size(t), all = blk * (size_t)c->n;
  const char *s = send, *r0 = recv;
  char *copy = NULL, *part;
  struct ring r;
  int err = begin(c, "reduce_scatter", true);

  if (err || count == 0)
    return err;
  if (c->n == 1) {
    if (send != recv)
      memmove(recv, send, blk);
    if (op == PG_AVG)
      pg__avg_finish(t, recv, count, 1);
    return 0;
  }
  if (r0 < s + all && s < r0 + blk) {
    /* recv inside send (in place): results would overwrite input that
     * is still to be sent. */
    copy = malloc(all);
    if (!copy)
      return end(c, pg__fail(-ENOMEM, "%s: out of memory", c->opname));
    memcpy(copy, send, all);
    s = copy;
  }
  if (all <= SMALL_BYTES && c->n <= DIRECT_MAX) {
    err = rs_direct(c, s, recv, count, t, op, deadline);
    free(copy);
    return end(c, err);
  }
  part = malloc(2 * blk);
  if (!part) {
    free(copy);
    return end(c, pg__fail(-ENOMEM, "%s: out of memory", c->opname));
  }
  memset(&r, 0, sizeof r);
  r.kind = RING_RS;
  r.t = t;
  r.op = op;
  r.count = count * (size_t)c->n;
  r.shift = -1;
  r.rsteps = c->n - 1;
  r.src = s;
  r.dst = recv;
  r.part[0] = part;
  r.part[1] = part + blk;
  err = tcp_ring_run(c, &r, c->n - 1, code_of(C_REDUCE_SCATTER, t, op),
                     deadline);
  free(part);
  free(copy);
  return end(c, err);
}

/* Dissemination: ceil(log2(n)) rounds of an empty frame to me + 2^k. */
static int tcp_barrier(struct pg__comm *base, double deadline)
{
  struct tcp_comm *c = (struct tcp_comm *)base;
  struct frame h;
  int err = begin(c, "barrier", true), k, round = 0;

  if (err)
    return err;
  for (k = 1; k < c->n; k <<= 1) {
    h = coll_frame(c, C_BARRIER, round++, 0);
    err = tcp_sendrecv(c, wrap(c->me + k, c->n), &h, NULL,
                       wrap(c->me - k, c->n), &h, NULL, deadline);
    if (err)
      return end(c, err);
  }
  return 0;
}

static int bad_peer(struct tcp_comm *c, int peer)
{
  if (peer < 0 || peer >= c->n)
    return pg__fail(-EINVAL, "%s: peer %d is not in 0..%d", c->opname,
                    peer, c->n - 1);
  return pg__fail(-EINVAL, "%s: peer %d is this rank", c->opname, peer);
}

static int tcp_send(struct pg__comm *base, const void *buf, size_t bytes,
                    int peer, int tag, double deadline)
{
  struct tcp_comm *c = (struct tcp_comm *)base;
  struct frame h;
  int err = begin(c, "send", false), i, ns = 1;

  if (err)
    return err;
  if (peer < 0 || peer >= c->n || peer == c->me)
    return bad_peer(c, peer);
  memset(&h, 0, sizeof h);
  h.magic = FRAME_MAGIC;
  h.kind = FRAME_P2P;
  h.tag = tag;
  h.len = bytes;
  tcp_stream_buf(c, &c->ss[0], peer, true, &h, buf);
  /* Meanwhile queue what any peer sends this rank, so ranks sending each
   * other large messages (in a pair or a cycle) do not wait on each
   * other. */
  for (i = 0; i < c->n; i++) {
    if (i == c->me)
      continue;
    tcp_stream_init(c, &c->ss[ns], i, false, &h);
    c->ss[ns++].drain_only = true;
  }
  return end(c, tcp_run(c, c->ss, ns, deadline));
}

static int tcp_recv(struct pg__comm *base, void *buf, size_t bytes,
                    int peer, int tag, double deadline)
{
  struct tcp_comm *c = (struct tcp_comm *)base;
  struct frame h;
  int err = begin(c, "recv", false);

  if (err)
    return err;
  if (peer < 0 || peer >= c->n || peer == c->me)
    return bad_peer(c, peer);
  memset(&h, 0, sizeof h);
  h.magic = FRAME_MAGIC;
  h.kind = FRAME_P2P;
  h.tag = tag;
  h.len = bytes;
  tcp_stream_buf(c, &c->ss[0], peer, false, &h, buf);
  c->ss[0].p2p = true;
  return end(c, tcp_run(c, c->ss, 1, deadline));
}

void tcp_comm_release(struct tcp_comm *c, int npeers)
{
  int i;

  for (i = 0; c->peers && i < npeers; i++) {
    struct peer *p = &c->peers[i];
    struct umsg *u;

    if (p->fd >= 0)
      close(p->fd);
    while ((u = p->qhead)) {
      p->qhead = u->next;
      free(u);
    }
    free(p->drain);
  }
  free(c->peers);
  free(c->ss);
  free(c->pfd);
  free(c->scratch);
}

static void tcp_destroy(struct pg__comm *base)
{
  struct tcp_comm *c = (struct tcp_comm *)base;

  if (!c)
    return;
  tcp_comm_release(c, c->n);
  free(c);
}

static const struct pg__comm_ops tcp_ops = {
  .name = "cpu-tcp",
  .all_reduce = tcp_all_reduce,
  .broadcast = tcp_broadcast,
  .reduce = tcp_reduce,
  .all_gather = tcp_all_gather,
  .reduce_scatter = tcp_reduce_scatter,
  .barrier = tcp_barrier,
  .send = tcp_send,
  .recv = tcp_recv,
  .destroy = tcp_destroy,
};

/* Note [spin then sleep] in tcp_stream.c: a pure spin of 50 us when the
 * ranks on this machine have a CPU each, else a yielding one of 200 us;
 * $PG_TCP_SPIN_US sets the length (0: sleep at once). */
static int spin_setting(const struct pg__setup *s, double *spin_s,
                        bool *yield)
{
  const char *v = pg__knob(PG_KNOB_TCP_SPIN_US);
  const struct pg__topo *t = s->topo;
  int i, here = 0;
  long us;

  /* Every rank under this kernel competes for its CPUs, whatever host
   * it poses as (netbed's namespaces) and whichever comm it uses. */
  for (i = 0; i < s->n; i++)
    here += !t || !t->host_of ||
            t->host_of[s->ranks[i]] == t->host_of[s->ranks[s->me]];
  if (t && t->machine_ranks > here)
    here = t->machine_ranks;
  *yield = here > pg__usable_cpus();
  *spin_s = *yield ? 200e-6 : 50e-6;
  if (v) {
    if (num_parse_long(v, 0, 10000, &us))
      return pg__fail(-EINVAL, "PG_TCP_SPIN_US is '%s', expected an "
                      "integer 0..10000 (microseconds)", v);
    *spin_s = (double)us * 1e-6;
  }
  return 0;
}

int pg__tcp_create(const struct pg__setup *s, struct pg__comm **out)
{
  double deadline = pg__now() + s->timeout;
  struct tcp_comm *c = calloc(1, sizeof *c);
  int i, err = 0;

  *out = NULL;
  if (!c)
    return pg__fail(-ENOMEM, "tcp setup: out of memory");
  c->base.ops = &tcp_ops;
  c->n = s->n;
  c->me = s->me;
  c->opname = "tcp setup";
  c->cut_armed = s->cut_armed;
  c->cut_ask = s->cut_ask;
  c->cut_arg = s->cut_arg;
  c->peers = calloc((size_t)s->n, sizeof *c->peers);
  c->ss = calloc(2 * (size_t)s->n + 2, sizeof *c->ss);
  c->pfd = calloc(2 * (size_t)s->n + 2, sizeof *c->pfd);
  if (!c->peers || !c->ss || !c->pfd) {
    tcp_destroy(&c->base);
    return pg__fail(-ENOMEM, "tcp setup: out of memory");
  }
  for (i = 0; i < s->n; i++) {
    c->peers[i].fd = -1;
    c->peers[i].rank = s->ranks[i];
  }
  err = spin_setting(s, &c->spin_s, &c->spin_yield);
  c->spin_cur = c->spin_s;
  if (!err && s->n > 1)
    err = tcp_connect_all(c, s, deadline);
  if (err) {
    tcp_destroy(&c->base);
    return err;
  }
  *out = &c->base;
  return 0;
}
