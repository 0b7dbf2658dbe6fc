/* tcp.c -- the TCP communicator: a full mesh of non-blocking sockets and
 * ring, recursive-doubling, tree and chain collectives driven by poll(). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "launch_env.h"
#include "pg_internal.h"

/* Messages of at most this many bytes take the latency-optimal algorithms
 * (log2(n) or one exchange of the whole buffer); larger ones the
 * bandwidth-optimal ring and chains. */
#define SMALL_BYTES (64 * 1024)
/* Rings and chains move segments of about this size, so a rank reduces or
 * forwards segment k while segment k+1 is still on the wire (Gloo: 1 MiB;
 * smaller stays in L2 while it is reduced and then sent on). */
#define SEG_BYTES (256 * 1024)
/* A chain-reduce rank holds this many partial segments not yet sent. */
#define CHAIN_SLOTS 4
/* Direct (all-to-all) gathers post 2(n-1) streams at once; above this many
 * ranks the ring is used whatever the size. */
#define DIRECT_MAX 16
/* Kernel socket buffers: room for several segments in flight each way. */
#define SOCK_BUF (4 * 1024 * 1024)
/* The scratch buffer is kept between operations up to this size. */
#define SCRATCH_KEEP (4 * 1024 * 1024)

#define FRAME_MAGIC 0x66746770u  /* "pgtf" */
#define HELLO_MAGIC 0x68746770u  /* "pgth" */
#define HELLO_VERSION 1

enum { FRAME_COLL = 1, FRAME_P2P = 2 };
enum {
  C_ALL_REDUCE = 1, C_BROADCAST, C_REDUCE, C_ALL_GATHER, C_REDUCE_SCATTER,
  C_BARRIER,
};

/* Every message is a frame: this header, then len bytes.  Collectives
 * carry their number and kind so ranks that disagree on what they are
 * doing get -EPROTO instead of garbage; p2p frames carry the tag. */
struct frame {
  uint32_t magic;
  uint16_t kind;
  uint16_t code;      /* collective | dtype << 4 | reduction << 8 */
  uint32_t seq;       /* collective: its number on this comm */
  int32_t tag;        /* p2p: the tag; collective: root or round */
  uint64_t len;
};
_Static_assert(sizeof(struct frame) == 24, "frame header is 24 bytes");

struct hello {
  uint32_t magic, version;
  uint64_t ns_hash;
  int32_t from, to, n, pad;
};

/* A p2p message that arrived before its recv. */
struct umsg {
  struct umsg *next;
  int tag;
  size_t len;
  char data[];
};

struct peer {
  int fd;               /* -1 for this rank */
  int rank;             /* global rank, for messages */
  struct frame in;      /* incoming header being read */
  size_t in_got;
  struct umsg *drain;   /* unexpected p2p body being read */
  size_t drain_got;
  struct umsg *qhead, *qtail;
};

struct stream;
/* Unit j of a stream: false while it depends on another stream. */
typedef bool (*unit_fn)(void *ctx, struct stream *s, size_t j, char **ptr,
                        size_t *len);
/* Unit j moved (rx: arrived; tx: handed to the kernel). */
typedef void (*done_fn)(void *ctx, struct stream *s, size_t j);

/* One message to or from one peer, in units. */
struct stream {
  struct peer *p;
  bool tx;
  bool drain_only;      /* queues the peer's p2p frames; never finishes */
  bool p2p;             /* rx: a p2p recv (match the tag) */
  struct frame h;       /* tx: the header to send; rx: the one expected */
  size_t hoff;          /* tx: header bytes sent */
  bool hdr;             /* rx: header matched */
  size_t nunits, j;
  char *buf;            /* single-unit streams (unit == NULL) */
  size_t buflen;
  char *ptr;            /* the current unit */
  size_t len, off;
  bool have;
  unit_fn unit;
  done_fn done;
  void *ctx;
  short want;           /* poll events awaited; 0: blocked on a unit */
  bool fin;
};

struct tcp_comm {
  struct pg__comm base;
  int n, me;
  struct peer *peers;
  uint32_t seq;
  int dead;             /* the error that poisoned the comm, or 0 */
  const char *opname;
  struct stream *ss;    /* [2n + 2] */
  struct pollfd *pfd;   /* [2n + 2] */
  char *scratch;
  size_t scratch_len;
};

/* ---- small helpers ------------------------------------------------------ */

static int wrap(int x, int n)
{
  x %= n;
  return x < 0 ? x + n : x;
}

static size_t min_sz(size_t a, size_t b)
{
  return a < b ? a : b;
}

