/* tcp_stream.c -- the TCP communicator's engine: every message is a stream
 * of units to or from one peer, and one poll() loop moves them all. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp_internal.h"









char *tcp_scratch(struct tcp_comm *c, size_t bytes)
{
  char *p;

  if (bytes <= c->scratch_len)
    return c->scratch;
  p = realloc(c->scratch, bytes);
  if (!p)
    return NULL;
  c->scratch = p;
  c->scratch_len = bytes;
  return p;
}


const char *tcp_coll_name(int code)
{
  static const char *const names[] = {
    "?", "all_reduce", "broadcast", "reduce", "all_gather",
    "reduce_scatter", "barrier",
  };
  int k = code & 15;

  return k <= C_BARRIER ? names[k] : "?";
}


/* ---- streams and the poll loop ------------------------------------------ */

struct stream *tcp_stream_init(struct tcp_comm *c, struct stream *s,
                               int peer, bool tx, const struct frame *h)
{
  memset(s, 0, sizeof *s);
  s->p = &c->peers[peer];
  s->tx = tx;
  s->h = *h;
  return s;
}

/* A one-buffer message. */
void tcp_stream_buf(struct tcp_comm *c, struct stream *s, int peer,
                    bool tx, const struct frame *h, const void *buf)
{
  tcp_stream_init(c, s, peer, tx, h);
  s->buf = (char *)buf;
  s->buflen = (size_t)h->len;
  s->nunits = 1;
}

void tcp_stream_units(struct tcp_comm *c, struct stream *s, int peer,
                      bool tx, const struct frame *h, size_t nunits,
                      unit_fn unit, done_fn done, void *ctx)
{
  tcp_stream_init(c, s, peer, tx, h);
  s->nunits = nunits;
  s->unit = unit;
  s->done = done;
  s->ctx = ctx;
}

static bool unit_next(struct stream *s)
{
  if (s->unit) {
    if (!s->unit(s->ctx, s, s->j, &s->ptr, &s->len))
      return false;
  } else {
    s->ptr = s->buf;
    s->len = s->buflen;
  }
  s->off = 0;
  s->have = true;
  return true;
}

static int peer_gone(struct tcp_comm *c, struct peer *p, int err,
                     const char *doing)
{
  if (err == 0 || err == EPIPE || err == ECONNRESET || err == ENOTCONN)
    return pg__fail(-ECONNRESET, "%s: rank %d closed its connection while "
                    "%s it (it exited, failed, or gave up)", c->opname,
                    p->rank, doing);
  return pg__fail(-err, "%s: %s rank %d: %s", c->opname, doing, p->rank,
                  strerror(err));
}

static int tx_step(struct tcp_comm *c, struct stream *s, bool *moved)
{
  for (;;) {
    struct iovec iov[2];
    struct msghdr m;
    size_t a, d;
    ssize_t k;
    int niov = 0;

    if (!s->have && s->j < s->nunits)
      unit_next(s);
    if (s->hoff < sizeof s->h) {
      iov[niov].iov_base = (char *)&s->h + s->hoff;
      iov[niov++].iov_len = sizeof s->h - s->hoff;
    }
    if (s->have && s->off < s->len) {
      iov[niov].iov_base = s->ptr + s->off;
      iov[niov++].iov_len = s->len - s->off;
    }
    if (niov == 0) {
      if (s->have) {
        s->have = false;
        if (s->done)
          s->done(s->ctx, s, s->j);
        s->j++;
        *moved = true;
        continue;
      }
      if (s->j == s->nunits) {
        s->fin = true;
        return 0;
      }
      s->want = 0;
      return 0;
    }
    memset(&m, 0, sizeof m);
    m.msg_iov = iov;
    m.msg_iovlen = (size_t)niov;
    k = sendmsg(s->p->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        s->want = POLLOUT;
        return 0;
      }
      return peer_gone(c, s->p, errno, "sending to");
    }
    *moved = true;
    a = (size_t)k;
    d = min_sz(a, sizeof s->h - s->hoff);
    s->hoff += d;
    s->off += a - d;
  }
}

/* One recv from s's peer: the bytes read (> 0); 0 when it would block
 * (s->want set); or the error, reported (the peer closed or failed). */
