/* tcp_setup.c -- the TCP communicator's setup: each rank publishes where it
 * listens through the store, then the ranks connect into a full mesh. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "num.h"
#include "tcp_internal.h"
#include "tcp_setup.h"
#include "admit.h"
#include "knobs.h"

uint64_t tcp_fnv1a(const char *s)
{
  uint64_t h = 1469598103934665603ull;

  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* ---- setup: endpoints through the store, then the mesh ------------------ */

static int numeric_host(const struct sockaddr *sa, socklen_t len, char *host,
                        size_t hostlen)
{
  return getnameinfo(sa, len, host, (socklen_t)hostlen, NULL, 0,
                     NI_NUMERICHOST) ? -1 : 0;
}

/* The address other hosts reach this one by: the source address of a
 * route to m, rank 0's address (a UDP connect sends nothing), else the
 * hostname's first address, else loopback.  Sockets listen on every
 * address. */
static int my_address(const char *m, char *host, size_t hostlen,
                      int *family)
{
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
    if (!fgets(buf, sizeof buf, f) ||
        num_parse_long_n(buf, strcspn(buf, "\n"), LONG_MIN, LONG_MAX,
                          &v))
      v = 0;
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
int tcp_io_full(int fd, void *buf, size_t len, bool wr, double deadline)
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
    ms = tcp_ms_until(deadline);
    if (ms <= 0)
      return -ETIMEDOUT;
    if (poll(&pf, 1, ms) < 0 && errno != EINTR)
      return -errno;
  }
  return 0;
}

/* "host port" -> its address. */
static int ep_addr(const char *ep, struct sockaddr_storage *sa,
                   socklen_t *sl)
{
  char host[256];
  const char *sp = strrchr(ep, ' ');
  struct addrinfo hints, *ai;
  long port;

  if (!sp || (size_t)(sp - ep) >= sizeof host)
    return -EPROTO;
  memcpy(host, ep, (size_t)(sp - ep));
  host[sp - ep] = '\0';
  if (num_parse_long(sp + 1, 1, 65535, &port))
    return -EPROTO;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  if (getaddrinfo(host, sp + 1, &hints, &ai))
    return -EPROTO;
  if (ai->ai_addrlen > sizeof *sa) {
    freeaddrinfo(ai);
    return -EPROTO;
  }
  memcpy(sa, ai->ai_addr, ai->ai_addrlen);
  *sl = ai->ai_addrlen;
  freeaddrinfo(ai);
  return 0;
}

/* A non-blocking connect to sa started: the socket, or an error. */
static int connect_start(const struct sockaddr_storage *sa, socklen_t sl,
                         int bufsz)
{
  int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                  0);

  if (fd < 0)
    return -errno;
  tune(fd, bufsz);
  if (connect(fd, (const struct sockaddr *)sa, sl) < 0 &&
      errno != EINPROGRESS) {
    int err = -errno;

    close(fd);
    return err;
  }
  return fd;
}

/* "host port" -> connected non-blocking socket, retrying refusals until
 * the deadline. */
int tcp_connect_ep(const char *ep, int bufsz, double deadline)
{
  struct sockaddr_storage sa;
  socklen_t sl;
  int fd, err = ep_addr(ep, &sa, &sl);

  if (err)
    return err;
  for (;;) {
    struct pollfd pf;
    socklen_t el = sizeof err;

    fd = connect_start(&sa, sl, bufsz);
    if (fd < 0)
      return fd;
    pf.fd = fd;
    pf.events = POLLOUT;
    err = 0;
    while (err == 0) {
      int k = poll(&pf, 1, tcp_ms_until(deadline));

      if (k > 0) {
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        err = -err;
        break;
      }
      if (k == 0)
        err = -ETIMEDOUT;
      else if (errno != EINTR)
        err = -errno;
    }
    if (err == 0)
      return fd;
    close(fd);
    if (err != -ECONNREFUSED || tcp_ms_until(deadline) <= 0)
      return err;
    poll(NULL, 0, 20);  /* a listener not there yet: try again */
  }
}

