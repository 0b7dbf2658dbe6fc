/* rdzv_client_conn.c -- the rdzvd back end's connection: writing and
 * reading frames, the first connection, keepalives both ways, and the
 * reconnection after a loss (Note [reconnect]).  What the frames say is
 * rdzv_client.c's. */
#include "rdzv_client.h"
#include "rdzv_client_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdzv_rules.h"
#include "monotime.h"
#include "rdzv_proto_frames.h"
#include "say.h"

#define READ_CHUNK 65536

/* One of c's handles (or its embedded server) is gone; the last one,
 * once destroyed, frees c. */
void rdzv_client__release(struct rdzv_client *c)
{
  if (--c->open_handles == 0 && c->destroyed) {
    free(c->buf);
    rdzv_auth_secret_clear(&c->secret);
    free(c);
  }
}

void rdzv_client__handle_closed(uv_handle_t *h)
{
  struct rdzv_client *c = h->data;

  if (h == (uv_handle_t *)&c->tcp)
    c->tcp_open = false;
  rdzv_client__release(c);
}
/* ---- writing ----------------------------------------------------------- */

struct write_req {
  uv_write_t req;
  char *data;
};

static void write_done(uv_write_t *req, int status)
{
  struct write_req *w = (struct write_req *)req;

  (void)status;   /* a broken connection shows up on the read side */
  free(w->data);
  free(w);
}

int rdzv_client__send_msg(struct rdzv_client *c, const struct rdzv_proto_msg *m)
{
  struct write_req *w;
  uv_buf_t b;
  size_t len;
  int err;

  if (!c->connected)
    return UV_ENOTCONN;
  w = malloc(sizeof *w);
  if (!w)
    return UV_ENOMEM;
  err = rdzv_proto_encode(m, &w->data, &len);
  if (err) {
    free(w);
    return err;
  }
  b = uv_buf_init(w->data, (unsigned int)len);
  err = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, write_done);
  if (err) {
    free(w->data);
    free(w);
  }
  return err;
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  struct rdzv_client *c = h->data;
  size_t want = c->len + READ_CHUNK;
  char *grown;

  (void)hint;
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

void rdzv_client__close_tcp(struct rdzv_client *c)
{
  c->connected = false;
  if (c->tcp_open && !uv_is_closing((uv_handle_t *)&c->tcp))
    uv_close((uv_handle_t *)&c->tcp, rdzv_client__handle_closed);
}

/* One message from the server; stops the frame loop once the client is
 * done (destroyed, or failed). */
static void flush_pending(struct rdzv_client *c);

static int on_frame(void *ctx, struct rdzv_proto_msg *m)
{
  struct rdzv_client *c = ctx;

  c->spoke = c->ever_spoke = true;
  if (c->unproven) {            /* Note [reconnect]: it is an rdzvd */
    c->unproven = false;
    flush_pending(c);
  }
  if (c->authed)
    rdzv_client__dispatch(c, m);
  else
    rdzv_client__handshake_step(c, m);
  return c->destroyed || c->failed || !c->connected;
}

/* Note [foreign protocol]: the first reply tells an rdzvd from anything
 * else at the endpoint (a torchrun TCPStore closes or resets the
 * connection after our hello, an HTTP server answers text): say what
 * was found, not just "connection closed". */
