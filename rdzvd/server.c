/* server.c -- the libuv side of rdzvd: accept, frame, decode, hand to the
 * state machine, encode and write what it sends back.  One loop, no
 * threads, no polling: deadlines run from one timer set to the state
 * machine's next deadline. */
#include "server.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "rdzv_proto.h"

/* A client whose unread replies exceed this is too slow: it is dropped
 * rather than allowed to grow the daemon's memory without bound. */
#define MAX_PENDING_WRITE (8u << 20)
#define READ_CHUNK 65536

struct conn {
  uv_tcp_t tcp;               /* first: the handle's data is the conn */
  struct rdzvd_server *s;
  char *buf;                  /* bytes read, not yet framed */
  size_t len, cap;
  char peer[INET6_ADDRSTRLEN];
  char local[INET6_ADDRSTRLEN];
  bool peer_loopback;
  bool closing;
  bool close_pending;         /* Note [deferred close] */
  bool drop_after_write;      /* close once the write queue drains */
  struct conn *close_next;    /* s->close_list */
  size_t pending;             /* bytes queued for writing */
  struct conn *prev, *next;   /* every open connection */
};

struct write_req {
  uv_write_t req;
  struct conn *c;
  size_t len;
  char *data;
};

struct rdzvd_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  uv_timer_t timer;
  struct rs_registry *reg;
  struct conn *conns;
  struct conn *close_list;    /* closes requested while in the machine */
  int in_machine;             /* depth of rs_* calls running */
  int port;
  int open_handles;
  bool stopping;
  void (*log)(void *ctx, const char *line);
  void *log_ctx;
  void (*idle_cb)(void *ctx);
  void *idle_ctx;
  uv_idle_t idle_check;
  char rbuf[READ_CHUNK];        /* Note [read buffers] */
};

static double now_s(const struct rdzvd_server *s)
{
  (void)s;
  return (double)uv_hrtime() / 1e9;
}

static void server_log(struct rdzvd_server *s, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

static void server_log(struct rdzvd_server *s, const char *fmt, ...)
{
  char line[1024];
  va_list ap;

  if (!s->log)
    return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  s->log(s->log_ctx, line);
}

/* One handle of s is closed; the last one, once stopping, frees s. */
static void handle_released(struct rdzvd_server *s)
{
  if (--s->open_handles == 0 && s->stopping) {
    rs_destroy(s->reg);
    free(s);
  }
}

static void handle_closed(uv_handle_t *h)
{
  handle_released(h->data);
}

static void conn_freed(uv_handle_t *h)
{
  struct conn *c = (struct conn *)h;
  struct rdzvd_server *s = c->s;

  free(c->buf);
  free(c);
  handle_released(s);
}

static void check_idle(struct rdzvd_server *s);
static void schedule(struct rdzvd_server *s);

/* Note [deferred close]
 *
 * The state machine walks its own lists (a key's waiters, a job's nodes)
 * while it sends, and a send can fail (the output limit, malloc,
 * uv_write): the connection must then close, and closing tells the
 * machine the node is gone, which frees what it is walking.  So every
 * call into the machine goes through machine_enter/machine_leave, and a
 * close requested meanwhile only marks the connection (close_pending:
 * nothing more is written to it) and queues it; machine_leave, once the
 * outermost call has returned, closes what was queued.  rs_conn_closed is
 * called from one place, conn_close_now, and never inside the machine;
 * the machine itself aborts on re-entry (rdzv_state.c), so the contract
 * is enforced, not only written down. */
static void conn_close_now(struct conn *c);

static void machine_enter(struct rdzvd_server *s)
{
  s->in_machine++;
}

static void machine_leave(struct rdzvd_server *s)
{
  struct conn *c;

  if (--s->in_machine > 0)
    return;
  while ((c = s->close_list)) {
    s->close_list = c->close_next;
    c->close_next = NULL;
    conn_close_now(c);
  }
}

/* Closes a connection: now, or once the machine has returned. */
static void conn_close(struct conn *c)
{
  struct rdzvd_server *s = c->s;

  if (c->closing || c->close_pending)
    return;
  if (s->in_machine) {
    c->close_pending = true;
    c->close_next = s->close_list;
    s->close_list = c;
    return;
  }
  conn_close_now(c);
}

/* The state machine learns the connection is gone; the handle closes. */
static void conn_close_now(struct conn *c)
{
  struct rdzvd_server *s = c->s;

  if (c->closing)
    return;
  c->closing = true;
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  if (!s->stopping) {
    machine_enter(s);
    rs_conn_closed(s->reg, c, now_s(s));
    machine_leave(s);
  }
  uv_close((uv_handle_t *)&c->tcp, conn_freed);
  if (!s->stopping) {
    schedule(s);
    check_idle(s);
  }
}

static void write_done(uv_write_t *req, int status)
{
  struct write_req *w = (struct write_req *)req;
  struct conn *c = w->c;

  c->pending -= w->len;
  free(w->data);
  free(w);
  if (c->closing)
    return;
  if (status < 0 || (c->drop_after_write && c->pending == 0))
    conn_close(c);
}

/* Queues one encoded frame (ownership of data passes here). */
static void conn_write(struct conn *c, char *data, size_t len)
{
  struct write_req *w;
  uv_buf_t b;

  if (c->closing || c->close_pending) {
    free(data);
    return;
  }
  if (c->pending + len > MAX_PENDING_WRITE) {
    server_log(c->s, "dropping %s: it does not read its replies",
               c->peer);
    free(data);
    conn_close(c);
    return;
  }
  w = malloc(sizeof *w);
  if (!w) {
    free(data);
    conn_close(c);
    return;
  }
  w->c = c;
  w->len = len;
  w->data = data;
  b = uv_buf_init(data, (unsigned int)len);
  c->pending += len;
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, write_done) != 0) {
    c->pending -= len;
    free(data);
    free(w);
    conn_close(c);
  }
}

