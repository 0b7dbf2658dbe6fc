/* hier_p2p.c -- point-to-point between ranks of a hierarchical comm that
 * live on different hosts, over connections made on first use.
 *
 * Note [lazy p2p]: a full mesh over every rank is what the hierarchical
 * comm must not have (8,000 sockets a rank at 1,000 hosts x 8), so a pair
 * of ranks on different hosts gets a connection only when one sends to
 * the other, and each direction its own: the sender connects to the
 * receiver's listener (its endpoint read from the store once, published
 * at creation).  The receiver, when it accepts, sends a fresh 32-byte
 * challenge; the sender answers with its hello (magic, namespace hash,
 * positions, and a proof of the job token over its nonce and the
 * challenge: Note [mesh hello] in tcp_internal.h), and the receiver
 * answers one byte once it took the connection.  Only then does the
 * sender send frames on it, so a connection that a flood displaced
 * before its hello was answered (Note [admission under a flood] in
 * admit.c) loses nothing: the sender connects again, within its
 * operation's deadline.  A captured hello proves nothing on another
 * connection (the challenge).
 * The receiver's acceptor, a thread of its own, accepts, challenges and
 * takes connections whatever the rank is doing (Note [p2p acceptor]), and
 * drops what does not prove itself within HELLO_S.  So nobody agrees on
 * who connects (the sender always does), and an exchange or a cycle of
 * sends before receives does not deadlock, even with a rank blocked
 * elsewhere (a shared-memory send to a peer that is itself waiting for
 * this rank's message).  The messages are tcp_stream.c's p2p frames,
 * moved by its poll loop: peers[q] is the socket this rank sends q on,
 * peers[n + q] the one q sends it on; a blocked send or recv collects,
 * every SLICE_S, the connections the acceptor took meanwhile.
 *
 * Note [p2p acceptor]: the challenge needs the receiver's answer before
 * the sender's first frame, and a receiver that answered only from its
 * own point-to-point calls deadlocked programs that are fine on every
 * other transport: rank 2 connecting to rank 1 waits for rank 1, blocked
 * in a shared-memory send to rank 0, which waits for rank 3's message,
 * while rank 3 waits in a shared-memory send to rank 2.  The acceptor
 * owns the listener and the pending table; what it took it publishes in
 * arrived[q] (an atomic store, from -1 to the socket, once) and tells
 * through wake_fd; the rank's thread moves it into peers[n + q]. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admit.h"
#include "hier_p2p.h"
#include "tcp_internal.h"
#include "tcp_setup.h"

#define HELLO_S 2.0       /* an accepted connection proves itself */
#define SLICE_S 0.005
#define PEND_MAX 64
/* A receive waiting for a connection asks the setup's watch this often
 * (live mode: the peer may be recovering, and will never connect). */
#define WATCH_MS 50
#define CONNECT_SLICE_S 1.0
#define RETRY_MIN_S 0.005  /* a sender displaced connects again */
#define RETRY_MAX_S 0.2
#define P2P_TOOK 0x5a      /* the receiver's answer: connection taken */

struct pending {
  int fd;
  size_t got;
  struct hello in;
  uint8_t challenge[PG_NONCE_BYTES];
  struct pg__unproven u;
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
  /* The acceptor's (Note [p2p acceptor]). */
  struct pending pend[PEND_MAX];
  int npend;
  int *arrived;                 /* [n]: taken from q, -1: not yet */
  int wake_fd, stop_fd;         /* eventfds: something arrived; stop */
  pthread_t acceptor;
  bool acceptor_on;
};

static void drop_pending(struct hier_p2p *p, int i)
{
  close(p->pend[i].fd);
  p->pend[i] = p->pend[--p->npend];
}

/* Reads what arrived of q's hello: 1 it is whole, 0 not yet, -1 drop it
 * (closed, or past its deadline). */
static int read_hello(struct pending *q, double now)
{
  ssize_t k = recv(q->fd, (char *)&q->in + q->got, sizeof q->in - q->got,
                   MSG_DONTWAIT);

  if (k > 0)
    q->got += (size_t)k;
  if (q->got == sizeof q->in)
    return 1;
  if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                 errno != EINTR) || now >= q->u.until)
    return -1;
  return 0;
}

