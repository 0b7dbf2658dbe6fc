/* store_client.c -- the store's client (pg_store_*; protocol:
 * store_wire.h): one request at a time per connection, and prefix
 * views. */


#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pg_internal.h"
#include "store_wire.h"

/* Calls that do not wait give up after this much (or the connect
 * timeout, when longer): the server answers them at once. */
#define ST_MIN_OP_TIMEOUT 10.0
/* A wait's reply comes from the server at its deadline; we allow this
 * much more before calling the server dead. */
#define ST_GRACE 1.0

struct pg_store {
  /* Note [prefix views]: a view (pg_store_prefix) has no connection of
   * its own: each call goes to base with prefix + key. */
  pg_store *base;
  char *prefix;
  size_t plen;
  pthread_mutex_t mu;
  int fd;                   /* -1 once broken */
  uint32_t next_id;
  double op_timeout;
  struct buf req;
  char where[300];          /* "host:port", for sentences */
  struct pg__token token;   /* len 0: none */
};

struct st_reply {
  uint8_t *body;            /* the whole frame after its length */
  uint8_t status;
  struct rd r;              /* the fields */
};

static int st_fail(const pg_store *s, int err, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

static int st_fail(const pg_store *s, int err, const char *fmt, ...)
{
  char msg[400];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return pg__fail(err, "store %s: %s", s->where, msg);
}

/* Waits for ev on fd until deadline (INFINITY: none). */
static int io_wait(int fd, short ev, double deadline)
{
  struct pollfd p = { .fd = fd, .events = ev };

  for (;;) {
    double left = deadline - pg__now();
    int ms = -1, rc;

    if (left <= 0)
      return -ETIMEDOUT;
    if (isfinite(deadline))
      ms = left > 86400 ? 86400000 : (int)ceil(left * 1000);
    rc = poll(&p, 1, ms);
    if (rc > 0)
      return 0;
    if (rc < 0 && errno != EINTR)
      return -errno;
  }
}

static int io_err(int e)
{
  return e == EPIPE ? -ECONNRESET : -e;
}

static int send_all(int fd, const uint8_t *p, size_t n, double deadline)
{
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    int err;

    if (k > 0) {
      p += k;
      n -= (size_t)k;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if ((err = io_wait(fd, POLLOUT, deadline)))
        return err;
    } else if (k < 0 && errno != EINTR) {
      return io_err(errno);
    }
  }
  return 0;
}

static int recv_all(int fd, uint8_t *p, size_t n, double deadline)
{
  while (n > 0) {
    ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
    int err;

    if (k > 0) {
      p += k;
      n -= (size_t)k;
    } else if (k == 0) {
      return -ECONNRESET;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if ((err = io_wait(fd, POLLIN, deadline)))
        return err;
    } else if (errno != EINTR) {
      return io_err(errno);
    }
  }
  return 0;
}