void tcp_hello_init(struct hello *h, uint64_t hash, int from, int to, int n)
{
  memset(h, 0, sizeof *h);
  h->magic = HELLO_MAGIC;
  h->version = HELLO_VERSION;
  h->ns_hash = hash;
  h->from = from;
  h->to = to;
  h->n = n;
  pg__nonce(h->nonce, sizeof h->nonce);
}

/* What every proof of a connection covers: the comm (its namespace
 * hash and size) and who connects to whom. */
struct proof_ctx {
  uint64_t hash;
  int32_t connector, acceptor, n;
};

static struct proof_ctx ctx_of(const struct hello *h)
{
  struct proof_ctx x;

  memset(&x, 0, sizeof x);
  x.hash = h->ns_hash;
  x.connector = h->from;
  x.acceptor = h->to;
  x.n = h->n;
  return x;
}

void tcp_hello_answer(const struct pg__token *t, const struct hello *asked,
                      struct hello *answer)
{
  struct proof_ctx x = ctx_of(asked);

  pg__auth_mac(t, "pg-mesh-2 acceptor", &x, sizeof x, asked->nonce,
               answer->nonce, answer->mac);
}

bool tcp_answer_ok(const struct pg__token *t, const struct hello *sent,
                   const struct hello *answer)
{
  struct proof_ctx x = ctx_of(sent);

  return pg__auth_check(t, "pg-mesh-2 acceptor", &x, sizeof x, sent->nonce,
                        answer->nonce, answer->mac);
}

void tcp_proof(const struct pg__token *t, const struct hello *sent,
               const struct hello *answer, uint8_t out[32])
{
  struct proof_ctx x = ctx_of(sent);

  pg__auth_mac(t, "pg-mesh-2 connector", &x, sizeof x, sent->nonce,
               answer->nonce, out);
}

bool tcp_proof_ok(const struct pg__token *t, const struct hello *asked,
                  const struct hello *answer, const uint8_t proof[32])
{
  struct proof_ctx x = ctx_of(asked);

  return pg__auth_check(t, "pg-mesh-2 connector", &x, sizeof x,
                        asked->nonce, answer->nonce, proof);
}

void tcp_hello_sign(const struct pg__token *t, struct hello *h,
                    const uint8_t challenge[PG_NONCE_BYTES])
{
  struct proof_ctx x = ctx_of(h);

  pg__auth_mac(t, "pg-p2p-3 sender", &x, sizeof x, h->nonce, challenge,
               h->mac);
}

bool tcp_hello_signed(const struct pg__token *t, const struct hello *h,
                      const uint8_t challenge[PG_NONCE_BYTES])
{
  struct proof_ctx x = ctx_of(h);

  return pg__auth_check(t, "pg-p2p-3 sender", &x, sizeof x, h->nonce,
                        challenge, h->mac);
}

bool tcp_hello_ok(const struct hello *h, uint64_t hash, int to, int n)
{
  return h->magic == HELLO_MAGIC && h->version == HELLO_VERSION &&
         h->ns_hash == hash && h->to == to && h->n == n && h->from >= 0 &&
         h->from < n;
}

/* Note [parallel mesh]: lower ranks listen, higher ranks connect to every
 * lower one, and each side proves it belongs to this comm (magic,
 * namespace hash, ranks, and the job token: Note [mesh hello] in
 * tcp_internal.h) so a stray connection to the port is dropped.
 * Everything is in flight at once: the non-blocking connects to every
 * lower rank, the accepts of the higher ones, and each socket's hellos as
 * it becomes ready, all moved by one poll() loop -- setup costs about one
 * round trip, not one per peer.  A refused connect (that listener is not
 * up yet) is retried 20 ms later; an accepted connection that has not
 * proved itself within STRAY_S is dropped, and it never blocks the
 * others meanwhile. */
#define STRAY_S 5.0
#define RETRY_S 0.020
#define ACCEPT_MAX 64   /* accepted connections proving themselves at once */
#define WATCH_MS 100    /* how often a watched mesh asks its setup watch */

