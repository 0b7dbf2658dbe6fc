/* server.c -- the libuv side of rdzvd: accept, frame, decode, hand to the
 * state machine, encode and write what it sends back.  One loop, no
 * threads, no polling: deadlines run from one timer set to the state
 * machine's next deadline.
 *
 * Files: server.c (the server's life: listen, accept, the hello and
 * deadline timers, idle, going away, stop), server_conn.c (a
 * connection's bytes: reading and writing within the budgets, closing),
 * server_dispatch.c (its frames: the handshake gate, STATUS, the state
 * machine's messages and its sink); their shared types are in
 * server_int.h. */
#include "server.h"
#include "server_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "err.h"
#include "hashtab.h"
#include "list.h"
#include "metrics.h"
#include "monotime.h"
#include "rdzv_auth.h"
#include "rdzv_proto.h"

#define DEF_MAX_CONNS 65536
#define DEF_HELLO_TIMEOUT 10.0
#define DEF_PREJOIN_FRAME ((size_t)16 << 10)
#define DEF_INPUT_BUDGET ((size_t)64 << 20)
#define DEF_OUTPUT_BUDGET ((size_t)256 << 20)
#define DEF_CONN_OUTPUT ((size_t)8 << 20)

void rdzvd_server__log(struct rdzvd_server *s, const char *fmt, ...)
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
void rdzvd_server__handle_released(struct rdzvd_server *s)
{
  if (--s->open_handles == 0 && s->stopping) {
    rdzv_state_destroy(s->reg);
    rdzv_auth_secret_clear(&s->secret);
    /* Connections closed by the stop itself left their counts. */
    for (size_t i = 0; i < s->peers.cap; i++)
      free(s->peers.s[i].item);
    free(s->peers.s);
    free(s);
  }
}

static void handle_closed(uv_handle_t *h)
{
  rdzvd_server__handle_released(h->data);
}

static void hello_fired(uv_timer_t *t);

static void timer_fired(uv_timer_t *t)
{
  rdzvd_server__schedule(t->data);
}

/* Runs due deadlines and arms the timer for the next one. */
void rdzvd_server__schedule(struct rdzvd_server *s)
{
  double now = monotime_now(), next;

  if (s->stopping)
    return;
  server_conn_machine_enter(s);
  next = rdzv_state_tick(s->reg, now);
  server_conn_machine_leave(s);
  if (s->stopping)
    return;
  if (next < 0) {
    uv_timer_stop(&s->timer);
  } else {
    double ms = (next - now) * 1000.0;

    uv_timer_start(&s->timer, timer_fired,
                   ms <= 0 ? 0 : (uint64_t)ms + 1, 0);
  }
  rdzvd_server__check_idle(s);
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

/* Arms the hello timer for the oldest connection that has not joined. */
static void hello_arm(struct rdzvd_server *s)
{
  struct conn *oldest;
  double ms;

  if (list_empty(&s->hello)) {
    uv_timer_stop(&s->hello_timer);
    return;
  }
  oldest = list_first(&s->hello, struct conn, hello);
  ms = (oldest->accepted_at + s->lim.hello_timeout - monotime_now()) *
       1000.0;
  uv_timer_start(&s->hello_timer, hello_fired, ms <= 0 ? 0
                 : (uint64_t)ms + 1, 0);
}

/* Connections accepted hello_timeout ago that have not joined go.  The
 * list is in accept order, so only its head is ever looked at. */
static void hello_fired(uv_timer_t *t)
{
  struct rdzvd_server *s = t->data;
  double now = monotime_now();
  struct conn *c;

  while (!list_empty(&s->hello) &&
         (c = list_first(&s->hello, struct conn, hello))->accepted_at +
         s->lim.hello_timeout <= now) {
    rdzvd_server__log(s, "dropping %s: no join within %g s of connecting",
                      c->peer, s->lim.hello_timeout);
    server_conn_hello_remove(c);
    server_conn_close(c);
  }
  hello_arm(s);
}

static void on_connection(uv_stream_t *listener, int status)
{
  struct rdzvd_server *s = listener->data;
  struct sockaddr_storage ss;
  int namelen = sizeof ss;
  struct conn *c;

  if (status < 0) {
    rdzvd_server__log(s, "accept: %s", uv_strerror(status));
    return;
  }
  c = calloc(1, sizeof *c);
  if (!c)
    return;
  c->s = s;
  list_init(&c->in_server);
  list_init(&c->hello);
  list_init(&c->paused);
  list_init(&c->in_close);
  uv_tcp_init(s->loop, &c->tcp);
  s->open_handles++;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, server_conn_freed);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  metrics_conn_opened(s->metrics);
  s->n_conns++;
  list_insert_head(&s->conns, &c->in_server);
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &namelen) == 0)
    addr_string(&ss, c->peer, sizeof c->peer);
  namelen = sizeof ss;
  if (uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&ss, &namelen) == 0)
    addr_string(&ss, c->local, sizeof c->local);
  c->peer_loopback = server_dispatch_is_loopback(c->peer);
  if (s->n_conns > s->lim.max_conns) {
    rdzvd_server__log(s, "refused a connection from %s: too many connections "
                      "(%d)", c->peer, s->lim.max_conns);
    server_conn_close(c);
    return;
  }
  c->pc = server_conn_peer_ref(s, c->peer);
  if (c->pc && c->pc->n > s->lim.max_conns_per_peer) {
    struct rdzv_proto_msg m;

    /* Note [tenant share]: told why, then closed; other addresses go on. */
    s->peer_refused++;
    memset(&m, 0, sizeof m);
    m.op = RDZV_PROTO_ERROR;
    m.u.text.code = RDZV_PROTO_ERR_LIMIT;
    snprintf(m.u.text.message, sizeof m.u.text.message, "too many "
             "connections from %s (%d: rdzvd --max-conns-per-peer)", c->peer,
             s->lim.max_conns_per_peer);
    rdzvd_server__log(s, "refused a connection from %s: %s", c->peer,
                      m.u.text.message);
    server_dispatch_send(s, c, &m);
    server_dispatch_drop(s, c);
    return;
  }
  c->accepted_at = monotime_now();
  c->in_hello = true;
  list_insert_tail(&s->hello, &c->hello);
  if (!uv_is_active((uv_handle_t *)&s->hello_timer))
    hello_arm(s);
  if (server_conn_known(c)) {
    server_conn_machine_enter(s);
    rdzv_state_set_peer_addr(s->reg, c, c->peer);
    server_conn_machine_leave(s);
  }
  server_conn_read_update(c);
}