static uint64_t fnv1a(const char *s)
{
  uint64_t h = 1469598103934665603ull;

  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* Chunk c of n over count elements, then segment k of nseg within it:
 * sizes differ by at most one element, so any count divides. */
static void seg_of(size_t count, int n, size_t nseg, int c, size_t k,
                   size_t *off, size_t *len)
{
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  size_t cs = (size_t)c * base + min_sz((size_t)c, rem);
  size_t cl = base + ((size_t)c < rem);
  size_t sb = cl / nseg, sr = cl % nseg;

  *off = cs + k * sb + min_sz(k, sr);
  *len = sb + (k < sr);
}

static size_t chunk_len(size_t count, int n, int c)
{
  return count / (size_t)n + ((size_t)c < count % (size_t)n);
}

/* Segments per chunk so that each is about SEG_BYTES. */
static size_t nseg_for(size_t chunk_bytes)
{
  size_t k = (chunk_bytes + SEG_BYTES - 1) / SEG_BYTES;

  return k ? k : 1;
}

static char *scratch(struct tcp_comm *c, size_t bytes)
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

static uint16_t code_of(int coll, pg_dtype t, pg_op op)
{
  return (uint16_t)(coll | (int)t << 4 | (int)op << 8);
}

static const char *coll_name(int code)
{
  static const char *const names[] = {
    "?", "all_reduce", "broadcast", "reduce", "all_gather",
    "reduce_scatter", "barrier",
  };
  int k = code & 15;

  return k <= C_BARRIER ? names[k] : "?";
}

static struct frame coll_frame(struct tcp_comm *c, uint16_t code, int tag,
                               size_t len)
{
  struct frame f;

  memset(&f, 0, sizeof f);
  f.magic = FRAME_MAGIC;
  f.kind = FRAME_COLL;
  f.code = code;
  f.seq = c->seq;
  f.tag = tag;
  f.len = len;
  return f;
}

/* ---- streams and the poll loop ------------------------------------------ */

static struct stream *stream_init(struct tcp_comm *c, struct stream *s,
                                  int peer, bool tx, const struct frame *h)
{
  memset(s, 0, sizeof *s);
  s->p = &c->peers[peer];
  s->tx = tx;
  s->h = *h;
  return s;
}

/* A one-buffer message. */
static void stream_buf(struct tcp_comm *c, struct stream *s, int peer,
                       bool tx, const struct frame *h, const void *buf)
{
  stream_init(c, s, peer, tx, h);
  s->buf = (char *)buf;
  s->buflen = (size_t)h->len;
  s->nunits = 1;
}

static void stream_units(struct tcp_comm *c, struct stream *s, int peer,
                         bool tx, const struct frame *h, size_t nunits,
                         unit_fn unit, done_fn done, void *ctx)
{
  stream_init(c, s, peer, tx, h);
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
    k = recv(p->fd, dst, need, MSG_DONTWAIT);
    if (k == 0)
      return peer_gone(c, p, 0, "receiving from");
    if (k < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        s->want = POLLIN;
        return 0;
      }
      return peer_gone(c, p, errno, "receiving from");
    }
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
                      coll_name(in->code));
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
                    coll_name(in->code), in->seq, in->code, in->tag,
                    (unsigned long long)in->len, coll_name(x->code),
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
    k = recv(p->fd, s->ptr + s->off, s->len - s->off, MSG_DONTWAIT);
    if (k == 0)
      return peer_gone(c, p, 0, "receiving from");
    if (k < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        s->want = POLLIN;
        return 0;
      }
      return peer_gone(c, p, errno, "receiving from");
    }
    s->off += (size_t)k;
    *moved = true;
  }
}

static int ms_until(double deadline)
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

/* Moves every stream until all but the drain-only ones are finished, the
 * deadline passes or a peer fails.  Never spins: waits in poll(). */
static int run(struct tcp_comm *c, struct stream *ss, int ns,
               double deadline)
{
  for (;;) {
    bool moved = true, busy = false;
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
    if (i == ns)
      return 0;
    if (!busy)          /* every stream waits on another: a bug here */
      return pg__fail(-EPROTO, "%s: internal error: no stream can move",
                      c->opname);
    k = ms_until(deadline);
    if (k <= 0)
      return timed_out(c, ss, ns);
    k = poll(c->pfd, (nfds_t)nfd, k);
    if (k < 0 && errno != EINTR)
      return pg__fail(-errno, "%s: poll: %s", c->opname, strerror(errno));
  }
}

/* One message each way between this rank and two peers (or one). */
static int sendrecv(struct tcp_comm *c, int to, const struct frame *th,
                    const void *sbuf, int from, const struct frame *rh,
                    void *rbuf, double deadline)
{
  stream_buf(c, &c->ss[0], to, true, th, sbuf);
  stream_buf(c, &c->ss[1], from, false, rh, rbuf);
  return run(c, c->ss, 2, deadline);
}

