/* hier_p2p.c -- point-to-point between ranks of a hierarchical comm that
 * live on different hosts, over connections made on first use.
 *
 * Note [lazy p2p]: a full mesh over every rank is what the hierarchical
 * comm must not have (8,000 sockets a rank at 1,000 hosts x 8), so a pair
 * of ranks on different hosts gets a connection only when one sends to
 * the other, and each direction its own: the sender connects to the
 * receiver's listener (its endpoint read from the store once, published
 * at creation) and opens with a hello (magic, namespace hash, positions,
 * and a one-way proof of the job token over a fresh nonce: Note [mesh
 * hello] in tcp_internal.h);
 * the receiver accepts whenever it next does point-to-point (a recv, or a
 * send, which also drains what others send it) and drops what does not
 * prove itself within STRAY_S.  So nobody agrees on who connects (the
 * sender always does), nobody waits for the other side to be in an
 * operation (the kernel completes the connection into the backlog and
 * buffers the first bytes), and sends stay eager as on the flat TCP comm:
 * an exchange or a cycle of sends before receives does not deadlock.  The
 * messages are tcp_stream.c's p2p frames, moved by its poll loop: peers[q]
 * is the socket this rank sends q on, peers[n + q] the one q sends it on.
 * A blocked send wakes every SLICE_S to accept connections that arrived
 * meanwhile (the poll loop knows no listener). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hier_p2p.h"
#include "tcp_internal.h"
#include "tcp_setup.h"

#define STRAY_S 5.0
#define SLICE_S 0.005
#define PEND_MAX 64
/* A receive waiting for a connection asks the setup's watch this often
 * (live mode: the peer may be recovering, and will never connect). */
#define WATCH_MS 50
#define CONNECT_SLICE_S 1.0

struct pending {
  int fd;
  size_t got;
  struct hello in;
  double until;
};

struct hier_p2p {
  struct tcp_comm c;    /* peers[2n]: [q] to q, [n + q] from q */
  int n, me;
  int lfd, bufsz;
  uint64_t hash;
  const struct pg__token *token;
  pg_store *store;
  char *ns;
  int (*watch)(void *arg);      /* struct pg__setup's */
  void *watch_arg;
  struct pending pend[PEND_MAX];
  int npend;
};

static void drop_pending(struct hier_p2p *p, int i)
{
  close(p->pend[i].fd);
  p->pend[i] = p->pend[--p->npend];
}

/* Accepts what is waiting and reads the hellos that have arrived; never
 * blocks. */
static void accept_ready(struct hier_p2p *p)
{
  double now = pg__now();
  int fd, i;

  while ((fd = accept4(p->lfd, NULL, NULL,
                       SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
    if (p->npend == PEND_MAX)
      drop_pending(p, 0);
    memset(&p->pend[p->npend], 0, sizeof p->pend[0]);
    p->pend[p->npend].fd = fd;
    p->pend[p->npend++].until = now + STRAY_S;
  }
  for (i = 0; i < p->npend; i++) {
    struct pending *q = &p->pend[i];
    ssize_t k = recv(q->fd, (char *)&q->in + q->got, sizeof q->in - q->got,
                     MSG_DONTWAIT);
    int from;

    if (k > 0)
      q->got += (size_t)k;
    if (q->got < sizeof q->in) {
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                     errno != EINTR) || now > q->until)
        drop_pending(p, i--);
      continue;
    }
    from = q->in.from;
    if (!tcp_hello_ok(&q->in, p->hash, p->me, p->n) || from == p->me ||
        !tcp_hello_signed(p->token, &q->in) ||
        p->c.peers[p->n + from].fd >= 0) {
      drop_pending(p, i--);
      continue;
    }
    p->c.peers[p->n + from].fd = q->fd;
    p->pend[i--] = p->pend[--p->npend];
  }
}