/* A connector goes CONNECT, TX (hello), RX (answer), TX_PROOF; an
 * acceptor RX (hello), TX (answer), RX_PROOF (Note [mesh hello]). */
enum { CS_WAIT, CS_CONNECT, CS_TX, CS_RX, CS_TX_PROOF, CS_RX_PROOF,
       CS_DONE };

struct conn {
  int fd, state;
  int peer;             /* position; -1: accepted, not yet known */
  size_t off;           /* bytes of the message sent or received */
  struct hello out, in;
  uint8_t proof[32];
  double at;            /* CS_WAIT: connect then; accepted: drop then */
  uint64_t src;         /* accepted: its source (pg__admit_source) */
  double since;         /* accepted: then */
};

static void conn_close(struct conn *k)
{
  if (k->fd >= 0)
    close(k->fd);
  k->fd = -1;
}

/* Moves k's message of this state as far as the socket allows: 1 done,
 * 0 wait, < 0 error. */
static int hello_io(struct conn *k)
{
  bool tx = k->state == CS_TX || k->state == CS_TX_PROOF;
  bool proof = k->state == CS_TX_PROOF || k->state == CS_RX_PROOF;
  char *p = proof ? (char *)k->proof
                  : tx ? (char *)&k->out : (char *)&k->in;
  size_t len = proof ? sizeof k->proof : sizeof(struct hello);

  for (;;) {
    ssize_t r;

    if (k->off == len)
      return 1;
    r = tx ? send(k->fd, p + k->off, len - k->off,
                  MSG_NOSIGNAL | MSG_DONTWAIT)
           : recv(k->fd, p + k->off, len - k->off, MSG_DONTWAIT);
    if (r > 0) {
      k->off += (size_t)r;
      continue;
    }
    if (r == 0)
      return -ECONNRESET;
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
    return -errno;
  }
}

/* The acceptor closed k before it answered: a flood of strangers
 * displaced it there (Note [admission under a flood], admit.c), so k
 * connects again RETRY_S later, within the setup's deadline.  Other
 * errors, and 0 (wait), pass. */
static int displaced(struct conn *k, int r)
{
  if (r != -ECONNRESET && r != -EPIPE)
    return r;
  conn_close(k);
  k->state = CS_WAIT;
  k->at = pg__now() + RETRY_S;
  return 0;
}

/* One step of an outgoing connection; < 0: a failure to report
 * (-EACCES: the peer did not prove the job token). */
static int out_step(struct tcp_comm *c, const struct pg__token *t,
                    struct conn *k, const struct sockaddr_storage *sa,
                    socklen_t sl, int bufsz, uint64_t hash, short rev)
{
  int err = 0, r;
  socklen_t el = sizeof err;

  switch (k->state) {
  case CS_WAIT:
    if (pg__now() < k->at)
      return 0;
    k->fd = connect_start(sa, sl, bufsz);
    if (k->fd < 0)
      return k->fd;
    k->state = CS_CONNECT;
    return 0;
  case CS_CONNECT:
    if (!rev)
      return 0;
    getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err == ECONNREFUSED) {      /* not listening yet: again soon */
      conn_close(k);
      k->state = CS_WAIT;
      k->at = pg__now() + RETRY_S;
      return 0;
    }
    if (err)
      return -err;
    tcp_hello_init(&k->out, hash, c->me, k->peer, c->n);
    k->state = CS_TX;
    k->off = 0;
    /* fall through */
  case CS_TX:
    r = hello_io(k);
    if (r <= 0)
      return displaced(k, r);
    k->state = CS_RX;
    k->off = 0;
    /* fall through */
  case CS_RX:
    r = hello_io(k);
    if (r <= 0)
      return displaced(k, r);
    if (!tcp_hello_ok(&k->in, hash, c->me, c->n) || k->in.from != k->peer)
      return -EPROTO;
    if (!tcp_answer_ok(t, &k->out, &k->in))
      return -EACCES;
    tcp_proof(t, &k->out, &k->in, k->proof);
    k->state = CS_TX_PROOF;
    k->off = 0;
    /* fall through */
  case CS_TX_PROOF:
    r = hello_io(k);
    if (r <= 0)
      return r;
    c->peers[k->peer].fd = k->fd;
    k->fd = -1;
    k->state = CS_DONE;
    return 0;
  }
  return 0;
}