static void foreign_protocol(struct rdzv_client *c, int err)
{
  char what[96];

  if (c->rx_bytes)
    snprintf(what, sizeof what, "answered %zu bytes that are not an rdzvd "
             "frame", c->rx_bytes);
  else
    snprintf(what, sizeof what, "%s the connection after our hello",
             err == UV_ECONNRESET ? "reset" : "closed");
  rdzv_client__give_up(c, UV_EPROTO,
                       "the endpoint %s:%d does not speak the rdzvd protocol "
                       "(it %s; is it a torch TCPStore, or another service?)",
                       c->host, c->o.port, what);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
  struct rdzv_client *c = st->data;
  char err[256];
  ssize_t used;

  (void)buf;
  /* Once the endpoint has been an rdzvd, a connection that closes before
   * its first frame is a daemon going or restarting: reconnect. */
  if (nread < 0 && !c->spoke && !c->ever_spoke) {
    rdzv_client__close_tcp(c);
    foreign_protocol(c, (int)nread);
    return;
  }
  if (nread < 0) {
    rdzv_client__lost(
        c, nread == UV_EOF ? "connection closed" : uv_strerror((int)nread),
        false);
    return;
  }
  c->last_rx = monotime_now();
  c->len += (size_t)nread;
  c->rx_bytes += (size_t)nread;
  used = rdzv_proto_frames_read(c->buf, c->len, 0, on_frame, c, err,
                                sizeof err);
  if (used < 0) {
    rdzv_client__close_tcp(c);
    if (!c->spoke && !c->ever_spoke) {
      foreign_protocol(c, UV_EPROTO);
      return;
    }
    rdzv_client__give_up(c, UV_EPROTO,
                         "bad message from the rendezvous server %s:%d: %s",
                         c->host, c->o.port, err);
    return;
  }
  if (c->destroyed || c->failed || !c->connected)
    return;                     /* a reconnect starts with c->len 0 */
  memmove(c->buf, c->buf + used, c->len - (size_t)used);
  c->len -= (size_t)used;
}

/* ---- connecting and keepalives ------------------------------------------ */

/* Note [reconnect]: when the connection is lost (closed, reset, silent
 * for the keepalive window, or GOING_AWAY), the workers keep running and
 * the client reconnects: after a delay that doubles from 0.1 s (0 after
 * GOING_AWAY) up to RDZV_RECONNECT_BACKOFF_CAP, each drawn at random
 * between half and all of it, so that thousands of agents do not all
 * come back in the same millisecond; for at most reconnect_timeout
 * seconds.  Once connected (and authenticated) it sends RESUME: the
 * ROUND it runs and its phase (running, or at the exit barrier), or the
 * round it waits for; then what happened meanwhile: a worker failure,
 * the exit barrier, a join.  The server decides what that means
 * (rdzv_state.h, Note [soft state]). */

/* "the rendezvous server H:P", or, when it was embedded in a node's
 * agent, "the rendezvous host H:P (embedded in the agent of node R)". */
static const char *server_name(const struct rdzv_client *c, char *buf,
                               size_t len)
{
  if (c->have_round && c->last.embedded)
    snprintf(buf, len, "the rendezvous host %s:%d (embedded in the agent "
             "of node %d)", c->host, c->o.port, c->last.host_rank);
  else
    snprintf(buf, len, "the rendezvous server %s:%d", c->host, c->o.port);
  return buf;
}

static void retry_fire(uv_timer_t *t);

static void schedule_retry(struct rdzv_client *c)
{
  double delay;

  c->rng ^= c->rng << 13;         /* xorshift64 */
  c->rng ^= c->rng >> 7;
  c->rng ^= c->rng << 17;
  delay = c->backoff * (0.5 + 0.5 * (double)(c->rng >> 11) / 0x1p53);
  if (c->reconnecting)          /* the last attempt at the deadline */
    delay = fmax(0, fmin(delay, c->lost_at + c->reconnect_for -
                                monotime_now()));

  c->backoff = c->backoff <= 0 ? 0.1 : c->backoff * 2;
  if (c->backoff > RDZV_RECONNECT_BACKOFF_CAP)
    c->backoff = RDZV_RECONNECT_BACKOFF_CAP;
  uv_timer_start(&c->retry, retry_fire, (uint64_t)(delay * 1000.0), 0);
}

/* Note [a lost host] (rdzvd/rdzv_rules.h): the embedded host is not
 * back, and the job cannot go on without it: every node ends it, naming
 * the host and how it left (the agent exits 75). */