static ssize_t recv_some(struct tcp_comm *c, struct stream *s, void *dst,
                         size_t need)
{
  ssize_t k;

  do
    k = recv(s->p->fd, dst, need, MSG_DONTWAIT);
  while (k < 0 && errno == EINTR);
  if (k > 0)
    return k;
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    s->want = POLLIN;
    return 0;
  }
  return peer_gone(c, s->p, k == 0 ? 0 : errno, "receiving from");
}

static void enqueue(struct peer *p, struct umsg *u)
{
  u->next = NULL;
  if (p->qtail)
    p->qtail->next = u;
  else
    p->qhead = u;
  p->qtail = u;
}

/* The first queued message with this tag, unlinked; or NULL. */
static struct umsg *dequeue(struct peer *p, int tag)
{
  struct umsg **pp, *prev = NULL;

  for (pp = &p->qhead; *pp; prev = *pp, pp = &(*pp)->next) {
    struct umsg *u = *pp;

    if (u->tag != tag)
      continue;
    *pp = u->next;
    if (p->qtail == u)
      p->qtail = prev;
    return u;
  }
  return NULL;
}

/* Reads p's frames until a header for s is complete, queueing the p2p
 * messages that are not for s on the way (a peer may send before this rank
 * receives, or before a collective both are in).  1: p->in is a header
 * for s to judge; 0: needs I/O (s->want set); < 0: error. */
static int pump(struct tcp_comm *c, struct stream *s, bool *moved)
{
  struct peer *p = s->p;

  for (;;) {
    char *dst;
    size_t need;
    ssize_t k;

    if (p->drain) {
      dst = p->drain->data + p->drain_got;
      need = p->drain->len - p->drain_got;
    } else if (p->in_got < sizeof p->in) {
      dst = (char *)&p->in + p->in_got;
      need = sizeof p->in - p->in_got;
    } else {
      if (p->in.magic != FRAME_MAGIC ||
          (p->in.kind != FRAME_COLL && p->in.kind != FRAME_P2P))
        return pg__fail(-EPROTO, "%s: rank %d sent a malformed frame",
                        c->opname, p->rank);
      if (p->in.kind == FRAME_COLL || (s->p2p && p->in.tag == s->h.tag))
        return 1;
      if (p->in.len > SIZE_MAX - sizeof(struct umsg))
        return pg__fail(-EPROTO, "%s: rank %d sent a frame of %llu bytes",
                        c->opname, p->rank,
                        (unsigned long long)p->in.len);
      p->drain = malloc(sizeof(struct umsg) + (size_t)p->in.len);
      if (!p->drain)
        return pg__fail(-ENOMEM, "%s: no memory to queue a %llu-byte "
                        "message from rank %d", c->opname,
                        (unsigned long long)p->in.len, p->rank);
      p->drain->tag = p->in.tag;
      p->drain->len = (size_t)p->in.len;
      p->drain_got = 0;
      p->in_got = 0;
      *moved = true;
      continue;
    }
    if (need == 0) {
      enqueue(p, p->drain);
      p->drain = NULL;
      *moved = true;
      if (s->p2p)
        return 0;       /* the caller looks at the queue again */
      continue;
    }
    k = recv_some(c, s, dst, need);
    if (k <= 0)
      return (int)k;
    *moved = true;
    if (p->drain)
      p->drain_got += (size_t)k;
    else
      p->in_got += (size_t)k;
  }
}

/* Whether the header p->in is the one s expects. */
static int match(struct tcp_comm *c, struct stream *s)
{
  const struct frame *in = &s->p->in, *x = &s->h;
  int r = s->p->rank;

  if (s->p2p) {
    if (in->kind == FRAME_COLL)
      return pg__fail(-EPROTO, "recv (tag %d): rank %d is in collective "
                      "#%u (%s) instead of sending; the ranks issued "
                      "different operations", x->tag, r, in->seq,
                      tcp_coll_name(in->code));
    if (in->len != x->len)
      return pg__fail(-EMSGSIZE, "recv (tag %d): rank %d sent %llu bytes, "
                      "this rank expects %llu", x->tag, r,
                      (unsigned long long)in->len,
                      (unsigned long long)x->len);
    return 0;
  }
  if (in->seq != x->seq || in->code != x->code || in->tag != x->tag ||
      in->len != x->len)
    return pg__fail(-EPROTO, "%s #%u: rank %d sent %s #%u (code %#x, "
                    "%d, %llu bytes) where %s (code %#x, %d, %llu bytes) "
                    "was expected; the ranks issued different "
                    "collectives, counts or types", c->opname, x->seq, r,
                    tcp_coll_name(in->code), in->seq, in->code, in->tag,
                    (unsigned long long)in->len, tcp_coll_name(x->code),
                    x->code, x->tag, (unsigned long long)x->len);
  return 0;
}