static bool is_loopback(const char *addr)
{
  return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0 ||
         strcmp(addr, "localhost") == 0 ||
         strncmp(addr, "::ffff:127.", 11) == 0;
}

/* The state machine's send(): encode and queue.
 *
 * Note [master address seen from afar]: a node on the daemon's own host
 * may have reached it over loopback, so its address is 127.0.0.1 -- right
 * for its neighbours on that host, useless for a remote node.  A remote
 * node learns instead the address at which it reached this host, which is
 * the rank-0 node's host too. */
static void sink_send(void *ctx, void *connp, const struct rp_msg *m)
{
  struct conn *c = connp;
  struct rp_msg copy;
  char *data;
  size_t len;
  int err;

  (void)ctx;
  if (c->closing || c->close_pending)
    return;
  if (m->op == RP_ROUND && is_loopback(m->u.round.master_addr) &&
      !c->peer_loopback && c->local[0]) {
    copy = *m;
    snprintf(copy.u.round.master_addr, sizeof copy.u.round.master_addr,
             "%s", c->local);
    m = &copy;
  }
  err = rp_encode(m, &data, &len);
  if (err) {
    server_log(c->s, "internal: cannot encode %s for %s: %s",
               rp_op_name(m->op), c->peer, strerror(-err));
    return;
  }
  conn_write(c, data, len);
}

static void sink_drop(void *ctx, void *connp)
{
  struct conn *c = connp;

  (void)ctx;
  if (c->closing || c->close_pending)
    return;
  c->drop_after_write = true;
  if (c->pending == 0)
    conn_close(c);
}

static void sink_log(void *ctx, const char *line)
{
  struct rdzvd_server *s = ctx;

  server_log(s, "%s", line);
}

/* A frame the codec refused: answer with an ERROR and close. */
static void reject(struct conn *c, const char *why)
{
  struct rp_msg m;

  memset(&m, 0, sizeof m);
  m.op = RP_ERROR;
  m.u.text.code = RP_ERR_BAD_REQUEST;
  snprintf(m.u.text.message, sizeof m.u.text.message, "%s", why);
  server_log(c->s, "bad request from %s: %s", c->peer, why);
  sink_send(c->s, c, &m);
  sink_drop(c->s, c);
}

static void timer_fired(uv_timer_t *t)
{
  schedule(t->data);
}

/* Runs due deadlines and arms the timer for the next one. */
static void schedule(struct rdzvd_server *s)
{
  double now = now_s(s), next;

  if (s->stopping)
    return;
  machine_enter(s);
  next = rs_tick(s->reg, now);
  machine_leave(s);
  if (s->stopping)
    return;
  if (next < 0) {
    uv_timer_stop(&s->timer);
  } else {
    double ms = (next - now) * 1000.0;

    uv_timer_start(&s->timer, timer_fired,
                   ms <= 0 ? 0 : (uint64_t)ms + 1, 0);
  }
  check_idle(s);
}

/* Note [read buffers]: most reads carry whole frames, so they land in one
 * buffer shared by every connection; only a partial frame is copied into
 * the connection's own buffer.  10,000 idle agents then cost no read
 * memory at all. */