static int send1(struct tcp_comm *c, int to, const struct frame *h,
                 const void *buf, double deadline)
{
  stream_buf(c, &c->ss[0], to, true, h, buf);
  return run(c, c->ss, 1, deadline);
}

static int recv1(struct tcp_comm *c, int from, const struct frame *h,
                 void *buf, double deadline)
{
  stream_buf(c, &c->ss[0], from, false, h, buf);
  return run(c, c->ss, 1, deadline);
}

/* ---- rings ---------------------------------------------------------------
 * Step t sends chunk (me - t + shift) to the right and receives chunk
 * (me - t - 1 + shift) from the left: the one it sends at step t + 1.
 * Each step is cut into nseg segments, and segment k of step t goes out
 * as soon as segment k of step t - 1 has arrived (and been reduced), so
 * both directions of every link stay busy and reduction overlaps the
 * transfers.
 *
 *   all_reduce:     steps 0..n-2 reduce into dst, n-1..2n-3 copy; the owner
 *                   of a chunk computes its final value once (and divides
 *                   for AVG) and everyone else copies it: bitwise equal.
 *   all_gather:     steps 0..n-2 copy; own block placed first.
 *   reduce_scatter: shift -1, steps 0..n-2 reduce; partial blocks in two
 *                   buffers alternating by step, the last step into recv. */
enum ring_kind { RING_AR, RING_AG, RING_RS };

struct ring {
  enum ring_kind kind;
  pg_dtype t;
  pg_op op;
  size_t es;
  int n, me, shift, rsteps;
  size_t count;         /* elements over all n chunks */
  size_t nseg;
  const char *src;
  char *dst;            /* AR: the accumulator; AG: recv; RS: recv */
  char *part[2];        /* RS: partial blocks */
  char *tmp;            /* one segment */
  size_t rx_done, tx_done;
};

static void ring_unit(const struct ring *r, size_t j, bool rx, int *t,
                      int *chunk, size_t *off, size_t *len)
{
  size_t k = j % r->nseg;

  *t = (int)(j / r->nseg);
  *chunk = wrap(r->me - *t + r->shift - (rx ? 1 : 0), r->n);
  seg_of(r->count, r->n, r->nseg, *chunk, k, off, len);
}

static bool ring_tx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                         size_t *len)
{
  struct ring *r = ctx;
  size_t off, n;
  int t, chunk;

  (void)s;
  ring_unit(r, j, false, &t, &chunk, &off, &n);
  if (t > 0 && r->rx_done + r->nseg <= j)
    return false;
  *len = n * r->es;
  if (r->kind == RING_RS) {
    size_t rel = off - (size_t)chunk * (r->count / (size_t)r->n);

    *ptr = t == 0 ? (char *)r->src + off * r->es
                  : r->part[(t - 1) & 1] + rel * r->es;
  } else if (r->kind == RING_AR && t == 0) {
    *ptr = (char *)r->src + off * r->es;
  } else {
    *ptr = r->dst + off * r->es;
  }
  return true;
}

static void ring_tx_done(void *ctx, struct stream *s, size_t j)
{
  struct ring *r = ctx;

  (void)s;
  (void)j;
  r->tx_done++;
}

static bool ring_rx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                         size_t *len)
{
  struct ring *r = ctx;
  size_t off, n;
  int t, chunk;

  (void)s;
  ring_unit(r, j, true, &t, &chunk, &off, &n);
  /* RS: step t overwrites what step t - 1 sent from the same buffer. */
  if (r->kind == RING_RS && t >= 2 && r->tx_done + r->nseg <= j)
    return false;
  *len = n * r->es;
  *ptr = t < r->rsteps ? r->tmp : r->dst + off * r->es;
  return true;
}

static void ring_rx_done(void *ctx, struct stream *s, size_t j)
{
  struct ring *r = ctx;
  size_t off, n;
  int t, chunk;
  char *d;

  (void)s;
  ring_unit(r, j, true, &t, &chunk, &off, &n);
  if (t < r->rsteps) {
    if (r->kind == RING_RS) {
      size_t rel = off - (size_t)chunk * (r->count / (size_t)r->n);

      d = t == r->rsteps - 1 ? r->dst + rel * r->es
                             : r->part[t & 1] + rel * r->es;
      pg__reduce3(r->t, r->op, d, r->src + off * r->es, r->tmp, n);
    } else {
      d = r->dst + off * r->es;
      if (r->src == r->dst)
        pg__reduce(r->t, r->op, d, r->tmp, n);
      else
        pg__reduce3(r->t, r->op, d, r->src + off * r->es, r->tmp, n);
    }
    if (t == r->rsteps - 1 && r->op == PG_AVG)
      pg__avg_finish(r->t, d, n, r->n);
  }
  r->rx_done++;
}