static void idle_fire(uv_idle_t *h)
{
  struct rdzvd_server *s = h->data;
  void (*cb)(void *) = s->idle_cb;

  uv_idle_stop(h);
  if (!cb || s->stopping || rdzv_state_node_count(s->reg) > 0)
    return;
  s->idle_cb = NULL;
  cb(s->idle_ctx);
}

void rdzvd_server__check_idle(struct rdzvd_server *s)
{
  if (s->idle_cb && rdzv_state_node_count(s->reg) == 0)
    uv_idle_start(&s->idle_check, idle_fire);
}

void rdzvd_server_on_idle(struct rdzvd_server *s, void (*cb)(void *ctx),
                          void *ctx)
{
  s->idle_cb = cb;
  s->idle_ctx = ctx;
  rdzvd_server__check_idle(s);
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
    return err_set(err, errlen, UV_EINVAL, "cannot resolve '%s': %s", host,
                   gai_strerror(rc));
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
  struct rdzv_state_sink sink;
  struct sockaddr_storage ss;
  int namelen = sizeof ss, rc;

  if (!s) {
    return err_set(err, errlen, UV_ENOMEM, "out of memory");
  }
  s->loop = loop;
  list_init(&s->conns);
  list_init(&s->close_list);
  list_init(&s->hello);
  list_init(&s->paused);
  if (o->secret)
    s->secret = *o->secret;
  s->lim = o->io;
  rdzvd_server_limits_default(&s->lim);
  s->log = o->log;
  s->log_ctx = o->log_ctx;
  sink.ctx = s;
  sink.send = server_dispatch_send;
  sink.drop = server_dispatch_drop;
  /* No log (--quiet): the machine formats no line to throw away. */
  sink.log = o->log ? server_dispatch_log : NULL;
  s->peer_seed = hashtab_mix64((uint64_t)(uintptr_t)s ^ 0x7065657273ull);
  s->reg = rdzv_state_create(&sink, &o->limits);
  if (s->reg && o->token_key && o->token_key->len &&
      rdzv_state_set_token_key(s->reg, o->token_key)) {
    rdzv_state_destroy(s->reg);
    s->reg = NULL;
  }
  if (!s->reg) {
    rdzv_auth_secret_clear(&s->secret);
    free(s);
    return err_set(err, errlen, UV_ENOMEM, "out of memory");
  }
  s->metrics = o->metrics;
  rdzv_state_set_metrics(s->reg, o->metrics);
  rdzv_state_set_ledger(s->reg, o->ledger);
  rdzv_state_set_live_host(s->reg, o->live);
  if (o->embedded) {
    char me[RDZV_PROTO_MAX_ADDR + 1] = "";

    if (gethostname(me, sizeof me - 1) < 0)
      me[0] = '\0';
    rdzv_state_set_embedded(s->reg, (int64_t)getpid(), me);
  }
  uv_tcp_init(loop, &s->listener);
  uv_timer_init(loop, &s->timer);
  uv_idle_init(loop, &s->idle_check);
  uv_timer_init(loop, &s->hello_timer);
  uv_prepare_init(loop, &s->turn_check);
  s->listener.data = s;
  s->timer.data = s;
  s->idle_check.data = s;
  s->hello_timer.data = s;
  s->turn_check.data = s;
  s->open_handles = 5;
  uv_prepare_start(&s->turn_check, server_conn_turn_begin);
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

void rdzvd_server_peer_counts(const struct rdzvd_server *s, int *peers,
                              uint64_t *refused_jobs,
                              uint64_t *refused_waiting,
                              uint64_t *refused_conns)
{
  rdzv_state_peer_counts(s->reg, peers, refused_jobs, refused_waiting);
  *refused_conns = s->peer_refused;
}

int rdzvd_server_nodes(const struct rdzvd_server *s)
{
  return rdzv_state_node_count(s->reg);
}

void rdzvd_server_jobs_by_phase(const struct rdzvd_server *s,
                                int counts[RDZV_STATE_PHASES],
                                const char *names[RDZV_STATE_PHASES])
{
  rdzv_state_jobs_by_phase(s->reg, counts, names);
}

void rdzvd_server_going_away(struct rdzvd_server *s, const char *why)
{
  struct rdzv_proto_msg m;
  struct list_node todo;

  if (s->stopping)
    return;
  /* Stop accepting first: an agent that reconnects at once must not
   * reach this daemon's backlog, only its successor. */
  uv_close((uv_handle_t *)&s->listener, handle_closed);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_GOING_AWAY;
  snprintf(m.u.text.message, sizeof m.u.text.message, "%s", why);
  /* uv_write writes at once into an empty socket buffer, so the frame
   * is out before the close below; a connection with replies still
   * queued may lose it and finds out from the close instead. */
  /* A send that fails closes its connection, and the state machine may
   * close others then: the connections still to visit wait on todo, from
   * which a close takes them out, and go back to s->conns in order. */
  list_init(&todo);
  while (!list_empty(&s->conns)) {
    struct list_node *n = s->conns.next;

    list_remove(n);
    list_insert_tail(&todo, n);
  }
  while (!list_empty(&todo)) {
    struct conn *c = list_first(&todo, struct conn, in_server);

    list_remove(&c->in_server);
    list_insert_tail(&s->conns, &c->in_server);
    if (server_conn_known(c) && !c->closing && !c->close_pending)
      server_dispatch_send(s, c, &m);
  }
  rdzvd_server_stop(s);
}

void rdzvd_server_stop(struct rdzvd_server *s)
{
  struct list_node *pos, *next;

  if (s->stopping)
    return;
  s->stopping = true;
  list_for_each_safe(pos, next, &s->conns) {
    struct conn *c = list_entry(pos, struct conn, in_server);

    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, server_conn_freed);
  }
  list_init(&s->conns);       /* closing: none is unlinked from now on */
  if (!uv_is_closing((uv_handle_t *)&s->listener))
    uv_close((uv_handle_t *)&s->listener, handle_closed);
  uv_close((uv_handle_t *)&s->timer, handle_closed);
  uv_close((uv_handle_t *)&s->idle_check, handle_closed);
  uv_close((uv_handle_t *)&s->hello_timer, handle_closed);
  uv_close((uv_handle_t *)&s->turn_check, handle_closed);
}

void rdzvd_server_limits_default(struct rdzvd_server_limits *l)
{
  if (l->max_conns <= 0)
    l->max_conns = DEF_MAX_CONNS;
  /* A quarter of the whole, but never below what a small daemon (or
   * one host's agents) needs: 1024, or every connection when fewer. */
  if (l->max_conns_per_peer <= 0) {
    int floor_n = l->max_conns < 1024 ? l->max_conns : 1024;

    l->max_conns_per_peer = l->max_conns / 4 > floor_n ? l->max_conns / 4
                                                       : floor_n;
  }
  if (!(l->hello_timeout > 0))
    l->hello_timeout = DEF_HELLO_TIMEOUT;
  if (!l->prejoin_frame)
    l->prejoin_frame = DEF_PREJOIN_FRAME;
  if (!l->input_budget)
    l->input_budget = DEF_INPUT_BUDGET;
  if (!l->output_budget)
    l->output_budget = DEF_OUTPUT_BUDGET;
  if (!l->conn_output)
    l->conn_output = DEF_CONN_OUTPUT;
}