/* One step of an accepted connection; false: drop it. */
static bool in_step(struct tcp_comm *c, const struct pg__token *t,
                    struct conn *k, uint64_t hash)
{
  int r;

  if (k->state == CS_RX) {
    r = hello_io(k);
    if (r < 0)
      return false;
    if (r == 0)
      return pg__now() < k->at;
    if (!tcp_hello_ok(&k->in, hash, c->me, c->n) || k->in.from <= c->me ||
        c->peers[k->in.from].fd >= 0)
      return false;
    k->peer = k->in.from;
    tcp_hello_init(&k->out, hash, c->me, k->peer, c->n);
    tcp_hello_answer(t, &k->in, &k->out);
    k->state = CS_TX;
    k->off = 0;
  }
  if (k->state == CS_TX) {
    r = hello_io(k);
    if (r < 0)
      return false;
    if (r == 0)
      return pg__now() < k->at;
    k->state = CS_RX_PROOF;
    k->off = 0;
  }
  r = hello_io(k);
  if (r < 0)
    return false;
  if (r == 0)
    return pg__now() < k->at;
  /* A stranger without the token is dropped here, its slot freed. */
  if (!tcp_proof_ok(t, &k->in, &k->out, k->proof) ||
      c->peers[k->peer].fd >= 0)
    return false;
  c->peers[k->peer].fd = k->fd;
  k->fd = -1;
  k->state = CS_DONE;
  return true;
}

/* The sentence for a failed outgoing connection to position j. */
static int out_fail(struct tcp_comm *c, int j, const char *ep, int err)
{
  if (err == -EACCES)
    return pg__fail(err, "tcp setup: rank %d at %s did not prove the job "
                    "token (%s differs between ranks, or that endpoint "
                    "is not rank %d's)", c->peers[j].rank, ep,
                    PG_TOKEN_VAR, c->peers[j].rank);
  return pg__fail(err, err == -EPROTO
                  ? "tcp setup: no handshake with rank %d at %s: %s"
                  : "tcp setup: cannot connect to rank %d at %s: %s",
                  c->peers[j].rank, ep, pg_strerror(err));
}

/* One mesh setup (mesh): the connections out to the lower positions
 * (out[j] to position j), those accepted from the higher ones, and the
 * poll set over both. */
struct mesh {
  struct tcp_comm *c;
  const struct pg__token *t;
  int lfd, bufsz;
  char **eps;
  uint64_t hash;
  double deadline;
  int nout, nin, nacc, cap;
  struct conn *out, *acc;
  struct pg__unproven *unproven;  /* mesh_accept's scratch, cap long */
  struct sockaddr_storage *sa;
  socklen_t *sl;
  struct pollfd *pfd;
  int *who;               /* pfd[i]'s: -1 the listener, < nout out[],
                             else acc[who - nout] */
  int got, done_out;
};

/* Every out[] slot closed (fd -1) before any endpoint is parsed, so a
 * bad one leaves nothing for mesh_free to close that it did not open. */