static void sleep_s(double t)
{
  struct timespec ts;

  if (t <= 0)
    return;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

/* The handshake's second half (store_wire.h): the server's auth mode and
 * nonce ns came back for our nc.  0, or an error (*fatal when the tokens
 * do not match: retrying cannot help). */
static int st_prove(pg_store *s, int fd, uint8_t auth,
                    const uint8_t nc[PG_NONCE_BYTES],
                    const uint8_t ns[PG_NONCE_BYTES], double until,
                    bool *fatal, char *why, size_t whylen)
{
  uint8_t mac[PG_MAC_BYTES], answer[1 + PG_MAC_BYTES];
  int err;

  if (auth == ST_AUTH_NONE && !s->token.len)
    return 0;
  *fatal = true;
  if (auth == ST_AUTH_NONE) {
    snprintf(why, whylen, "the store does not ask for the job token: it is "
             "not this job's, or rank 0 runs without %s", PG_TOKEN_VAR);
    return -EACCES;
  }
  if (auth != ST_AUTH_TOKEN) {
    snprintf(why, whylen, "the store asks for an unknown kind of "
             "authentication (%u)", auth);
    return -EPROTO;
  }
  if (!s->token.len) {
    snprintf(why, whylen, "the store requires the job token, and %s is "
             "not set here", PG_TOKEN_VAR);
    return -EACCES;
  }
  pg__auth_mac(&s->token, ST_LABEL_CLIENT, NULL, 0, nc, ns, mac);
  err = send_all(fd, mac, sizeof mac, until);
  if (!err)
    err = recv_all(fd, answer, sizeof answer, until);
  if (err) {
    *fatal = false;
    return err;
  }
  if (answer[0] == ST_AUTH_FAILED) {
    snprintf(why, whylen, "the store refused our job token (%s differs "
             "from rank 0's)", PG_TOKEN_VAR);
    return -EACCES;
  }
  if (answer[0] == ST_OVER_BUDGET) {
    snprintf(why, whylen, "rank 0's store has no room for another "
             "connection (PG_STORE_MAX_BYTES)");
    return -ENOSPC;
  }
  if (answer[0] != ST_OK ||
      !pg__auth_check(&s->token, ST_LABEL_SERVER, NULL, 0, nc, ns,
                      answer + 1)) {
    snprintf(why, whylen, "the store did not prove it knows the job token");
    return -EACCES;
  }
  *fatal = false;
  return 0;
}

/* One connection attempt to every address of host.  0 with s->fd set,
 * or an error; *fatal when retrying cannot help; why gets details. */
static int st_try(pg_store *s, const char *host, int port, double deadline,
                  bool *fatal, char *why, size_t whylen)
{
  struct addrinfo hints, *res, *ai;
  char service[16];
  int err = -ECONNREFUSED, rc;

  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  snprintf(service, sizeof service, "%d", port);
  rc = getaddrinfo(host, service, &hints, &res);
  if (rc) {
    /* The name may not exist yet (a pod starting): retry. */
    snprintf(why, whylen, "cannot resolve '%s': %s", host,
             rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    return -EHOSTUNREACH;
  }
  for (ai = res; ai; ai = ai->ai_next) {
    /* Give a connect at least a moment, even with timeout 0. */
    double until = fmax(deadline, pg__now() + 0.1);
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
                    SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1, soerr = 0;
    socklen_t sl = sizeof soerr;
    uint8_t hello[ST_HELLO_BYTES + 1], nc[PG_NONCE_BYTES];

    if (fd < 0) {
      err = -errno;
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
      if (errno != EINPROGRESS) {
        err = -errno;
        close(fd);
        continue;
      }
      err = io_wait(fd, POLLOUT, until);
      if (!err && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
        soerr = errno;
      if (err || soerr) {
        err = err ? err : -soerr;
        close(fd);
        continue;
      }
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    until = fmax(deadline, pg__now() + 1.0);
    memcpy(hello, stw_hello, 4);
    pg__nonce(nc, sizeof nc);
    memcpy(hello + 4, nc, sizeof nc);
    err = send_all(fd, hello, ST_HELLO_BYTES, until);
    if (!err)
      err = recv_all(fd, hello, 4, until);
    if (err) {
      snprintf(why, whylen, "handshake failed: %s", strerror(-err));
      close(fd);
      continue;
    }
    if (memcmp(hello, stw_hello, 3) || hello[3] != ST_VERSION) {
      *fatal = true;
      if (memcmp(hello, stw_hello, 3))
        snprintf(why, whylen, "not a libpg store (it answered %02x %02x "
                 "%02x %02x)", hello[0], hello[1], hello[2], hello[3]);
      else
        snprintf(why, whylen, "the server speaks store protocol %d, we "
                 "speak %d", hello[3], ST_VERSION);
      close(fd);
      err = -EPROTO;
      break;
    }
    err = recv_all(fd, hello + 4, 1 + PG_NONCE_BYTES, until);
    if (!err)
      err = st_prove(s, fd, hello[4], nc, hello + 5, until, fatal, why,
                     whylen);
    if (err) {
      if (!*fatal)
        snprintf(why, whylen, "handshake failed: %s", strerror(-err));
      close(fd);
      if (*fatal)
        break;
      continue;
    }
    s->fd = fd;
    err = 0;
    break;
  }
  freeaddrinfo(res);
  return err;
}

int pg_store_connect(const char *host, int port, double timeout,
                     pg_store **out)
{
  return pg_store_connect_auth(host, port, timeout, NULL, out);
}

int pg_store_connect_auth(const char *host, int port, double timeout,
                          const char *token, pg_store **out)
{
  double start = pg__now(), deadline, backoff = 0.01;
  char why[200] = "";
  bool fatal = false;
  pg_store *s;
  int err;

  if (!out)
    return pg__fail(-EINVAL, "store: no place for the connection");
  *out = NULL;
  if (!host || !*host || port < 1 || port > 65535 || !(timeout >= 0))
    return pg__fail(-EINVAL, "store: cannot connect to %s:%d (timeout %g "
                    "s)", host ? host : "(null)", port, timeout);
  s = calloc(1, sizeof *s);
  if (!s)
    return pg__fail(-ENOMEM, "store: out of memory");
  s->fd = -1;
  if ((err = pg__token_from(token, &s->token))) {
    free(s);
    return err;
  }
  s->op_timeout = fmax(timeout, ST_MIN_OP_TIMEOUT);
  snprintf(s->where, sizeof s->where, strchr(host, ':') ? "[%s]:%d" :
           "%s:%d", host, port);
  deadline = start + timeout;
  for (;;) {
    double left;

    why[0] = '\0';
    err = st_try(s, host, port, deadline, &fatal, why, sizeof why);
    left = deadline - pg__now();
    if (!err || fatal || left <= 0)
      break;
    sleep_s(fmin(backoff, left));
    backoff = fmin(2 * backoff, 0.5);
  }
  if (err) {
    if (err == -ECONNREFUSED && !why[0])
      err = st_fail(s, err, "connection refused after %g s", timeout);
    else if (err == -ETIMEDOUT && !why[0])
      err = st_fail(s, err, "no answer after %g s", timeout);
    else if (fatal)
      err = st_fail(s, err, "%s", why);
    else
      err = st_fail(s, err, "%s (after %g s)", why[0] ? why :
                    strerror(-err), timeout);
    free(s);
    return err;
  }
  pthread_mutex_init(&s->mu, NULL);
  *out = s;
  return 0;
}

void pg_store_close(pg_store *s)
{
  if (!s)
    return;
  if (s->base) {
    free(s->prefix);
    free(s);
    return;
  }
  if (s->fd >= 0)
    close(s->fd);
  pthread_mutex_destroy(&s->mu);
  stw_buf_free(&s->req);
  memset(&s->token, 0, sizeof s->token);
  free(s);
}

/* Locks s; fails (unlocked) when the connection broke earlier. */
static int st_enter(pg_store *s)
{
  if (!s)
    return pg__fail(-EINVAL, "store: no connection");
  pthread_mutex_lock(&s->mu);
  if (s->fd < 0) {
    pthread_mutex_unlock(&s->mu);
    return st_fail(s, -ECONNRESET, "the connection broke earlier");
  }
  return 0;
}

static void req_begin(pg_store *s, uint8_t op)
{
  s->req.off = s->req.len = 0;
  s->req.oom = false;
  stw_buf_u32(&s->req, 0);
  stw_buf_u8(&s->req, op);
  stw_buf_u32(&s->req, ++s->next_id);
}

/* Drops the connection: after an I/O error or a missed reply the stream
 * can no longer be trusted to line up with our requests. */
static int st_break(pg_store *s, int err, const char *what, double wait)
{
  close(s->fd);
  s->fd = -1;
  if (err == -ETIMEDOUT)
    return st_fail(s, err, "%s: no reply within %g s; connection dropped",
                   what, wait);
  if (err == -ECONNRESET)
    return st_fail(s, err, "%s: connection closed by the server", what);
  return st_fail(s, err, "%s: %s", what, strerror(-err));
}

/* Sends s->req and reads the reply, waiting up to wait seconds
 * (INFINITY: no limit).  The caller frees rep->body. */
static int st_call(pg_store *s, const char *what, double wait,
                   struct st_reply *rep)
{
  double deadline = pg__now() + wait;
  uint8_t hdr[4];
  uint32_t len;
  int err;

  rep->body = NULL;
  if (s->req.oom) {
    stw_buf_clear(&s->req);
    return st_fail(s, -ENOMEM, "%s: out of memory", what);
  }
  stw_put_u32(s->req.p, (uint32_t)(s->req.len - 4));
  err = send_all(s->fd, s->req.p, s->req.len, deadline);
  stw_buf_clear(&s->req);
  if (!err)
    err = recv_all(s->fd, hdr, 4, deadline);
  if (err)
    return st_break(s, err, what, wait);
  len = stw_get_u32(hdr);
  if (len < 5 || len > ST_MAX_REPLY)
    return st_break(s, -EPROTO, what, wait);
  rep->body = malloc((size_t)len + 1);  /* + 1: room for a NUL */
  if (!rep->body)
    return st_break(s, -ENOMEM, what, wait);
  err = recv_all(s->fd, rep->body, len, deadline);
  if (!err && stw_get_u32(rep->body) != s->next_id)
    err = -EPROTO;
  if (err) {
    free(rep->body);
    rep->body = NULL;
    return st_break(s, err, what, wait);
  }
  rep->status = rep->body[4];
  rep->r.p = rep->body + 5;
  rep->r.n = len - 5;
  rep->r.bad = false;
  return 0;
}

/* The server's sentence in a refusal's fields, if any. */
static bool sentence(struct rd *r, char *out, size_t len)
{
  size_t n;
  const uint8_t *p = r ? stw_rd_bytes(r, &n) : NULL;

  if (!p || n == 0)
    return false;
  if (n >= len)
    n = len - 1;
  memcpy(out, p, n);
  out[n] = '\0';
  for (size_t i = 0; i < n; i++)   /* a line of printable text */
    if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
      out[i] = '?';
  return true;
}

/* The error for a status other than OK. */
static int st_status(pg_store *s, const char *what, uint8_t status,
                     double timeout, struct rd *r)
{
  char why[300];

  switch (status) {
  case ST_NOT_FOUND:
    return st_fail(s, -ENOENT, "%s: no such key", what);
  case ST_TIMEOUT:
    return st_fail(s, -ETIMEDOUT, "%s: not set after %g s", what, timeout);
  case ST_NOT_NUMBER:
    return st_fail(s, -EINVAL, "%s: the value is not a decimal integer",
                   what);
  case ST_TOO_LARGE:
    if (sentence(r, why, sizeof why))
      return st_fail(s, -EMSGSIZE, "%s: refused: %s", what, why);
    return st_fail(s, -EMSGSIZE, "%s: the server refused it as too large",
                   what);
  case ST_OVER_BUDGET:
    if (!sentence(r, why, sizeof why))
      snprintf(why, sizeof why, "over the store's memory budget");
    return st_fail(s, -ENOSPC, "%s: refused: %s", what, why);
  case ST_NO_MEMORY:
    return st_fail(s, -ENOMEM, "%s: the server is out of memory", what);
  case ST_UNKNOWN_OP:
    return st_fail(s, -ENOTSUP, "%s: the server does not know it", what);
  case ST_OVERFLOW:
    return st_fail(s, -ERANGE, "%s: the result overflows int64", what);
  case ST_MALFORMED:
    return st_break(s, -EPROTO, what, 0);
  default:
    return st_break(s, -EPROTO, what, 0);
  }
}

/* Finishes a call: frees the reply, unlocks, returns err. */
static int st_leave(pg_store *s, struct st_reply *rep, int err)
{
  free(rep->body);
  pthread_mutex_unlock(&s->mu);
  return err;
}

static int check_key(const pg_store *s, const char *key)
{
  size_t n;

  if (!key)
    return st_fail(s, -EINVAL, "no key given");
  n = strlen(key);
  if (n > ST_MAX_KEY)
    return st_fail(s, -EMSGSIZE, "key '%.40s...': too long (%zu bytes, "
                   "limit %u)", key, n, ST_MAX_KEY);
  return 0;
}

static int check_value(const pg_store *s, const char *key, const void *v,
                       size_t n)
{
  if (n > ST_MAX_VALUE)
    return st_fail(s, -EMSGSIZE, "key '%.80s': value too large (%zu "
                   "bytes, limit %u)", key, n, ST_MAX_VALUE);
  if (!v && n)
    return st_fail(s, -EINVAL, "key '%.80s': NULL value of %zu bytes",
                   key, n);
  return 0;
}

/* Seconds to milliseconds on the wire: < 0 is no limit. */
static uint32_t wire_ms(double timeout)
{
  double ms = ceil(timeout * 1000);

  if (timeout < 0 || ms >= ST_NO_LIMIT)
    return ST_NO_LIMIT;
  return (uint32_t)ms;
}

/* How long the client waits for a wait's reply. */
static double wait_span(const pg_store *s, double timeout)
{
  if (timeout < 0)
    return INFINITY;
  return timeout > 0 ? timeout + ST_GRACE : s->op_timeout;
}

/* ---- prefix views (Note [prefix views]) ---- */

static int view_key(const pg_store *s, const char *key, char **out)
{
  size_t kl;

  if (!key)
    return pg__fail(-EINVAL, "store: NULL key");
  kl = strlen(key);
  if (s->plen + kl > ST_MAX_KEY)
    return pg__fail(-EINVAL, "store: key '%.80s' under the prefix '%.80s' "
                    "is longer than %u bytes", key, s->prefix, ST_MAX_KEY);
  *out = malloc(s->plen + kl + 1);
  if (!*out)
    return pg__fail(-ENOMEM, "store: out of memory");
  memcpy(*out, s->prefix, s->plen);
  memcpy(*out + s->plen, key, kl + 1);
  return 0;
}

int pg_store_prefix(pg_store *s, const char *prefix, pg_store **out)
{
  pg_store *v;

  if (!out)
    return pg__fail(-EINVAL, "store: no place for the view");
  *out = NULL;
  if (!s || !prefix || strlen(prefix) > ST_MAX_KEY)
    return pg__fail(-EINVAL, "store: a prefix view needs a store and a "
                    "prefix of at most %u bytes", ST_MAX_KEY);
  v = calloc(1, sizeof *v);
  if (!v || !(v->prefix = strdup(prefix))) {
    free(v);
    return pg__fail(-ENOMEM, "store: out of memory");
  }
  v->base = s;
  v->plen = strlen(prefix);
  v->fd = -1;
  *out = v;
  return 0;
}

/* The body of a keyed call on a view: forwards CALL with k in place of
 * the key. */
#define VIEW_FORWARD(s, key, CALL)                                      \
  do {                                                                  \
    if ((s) && (s)->base) {                                             \
      char *k;                                                          \
      int verr_ = view_key((s), (key), &k);                             \
      if (verr_)                                                        \
        return verr_;                                                   \
      verr_ = (CALL);                                                   \
      free(k);                                                          \
      return verr_;                                                     \
    }                                                                   \
  } while (0)

int pg_store_set(pg_store *s, const char *key, const void *value,
                 size_t len)
{
  struct st_reply rep = { 0 };
  char what[128];
  int err;

  VIEW_FORWARD(s, key, pg_store_set(s->base, k, value, len));
  if ((err = st_enter(s)))
    return err;
  if ((err = check_key(s, key)) || (err = check_value(s, key, value, len)))
    return st_leave(s, &rep, err);
  snprintf(what, sizeof what, "set '%.80s'", key);
  req_begin(s, ST_SET);
  stw_buf_bytes(&s->req, key, strlen(key));
  stw_buf_bytes(&s->req, value, len);
  if ((err = st_call(s, what, s->op_timeout, &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    err = st_status(s, what, rep.status, 0, &rep.r);
  else if (!stw_rd_done(&rep.r))
    err = st_break(s, -EPROTO, what, 0);
  return st_leave(s, &rep, err);
}

int pg_store_get(pg_store *s, const char *key, double timeout,
                 void **value, size_t *len)
{
  struct st_reply rep = { 0 };
  const uint8_t *v;
  char what[128];
  size_t n;
  int err;

  if (!value || !len || timeout != timeout)
    return pg__fail(-EINVAL, "store: get needs value, len and a timeout");
  VIEW_FORWARD(s, key, pg_store_get(s->base, k, timeout, value, len));
  *value = NULL;
  *len = 0;
  if ((err = st_enter(s)))
    return err;
  if ((err = check_key(s, key)))
    return st_leave(s, &rep, err);
  snprintf(what, sizeof what, "get '%.80s'", key);
  req_begin(s, ST_GET);
  stw_buf_bytes(&s->req, key, strlen(key));
  stw_buf_u32(&s->req, wire_ms(timeout));
  if ((err = st_call(s, what, wait_span(s, timeout), &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    return st_leave(s, &rep, st_status(s, what, rep.status, timeout, &rep.r));
  v = stw_rd_bytes(&rep.r, &n);
  if (!stw_rd_done(&rep.r))
    return st_leave(s, &rep, st_break(s, -EPROTO, what, 0));
  /* Hand the reply buffer over: the value moves to its front and gets a
   * NUL, so text values can be used as strings. */
  memmove(rep.body, v, n);
  rep.body[n] = '\0';
  *value = rep.body;
  *len = n;
  rep.body = NULL;
  return st_leave(s, &rep, 0);
}

int pg_store_add(pg_store *s, const char *key, int64_t delta,
                 int64_t *result)
{
  struct st_reply rep = { 0 };
  char what[128];
  int64_t v;
  int err;

  VIEW_FORWARD(s, key, pg_store_add(s->base, k, delta, result));
  if ((err = st_enter(s)))
    return err;
  if ((err = check_key(s, key)))
    return st_leave(s, &rep, err);
  snprintf(what, sizeof what, "add to '%.80s'", key);
  req_begin(s, ST_ADD);
  stw_buf_bytes(&s->req, key, strlen(key));
  stw_buf_u64(&s->req, (uint64_t)delta);
  if ((err = st_call(s, what, s->op_timeout, &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    return st_leave(s, &rep, st_status(s, what, rep.status, 0, &rep.r));
  v = (int64_t)stw_rd_u64(&rep.r);
  if (!stw_rd_done(&rep.r))
    return st_leave(s, &rep, st_break(s, -EPROTO, what, 0));
  if (result)
    *result = v;
  return st_leave(s, &rep, 0);
}

static int view_wait(pg_store *s, const char *const *keys, size_t n,
                     double timeout)
{
  char **full = calloc(n ? n : 1, sizeof *full);
  size_t i;
  int err = full ? 0 : pg__fail(-ENOMEM, "store: out of memory");

  for (i = 0; !err && i < n; i++)
    err = view_key(s, keys[i], &full[i]);
  if (!err)
    err = pg_store_wait(s->base, (const char *const *)full, n, timeout);
  for (i = 0; full && i < n; i++)
    free(full[i]);
  free(full);
  return err;
}

int pg_store_wait(pg_store *s, const char *const *keys, size_t n,
                  double timeout)
{
  struct st_reply rep = { 0 };
  size_t i, total = 13;
  char what[128];
  int err;

  if ((!keys && n) || timeout != timeout)
    return pg__fail(-EINVAL, "store: wait needs keys and a timeout");
  if (s && s->base)
    return view_wait(s, keys, n, timeout);
  if ((err = st_enter(s)))
    return err;
  for (i = 0; i < n; i++) {
    if ((err = check_key(s, keys[i])))
      return st_leave(s, &rep, err);
    total += 4 + strlen(keys[i]);
  }
  if (n > ST_MAX_WAIT_KEYS || total > ST_MAX_FRAME)
    return st_leave(s, &rep, st_fail(s, -EMSGSIZE, "wait for %zu keys: "
                                     "too many (limit %u keys, %u bytes)",
                                     n, ST_MAX_WAIT_KEYS, ST_MAX_FRAME));
  if (n == 0)
    return st_leave(s, &rep, 0);
  if (n == 1)
    snprintf(what, sizeof what, "wait for '%.80s'", keys[0]);
  else
    snprintf(what, sizeof what, "wait for %zu keys ('%.40s', ...)", n,
             keys[0]);
  req_begin(s, ST_WAIT);
  stw_buf_u32(&s->req, wire_ms(timeout));
  stw_buf_u32(&s->req, (uint32_t)n);
  for (i = 0; i < n; i++)
    stw_buf_bytes(&s->req, keys[i], strlen(keys[i]));
  if ((err = st_call(s, what, wait_span(s, timeout), &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    err = st_status(s, what, rep.status, timeout, &rep.r);
  else if (!stw_rd_done(&rep.r))
    err = st_break(s, -EPROTO, what, 0);
  return st_leave(s, &rep, err);
}

int pg_store_compare_set(pg_store *s, const char *key, const void *expected,
                         size_t expected_len, const void *desired,
                         size_t desired_len, void **current,
                         size_t *current_len, bool *swapped)
{
  struct st_reply rep = { 0 };
  uint8_t did, present;
  const uint8_t *v;
  char what[128];
  size_t n;
  int err;

  if (current)
    *current = NULL;
  if (current_len)
    *current_len = 0;
  if (swapped)
    *swapped = false;
  VIEW_FORWARD(s, key, pg_store_compare_set(s->base, k, expected,
                                            expected_len, desired,
                                            desired_len, current,
                                            current_len, swapped));
  if ((err = st_enter(s)))
    return err;
  if ((err = check_key(s, key)) ||
      (err = check_value(s, key, expected, expected_len)) ||
      (err = check_value(s, key, desired, desired_len)))
    return st_leave(s, &rep, err);
  snprintf(what, sizeof what, "compare_set '%.80s'", key);
  req_begin(s, ST_CAS);
  stw_buf_bytes(&s->req, key, strlen(key));
  stw_buf_bytes(&s->req, expected, expected_len);
  stw_buf_bytes(&s->req, desired, desired_len);
  if ((err = st_call(s, what, s->op_timeout, &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    return st_leave(s, &rep, st_status(s, what, rep.status, 0, &rep.r));
  did = stw_rd_u8(&rep.r);
  present = stw_rd_u8(&rep.r);
  v = stw_rd_bytes(&rep.r, &n);
  if (!stw_rd_done(&rep.r) || did > 1 || present > 1 || (!present && n))
    return st_leave(s, &rep, st_break(s, -EPROTO, what, 0));
  if (swapped)
    *swapped = did;
  /* An absent key reads as NULL; a present one, even empty, as a
   * NUL-terminated copy. */
  if (current && present) {
    memmove(rep.body, v, n);
    rep.body[n] = '\0';
    *current = rep.body;
    rep.body = NULL;
  }
  if (current_len)
    *current_len = n;
  return st_leave(s, &rep, 0);
}

/* A request of one key (DELETE, DEL_PREFIX): 0 with the OK reply in
 * *rep, the connection held (the caller reads rep and leaves), or an
 * error, left. */
static int one_key_call(pg_store *s, uint8_t op, const char *key,
                        const char *what, struct st_reply *rep)
{
  int err;

  if ((err = st_enter(s)))
    return err;
  if ((err = check_key(s, key)))
    return st_leave(s, rep, err);
  req_begin(s, op);
  stw_buf_bytes(&s->req, key, strlen(key));
  if ((err = st_call(s, what, s->op_timeout, rep)))
    return st_leave(s, rep, err);
  if (rep->status != ST_OK)
    return st_leave(s, rep, st_status(s, what, rep->status, 0, &rep->r));
  return 0;
}

int pg_store_delete(pg_store *s, const char *key, bool *deleted)
{
  struct st_reply rep = { 0 };
  char what[128];
  uint8_t d;
  int err;

  if (deleted)
    *deleted = false;
  VIEW_FORWARD(s, key, pg_store_delete(s->base, k, deleted));
  snprintf(what, sizeof what, "delete '%.80s'", key);
  if ((err = one_key_call(s, ST_DELETE, key, what, &rep)))
    return err;
  d = stw_rd_u8(&rep.r);
  if (!stw_rd_done(&rep.r) || d > 1)
    return st_leave(s, &rep, st_break(s, -EPROTO, what, 0));
  if (deleted)
    *deleted = d;
  return st_leave(s, &rep, 0);
}

int pg__store_delete_prefix(pg_store *s, const char *prefix, int64_t *n)
{
  struct st_reply rep = { 0 };
  char what[128];
  int64_t v;
  int err;

  if (n)
    *n = 0;
  VIEW_FORWARD(s, prefix, pg__store_delete_prefix(s->base, k, n));
  snprintf(what, sizeof what, "delete the keys '%.80s*'", prefix);
  if ((err = one_key_call(s, ST_DEL_PREFIX, prefix, what, &rep)))
    return err;
  v = (int64_t)stw_rd_u64(&rep.r);
  if (!stw_rd_done(&rep.r))
    return st_leave(s, &rep, st_break(s, -EPROTO, what, 0));
  if (n)
    *n = v;
  return st_leave(s, &rep, 0);
}

int pg_store_num_keys(pg_store *s, int64_t *n)
{
  struct st_reply rep = { 0 };
  int64_t v;
  int err;

  if (!n)
    return pg__fail(-EINVAL, "store: num_keys needs a result");
  if (s && s->base)   /* every key, as torch's PrefixStore counts */
    return pg_store_num_keys(s->base, n);
  if ((err = st_enter(s)))
    return err;
  req_begin(s, ST_NUM_KEYS);
  if ((err = st_call(s, "num_keys", s->op_timeout, &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    return st_leave(s, &rep, st_status(s, "num_keys", rep.status, 0, &rep.r));
  v = (int64_t)stw_rd_u64(&rep.r);
  if (!stw_rd_done(&rep.r))
    return st_leave(s, &rep, st_break(s, -EPROTO, "num_keys", 0));
  *n = v;
  return st_leave(s, &rep, 0);
}