int pg__hier_p2p_create(const struct pg__setup *s, struct hier_p2p **out)
{
  static const struct pg__token no_token;
  struct hier_p2p *p = calloc(1, sizeof *p);
  char ep[1100], key[4200];
  int i, err;

  *out = NULL;
  if (!p)
    return pg__fail(-ENOMEM, "hier setup: out of memory");
  p->n = s->n;
  p->me = s->me;
  p->lfd = -1;
  p->store = s->store;
  p->watch = s->watch;
  p->watch_arg = s->watch_arg;
  p->token = s->token ? s->token : &no_token;
  snprintf(key, sizeof key, "%sp2p/", s->ns);
  p->ns = strdup(key);
  p->hash = tcp_fnv1a(key);
  p->c.opname = "send";
  p->c.me = s->me;
  p->c.n = s->n;
  p->c.peers = calloc(2 * (size_t)s->n, sizeof *p->c.peers);
  p->c.ss = calloc((size_t)s->n + 2, sizeof *p->c.ss);
  p->c.pfd = calloc((size_t)s->n + 2, sizeof *p->c.pfd);
  if (!p->ns || !p->c.peers || !p->c.ss || !p->c.pfd) {
    pg__hier_p2p_destroy(p);
    return pg__fail(-ENOMEM, "hier setup: out of memory");
  }
  for (i = 0; i < 2 * s->n; i++) {
    p->c.peers[i].fd = -1;
    p->c.peers[i].rank = s->ranks[i % s->n];
  }
  p->lfd = tcp_listen_ep(s->master_addr, ep, sizeof ep, &p->bufsz);
  if (p->lfd < 0) {
    err = p->lfd;
    p->lfd = -1;
    pg__hier_p2p_destroy(p);
    return err;
  }
  snprintf(key, sizeof key, "%sep/%d", p->ns, s->me);
  err = pg_store_set(s->store, key, ep, strlen(ep));
  if (err) {
    pg__hier_p2p_destroy(p);
    return pg__fail(err, "hier setup: cannot publish '%s': %s", key,
                    pg_strerror(err));
  }
  *out = p;
  return 0;
}

/* The socket to send q on, connected now if it is not yet. */
static int connect_peer(struct hier_p2p *p, int q, double deadline)
{
  char key[4200], *ep;
  void *v = NULL;
  size_t len = 0;
  struct hello h;
  double left = deadline - pg__now();
  int fd, err;

  if (p->c.peers[q].fd >= 0)
    return 0;
  snprintf(key, sizeof key, "%sep/%d", p->ns, q);
  err = pg_store_get(p->store, key, left > 0 ? left : 0, &v, &len);
  if (err)
    return pg__fail(err, "send: no endpoint of rank %d in the store "
                    "('%s'): %s", p->c.peers[q].rank, key,
                    pg_strerror(err));
  ep = malloc(len + 1);
  if (!ep) {
    free(v);
    return pg__fail(-ENOMEM, "send: out of memory");
  }
  memcpy(ep, v, len);
  ep[len] = '\0';
  free(v);
  /* A refusal is retried until the deadline; with a watch, that is asked
   * between slices of CONNECT_SLICE_S (the peer may be recovering: its
   * listener is closed).  A slice is as long as the kernel's first SYN
   * retry, so cutting a slow connect short and starting again costs it
   * nothing. */
  for (;;) {
    double until = pg__now() + CONNECT_SLICE_S;
    bool sliced = p->watch && until < deadline;

    fd = tcp_connect_ep(ep, p->bufsz, sliced ? until : deadline);
    if (fd >= 0 || !sliced || (fd != -ECONNREFUSED && fd != -ETIMEDOUT) ||
        (fd = p->watch(p->watch_arg)) != 0)
      break;
  }
  err = fd < 0 ? fd : 0;
  if (!err) {
    tcp_hello_init(&h, p->hash, p->me, q, p->n);
    tcp_hello_sign(p->token, &h);
    err = tcp_io_full(fd, &h, sizeof h, true, deadline);
    if (err)
      close(fd);
  }
  if (err) {
    err = pg__fail(err, "send: cannot connect to rank %d at %s: %s",
                   p->c.peers[q].rank, ep, err == PG_ERR_PEER_LOST
                   ? pg_last_error() : pg_strerror(err));
    free(ep);
    return err;
  }
  free(ep);
  p->c.peers[q].fd = fd;
  return 0;
}