static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  struct conn *c = (struct conn *)h;
  size_t want = c->len + READ_CHUNK;
  char *grown;

  (void)hint;
  if (c->len == 0) {
    *buf = uv_buf_init(c->s->rbuf, sizeof c->s->rbuf);
    return;
  }
  if (want > c->cap) {
    grown = realloc(c->buf, want);
    if (!grown) {
      *buf = uv_buf_init(NULL, 0);
      return;
    }
    c->buf = grown;
    c->cap = want;
  }
  *buf = uv_buf_init(c->buf + c->len, (unsigned int)(c->cap - c->len));
}

/* Handles every whole frame in data[0..len); returns the bytes used, or
 * -1 when the connection is being closed. */
static ssize_t consume(struct conn *c, const char *data, size_t len)
{
  struct rdzvd_server *s = c->s;
  size_t off = 0, flen;
  struct rp_msg m;
  char err[256];
  int rc;

  while (!c->closing && !c->close_pending && !c->drop_after_write) {
    rc = rp_frame_peek(data + off, len - off, &flen);
    if (rc == 0)
      break;
    if (rc < 0) {
      reject(c, rc == -EMSGSIZE ? "frame too large" : "empty frame");
      return -1;
    }
    rc = rp_decode(data + off + RP_FRAME_HEADER, flen - RP_FRAME_HEADER,
                   &m, err, sizeof err);
    off += flen;
    if (rc) {
      reject(c, err);
      return -1;
    }
    machine_enter(s);
    rs_handle(s->reg, c, &m, now_s(s));
    machine_leave(s);
    rp_msg_free(&m);
  }
  return c->closing || c->close_pending || c->drop_after_write
           ? -1 : (ssize_t)off;
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
  struct conn *c = (struct conn *)st;
  ssize_t used;
  size_t left;

  if (nread < 0) {
    conn_close(c);
    return;
  }
  if (nread == 0)
    return;
  if (buf->base == c->s->rbuf) {
    used = consume(c, buf->base, (size_t)nread);
    left = used < 0 ? 0 : (size_t)nread - (size_t)used;
    if (left) {
      c->buf = malloc(left + READ_CHUNK);
      if (!c->buf) {
        conn_close(c);
        return;
      }
      c->cap = left + READ_CHUNK;
      memcpy(c->buf, buf->base + used, left);
      c->len = left;
    }
  } else {
    c->len += (size_t)nread;
    used = consume(c, c->buf, c->len);
    if (used > 0) {
      memmove(c->buf, c->buf + used, c->len - (size_t)used);
      c->len -= (size_t)used;
    }
    if (c->len == 0 || used < 0) {
      free(c->buf);
      c->buf = NULL;
      c->cap = c->len = 0;
    }
  }
  schedule(c->s);
}

static void addr_string(const struct sockaddr_storage *ss, char *out,
                        size_t len)
{
  if (ss->ss_family == AF_INET) {
    uv_ip4_name((const struct sockaddr_in *)ss, out, len);
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

    /* Dual-stack sockets show IPv4 peers as ::ffff:a.b.c.d. */
    if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
      inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], out, (socklen_t)len);
    else
      uv_ip6_name(s6, out, len);
  } else {
    snprintf(out, len, "?");
  }
}

static void on_connection(uv_stream_t *listener, int status)
{
  struct rdzvd_server *s = listener->data;
  struct sockaddr_storage ss;
  int namelen = sizeof ss;
  struct conn *c;

  if (status < 0) {
    server_log(s, "accept: %s", uv_strerror(status));
    return;
  }
  c = calloc(1, sizeof *c);
  if (!c)
    return;
  c->s = s;
  uv_tcp_init(s->loop, &c->tcp);
  s->open_handles++;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, conn_freed);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &namelen) == 0)
    addr_string(&ss, c->peer, sizeof c->peer);
  namelen = sizeof ss;
  if (uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&ss, &namelen) == 0)
    addr_string(&ss, c->local, sizeof c->local);
  c->peer_loopback = is_loopback(c->peer);
  c->next = s->conns;
  if (s->conns)
    s->conns->prev = c;
  s->conns = c;
  rs_set_peer_addr(s->reg, c, c->peer);
  uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

static void idle_fire(uv_idle_t *h)
{
  struct rdzvd_server *s = h->data;
  void (*cb)(void *) = s->idle_cb;

  uv_idle_stop(h);
  if (!cb || s->stopping || rs_node_count(s->reg) > 0)
    return;
  s->idle_cb = NULL;
  cb(s->idle_ctx);
}

