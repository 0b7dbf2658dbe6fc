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

#include "launch_env.h"
#include "tcp_internal.h"

static uint64_t tcp_fnv1a(const char *s)
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
    ms = tcp_ms_until(deadline);
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
        int k = poll(&pf, 1, tcp_ms_until(deadline));

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
    if (err != -ECONNREFUSED || tcp_ms_until(deadline) <= 0)
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
    int fd, ms = tcp_ms_until(deadline);

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

/* Publishes this rank's endpoint and connects c's peers: every socket of
 * the mesh open and proven to belong to this comm (the hello), or an
 * error already reported. */
int tcp_connect_all(struct tcp_comm *c, const struct pg__setup *s,
                    double deadline)
{
  char **eps = calloc((size_t)s->n, sizeof *eps);
  char host[NI_MAXHOST], ep[NI_MAXHOST + 16];
  int i, err, lfd, port = 0, family, bufsz = sock_buf();

  if (!eps)
    return pg__fail(-ENOMEM, "tcp setup: out of memory");
  my_address(host, sizeof host, &family);
  lfd = listen_any(family, bufsz, &port);
  if (lfd < 0) {
    err = pg__fail(lfd, "tcp setup: cannot listen: %s", strerror(-lfd));
    goto out;
  }
  snprintf(ep, sizeof ep, "%s %d", host, port);
  err = publish(s, ep, eps);
  if (!err)
    err = mesh(c, lfd, eps, tcp_fnv1a(s->ns), bufsz, deadline);
  close(lfd);
out:
  for (i = 0; i < s->n; i++)
    free(eps[i]);
  free(eps);
  return err;
}