static int ring_run(struct tcp_comm *c, struct ring *r, int steps,
                    uint16_t code, double deadline)
{
  int left = wrap(c->me - 1, c->n), right = wrap(c->me + 1, c->n);
  size_t txb = 0, rxb = 0, maxseg;
  struct frame th, rh;
  int t;

  r->n = c->n;
  r->me = c->me;
  r->es = pg_dtype_size(r->t);
  r->nseg = nseg_for(r->count / (size_t)r->n * r->es);
  maxseg = chunk_len(r->count, r->n, 0) / r->nseg + 1;
  r->tmp = scratch(c, maxseg * r->es);
  if (!r->tmp)
    return pg__fail(-ENOMEM, "%s: out of memory", c->opname);
  for (t = 0; t < steps; t++) {
    txb += chunk_len(r->count, r->n, wrap(r->me - t + r->shift, r->n));
    rxb += chunk_len(r->count, r->n, wrap(r->me - t + r->shift - 1, r->n));
  }
  th = coll_frame(c, code, 0, txb * r->es);
  rh = coll_frame(c, code, 0, rxb * r->es);
  stream_units(c, &c->ss[0], right, true, &th, (size_t)steps * r->nseg,
               ring_tx_unit, ring_tx_done, r);
  stream_units(c, &c->ss[1], left, false, &rh, (size_t)steps * r->nseg,
               ring_rx_unit, ring_rx_done, r);
  return run(c, c->ss, 2, deadline);
}

/* ---- chains: pipelined broadcast and reduce ------------------------------
 * Broadcast: root -> root+1 -> ... -> root-1; a rank forwards segment k
 * once it has it.  Reduce: root-1 -> root-2 -> ... -> root; each rank
 * combines segment k with its own and passes it on, from a small ring of
 * slots.  Each link carries the message once, whatever n. */
struct chain {
  pg_dtype t;
  pg_op op;
  size_t es, count, nseg;
  int vr, n;
  const char *src;
  char *dst;
  char *slots;          /* reduce: CHAIN_SLOTS segments */
  size_t slot_bytes;
  size_t rx_done, tx_done;
};

static void chain_seg(const struct chain *ch, size_t j, size_t *off,
                      size_t *len)
{
  seg_of(ch->count, 1, ch->nseg, 0, j, off, len);
}

static bool bc_tx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                       size_t *len)
{
  struct chain *ch = ctx;
  size_t off, n;

  (void)s;
  if (ch->vr > 0 && ch->rx_done <= j)
    return false;
  chain_seg(ch, j, &off, &n);
  *ptr = ch->dst + off * ch->es;
  *len = n * ch->es;
  return true;
}

static bool bc_rx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                       size_t *len)
{
  struct chain *ch = ctx;
  size_t off, n;

  (void)s;
  chain_seg(ch, j, &off, &n);
  *ptr = ch->dst + off * ch->es;
  *len = n * ch->es;
  return true;
}

static void chain_rx_done(void *ctx, struct stream *s, size_t j)
{
  struct chain *ch = ctx;

  (void)s;
  (void)j;
  ch->rx_done++;
}

static void chain_tx_done(void *ctx, struct stream *s, size_t j)
{
  struct chain *ch = ctx;

  (void)s;
  (void)j;
  ch->tx_done++;
}

static bool rd_tx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                       size_t *len)
{
  struct chain *ch = ctx;
  size_t off, n;

  (void)s;
  chain_seg(ch, j, &off, &n);
  *len = n * ch->es;
  if (ch->vr == ch->n - 1) {          /* the far end sends its own data */
    *ptr = (char *)ch->src + off * ch->es;
    return true;
  }
  if (ch->rx_done <= j)
    return false;
  *ptr = ch->slots + (j % CHAIN_SLOTS) * ch->slot_bytes;
  return true;
}

static bool rd_rx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                       size_t *len)
{
  struct chain *ch = ctx;
  size_t off, n;

  (void)s;
  if (ch->vr > 0 && ch->tx_done + CHAIN_SLOTS <= j)
    return false;       /* slot j still holds unit j - CHAIN_SLOTS */
  chain_seg(ch, j, &off, &n);
  *len = n * ch->es;
  *ptr = ch->slots + (ch->vr > 0 ? j % CHAIN_SLOTS : 0) * ch->slot_bytes;
  return true;
}

static void rd_rx_done(void *ctx, struct stream *s, size_t j)
{
  struct chain *ch = ctx;
  size_t off, n;
  char *d;

  (void)s;
  chain_seg(ch, j, &off, &n);
  if (ch->vr > 0) {
    pg__reduce(ch->t, ch->op, ch->slots + (j % CHAIN_SLOTS) * ch->slot_bytes,
               ch->src + off * ch->es, n);
  } else {
    d = ch->dst + off * ch->es;
    if (ch->src == ch->dst)
      pg__reduce(ch->t, ch->op, d, ch->slots, n);
    else
      pg__reduce3(ch->t, ch->op, d, ch->src + off * ch->es, ch->slots, n);
    if (ch->op == PG_AVG)
      pg__avg_finish(ch->t, d, n, ch->n);
  }
  ch->rx_done++;
}