static int bad_peer(struct hier_p2p *p, const char *op, int q)
{
  return pg__fail(-EINVAL, "%s: peer %d is not a rank on another host",
                  op, q);
}

static struct frame p2p_frame(int tag, size_t bytes)
{
  struct frame h;

  memset(&h, 0, sizeof h);
  h.magic = FRAME_MAGIC;
  h.kind = FRAME_P2P;
  h.tag = tag;
  h.len = bytes;
  return h;
}

/* After an error a stream is out of step: every later op fails. */
static int fail(struct hier_p2p *p, int err)
{
  if (err && !p->c.dead)
    p->c.dead = err;
  return err;
}

static int dead(struct hier_p2p *p, const char *op)
{
  return pg__fail(PG_EPEERFAIL, "%s: point-to-point across hosts failed "
                  "earlier (%s)", op, pg_err_name(p->c.dead));
}

int pg__hier_p2p_send(struct hier_p2p *p, const void *buf, size_t bytes,
                      int q, int tag, double deadline)
{
  struct frame h = p2p_frame(tag, bytes);
  int err, i, ns;

  p->c.opname = "send";
  if (p->c.dead)
    return dead(p, "send");
  if (q < 0 || q >= p->n || q == p->me)
    return bad_peer(p, "send", q);
  err = connect_peer(p, q, deadline);
  if (err)
    return fail(p, err);
  tcp_stream_buf(&p->c, &p->c.ss[0], q, true, &h, buf);
  for (;;) {
    double until = pg__now() + SLICE_S;

    /* Queue what the others send this rank meanwhile (as the flat comm
     * does), on the connections there are so far. */
    accept_ready(p);
    ns = 1;
    for (i = 0; i < p->n; i++) {
      if (p->c.peers[p->n + i].fd < 0)
        continue;
      tcp_stream_init(&p->c, &p->c.ss[ns], p->n + i, false, &h);
      p->c.ss[ns++].drain_only = true;
    }
    err = tcp_run(&p->c, p->c.ss, ns, until < deadline ? until : deadline);
    if (err != -ETIMEDOUT || pg__now() >= deadline)
      return fail(p, err);
  }
}

int pg__hier_p2p_recv(struct hier_p2p *p, void *buf, size_t bytes, int q,
                      int tag, double deadline)
{
  struct frame h = p2p_frame(tag, bytes);
  int ms;

  p->c.opname = "recv";
  if (p->c.dead)
    return dead(p, "recv");
  if (q < 0 || q >= p->n || q == p->me)
    return bad_peer(p, "recv", q);
  for (;;) {
    struct pollfd pf[PEND_MAX + 1];
    int i, np = 0;

    accept_ready(p);
    if (p->c.peers[p->n + q].fd >= 0)
      break;
    ms = tcp_ms_until(deadline);
    if (ms <= 0)
      return fail(p, pg__fail(-ETIMEDOUT, "recv (tag %d): timed out "
                              "waiting for rank %d (it never connected to "
                              "send to this rank)", tag,
                              p->c.peers[q].rank));
    pf[np].fd = p->lfd;
    pf[np++].events = POLLIN;
    for (i = 0; i < p->npend; i++) {
      pf[np].fd = p->pend[i].fd;
      pf[np++].events = POLLIN;
    }
    if (p->npend && ms > (int)(STRAY_S * 1000))
      ms = (int)(STRAY_S * 1000);
    if (p->watch && ms > WATCH_MS)
      ms = WATCH_MS;
    if (poll(pf, (nfds_t)np, ms) == 0 && p->watch) {
      int err = p->watch(p->watch_arg);

      if (err)
        return fail(p, err);
    }
  }
  tcp_stream_buf(&p->c, &p->c.ss[0], p->n + q, false, &h, buf);
  p->c.ss[0].p2p = true;
  return fail(p, tcp_run(&p->c, p->c.ss, 1, deadline));
}

void pg__hier_p2p_destroy(struct hier_p2p *p)
{
  int i;

  if (!p)
    return;
  tcp_comm_release(&p->c, 2 * p->n);
  for (i = 0; i < p->npend; i++)
    close(p->pend[i].fd);
  if (p->lfd >= 0)
    close(p->lfd);
  free(p->ns);
  free(p);
}