static void host_not_back(struct rdzv_client *c, const char *what)
{
  const struct rdzv_rules_loss *l = &c->host_loss;
  char because[160];
  char bound[64];

  rdzv_rules_lost_why(l, because, sizeof because);
  snprintf(c->base.lost_host, sizeof c->base.lost_host, "%s", c->host);
  snprintf(c->base.lost_why, sizeof c->base.lost_why, "%s",
           l->how == RDZV_LEFT_SILENT ? "its link went silent"
                                      : "its agent exited");
  c->base.ended_lost = true;
  if (c->reconnect_for >= c->o.reconnect_timeout)
    snprintf(bound, sizeof bound, "reconnect_timeout");
  else if (l->how == RDZV_LEFT_SILENT)
    snprintf(bound, sizeof bound, "%g s after the keepalive window",
             RDZV_RULES_HOST_GRACE);
  else
    snprintf(bound, sizeof bound, "one keepalive window and %g s",
             RDZV_RULES_HOST_GRACE);
  rdzv_client__give_up(c, UV_ETIMEDOUT,
                       "%s did not come back within %g s (%s): %s: "
                       "node %d left (%s): %s",
                       what, c->reconnect_for, bound, c->last_connect_error,
                       c->last.host_rank, rdzv_rules_leave_name(l->how),
                       because);
}

/* One more attempt failed: the next, or the end of the reconnection
 * (reconnect_timeout, or a lost host's wait: Note [a lost host]).  A
 * millisecond's margin: the last attempt was timed for the deadline. */
static void reconnect_failed(struct rdzv_client *c)
{
  char what[RDZV_PROTO_MAX_ADDR + 96];

  if (monotime_now() + 0.001 >= c->lost_at + c->reconnect_for) {
    server_name(c, what, sizeof what);
    if (c->host_ends) {
      host_not_back(c, what);
      return;
    }
    rdzv_client__give_up(c, UV_ETIMEDOUT, "%s did not come back within %g s "
            "(reconnect_timeout): %s", what, c->o.reconnect_timeout,
            c->last_connect_error);
    return;
  }
  schedule_retry(c);
}

/* Note [a lost host] (rdzvd/rdzv_rules.h): this node runs a round, or
 * waits at its exit barrier (the host had not passed it: it stays up
 * until every other node has left), and its embedded host is lost (why:
 * the connection's end, or "no answer for ..."): how long it waits for
 * the host, and whether the job ends then. */
static void host_lost(struct rdzv_client *c, const char *why)
{
  double window = rdzv_rules_keepalive_window(c->o.conf.keepalive_interval,
                                              c->o.conf.keepalive_misses);
  struct rdzv_rules_loss *l = &c->host_loss;

  memset(l, 0, sizeof *l);
  l->how = strncmp(why, "no answer for ", 14) == 0 ? RDZV_LEFT_SILENT
                                                   : RDZV_LEFT_DIED;
  l->n_left = c->last.group_world_size - 1;
  l->min_nodes = c->o.conf.min_nodes;
  l->restart_count = c->last.restart_count;
  l->max_restarts = c->o.conf.max_restarts;
  c->host_ends = rdzv_rules_lost_ends(l);
  c->reconnect_for = rdzv_rules_host_wait(l, window, c->o.reconnect_timeout);
}

/* Note [first connection]: the first connection failed (refused,
 * unreachable, or it reached something that never answered).  Said at
 * once and then every 10 s, doubling to a minute, with how long it has
 * tried; retried until the join timeout, then a failure naming the
 * address and the last reason. */
static void first_connect_failed(struct rdzv_client *c, int err)
{
  double t = monotime_now();

  if (t >= c->connect_deadline) {
    rdzv_client__give_up(c, err,
                         "cannot reach the rendezvous at %s:%d within the join "
                         "timeout (%.0f s): %s",
                         c->host, c->o.port, c->o.conf.join_timeout,
                         c->last_connect_error);
    return;
  }
  if (t >= c->next_report) {
    if (!c->report_every)
      say("cannot reach the rendezvous at %s:%d yet: %s; retrying until "
          "the join timeout (%.0f s)", c->host, c->o.port,
          c->last_connect_error, c->o.conf.join_timeout);
    else
      say("still cannot reach the rendezvous at %s:%d after %.0f s: %s; "
          "giving up in %.0f s", c->host, c->o.port, t - c->first_try_at,
          c->last_connect_error, c->connect_deadline - t);
    c->report_every = c->report_every ? fmin(2 * c->report_every, 60) : 10;
    c->next_report = t + c->report_every;
  }
  uv_timer_start(&c->retry, retry_fire, 500, 0);
}