static int rx_step(struct tcp_comm *c, struct stream *s, bool *moved)
{
  struct peer *p = s->p;

  for (;;) {
    ssize_t k;
    int r;

    if (!s->hdr) {
      if (s->p2p) {
        struct umsg *u = dequeue(p, s->h.tag);

        if (u) {
          r = 0;
          if (u->len != s->h.len)
            r = pg__fail(-EMSGSIZE, "recv (tag %d): rank %d sent %zu "
                         "bytes, this rank expects %llu", s->h.tag,
                         p->rank, u->len, (unsigned long long)s->h.len);
          else if (u->len)
            memcpy(s->buf, u->data, u->len);
          free(u);
          s->fin = true;
          *moved = true;
          return r;
        }
      }
      r = pump(c, s, moved);
      if (r < 0 && s->drain_only) {
        /* A peer that finished and closed is no error for a send to
         * another; an op that needs it will meet the closed socket. */
        s->fin = true;
        return 0;
      }
      if (r <= 0)
        return r;
      if (s->drain_only) {
        s->want = 0;    /* a collective's frame: leave it for that */
        return 0;
      }
      r = match(c, s);
      if (r)
        return r;
      s->hdr = true;
      p->in_got = 0;
      *moved = true;
      continue;
    }
    if (!s->have) {
      if (s->j == s->nunits) {
        s->fin = true;
        return 0;
      }
      if (!unit_next(s)) {
        s->want = 0;
        return 0;
      }
    }
    if (s->off == s->len) {
      s->have = false;
      if (s->done)
        s->done(s->ctx, s, s->j);
      s->j++;
      *moved = true;
      continue;
    }
    k = recv_some(c, s, s->ptr + s->off, s->len - s->off);
    if (k <= 0)
      return (int)k;
    s->off += (size_t)k;
    *moved = true;
  }
}

int tcp_ms_until(double deadline)
{
  double ms = (deadline - pg__now()) * 1000.0;

  if (ms <= 0)
    return 0;
  if (ms >= INT_MAX)
    return INT_MAX;
  return (int)ms + 1;
}

static int timed_out(struct tcp_comm *c, const struct stream *ss, int ns)
{
  const struct stream *w = NULL;
  int i;

  /* Name a stream blocked on its socket, not one waiting on another. */
  for (i = 0; i < ns; i++) {
    if (ss[i].fin || ss[i].drain_only)
      continue;
    if (!w || (!w->want && ss[i].want))
      w = &ss[i];
  }
  if (!w)
    return pg__fail(-ETIMEDOUT, "%s: timed out", c->opname);
  return pg__fail(-ETIMEDOUT, "%s: timed out %s rank %d (%zu of %zu parts "
                  "done)", c->opname, w->tx ? "sending to" : "waiting for",
                  w->p->rank, w->j, w->nunits);
}

/* Note [spin then sleep]: a wait first retries the sockets (non-blocking
 * calls) for up to spin_cur seconds before it sleeps in poll().  Waking
 * a sleeping process costs more than a small message's whole round trip
 * when its CPU was idle (tens of microseconds: an idle CPU, in a VM a
 * halted vCPU, must be woken), which is where Open MPI's busy-polling
 * ranks win at 4 B.  But a rank spinning on a CPU its peer needs only
 * delays the data it waits for, so the budget adapts, as an adaptive
 * mutex's does: a spin that ended in data restores it to spin_s, one
 * that ran out halves it, down to nothing; then every SPIN_PROBE-th wait
 * tries a quarter of spin_s again.  spin_s is 50 us by default when the
 * ranks under this kernel have a CPU each (pg__tcp_create).  When they
 * outnumber the CPUs, the peer a rank waits for may be waiting for this
 * very CPU, so the spin is a yielding one (sched_yield between retries,
 * as Open MPI's mpi_yield_when_idle and shm's waits, Note [waiting] in
 * shm.c) of 200 us.  The spin pays for small messages, where the wake-up
 * is most of the round trip, and makes no difference for large ones,
 * where the wire is. */
#define SPIN_PROBE 64