static void check_idle(struct rdzvd_server *s)
{
  if (s->idle_cb && rs_node_count(s->reg) == 0)
    uv_idle_start(&s->idle_check, idle_fire);
}

void rdzvd_server_on_idle(struct rdzvd_server *s, void (*cb)(void *ctx),
                          void *ctx)
{
  s->idle_cb = cb;
  s->idle_ctx = ctx;
  check_idle(s);
}

static int bind_listener(struct rdzvd_server *s, const char *host, int port,
                         char *err, size_t errlen)
{
  struct sockaddr_storage ss;
  struct addrinfo hints, *res = NULL;
  char portstr[16];
  int rc;

  memset(&ss, 0, sizeof ss);
  if (!host || !*host) {
    /* Dual stack first; an IPv4-only machine falls back to 0.0.0.0. */
    uv_ip6_addr("::", port, (struct sockaddr_in6 *)&ss);
    rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
      rc = uv_listen((uv_stream_t *)&s->listener, 16384, on_connection);
    if (rc == UV_EAFNOSUPPORT || rc == UV_EADDRNOTAVAIL) {
      uv_ip4_addr("0.0.0.0", port, (struct sockaddr_in *)&ss);
      rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
      if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 16384, on_connection);
    }
    if (rc)
      snprintf(err, errlen, "cannot listen on port %d: %s", port,
               uv_strerror(rc));
    return rc;
  }
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  snprintf(portstr, sizeof portstr, "%d", port);
  rc = getaddrinfo(host, portstr, &hints, &res);
  if (rc != 0) {
    snprintf(err, errlen, "cannot resolve '%s': %s", host,
             gai_strerror(rc));
    return UV_EINVAL;
  }
  rc = uv_tcp_bind(&s->listener, res->ai_addr, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&s->listener, 16384, on_connection);
  freeaddrinfo(res);
  if (rc)
    snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port,
             uv_strerror(rc));
  return rc;
}

int rdzvd_server_start(uv_loop_t *loop, const struct rdzvd_server_opts *o,
                       struct rdzvd_server **out, char *err, size_t errlen)
{
  struct rdzvd_server *s = calloc(1, sizeof *s);
  struct rs_sink sink;
  struct sockaddr_storage ss;
  int namelen = sizeof ss, rc;

  if (!s) {
    snprintf(err, errlen, "out of memory");
    return UV_ENOMEM;
  }
  s->loop = loop;
  s->log = o->log;
  s->log_ctx = o->log_ctx;
  sink.ctx = s;
  sink.send = sink_send;
  sink.drop = sink_drop;
  sink.log = sink_log;
  s->reg = rs_create(&sink, o->limits.max_jobs ? &o->limits : NULL);
  if (!s->reg) {
    free(s);
    snprintf(err, errlen, "out of memory");
    return UV_ENOMEM;
  }
  uv_tcp_init(loop, &s->listener);
  uv_timer_init(loop, &s->timer);
  uv_idle_init(loop, &s->idle_check);
  s->listener.data = s;
  s->timer.data = s;
  s->idle_check.data = s;
  s->open_handles = 3;
  rc = bind_listener(s, o->host, o->port, err, errlen);
  if (rc) {
    rdzvd_server_stop(s);
    return rc;
  }
  if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss,
                         &namelen) == 0)
    s->port = ntohs(ss.ss_family == AF_INET6
                        ? ((struct sockaddr_in6 *)&ss)->sin6_port
                        : ((struct sockaddr_in *)&ss)->sin_port);
  *out = s;
  return 0;
}

int rdzvd_server_port(const struct rdzvd_server *s)
{
  return s->port;
}

int rdzvd_server_nodes(const struct rdzvd_server *s)
{
  return rs_node_count(s->reg);
}

int rdzvd_server_jobs(const struct rdzvd_server *s)
{
  return rs_job_count(s->reg);
}

void rdzvd_server_stop(struct rdzvd_server *s)
{
  struct conn *c, *next;

  if (s->stopping)
    return;
  s->stopping = true;
  for (c = s->conns; c; c = next) {
    next = c->next;
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, conn_freed);
  }
  s->conns = NULL;
  uv_close((uv_handle_t *)&s->listener, handle_closed);
  uv_close((uv_handle_t *)&s->timer, handle_closed);
  uv_close((uv_handle_t *)&s->idle_check, handle_closed);
}