void rdzv_client__lost(struct rdzv_client *c, const char *why, bool going_away)
{
  char what[RDZV_PROTO_MAX_ADDR + 96];
  bool embedded;

  /* A connection given up on to come back is closed with a reset, not a
   * FIN: a server that is still there (it stalled, or only our direction
   * broke) then keeps this node for its keepalive window instead of
   * taking the close for a death (rdzvd.8, SOFT STATE). */
  c->connected = false;
  if (going_away || c->o.reconnect_timeout <= 0 || !c->tcp_open ||
      uv_is_closing((uv_handle_t *)&c->tcp) ||
      uv_tcp_close_reset(&c->tcp, rdzv_client__handle_closed) != 0)
    rdzv_client__close_tcp(c);
  if (c->destroyed || c->failed)
    return;
  /* Note [foreign protocol]: a connection that never carried a frame
   * reached something that is not an rdzvd (a silent listener, an HTTP
   * server waiting for its request): one more failed attempt, counted
   * against the join timeout (first connection) or the reconnect
   * timeout, never a fresh start. */
  if (!c->ever_spoke) {
    snprintf(c->last_connect_error, sizeof c->last_connect_error,
             "it accepted the connection but never spoke rdzvd's protocol "
             "(%s)", why);
    c->join_pending = true;
    first_connect_failed(c, UV_EPROTO);
    return;
  }
  if (c->unproven) {
    c->unproven = false;
    c->reconnecting = true;
    snprintf(c->last_connect_error, sizeof c->last_connect_error,
             "the endpoint accepted the connection but never spoke "
             "rdzvd's protocol (%s)", why);
    reconnect_failed(c);
    return;
  }
  server_name(c, what, sizeof what);
  embedded = c->have_round && c->last.embedded;
  if (c->o.reconnect_timeout <= 0) {
    if (embedded && !going_away && c->phase != RDZV_PROTO_PHASE_GATHERING) {
      host_lost(c, why);
      if (c->host_ends) {
        snprintf(c->last_connect_error, sizeof c->last_connect_error, "%s",
                 why);
        host_not_back(c, what);
        return;
      }
    }
    rdzv_client__give_up(c, going_away ? UV_ECONNRESET : UV_ECONNABORTED,
                         "%s%s%s: %s", embedded ? "" : "lost ", what,
                         embedded ? " is gone" : "", why);
    return;
  }
  if (!c->reconnecting) {
    c->reconnecting = true;
    c->lost_at = monotime_now();
    c->reconnect_for = c->o.reconnect_timeout;
    c->host_ends = false;
    if (embedded && !going_away && c->phase != RDZV_PROTO_PHASE_GATHERING)
      host_lost(c, why);
    if (c->host_ends) {
      char because[160];

      rdzv_rules_lost_why(&c->host_loss, because, sizeof because);
      say("%s is gone: %s (%s); without it %s: the job ends unless the "
          "host is back within %g s; %s, reconnecting", what, why,
          rdzv_rules_leave_name(c->host_loss.how), because, c->reconnect_for,
          c->phase == RDZV_PROTO_PHASE_EXIT ? "waiting at the exit barrier"
                                            : "workers keep running");
    } else {
      say("%s%s%s: %s; %s, reconnecting for up to %g s (reconnect_timeout)",
          going_away ? "going away: " : embedded ? "" : "lost ", what,
          embedded && !going_away ? " is gone" : "", why,
          c->phase == RDZV_PROTO_PHASE_GATHERING ? "still waiting for a round"
                                                 : "workers keep running",
          c->o.reconnect_timeout);
    }
  }
  c->backoff = going_away ? 0 : 0.1;
  schedule_retry(c);
}