static int mesh_init(struct mesh *m)
{
  int nout = m->nout, cap = m->cap, j, err;

  m->out = calloc((size_t)nout + 1, sizeof *m->out);
  m->acc = calloc((size_t)cap, sizeof *m->acc);
  m->unproven = calloc((size_t)cap, sizeof *m->unproven);
  m->sa = calloc((size_t)nout + 1, sizeof *m->sa);
  m->sl = calloc((size_t)nout + 1, sizeof *m->sl);
  m->pfd = calloc((size_t)(nout + cap) + 1, sizeof *m->pfd);
  m->who = calloc((size_t)(nout + cap) + 1, sizeof *m->who);
  if (!m->out || !m->acc || !m->unproven || !m->sa || !m->sl || !m->pfd ||
      !m->who)
    return pg__fail(-ENOMEM, "tcp setup: out of memory");
  for (j = 0; j < nout; j++) {
    m->out[j].fd = -1;
    m->out[j].peer = j;
    m->out[j].state = CS_WAIT;
  }
  for (j = 0; j < nout; j++) {
    err = ep_addr(m->eps[j], &m->sa[j], &m->sl[j]);
    if (err)
      return pg__fail(err, "tcp setup: rank %d published a bad endpoint "
                      "'%s'", m->c->peers[j].rank, m->eps[j]);
  }
  return 0;
}

static void mesh_free(struct mesh *m)
{
  int j;

  for (j = 0; m->out && j < m->nout; j++)
    conn_close(&m->out[j]);
  for (j = 0; m->acc && j < m->nacc; j++)
    conn_close(&m->acc[j]);
  free(m->out);
  free(m->acc);
  free(m->unproven);
  free(m->sa);
  free(m->sl);
  free(m->pfd);
  free(m->who);
}

/* Connects due, and every step a socket allows without waiting, out and
 * in; an accepted connection done or dropped frees its slot. */
static int mesh_step(struct mesh *m)
{
  int j, i, err = 0;

  for (j = 0; j < m->nout; j++) {
    int was = m->out[j].state;

    if (was == CS_DONE)
      continue;
    err = out_step(m->c, m->t, &m->out[j], &m->sa[j], m->sl[j], m->bufsz,
                   m->hash, was == CS_CONNECT ? 0 : POLLOUT);
    if (err)
      return out_fail(m->c, j, m->eps[j], err);
    if (m->out[j].state == CS_DONE)
      m->done_out++;
  }
  for (i = 0; i < m->nacc; i++) {
    if (!in_step(m->c, m->t, &m->acc[i], m->hash))
      conn_close(&m->acc[i]);
    else if (m->acc[i].state != CS_DONE)
      continue;
    else
      m->got++;
    m->acc[i--] = m->acc[--m->nacc];
  }
  return 0;
}

/* Some accepted connection has not sent a valid hello yet: a newcomer
 * may displace it (mesh_accept). */
static bool mesh_displaceable(const struct mesh *m)
{
  for (int i = 0; i < m->nacc; i++)
    if (m->acc[i].state == CS_RX)
      return true;
  return false;
}

/* Fills the poll set with what waits on a socket and returns its size;
 * *ms comes down to the nearest connect retry or stray's deadline. */
static int mesh_poll_set(struct mesh *m, double now, int *ms)
{
  int np = 0, j, i;

  if (m->got < m->nin && (m->nacc < m->cap || mesh_displaceable(m))) {
    m->pfd[np].fd = m->lfd;
    m->pfd[np].events = POLLIN;
    m->who[np++] = -1;
  }
  for (j = 0; j < m->nout; j++) {
    struct conn *k = &m->out[j];

    if (k->state == CS_WAIT) {
      int w = (int)((k->at - now) * 1000) + 1;

      if (w < *ms)
        *ms = w > 0 ? w : 0;
      continue;
    }
    if (k->state == CS_DONE)
      continue;
    m->pfd[np].fd = k->fd;
    m->pfd[np].events = k->state == CS_RX ? POLLIN : POLLOUT;
    m->who[np++] = j;
  }
  for (i = 0; i < m->nacc; i++) {
    struct conn *k = &m->acc[i];
    int w = (int)((k->at - now) * 1000) + 1;

    if (w < *ms)
      *ms = w > 0 ? w : 0;
    m->pfd[np].fd = k->fd;
    m->pfd[np].events = k->state == CS_RX || k->state == CS_RX_PROOF
                        ? POLLIN : POLLOUT;
    m->who[np++] = m->nout + i;
  }
  return np;
}