/* q's whole hello: takes its connection as the one its sender sends
 * this rank on, and answers; false: drop it. */
static bool take_hello(struct hier_p2p *p, struct pending *q)
{
  static const uint8_t took = P2P_TOOK;
  int from = q->in.from;

  if (!tcp_hello_ok(&q->in, p->hash, p->me, p->n) || from == p->me ||
      !tcp_hello_signed(p->token, &q->in, q->challenge) ||
      __atomic_load_n(&p->arrived[from], __ATOMIC_ACQUIRE) >= 0)
    return false;
  /* One byte on a fresh socket always fits its buffer. */
  if (send(q->fd, &took, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
    return false;
  __atomic_store_n(&p->arrived[from], q->fd, __ATOMIC_RELEASE);
  (void)!eventfd_write(p->wake_fd, 1);
  return true;
}

/* Accepts one waiting connection into a slot (Note [admission under a
 * flood]) and sends it its challenge; false: none waits. */
static bool accept_one(struct hier_p2p *p, double now)
{
  struct sockaddr_storage sa;
  socklen_t sl = sizeof sa;
  struct pending *q;
  int fd = accept4(p->lfd, (struct sockaddr *)&sa, &sl,
                   SOCK_CLOEXEC | SOCK_NONBLOCK);

  if (fd < 0)
    return false;
  if (p->npend == PEND_MAX)
    drop_pending(p, pg__admit_victim(p->pend, sizeof p->pend[0],
                                     offsetof(struct pending, u), p->npend,
                                     now));
  q = &p->pend[p->npend];
  memset(q, 0, sizeof *q);
  q->fd = fd;
  q->u.src = pg__admit_source((struct sockaddr *)&sa, sl);
  q->u.since = now;
  q->u.until = now + HELLO_S;
  pg__nonce(q->challenge, sizeof q->challenge);
  if (send(fd, q->challenge, sizeof q->challenge,
           MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof q->challenge) {
    close(fd);
    return true;
  }
  p->npend++;
  return true;
}

/* Reads the hellos that arrived, then accepts at most half the table of
 * what waits, so that each new connection is read at least once before
 * a newer one can displace it; never blocks. */
static void accept_ready(struct hier_p2p *p)
{
  double now = pg__now();
  int i;

  for (i = 0; i < p->npend; i++) {
    struct pending *q = &p->pend[i];
    int r = read_hello(q, now);

    if (r == 0)
      continue;
    if (r > 0 && take_hello(p, q))
      p->pend[i--] = p->pend[--p->npend];
    else
      drop_pending(p, i--);
  }
  for (i = 0; i < PEND_MAX / 2 && accept_one(p, now); i++)
    ;
}

/* The acceptor: accepts, challenges and takes connections until told to
 * stop, whatever the rank's own thread is doing (Note [p2p acceptor]).
 * Signals are for the rank's thread. */
static void *acceptor_main(void *arg)
{
  struct hier_p2p *p = arg;
  sigset_t all;

  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  for (;;) {
    struct pollfd pf[PEND_MAX + 2];
    int i, np = 0;

    pf[np].fd = p->stop_fd;
    pf[np++].events = POLLIN;
    pf[np].fd = p->lfd;
    pf[np++].events = POLLIN;
    for (i = 0; i < p->npend; i++) {
      pf[np].fd = p->pend[i].fd;
      pf[np++].events = POLLIN;
    }
    poll(pf, (nfds_t)np, p->npend ? (int)(HELLO_S * 1000) : 1000);
    if (pf[0].revents)
      return NULL;
    accept_ready(p);
  }
}

/* Moves what the acceptor took into peers[n + q]. */
static void collect(struct hier_p2p *p)
{
  eventfd_t v;
  int q;

  (void)!eventfd_read(p->wake_fd, &v);
  for (q = 0; q < p->n; q++)
    if (p->c.peers[p->n + q].fd < 0)
      p->c.peers[p->n + q].fd = __atomic_load_n(&p->arrived[q],
                                                __ATOMIC_ACQUIRE);
}

/* Waits until fd is readable (or deadline), accepting meanwhile; then
 * reads len bytes that must be there: 0, -ECONNRESET (closed),
 * -ETIMEDOUT, or the watch's verdict. */
static int wait_read(struct hier_p2p *p, int fd, void *buf, size_t len,
                     double deadline)
{
  size_t got = 0;

  while (got < len) {
    ssize_t k = recv(fd, (char *)buf + got, len - got, MSG_DONTWAIT);
    struct pollfd pf = { .fd = fd, .events = POLLIN };
    double until;
    int ms;

    if (k > 0) {
      got += (size_t)k;
      continue;
    }
    if (k == 0)
      return -ECONNRESET;
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return -errno;
    collect(p);
    until = pg__now() + SLICE_S * 20;
    ms = tcp_ms_until(until < deadline ? until : deadline);
    if (pg__now() >= deadline)
      return -ETIMEDOUT;
    /* In live mode the receiver may be recovering instead, and its
     * acceptor gone with its old generation. */
    if (poll(&pf, 1, ms) == 0 && p->watch) {
      int err = p->watch(p->watch_arg);

      if (err)
        return err;
    }
  }
  return 0;
}

/* Sleeps s seconds (or to deadline), collecting meanwhile. */
static void wait_accepting(struct hier_p2p *p, double s, double deadline)
{
  double until = pg__now() + s;

  if (until > deadline)
    until = deadline;
  while (pg__now() < until) {
    collect(p);
    poll(NULL, 0, tcp_ms_until(pg__now() + SLICE_S < until
                               ? pg__now() + SLICE_S : until));
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
  p->arrived = malloc((size_t)s->n * sizeof *p->arrived);
  p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!p->ns || !p->c.peers || !p->c.ss || !p->c.pfd || !p->arrived ||
      p->wake_fd < 0 || p->stop_fd < 0) {
    pg__hier_p2p_destroy(p);
    return pg__fail(-ENOMEM, "hier setup: out of memory");
  }
  for (i = 0; i < 2 * s->n; i++) {
    p->c.peers[i].fd = -1;
    p->c.peers[i].rank = s->ranks[i % s->n];
  }
  for (i = 0; i < s->n; i++)
    p->arrived[i] = -1;
  p->lfd = tcp_listen_ep(s->master_addr, ep, sizeof ep, &p->bufsz);
  if (p->lfd < 0) {
    err = p->lfd;
    p->lfd = -1;
    pg__hier_p2p_destroy(p);
    return err;
  }
  err = -pthread_create(&p->acceptor, NULL, acceptor_main, p);
  if (err) {
    pg__hier_p2p_destroy(p);
    return pg__fail(err, "hier setup: cannot start the point-to-point "
                    "acceptor: %s", pg_strerror(err));
  }
  p->acceptor_on = true;
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

/* A connection to ep by the deadline.  A refusal is retried until then;
 * with a watch, that is asked between slices of CONNECT_SLICE_S (live
 * mode: the peer may be recovering, its listener closed).  A slice is as
 * long as the kernel's first SYN retry, so cutting a slow connect short
 * and starting again costs it nothing. */
static int connect_sliced(struct hier_p2p *p, const char *ep,
                          double deadline)
{
  for (;;) {
    double until = pg__now() + CONNECT_SLICE_S;
    bool sliced = p->watch && until < deadline;
    int fd = tcp_connect_ep(ep, p->bufsz, sliced ? until : deadline), err;

    if (fd >= 0 || !sliced || (fd != -ECONNREFUSED && fd != -ETIMEDOUT))
      return fd;
    err = p->watch(p->watch_arg);
    if (err)
      return err;
  }
}

/* One try at a connection to q at ep: the challenge, the hello, the
 * answer.  0 (*fdp the socket), -EAGAIN (the receiver closed it before
 * answering: a flood displaced it; try again), or an error. */
static int try_connect(struct hier_p2p *p, int q, const char *ep,
                       double deadline, int *fdp)
{
  uint8_t challenge[PG_NONCE_BYTES], took = 0;
  struct hello h;
  int fd = connect_sliced(p, ep, deadline), err;

  if (fd < 0)
    return fd;
  err = wait_read(p, fd, challenge, sizeof challenge, deadline);
  if (!err) {
    tcp_hello_init(&h, p->hash, p->me, q, p->n);
    tcp_hello_sign(p->token, &h, challenge);
    err = tcp_io_full(fd, &h, sizeof h, true, deadline);
  }
  if (!err)
    err = wait_read(p, fd, &took, 1, deadline);
  if (!err && took != P2P_TOOK)
    err = -EPROTO;
  if (err == -ECONNRESET || err == -EPIPE)
    err = -EAGAIN;
  if (err) {
    close(fd);
    return err;
  }
  *fdp = fd;
  return 0;
}

/* The socket to send q on, connected now if it is not yet: again and
 * again while the receiver closes it unanswered (a flood displaced it,
 * Note [admission under a flood]), until the deadline. */
static int connect_peer(struct hier_p2p *p, int q, double deadline)
{
  char key[4200], *ep;
  void *v = NULL;
  size_t len = 0;
  double left = deadline - pg__now(), wait_s = RETRY_MIN_S;
  int fd = -1, err, tries = 0;

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
  while ((err = try_connect(p, q, ep, deadline, &fd)) == -EAGAIN) {
    tries++;
    if (pg__now() >= deadline) {
      err = -ETIMEDOUT;
      break;
    }
    wait_accepting(p, wait_s, deadline);
    wait_s = wait_s * 2 < RETRY_MAX_S ? wait_s * 2 : RETRY_MAX_S;
  }
  if (err) {
    err = pg__fail(err, "send: cannot connect to rank %d at %s: %s%s",
                   p->c.peers[q].rank, ep, err == PG_ERR_PEER_LOST
                   ? pg_last_error() : pg_strerror(err),
                   tries && err != PG_ERR_PEER_LOST
                   ? " (it closed every try unanswered: a flood of "
                   "strangers, or a job token that differs)" : "");
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
    collect(p);
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
    struct pollfd pf = { .fd = p->wake_fd, .events = POLLIN };

    collect(p);
    if (p->c.peers[p->n + q].fd >= 0)
      break;
    ms = tcp_ms_until(deadline);
    if (ms <= 0)
      return fail(p, pg__fail(-ETIMEDOUT, "recv (tag %d): timed out "
                              "waiting for rank %d (it never connected to "
                              "send to this rank)", tag,
                              p->c.peers[q].rank));
    if (p->watch && ms > WATCH_MS)
      ms = WATCH_MS;
    if (poll(&pf, 1, ms) == 0 && p->watch) {
      int err = p->watch(p->watch_arg);

      if (err)
        return fail(p, err);
    }
  }
  tcp_stream_buf(&p->c, &p->c.ss[0], p->n + q, false, &h, buf);
  p->c.ss[0].p2p = true;
  /* Answer the others' hellos meanwhile, as a send does. */
  for (;;) {
    double until = pg__now() + SLICE_S * 20;
    int err = tcp_run(&p->c, p->c.ss, 1,
                      until < deadline ? until : deadline);

    if (err != -ETIMEDOUT || pg__now() >= deadline)
      return fail(p, err);
    collect(p);
  }
}

void pg__hier_p2p_destroy(struct hier_p2p *p)
{
  int i;

  if (!p)
    return;
  if (p->acceptor_on) {
    (void)!eventfd_write(p->stop_fd, 1);
    pthread_join(p->acceptor, NULL);
  }
  /* What the acceptor took and the rank never collected. */
  for (i = 0; p->arrived && p->c.peers && i < p->n; i++)
    if (p->arrived[i] >= 0 && p->c.peers[p->n + i].fd != p->arrived[i])
      close(p->arrived[i]);
  tcp_comm_release(&p->c, 2 * p->n);
  for (i = 0; i < p->npend; i++)
    close(p->pend[i].fd);
  if (p->wake_fd > 0)
    close(p->wake_fd);
  if (p->stop_fd > 0)
    close(p->stop_fd);
  free(p->arrived);
  if (p->lfd >= 0)
    close(p->lfd);
  free(p->ns);
  free(p);
}