/* ---- the operations ------------------------------------------------------ */

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
  char *tmp = scratch(c, bytes);

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
      err = send1(c, me + 1, &h, dst, deadline);
      vr = -1;
    } else {
      err = recv1(c, me - 1, &h, tmp, deadline);
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
      err = sendrecv(c, partner, &h, dst, partner, &h, tmp, deadline);
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
    return me % 2 ? send1(c, me - 1, &h, dst, deadline)
                  : recv1(c, me + 1, &h, dst, deadline);
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
  if (bytes <= SMALL_BYTES || count < (size_t)c->n)
    return end(c, ar_doubling(c, send, recv, count, t, op, deadline));
  memset(&r, 0, sizeof r);
  r.kind = RING_AR;
  r.t = t;
  r.op = op;
  r.count = count;
  r.rsteps = c->n - 1;
  r.src = send;
  r.dst = recv;
  return end(c, ring_run(c, &r, 2 * (c->n - 1),
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
      err = recv1(c, wrap(vr - mask + root, n), h, buf, deadline);
      if (err)
        return err;
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n)
      stream_buf(c, &c->ss[ns++], wrap(vr + mask + root, n), true, h, buf);
  return ns ? run(c, c->ss, ns, deadline) : 0;
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
    stream_units(c, &c->ss[ns++], wrap(c->me - 1, c->n), false, &h,
                 ch.nseg, bc_rx_unit, chain_rx_done, &ch);
  if (ch.vr < c->n - 1)
    stream_units(c, &c->ss[ns++], wrap(c->me + 1, c->n), true, &h,
                 ch.nseg, bc_tx_unit, chain_tx_done, &ch);
  return end(c, run(c, c->ss, ns, deadline));
}

/* Binomial tree toward the root; acc holds this rank's partial. */
static int reduce_tree(struct tcp_comm *c, const void *send, void *recv,
                       size_t count, pg_dtype t, pg_op op, int root,
                       double deadline)
{
  size_t bytes = count * pg_dtype_size(t);
  struct frame h = coll_frame(c, code_of(C_REDUCE, t, op), root, bytes);
  int n = c->n, vr = wrap(c->me - root, n), mask, err;
  char *acc, *tmp = scratch(c, 2 * bytes);

  if (!tmp)
    return pg__fail(-ENOMEM, "%s: out of memory", c->opname);
  acc = vr == 0 ? recv : tmp + bytes;
  if (acc != send)
    memcpy(acc, send, bytes);
  for (mask = 1; mask < n; mask <<= 1) {
    if (vr & mask)
      return send1(c, wrap(vr - mask + root, n), &h, acc, deadline);
    if (vr + mask < n) {
      err = recv1(c, wrap(vr + mask + root, n), &h, tmp, deadline);
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
  ch.slots = scratch(c, CHAIN_SLOTS * ch.slot_bytes);
  if (!ch.slots)
    return end(c, pg__fail(-ENOMEM, "%s: out of memory", c->opname));
  h = coll_frame(c, code_of(C_REDUCE, t, op), root, bytes);
  if (ch.vr < c->n - 1)
    stream_units(c, &c->ss[ns++], wrap(c->me + 1, c->n), false, &h,
                 ch.nseg, rd_rx_unit, rd_rx_done, &ch);
  if (ch.vr > 0)
    stream_units(c, &c->ss[ns++], wrap(c->me - 1, c->n), true, &h,
                 ch.nseg, rd_tx_unit, chain_tx_done, &ch);
  return end(c, run(c, c->ss, ns, deadline));
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
      stream_buf(c, &c->ss[ns++], i, true, &h, mine);
      stream_buf(c, &c->ss[ns++], i, false, &h, out + (size_t)i * blk);
    }
    return end(c, run(c, c->ss, ns, deadline));
  }
  memset(&r, 0, sizeof r);
  r.kind = RING_AG;
  r.t = t;
  r.count = count * (size_t)c->n;
  r.rsteps = 0;
  r.dst = recv;
  return end(c, ring_run(c, &r, c->n - 1, code, deadline));
}

/* Direct reduce-scatter: block b goes straight to rank b, which folds the
 * n contributions in rank order. */
static int rs_direct(struct tcp_comm *c, const char *send, char *recv,
                     size_t count, pg_dtype t, pg_op op, double deadline)
{
  size_t blk = count * pg_dtype_size(t);
  struct frame h = coll_frame(c, code_of(C_REDUCE_SCATTER, t, op), 0, blk);
  char *tmp = scratch(c, blk * (size_t)c->n);
  int i, ns = 0, err;

  if (!tmp)
    return pg__fail(-ENOMEM, "%s: out of memory", c->opname);
  for (i = 0; i < c->n; i++) {
    if (i == c->me)
      continue;
    stream_buf(c, &c->ss[ns++], i, true, &h, send + (size_t)i * blk);
    stream_buf(c, &c->ss[ns++], i, false, &h, tmp + (size_t)i * blk);
  }
  err = run(c, c->ss, ns, deadline);
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
  err = ring_run(c, &r, c->n - 1, code_of(C_REDUCE_SCATTER, t, op),
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
    err = sendrecv(c, wrap(c->me + k, c->n), &h, NULL,
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
  stream_buf(c, &c->ss[0], peer, true, &h, buf);
  /* Meanwhile queue what any peer sends this rank, so ranks sending each
   * other large messages (in a pair or a cycle) do not wait on each
   * other. */
  for (i = 0; i < c->n; i++) {
    if (i == c->me)
      continue;
    stream_init(c, &c->ss[ns], i, false, &h);
    c->ss[ns++].drain_only = true;
  }
  return end(c, run(c, c->ss, ns, deadline));
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
  stream_buf(c, &c->ss[0], peer, false, &h, buf);
  c->ss[0].p2p = true;
  return end(c, run(c, c->ss, 1, deadline));
}

static void tcp_destroy(struct pg__comm *base)
{
  struct tcp_comm *c = (struct tcp_comm *)base;
  int i;

  if (!c)
    return;
  for (i = 0; c->peers && i < c->n; i++) {
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

/* ---- setup: endpoints through the store, then the mesh ------------------ */

static int numeric_host(const struct sockaddr *sa, socklen_t len, char *host,
                        size_t hostlen)
{
  return getnameinfo(sa, len, host, (socklen_t)hostlen, NULL, 0,
                     NI_NUMERICHOST) ? -1 : 0;
}

/* The address other hosts reach this one by: the source address of a
 * route to MASTER_ADDR (a UDP connect sends nothing), else the hostname's
 * first address, else loopback.  Sockets listen on every address. */
static int my_address(char *host, size_t hostlen, int *family)
{
  char mbuf[256];
  /* Set by cdrun, else derived from srun's or mpirun's environment. */
  const char *m = pg__launch_env("MASTER_ADDR", mbuf, sizeof mbuf);
  struct addrinfo hints, *ai = NULL, *a;
  char name[256];

  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_DGRAM;
  if (m && *m && getaddrinfo(m, "9", &hints, &ai) == 0) {
    for (a = ai; a; a = a->ai_next) {
      struct sockaddr_storage ss;
      socklen_t sl = sizeof ss;
      int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      bool ok = fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
                numeric_host((struct sockaddr *)&ss, sl, host,
                             hostlen) == 0;

      if (fd >= 0)
        close(fd);
      if (ok) {
        *family = ss.ss_family;
        freeaddrinfo(ai);
        return 0;
      }
    }
    freeaddrinfo(ai);
  }
  hints.ai_socktype = SOCK_STREAM;
  name[sizeof name - 1] = '\0';
  if (gethostname(name, sizeof name - 1) == 0 &&
      getaddrinfo(name, NULL, &hints, &ai) == 0) {
    bool ok = numeric_host(ai->ai_addr, ai->ai_addrlen, host, hostlen) == 0;

    *family = ai->ai_family;
    freeaddrinfo(ai);
    if (ok)
      return 0;
  }
  snprintf(host, hostlen, "127.0.0.1");
  *family = AF_INET;
  return 0;
}

static long sysctl_long(const char *path)
{
  char buf[64];
  long v = 0;
  FILE *f = fopen(path, "re");

  if (f) {
    if (fgets(buf, sizeof buf, f))
      v = strtol(buf, NULL, 10);
    fclose(f);
  }
  return v;
}

/* SOCK_BUF if the kernel grants it, else 0.  A fixed size switches
 * autotuning off, and one capped by a small net.core.[rw]mem_max would be
 * worse than autotuning on a long link. */
static int sock_buf(void)
{
  if (sysctl_long("/proc/sys/net/core/wmem_max") >= SOCK_BUF &&
      sysctl_long("/proc/sys/net/core/rmem_max") >= SOCK_BUF)
    return SOCK_BUF;
  return 0;
}

/* Before connect/listen, so that the window scale covers the buffers. */
static void tune(int fd, int bufsz)
{
  int one = 1;

  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (bufsz) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof bufsz);
  }
}

static int listen_any(int family, int bufsz, int *port)
{
  struct sockaddr_storage ss;
  socklen_t sl;
  int fd, zero = 0, one = 1;

  memset(&ss, 0, sizeof ss);
  if (family == AF_INET6) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

    s6->sin6_family = AF_INET6;
    s6->sin6_addr = in6addr_any;
    sl = sizeof *s6;
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

    family = AF_INET;
    s4->sin_family = AF_INET;
    s4->sin_addr.s_addr = htonl(INADDR_ANY);
    sl = sizeof *s4;
  }
  fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -errno;
  if (family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  tune(fd, bufsz);
  if (bind(fd, (struct sockaddr *)&ss, sl) < 0 ||
      listen(fd, SOMAXCONN) < 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
    int err = -errno;

    close(fd);
    return err;
  }
  *port = ntohs(family == AF_INET6
                ? ((struct sockaddr_in6 *)&ss)->sin6_port
                : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

/* Blocking-style full read or write on a non-blocking socket. */
static int io_full(int fd, void *buf, size_t len, bool wr, double deadline)
{
  char *p = buf;

  while (len) {
    struct pollfd pf = { fd, wr ? POLLOUT : POLLIN, 0 };
    ssize_t k = wr ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                   : recv(fd, p, len, MSG_DONTWAIT);
    int ms;

    if (k > 0) {
      p += k;
      len -= (size_t)k;
      continue;
    }
    if (k == 0)
      return -ECONNRESET;
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return -errno;
    ms = ms_until(deadline);
    if (ms <= 0)
      return -ETIMEDOUT;
    if (poll(&pf, 1, ms) < 0 && errno != EINTR)
      return -errno;
  }
  return 0;
}

/* "host port" -> connected non-blocking socket, retrying refusals until
 * the deadline. */
static int connect_to(const char *ep, int bufsz, double deadline)
{
  char host[256];
  const char *sp = strrchr(ep, ' ');
  struct addrinfo hints, *ai;
  char *end;
  long port;
  int fd, err;

  if (!sp || (size_t)(sp - ep) >= sizeof host)
    return -EPROTO;
  memcpy(host, ep, (size_t)(sp - ep));
  host[sp - ep] = '\0';
  errno = 0;
  port = strtol(sp + 1, &end, 10);
  if (errno || *end || port < 1 || port > 65535)
    return -EPROTO;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  if (getaddrinfo(host, sp + 1, &hints, &ai))
    return -EPROTO;
  for (;;) {
    struct pollfd pf;
    socklen_t sl = sizeof err;

    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                0);
    if (fd < 0) {
      err = -errno;
      break;
    }
    tune(fd, bufsz);
    err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
      err = errno == EINPROGRESS ? 0 : -errno;
      pf.fd = fd;
      pf.events = POLLOUT;
      while (err == 0) {
        int k = poll(&pf, 1, ms_until(deadline));

        if (k > 0) {
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl);
          err = -err;
          break;
        }
        if (k == 0)
          err = -ETIMEDOUT;
        else if (errno != EINTR)
          err = -errno;
      }
    }
    if (err == 0)
      break;
    close(fd);
    fd = -1;
    if (err != -ECONNREFUSED || ms_until(deadline) <= 0)
      break;
    poll(NULL, 0, 20);  /* a listener not there yet: try again */
  }
  freeaddrinfo(ai);
  return fd >= 0 ? fd : err;
}

static void hello_init(struct hello *h, uint64_t hash, int from, int to,
                       int n)
{
  memset(h, 0, sizeof *h);
  h->magic = HELLO_MAGIC;
  h->version = HELLO_VERSION;
  h->ns_hash = hash;
  h->from = from;
  h->to = to;
  h->n = n;
}

static bool hello_ok(const struct hello *h, uint64_t hash, int to, int n)
{
  return h->magic == HELLO_MAGIC && h->version == HELLO_VERSION &&
         h->ns_hash == hash && h->to == to && h->n == n && h->from >= 0 &&
         h->from < n;
}

/* Lower ranks listen, higher ranks connect to every lower one; each side
 * proves it belongs to this comm (magic, namespace hash, ranks), so a
 * stray connection to the port is dropped. */
static int mesh(struct tcp_comm *c, int lfd, char **eps, uint64_t hash,
                int bufsz, double deadline)
{
  struct hello h, in;
  int j, got = 0, err;

  for (j = 0; j < c->me; j++) {
    int fd = connect_to(eps[j], bufsz, deadline);

    if (fd < 0)
      return pg__fail(fd, "tcp setup: cannot connect to rank %d at %s: "
                      "%s", c->peers[j].rank, eps[j], pg_strerror(fd));
    c->peers[j].fd = fd;
    hello_init(&h, hash, c->me, j, c->n);
    err = io_full(fd, &h, sizeof h, true, deadline);
    if (!err)
      err = io_full(fd, &in, sizeof in, false, deadline);
    if (!err && (!hello_ok(&in, hash, c->me, c->n) || in.from != j))
      err = -EPROTO;
    if (err)
      return pg__fail(err, "tcp setup: no handshake with rank %d at %s: "
                      "%s", c->peers[j].rank, eps[j], pg_strerror(err));
  }
  while (got < c->n - 1 - c->me) {
    struct pollfd pf = { lfd, POLLIN, 0 };
    double until;
    int fd, ms = ms_until(deadline);

    if (ms <= 0)
      return pg__fail(-ETIMEDOUT, "tcp setup: %d of %d higher ranks "
                      "connected before the timeout", got,
                      c->n - 1 - c->me);
    if (poll(&pf, 1, ms) <= 0)
      continue;
    fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      continue;
    until = pg__now() + 5.0;    /* a silent stray must not stall setup */
    if (until > deadline)
      until = deadline;
    err = io_full(fd, &in, sizeof in, false, until);
    if (err || !hello_ok(&in, hash, c->me, c->n) || in.from <= c->me ||
        c->peers[in.from].fd >= 0) {
      close(fd);
      continue;
    }
    hello_init(&h, hash, c->me, in.from, c->n);
    if (io_full(fd, &h, sizeof h, true, deadline)) {
      close(fd);
      continue;
    }
    c->peers[in.from].fd = fd;
    got++;
  }
  return 0;
}

static int publish(const struct pg__setup *s, const char *val, char **eps)
{
  char key[32];
  char **keys = calloc((size_t)s->n, sizeof *keys);
  size_t *lens = calloc((size_t)s->n, sizeof *lens);
  void **vals = calloc((size_t)s->n, sizeof *vals);
  int i, err = -ENOMEM;

  if (!keys || !lens || !vals)
    goto out;
  for (i = 0; i < s->n; i++) {
    keys[i] = malloc(32);
    if (!keys[i])
      goto out;
    snprintf(keys[i], 32, "ep/%d", i);
  }
  snprintf(key, sizeof key, "ep/%d", s->me);
  err = pg__store_exchange(s->store, s->ns, key, val, strlen(val),
                           (const char *const *)keys, s->n, s->timeout,
                           vals, lens);
  for (i = 0; err == 0 && i < s->n; i++) {
    eps[i] = malloc(lens[i] + 1);
    if (!eps[i]) {
      err = -ENOMEM;
      break;
    }
    memcpy(eps[i], vals[i], lens[i]);
    eps[i][lens[i]] = '\0';
  }
out:
  for (i = 0; i < s->n; i++) {
    if (keys)
      free(keys[i]);
    if (vals)
      free(vals[i]);
  }
  free(keys);
  free(lens);
  free(vals);
  return err;
}

int pg__tcp_create(const struct pg__setup *s, struct pg__comm **out)
{
  double deadline = pg__now() + s->timeout;
  struct tcp_comm *c = calloc(1, sizeof *c);
  char **eps = calloc((size_t)s->n, sizeof *eps);
  char host[NI_MAXHOST], ep[NI_MAXHOST + 16];
  int i, err, lfd = -1, port = 0, family, bufsz = sock_buf();

  *out = NULL;
  if (!c || !eps)
    goto nomem;
  c->base.ops = &tcp_ops;
  c->n = s->n;
  c->me = s->me;
  c->opname = "tcp setup";
  c->peers = calloc((size_t)s->n, sizeof *c->peers);
  c->ss = calloc(2 * (size_t)s->n + 2, sizeof *c->ss);
  c->pfd = calloc(2 * (size_t)s->n + 2, sizeof *c->pfd);
  if (!c->peers || !c->ss || !c->pfd)
    goto nomem;
  for (i = 0; i < s->n; i++) {
    c->peers[i].fd = -1;
    c->peers[i].rank = s->ranks[i];
  }
  if (s->n > 1) {
    my_address(host, sizeof host, &family);
    lfd = listen_any(family, bufsz, &port);
    if (lfd < 0) {
      err = pg__fail(lfd, "tcp setup: cannot listen: %s",
                     strerror(-lfd));
      goto fail;
    }
    snprintf(ep, sizeof ep, "%s %d", host, port);
    err = publish(s, ep, eps);
    if (err)
      goto fail;
    err = mesh(c, lfd, eps, fnv1a(s->ns), bufsz, deadline);
    if (err)
      goto fail;
    close(lfd);
  }
  for (i = 0; i < s->n; i++)
    free(eps[i]);
  free(eps);
  *out = &c->base;
  return 0;
nomem:
  err = pg__fail(-ENOMEM, "tcp setup: out of memory");
fail:
  if (lfd >= 0)
    close(lfd);
  for (i = 0; eps && i < s->n; i++)
    free(eps[i]);
  free(eps);
  tcp_destroy(c ? &c->base : NULL);
  return err;
}