static void spin_result(struct tcp_comm *c, bool got_data)
{
  if (got_data) {
    c->spin_cur = c->spin_s;
    return;
  }
  c->spin_cur = c->spin_cur < 2e-6 ? 0 : c->spin_cur / 2;
}

/* This wait's spin budget. */
static double spin_budget(struct tcp_comm *c)
{
  if (c->spin_cur > 0 || c->spin_s <= 0)
    return c->spin_cur;
  if (++c->spin_idle % SPIN_PROBE == 0)
    return c->spin_s / 4;
  return 0;
}

/* Moves every stream until all but the drain-only ones are finished, the
 * deadline passes or a peer fails: spins, then waits in poll(). */
int tcp_run(struct tcp_comm *c, struct stream *ss, int ns,
            double deadline)
{
  double spin_until = 0, budget = 0;

  for (;;) {
    bool moved = true, progressed = false, busy = false;
    int i, k, nfd = 0;

    while (moved) {
      moved = false;
      for (i = 0; i < ns; i++) {
        int err;

        if (ss[i].fin)
          continue;
        err = ss[i].tx ? tx_step(c, &ss[i], &moved)
                       : rx_step(c, &ss[i], &moved);
        if (err)
          return err;
      }
      progressed |= moved;
    }
    for (i = 0; i < ns; i++) {
      if (ss[i].fin || !ss[i].want)
        continue;
      if (!ss[i].drain_only)
        busy = true;
      for (k = 0; k < nfd && c->pfd[k].fd != ss[i].p->fd; k++)
        ;
      if (k == nfd) {
        c->pfd[nfd].fd = ss[i].p->fd;
        c->pfd[nfd++].events = 0;
      }
      c->pfd[k].events |= ss[i].want;
    }
    for (i = 0; i < ns; i++)
      if (!ss[i].fin && !ss[i].drain_only)
        break;
    if (i == ns) {
      if (spin_until > 0)
        spin_result(c, true);       /* the spin ended in the data */
      return 0;
    }
    if (!busy)          /* every stream waits on another: a bug here */
      return pg__fail(-EPROTO, "%s: internal error: no stream can move",
                      c->opname);
    if (c->spin_s > 0) {
      double now = pg__now();

      if (progressed && spin_until > 0) {
        spin_result(c, true);       /* data came while spinning */
        spin_until = 0;
      }
      if (spin_until == 0) {
        budget = spin_budget(c);
        spin_until = now + budget;
      }
      if (now < spin_until && now < deadline) {
        if (c->spin_yield)
          sched_yield();
        continue;
      }
      if (budget > 0)
        spin_result(c, false);      /* ran out: sleep, spin less */
      budget = 0;
    }
    k = tcp_ms_until(deadline);
    if (k <= 0)
      return timed_out(c, ss, ns);
    /* Note [a node cut off] */
    if (c->cut_armed && __atomic_load_n(c->cut_armed, __ATOMIC_ACQUIRE)) {
      double now = pg__now();
      int err;

      if (now >= c->cut_next) {
        c->cut_next = now + PG__CUT_SLICE;
        if ((err = c->cut_ask(c->cut_arg)))
          return err;
      }
      if (k > (int)(PG__CUT_SLICE * 1000))
        k = (int)(PG__CUT_SLICE * 1000);
    }
    k = poll(c->pfd, (nfds_t)nfd, k);
    if (k < 0 && errno != EINTR)
      return pg__fail(-errno, "%s: poll: %s", c->opname, strerror(errno));
  }
}

/* One message each way between this rank and two peers (or one). */
int tcp_sendrecv(struct tcp_comm *c, int to, const struct frame *th,
                 const void *sbuf, int from, const struct frame *rh,
                 void *rbuf, double deadline)
{
  tcp_stream_buf(c, &c->ss[0], to, true, th, sbuf);
  tcp_stream_buf(c, &c->ss[1], from, false, rh, rbuf);
  return tcp_run(c, c->ss, 2, deadline);
}

int tcp_send1(struct tcp_comm *c, int to, const struct frame *h,
              const void *buf, double deadline)
{
  tcp_stream_buf(c, &c->ss[0], to, true, h, buf);
  return tcp_run(c, c->ss, 1, deadline);
}

int tcp_recv1(struct tcp_comm *c, int from, const struct frame *h,
              void *buf, double deadline)
{
  tcp_stream_buf(c, &c->ss[0], from, false, h, buf);
  return tcp_run(c, c->ss, 1, deadline);
}