/* Connected and authenticated: the first JOIN, or the re-assertion. */
void rdzv_client__on_ready(struct rdzv_client *c)
{
  struct rdzv_proto_msg m;
  struct rdzv_proto_resume *r = &m.u.resume;
  bool running;

  if (!c->reconnecting) {
    if (c->join_pending)
      rdzv_client__send_join(c);
    return;
  }
  c->reconnecting = false;
  running = c->have_round &&
            (c->phase != RDZV_PROTO_PHASE_GATHERING || c->failure_pending);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_RESUME;
  snprintf(r->join.id, sizeof r->join.id, "%s", c->id);
  snprintf(r->join.addr, sizeof r->join.addr, "%s", c->local_addr);
  snprintf(r->join.host, sizeof r->join.host, "%s", c->myhost);
  r->join.pid = getpid();
  r->join.nproc = c->o.nproc;
  r->join.master_port = c->o.master_port;
  r->join.reason = c->pending_reason;
  r->join.conf = c->o.conf;
  if (running) {
    r->phase = c->phase == RDZV_PROTO_PHASE_EXIT ? RDZV_PROTO_PHASE_EXIT
                                                 : RDZV_PROTO_PHASE_RUNNING;
    r->round = c->last;
    r->round.embedded = false;
    r->round.host_rank = 0;
  } else {
    r->phase = RDZV_PROTO_PHASE_GATHERING;
    r->round.round = c->gather_round;
    r->round.restart_count = c->gather_restarts;
  }
  memcpy(r->round.token, c->token, sizeof c->token);
  snprintf(c->resumed_what, sizeof c->resumed_what, "%s round %d",
           running ? (r->phase == RDZV_PROTO_PHASE_EXIT ? "the exit barrier of"
                                                : "running")
                   : "waiting for", r->round.round);
  rdzv_client__send_msg(c, &m);
  /* What happened meanwhile waits until the endpoint has answered as an
   * rdzvd (a PONG to this at the latest): sent into something else, it
   * would be lost. */
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KEEPALIVE;
  rdzv_client__send_msg(c, &m);
  c->resumed_running = running;
  c->unproven = true;
}

/* The reconnection is proved (Note [reconnect]): what happened while the
 * server was away. */
static void flush_pending(struct rdzv_client *c)
{
  struct rdzv_proto_msg m;
  bool running = c->resumed_running;

  say("reconnected to the rendezvous server %s:%d after %.1f s; "
      "re-asserting %s", c->host, c->o.port, monotime_now() - c->lost_at,
      c->resumed_what);
  if (c->failure_pending) {
    memset(&m, 0, sizeof m);
    m.op = RDZV_PROTO_FAILURE;
    m.u.failure = c->pending_failure;
    c->failure_pending = false;
    rdzv_client__send_msg(c, &m);
  }
  if (running && c->phase == RDZV_PROTO_PHASE_EXIT) {
    memset(&m, 0, sizeof m);
    m.op = RDZV_PROTO_BARRIER;
    snprintf(m.u.barrier.name, sizeof m.u.barrier.name, "exit");
    m.u.barrier.round = c->round;
    rdzv_client__send_msg(c, &m);
  }
  c->barrier_pending = false;
  if (running && c->join_pending)
    rdzv_client__send_join(c);
  c->join_pending = false;      /* a gathering RESUME is the join */
}

static void keepalive_tick(uv_timer_t *t)
{
  struct rdzv_client *c = t->data;
  double window = rdzv_rules_keepalive_window(c->o.conf.keepalive_interval,
                                              c->o.conf.keepalive_misses);
  struct rdzv_proto_msg m;

  if (!c->connected)
    return;
  if (monotime_now() - c->last_rx > window) {
    char why[64];

    snprintf(why, sizeof why, "no answer for %.1f s", window);
    rdzv_client__lost(c, why, false);
    return;
  }
  if (!c->authed)
    return;   /* only the handshake before it succeeds */
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KEEPALIVE;
  rdzv_client__send_msg(c, &m);
}