/* Takes what waits on the listener, at most half the slots a pass (so
 * each is read once before a newer one may displace it); a full table
 * closes a connection that has not sent a valid hello yet (Note
 * [admission under a flood], admit.c), never one past it. */
static void mesh_accept(struct mesh *m)
{
  int fd, i, n;

  for (n = 0; n < m->cap / 2; n++) {
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    double now = pg__now();
    struct conn *k;

    if (m->nacc == m->cap) {
      int victim = -1, j = 0;

      /* The candidates: those still reading the first hello. */
      for (i = 0; i < m->nacc; i++)
        if (m->acc[i].state == CS_RX)
          m->unproven[j++] = (struct pg__unproven){
            m->acc[i].src, m->acc[i].since, m->acc[i].at };
      if (!j)
        return;
      victim = pg__admit_victim(m->unproven, sizeof *m->unproven, 0, j,
                                now);
      for (i = 0; i < m->nacc; i++)
        if (m->acc[i].state == CS_RX && victim-- == 0)
          break;
      conn_close(&m->acc[i]);
      m->acc[i] = m->acc[--m->nacc];
    }
    fd = accept4(m->lfd, (struct sockaddr *)&sa, &sl,
                 SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      return;
    k = &m->acc[m->nacc++];
    memset(k, 0, sizeof *k);
    k->fd = fd;
    k->peer = -1;
    k->state = CS_RX;
    k->src = pg__admit_source((struct sockaddr *)&sa, sl);
    k->since = now;
    /* a silent stray must not hold its slot for long */
    k->at = now + STRAY_S;
    if (k->at > m->deadline)
      k->at = m->deadline;
  }
}

/* What poll reported on pfd[0..np): connects that completed, and the
 * listener (accepted sockets move on in the next mesh_step). */
static int mesh_events(struct mesh *m, int np)
{
  int i, j, err;

  for (i = 0; i < np; i++) {
    if (!m->pfd[i].revents)
      continue;
    j = m->who[i];
    if (j >= 0 && j < m->nout && m->out[j].state == CS_CONNECT) {
      err = out_step(m->c, m->t, &m->out[j], &m->sa[j], m->sl[j],
                     m->bufsz, m->hash, m->pfd[i].revents);
      if (err)
        return out_fail(m->c, j, m->eps[j], err);
      if (m->out[j].state == CS_DONE)
        m->done_out++;
    }
    if (j == -1)
      mesh_accept(m);
  }
  return 0;
}

/* The sentence for a mesh the deadline cut short. */
static int mesh_timed_out(const struct mesh *m)
{
  int j;

  for (j = 0; j < m->nout && m->out[j].state == CS_DONE; j++)
    ;
  if (j < m->nout)
    return pg__fail(-ETIMEDOUT, "tcp setup: cannot connect to rank %d "
                    "at %s: %s", m->c->peers[j].rank, m->eps[j],
                    pg_strerror(-ETIMEDOUT));
  return pg__fail(-ETIMEDOUT, "tcp setup: %d of %d higher ranks "
                  "connected before the timeout", m->got, m->nin);
}

/* Connects this rank to every other of c: out to each lower position (at
 * eps[j]), and accepts the higher ones on lfd, all at once on one poll
 * loop, until every connection has passed its hello or the deadline.
 * Under a setup watch (live mode, Note [setup watch] in recover.c) the
 * poll waits WATCH_MS at most and the watch is asked between polls: a
 * peer that published its endpoint and died before it connected would
 * otherwise keep this rank here until the deadline. */
static int mesh(struct tcp_comm *c, const struct pg__token *t, int lfd,
                char **eps, uint64_t hash, int bufsz, double deadline)
{
  struct mesh m = {
    .c = c, .t = t, .lfd = lfd, .bufsz = bufsz, .eps = eps, .hash = hash,
    .deadline = deadline, .nout = c->me, .nin = c->n - 1 - c->me,
    .cap = ACCEPT_MAX,
  };
  int err = mesh_init(&m);
  bool watched = pg__setup_watched();
  double asked = pg__now();

  while (!err && (m.done_out < m.nout || m.got < m.nin)) {
    int ms = tcp_ms_until(deadline), np, k;
    double now = pg__now();

    if ((err = mesh_step(&m)))
      break;
    if ((m.done_out == m.nout && m.got == m.nin) || ms <= 0)
      break;
    if (watched && now - asked >= WATCH_MS / 1e3) {
      asked = now;
      if ((err = pg__setup_watch_ask()))
        break;
    }
    np = mesh_poll_set(&m, now, &ms);
    if (watched && ms > WATCH_MS)
      ms = WATCH_MS;
    k = poll(m.pfd, (nfds_t)np, ms);
    if (k < 0 && errno != EINTR)
      err = pg__fail(-errno, "tcp setup: poll: %s", strerror(errno));
    else if (k > 0)
      err = mesh_events(&m, np);
  }
  if (!err && (m.done_out < m.nout || m.got < m.nin))
    err = mesh_timed_out(&m);
  mesh_free(&m);
  return err;
}

static int publish(const struct pg__setup *s, const char *val, char **eps)
{
  size_t *lens = calloc((size_t)s->n, sizeof *lens);
  void **vals = calloc((size_t)s->n, sizeof *vals);
  int i, err = -ENOMEM;

  if (lens && vals)
    err = pg__store_allgather(s->store, s->ns, "ep/", s->me, s->n, val,
                              strlen(val), s->timeout, vals, lens);
  else
    pg__fail(err, "tcp setup: out of memory");
  for (i = 0; err == 0 && i < s->n; i++) {
    eps[i] = malloc(lens[i] + 1);
    if (!eps[i]) {
      err = pg__fail(-ENOMEM, "tcp setup: out of memory");
      break;
    }
    memcpy(eps[i], vals[i], lens[i]);
    eps[i][lens[i]] = '\0';
  }
  pg__free_vals(vals, s->n);
  free(lens);
  free(vals);
  return err;
}

/* A socket listening on every address, and "host port" for others to
 * reach it by. */
int tcp_listen_ep(const char *master_addr, char *ep, size_t eplen,
                  int *bufsz)
{
  char host[NI_MAXHOST];
  int lfd, port = 0, family;

  *bufsz = sock_buf();
  my_address(master_addr, host, sizeof host, &family);
  lfd = listen_any(family, *bufsz, &port);
  if (lfd < 0)
    return pg__fail(lfd, "tcp setup: cannot listen: %s", strerror(-lfd));
  snprintf(ep, eplen, "%s %d", host, port);
  return lfd;
}

/* PG_TEST_MESH_HOLD (tests only): waits until its path exists or the
 * deadline, so that a test can flood the others' listeners while they
 * wait in this mesh's setup (scripts/bench/abuse). */
static void test_hold(double deadline)
{
  const char *path = pg__knob(PG_KNOB_TEST_MESH_HOLD);

  while (path && access(path, F_OK) != 0 && pg__now() < deadline)
    usleep(20000);
}

/* Publishes this rank's endpoint and connects c's peers: every socket of
 * the mesh open and proven to belong to this comm (the hello), or an
 * error already reported. */
int tcp_connect_all(struct tcp_comm *c, const struct pg__setup *s,
                    double deadline)
{
  static const struct pg__token no_token;
  char **eps = calloc((size_t)s->n, sizeof *eps);
  char ep[NI_MAXHOST + 16];
  int i, err, lfd, bufsz;

  if (!eps)
    return pg__fail(-ENOMEM, "tcp setup: out of memory");
  lfd = tcp_listen_ep(s->master_addr, ep, sizeof ep, &bufsz);
  if (lfd < 0) {
    err = lfd;
    goto out;
  }
  test_hold(deadline);
  err = publish(s, ep, eps);
  if (!err)
    err = mesh(c, s->token ? s->token : &no_token, lfd, eps,
               tcp_fnv1a(s->ns), bufsz, deadline);
  close(lfd);
out:
  for (i = 0; i < s->n; i++)
    free(eps[i]);
  free(eps);
  return err;
}