static void retry_fire(uv_timer_t *t)
{
  rdzv_client__start_connect(t->data);
}

static void connected_cb(uv_connect_t *req, int status)
{
  struct rdzv_client *c = req->data;
  uint64_t ms;

  c->connecting = false;
  if (c->destroyed)
    return;
  if (status < 0) {
    snprintf(c->last_connect_error, sizeof c->last_connect_error, "%s",
             c->connect_timed_out ? "connection timed out"
                                  : uv_strerror(status));
    c->connect_timed_out = false;
    rdzv_client__close_tcp(c);
    if (c->reconnecting) {
      reconnect_failed(c);
      return;
    }
    first_connect_failed(c, status);
    return;
  }
  c->connected = true;
  c->len = 0;
  if (c->reconnecting)
    uv_timer_stop(&c->retry);   /* the connect watchdog */
  c->last_rx = monotime_now();
  c->spoke = false;
  c->rx_bytes = 0;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
  ms = (uint64_t)(c->o.conf.keepalive_interval * 1000.0);
  uv_timer_start(&c->keepalive, keepalive_tick, ms ? ms : 1, ms ? ms : 1);
  c->authed = c->secret.len == 0;
  if (!c->authed) {
    struct rdzv_proto_msg hello;

    if (rdzv_auth_client_hello(&c->auth, &hello) != 0) {
      rdzv_client__close_tcp(c);
      rdzv_client__give_up(c, UV_EIO,
                           "cannot start the handshake: no random bytes");
      return;
    }
    rdzv_client__send_msg(c, &hello);
    return;
  }
  rdzv_client__on_ready(c);
}

/* A reconnection attempt took too long: cancel it (connected_cb runs
 * with UV_ECANCELED and tries again, or gives up). */
static void connect_watchdog(uv_timer_t *t)
{
  struct rdzv_client *c = t->data;

  if (!c->connecting)
    return;
  c->connect_timed_out = true;
  rdzv_client__close_tcp(c);
}

void rdzv_client__start_connect(struct rdzv_client *c)
{
  int err;

  if (c->tcp_open && c->reconnecting && !c->destroyed && !c->connected &&
      !c->connecting) {         /* the old handle is still closing */
    uv_timer_start(&c->retry, retry_fire, 10, 0);
    return;
  }
  if (c->connecting || c->connected || c->destroyed || c->tcp_open)
    return;
  uv_tcp_init(c->base.loop, &c->tcp);
  c->tcp.data = c;
  c->tcp_open = true;
  c->open_handles++;
  c->connecting = true;
  c->creq.data = c;
  err = uv_tcp_connect(&c->creq, &c->tcp, (struct sockaddr *)&c->addr,
                       connected_cb);
  if (!err && c->reconnecting) {
    /* A connect into a network cut hangs for the kernel's SYN retries
     * (minutes): bound each attempt, and all of them by the deadline. */
    double left = c->lost_at + c->reconnect_for - monotime_now();

    if (left > RDZV_RECONNECT_BACKOFF_CAP)
      left = RDZV_RECONNECT_BACKOFF_CAP;
    uv_timer_start(&c->retry, connect_watchdog,
                   left > 0 ? (uint64_t)(left * 1000.0) + 1 : 1, 0);
  }
  if (err) {
    c->connecting = false;
    rdzv_client__close_tcp(c);
    if (c->reconnecting) {      /* unreachable for now: a network cut */
      snprintf(c->last_connect_error, sizeof c->last_connect_error, "%s",
               uv_strerror(err));
      reconnect_failed(c);
      return;
    }
    rdzv_client__give_up(c, err,
                         "cannot connect to the rendezvous at %s:%d: %s",
                         c->host, c->o.port, uv_strerror(err));
  }
}
