/* rdzv_client.c -- the agent's rdzvd back end: one connection, pushed
 * rounds and restarts, keepalives both ways, and the embedded server. */
#include "rdzv_client.h"

#include <errno.h>
#include <ifaddrs.h>
#include <math.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "rdzv_rules.h"
#include "monotime.h"
#include "rdzv_proto_frames.h"
#include "say.h"
#include "server.h"

#define READ_CHUNK 65536
#define PROGRESS_EVERY_S 10.0

struct rdzv_client {
  struct rdzv base;               /* first: a struct rdzv * is one */
  struct rdzv_client_opts o;
  char host[RDZV_PROTO_MAX_ADDR + 1];
  char id[RDZV_PROTO_MAX_ID + 1];
  char local_addr[RDZV_PROTO_MAX_ADDR + 1];
  char myhost[RDZV_PROTO_MAX_ADDR + 1];

  uv_tcp_t tcp;
  uv_connect_t creq;
  uv_shutdown_t sreq;
  uv_timer_t retry;
  uv_timer_t keepalive;
  int open_handles;
  bool tcp_open;                  /* tcp initialised and not closing */
  bool connected;
  bool connecting;
  struct sockaddr_storage addr;

  char *buf;
  size_t len, cap;

  double connect_deadline;        /* give up connecting after this */
  double first_try_at;            /* the first connection attempt */
  double next_report;             /* say again that it cannot connect */
  double report_every;
  double last_rx;                 /* last byte from the server */
  bool spoke;                     /* a valid frame came on this connection */
  bool ever_spoke;                /* ... or on an earlier one: an rdzvd */
  size_t rx_bytes;                /* bytes received on this connection */
  bool join_pending;
  enum rdzv_proto_join_reason pending_reason;
  int round;                      /* of the last ROUND */
  bool destroyed;
  bool failed;                    /* on_error already reported */
  char last_connect_error[128];

  int last_present;
  double last_progress;

  struct rdzvd_server *server;    /* when this node hosts */

  struct rdzv_auth_secret secret; /* len 0: none */
  struct rdzv_auth_client auth;   /* the handshake on this connection */
  bool authed;                    /* joins may go out */

  /* Note [reconnect]: what this node re-asserts, and the reconnection. */
  bool have_round;                /* last holds the ROUND it runs */
  struct rdzv_proto_round last;
  enum rdzv_proto_resume_phase phase;
  int gather_restarts;            /* restart count to assert, gathering */
  int gather_round;               /* the round to assert, gathering */
  /* Note [node tokens] (proto/rdzv_token.h): the last credential the
   * server gave this node, presented again in RESUME. */
  unsigned char token[RDZV_PROTO_TOKEN_BYTES];
  bool reconnecting;
  bool resumed_running;           /* the RESUME re-asserted a round */
  char resumed_what[64];          /* what it re-asserted, for the log */
  bool unproven;                  /* reconnected, but no frame yet: the
                                     endpoint has not shown it is an rdzvd */
  double lost_at;
  double reconnect_for;           /* seconds from lost_at it tries */
  /* Note [a lost host] (rdzvd/rdzv_rules.h): the embedded host's loss
   * ends the job unless it is back within reconnect_for. */
  bool host_ends;
  struct rdzv_rules_loss host_loss;
  double backoff;                 /* seconds before the next attempt */
  bool failure_pending;           /* a FAILURE to send once back */
  struct rdzv_proto_failure pending_failure;
  bool barrier_pending;           /* the exit BARRIER to send once back */
  uint64_t rng;                   /* the backoff's jitter, per agent */
  bool connect_timed_out;         /* connect_watchdog cancelled it */
};

static void give_up(struct rdzv_client *c, int err, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* The rendezvous cannot go on: this back end gives up for good (its
 * timers stop) and reports why, once (on_error; err 0: the job finished
 * without this node), as rdzv_etcd.c's give_up does. */
static void give_up(struct rdzv_client *c, int err, const char *fmt, ...)
{
  char msg[RDZV_PROTO_MAX_TEXT + 64];
  va_list ap;

  if (c->failed || c->destroyed)
    return;
  c->failed = true;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  uv_timer_stop(&c->keepalive);
  uv_timer_stop(&c->retry);
  c->base.cb.on_error(c->base.cb.ctx, err, msg);
}

/* One of c's handles (or its embedded server) is gone; the last one,
 * once destroyed, frees c. */
static void client_release(struct rdzv_client *c)
{
  if (--c->open_handles == 0 && c->destroyed) {
    free(c->buf);
    rdzv_auth_secret_clear(&c->secret);
    free(c);
  }
}

static void handle_closed(uv_handle_t *h)
{
  struct rdzv_client *c = h->data;

  if (h == (uv_handle_t *)&c->tcp)
    c->tcp_open = false;
  client_release(c);
}

static int send_msg(struct rdzv_client *c, const struct rdzv_proto_msg *m);
static void on_ready(struct rdzv_client *c);
static void lost(struct rdzv_client *c, const char *why, bool going_away);

static void send_join(struct rdzv_client *c)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  snprintf(m.u.join.id, sizeof m.u.join.id, "%s", c->id);
  snprintf(m.u.join.addr, sizeof m.u.join.addr, "%s", c->local_addr);
  snprintf(m.u.join.host, sizeof m.u.join.host, "%s", c->myhost);
  m.u.join.pid = getpid();
  m.u.join.nproc = c->o.nproc;
  m.u.join.master_port = c->o.master_port;
  m.u.join.reason = c->pending_reason;
  m.u.join.conf = c->o.conf;
  c->join_pending = false;
  send_msg(c, &m);
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

static int send_msg(struct rdzv_client *c, const struct rdzv_proto_msg *m)
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

/* ---- what the server says ---------------------------------------------- */

static void on_waiting(struct rdzv_client *c,
                       const struct rdzv_proto_waiting *w)
{
  double now = monotime_now();

  if (w->present == c->last_present &&
      now - c->last_progress < PROGRESS_EVERY_S)
    return;
  c->last_present = w->present;
  c->last_progress = now;
  if (w->last_call >= 0)
    say("rendezvous '%s' round %d: %d node%s present (min %d, max "
               "%d); starting in %.1f s unless more join", c->id, w->round,
               w->present, w->present == 1 ? "" : "s", w->min_nodes,
               w->max_nodes, w->last_call);
  else
    say("rendezvous '%s' round %d: waiting for nodes: %d present, "
               "at least %d needed (max %d); join timeout in %.0f s", c->id,
               w->round, w->present, w->min_nodes, w->max_nodes,
               w->deadline);
}

/* The job's root cause a RESTART or CLOSED names (Note [root cause]);
 * one without any leaves the last one known. */
static void take_cause(struct rdzv_client *c, const struct rdzv_proto_cause *in)
{
  struct rdzv_cause *out = &c->base.job_cause;

  if (in->exited_at <= 0)
    return;
  out->exited_at = in->exited_at;
  out->rank = in->rank;
  out->local_rank = in->local_rank;
  out->exitcode = in->exitcode;
  out->pid = (long)in->pid;
  snprintf(out->host, sizeof out->host, "%s", in->host);
}

static void dispatch(struct rdzv_client *c, const struct rdzv_proto_msg *m)
{
  struct rdzv_assignment a;

  switch (m->op) {
  case RDZV_PROTO_PONG:
    return;
  case RDZV_PROTO_WAITING:
    /* What its token vouches for is what a gathering RESUME asserts. */
    if (!rdzv_proto_token_none(m->u.waiting.token)) {
      memcpy(c->token, m->u.waiting.token, sizeof c->token);
      c->gather_round = m->u.waiting.round;
      c->gather_restarts = m->u.waiting.restart_count;
    }
    on_waiting(c, &m->u.waiting);
    return;
  case RDZV_PROTO_ROUND:
    memset(&a, 0, sizeof a);
    a.round = m->u.round.round;
    a.restart_count = m->u.round.restart_count;
    /* rdzvd applies the same rule to our report (rdzv_rules.h): the job
     * agreed on max_restarts at our JOIN. */
    a.failure_final = rdzv_rules_failure_final(a.restart_count,
                                               c->o.conf.max_restarts);
    a.group_rank = m->u.round.group_rank;
    a.group_world_size = m->u.round.group_world_size;
    a.rank_offset = m->u.round.rank_offset;
    a.world_size = m->u.round.world_size;
    snprintf(a.master_addr, sizeof a.master_addr, "%s",
             m->u.round.master_addr);
    a.master_port = m->u.round.master_port;
    if (!rdzv_proto_token_none(m->u.round.job_token))
      for (size_t i = 0; i < RDZV_PROTO_TOKEN_BYTES; i++)
        snprintf(a.job_token + 2 * i, 3, "%02x", m->u.round.job_token[i]);
    if (m->u.round.live_store_port && a.job_token[0])
      snprintf(a.live_store, sizeof a.live_store,
               strchr(c->host, ':') ? "[%s]:%d" : "%s:%d", c->host,
               m->u.round.live_store_port);
    c->round = a.round;
    c->last_present = -1;
    c->have_round = true;
    c->last = m->u.round;
    c->phase = RDZV_PROTO_PHASE_RUNNING;
    c->gather_restarts = a.restart_count;
    c->gather_round = a.round < RDZV_PROTO_MAX_ROUND ? a.round + 1 : a.round;
    memcpy(c->token, m->u.round.token, sizeof c->token);
    c->base.cb.on_round(c->base.cb.ctx, &a);
    return;
  case RDZV_PROTO_RESTART:
    c->phase = RDZV_PROTO_PHASE_GATHERING;
    take_cause(c, &m->u.text.cause);
    snprintf(c->base.lost_host, sizeof c->base.lost_host, "%s",
             m->u.text.lost_host);
    snprintf(c->base.lost_why, sizeof c->base.lost_why, "%s",
             m->u.text.lost_why);
    c->base.cb.on_restart(c->base.cb.ctx, m->u.text.message);
    return;
  case RDZV_PROTO_GOING_AWAY:
    lost(c, m->u.text.message, true);
    return;
  case RDZV_PROTO_BARRIER_DONE:
    c->base.cb.on_barrier(c->base.cb.ctx, 0);
    return;
  case RDZV_PROTO_CLOSED:
    take_cause(c, &m->u.text.cause);
    /* Note [a lost node] (rdzvd/rdzv_rules.h): the job ended on it. */
    snprintf(c->base.lost_host, sizeof c->base.lost_host, "%s",
             m->u.text.lost_host);
    snprintf(c->base.lost_why, sizeof c->base.lost_why, "%s",
             m->u.text.lost_why);
    c->base.ended_lost = !m->u.text.success && m->u.text.lost_host[0];
    /* err 0: the job finished well without needing this node (a spare
     * that waited for a place). */
    if (m->u.text.success)
      give_up(c, 0, "the job '%s' finished: %s", c->id, m->u.text.message);
    else
      give_up(c, UV_ECANCELED, "the job '%s' was closed: %s", c->id,
              m->u.text.message);
    return;
  case RDZV_PROTO_ERROR:
    if (m->u.text.code == RDZV_PROTO_ERR_AUTH) {
      give_up(c, UV_EACCES,
              RDZV_AUTH_REFUSED ": the rendezvous at %s:%d says: %s%s", c->host,
              c->o.port, m->u.text.message,
              c->secret.len ? "" : " (give --rdzv-conf=secret_file=PATH)");
      return;
    }
    give_up(c, UV_EPROTO, "rendezvous '%s' at %s:%d refused: %s (%s)", c->id,
            c->host, c->o.port, m->u.text.message,
            rdzv_proto_error_name(m->u.text.code));
    return;
  default:
    give_up(c, UV_EPROTO, "unexpected '%s' message from the rendezvous server",
            rdzv_proto_op_name(m->op));
    return;
  }
}

static void close_tcp(struct rdzv_client *c);

/* Note [client handshake]: with a secret, the first messages on a fresh
 * connection are the handshake (proto/rdzv_auth.h); the join goes out
 * once the server has proved that it knows the secret too.  A refusal is
 * final: retrying would get the same answer. */
static void handshake_step(struct rdzv_client *c,
                           const struct rdzv_proto_msg *m)
{
  struct rdzv_proto_msg reply;
  char err[RDZV_PROTO_MAX_TEXT + 128];
  int rc =
      rdzv_auth_client_step(&c->auth, &c->secret, m, &reply, err, sizeof err);

  if (rc == 1) {
    send_msg(c, &reply);
    return;
  }
  if (rc < 0) {
    close_tcp(c);
    give_up(c, UV_EACCES, "%s (rendezvous at %s:%d)", err, c->host, c->o.port);
    return;
  }
  c->authed = true;
  on_ready(c);
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

static void close_tcp(struct rdzv_client *c)
{
  c->connected = false;
  if (c->tcp_open && !uv_is_closing((uv_handle_t *)&c->tcp))
    uv_close((uv_handle_t *)&c->tcp, handle_closed);
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
    dispatch(c, m);
  else
    handshake_step(c, m);
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
  give_up(c, UV_EPROTO, "the endpoint %s:%d does not speak the rdzvd protocol "
          "(it %s; is it a torch TCPStore, or another service?)", c->host,
          c->o.port, what);
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
    close_tcp(c);
    foreign_protocol(c, (int)nread);
    return;
  }
  if (nread < 0) {
    lost(c, nread == UV_EOF ? "connection closed" : uv_strerror((int)nread),
         false);
    return;
  }
  c->last_rx = monotime_now();
  c->len += (size_t)nread;
  c->rx_bytes += (size_t)nread;
  used = rdzv_proto_frames_read(c->buf, c->len, 0, on_frame, c, err, sizeof err);
  if (used < 0) {
    close_tcp(c);
    if (!c->spoke && !c->ever_spoke) {
      foreign_protocol(c, UV_EPROTO);
      return;
    }
    give_up(c, UV_EPROTO, "bad message from the rendezvous server %s:%d: %s",
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
  give_up(c, UV_ETIMEDOUT, "%s did not come back within %g s (%s): %s: "
          "node %d left (%s): %s", what, c->reconnect_for, bound,
          c->last_connect_error, c->last.host_rank,
          rdzv_rules_leave_name(l->how), because);
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
    give_up(c, UV_ETIMEDOUT, "%s did not come back within %g s "
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
  double window = c->o.conf.keepalive_interval * c->o.conf.keepalive_misses;
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
    give_up(c, err, "cannot reach the rendezvous at %s:%d within the join "
            "timeout (%.0f s): %s", c->host, c->o.port, c->o.conf.join_timeout,
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

static void lost(struct rdzv_client *c, const char *why, bool going_away)
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
      uv_tcp_close_reset(&c->tcp, handle_closed) != 0)
    close_tcp(c);
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
    give_up(c, going_away ? UV_ECONNRESET : UV_ECONNABORTED, "%s%s%s: %s",
            embedded ? "" : "lost ", what, embedded ? " is gone" : "", why);
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
static void on_ready(struct rdzv_client *c)
{
  struct rdzv_proto_msg m;
  struct rdzv_proto_resume *r = &m.u.resume;
  bool running;

  if (!c->reconnecting) {
    if (c->join_pending)
      send_join(c);
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
  send_msg(c, &m);
  /* What happened meanwhile waits until the endpoint has answered as an
   * rdzvd (a PONG to this at the latest): sent into something else, it
   * would be lost. */
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KEEPALIVE;
  send_msg(c, &m);
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
    send_msg(c, &m);
  }
  if (running && c->phase == RDZV_PROTO_PHASE_EXIT) {
    memset(&m, 0, sizeof m);
    m.op = RDZV_PROTO_BARRIER;
    snprintf(m.u.barrier.name, sizeof m.u.barrier.name, "exit");
    m.u.barrier.round = c->round;
    send_msg(c, &m);
  }
  c->barrier_pending = false;
  if (running && c->join_pending)
    send_join(c);
  c->join_pending = false;      /* a gathering RESUME is the join */
}

static void keepalive_tick(uv_timer_t *t)
{
  struct rdzv_client *c = t->data;
  double window = c->o.conf.keepalive_interval * c->o.conf.keepalive_misses;
  struct rdzv_proto_msg m;

  if (!c->connected)
    return;
  if (monotime_now() - c->last_rx > window) {
    char why[64];

    snprintf(why, sizeof why, "no answer for %.1f s", window);
    lost(c, why, false);
    return;
  }
  if (!c->authed)
    return;   /* only the handshake before it succeeds */
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KEEPALIVE;
  send_msg(c, &m);
}

static void start_connect(struct rdzv_client *c);

static void retry_fire(uv_timer_t *t)
{
  start_connect(t->data);
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
    close_tcp(c);
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
      close_tcp(c);
      give_up(c, UV_EIO, "cannot start the handshake: no random bytes");
      return;
    }
    send_msg(c, &hello);
    return;
  }
  on_ready(c);
}

/* A reconnection attempt took too long: cancel it (connected_cb runs
 * with UV_ECANCELED and tries again, or gives up). */
static void connect_watchdog(uv_timer_t *t)
{
  struct rdzv_client *c = t->data;

  if (!c->connecting)
    return;
  c->connect_timed_out = true;
  close_tcp(c);
}

static void start_connect(struct rdzv_client *c)
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
    close_tcp(c);
    if (c->reconnecting) {      /* unreachable for now: a network cut */
      snprintf(c->last_connect_error, sizeof c->last_connect_error, "%s",
               uv_strerror(err));
      reconnect_failed(c);
      return;
    }
    give_up(c, err, "cannot connect to the rendezvous at %s:%d: %s", c->host,
            c->o.port, uv_strerror(err));
  }
}

static void server_log(void *ctx, const char *line)
{
  (void)ctx;
  say("rdzv: %s", line);
}

static bool is_loopback_sa(const struct sockaddr *sa)
{
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >>
            24) == 127;
  if (sa->sa_family == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
  return false;
}

void rdzv_host_bind_addr(const char *host, const struct sockaddr *addr,
                         char *out, size_t outlen)
{
  unsigned char bin[sizeof(struct in6_addr)];
  bool literal = inet_pton(AF_INET, host, bin) == 1 ||
                 inet_pton(AF_INET6, host, bin) == 1;
  bool localhost_name = strcmp(host, "localhost") == 0 ||
                        strncmp(host, "localhost.", 10) == 0 ||
                        strcmp(host, "ip6-localhost") == 0 ||
                        strcmp(host, "ip6-loopback") == 0;

  out[0] = '\0';
  if (!literal && !localhost_name && is_loopback_sa(addr))
    return;                     /* this machine's own name: see above */
  if (addr->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, out,
              (socklen_t)outlen);
  else if (addr->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)addr)->sin6_addr,
              out, (socklen_t)outlen);
}

/* Note [embedded rendezvous]: a node whose endpoint names its own host
 * tries to serve the rendezvous itself, from the same state machine as
 * rdzvd.  Binding decides the race between agents on one host and a
 * daemon already there: whoever binds hosts, the others connect.  The
 * hosting agent stays up after its own job ends until every node has
 * left, so finishing first breaks nobody's exit barrier.  It listens on
 * the endpoint's own address (rdzv_host_bind_addr), never on more than
 * the endpoint names: a loopback endpoint stays loopback. */
static void maybe_host(struct rdzv_client *c)
{
  struct rdzvd_server_opts so;
  const char *lvl = getenv("LOGLEVEL");
  char err[256], bind_addr[INET6_ADDRSTRLEN];
  int rc;

  if (c->o.host_mode == RDZV_HOST_NEVER)
    return;
  if (c->o.host_mode == RDZV_HOST_AUTO && !rdzv_endpoint_is_local(c->host))
    return;
  memset(&so, 0, sizeof so);
  /* is_host=1 for a name that resolves elsewhere: the user knows this
   * machine is the host under another address, so every address. */
  if (c->o.host_mode == RDZV_HOST_ALWAYS && !rdzv_endpoint_is_local(c->host))
    bind_addr[0] = '\0';
  else
    rdzv_host_bind_addr(c->host, (const struct sockaddr *)&c->addr,
                        bind_addr, sizeof bind_addr);
  so.host = bind_addr;
  so.port = c->o.port;
  so.secret = &c->secret;
  so.embedded = true;
  if (lvl && (strcmp(lvl, "INFO") == 0 || strcmp(lvl, "DEBUG") == 0))
    so.log = server_log;
  rc = rdzvd_server_start(c->base.loop, &so, &c->server, err, sizeof err);
  if (rc == 0) {
    c->open_handles++;
    say("hosting the rendezvous for '%s' on %s%s%s:%d", c->id,
        strchr(bind_addr, ':') ? "[" : "", bind_addr[0] ? bind_addr : "*",
        strchr(bind_addr, ':') ? "]" : "", rdzvd_server_port(c->server));
    if (c->o.port == 0) {
      c->o.port = rdzvd_server_port(c->server);
      if (c->addr.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&c->addr)->sin6_port =
            htons((uint16_t)c->o.port);
      else
        ((struct sockaddr_in *)&c->addr)->sin_port =
            htons((uint16_t)c->o.port);
    }
  } else if (rc != UV_EADDRINUSE) {
    say("cannot host the rendezvous (%s); joining as a client", err);
  }
}

static int resolve(struct rdzv_client *c)
{
  struct addrinfo hints, *res;
  char port[16];
  int rc;

  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  snprintf(port, sizeof port, "%d", c->o.port);
  rc = getaddrinfo(c->host, port, &hints, &res);
  if (rc) {
    give_up(c, UV_EAI_NONAME, "cannot resolve the rendezvous endpoint '%s': %s",
            c->host, gai_strerror(rc));
    return -1;
  }
  memcpy(&c->addr, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return 0;
}

/* ---- the back-end operations ---------------------------------------------- */

static int client_join(struct rdzv *r, enum rdzv_join_reason why)
{
  struct rdzv_client *c = (struct rdzv_client *)r;

  if (c->failed)
    return UV_ECANCELED;
  c->pending_reason = why == RDZV_JOIN_FIRST     ? RDZV_PROTO_REASON_FIRST
                      : why == RDZV_JOIN_FAILURE ? RDZV_PROTO_REASON_FAILURE
                                                 : RDZV_PROTO_REASON_MEMBERSHIP;
  c->join_pending = true;
  c->last_present = -1;
  if (why == RDZV_JOIN_FAILURE && c->phase == RDZV_PROTO_PHASE_RUNNING &&
      c->have_round)
    c->gather_restarts = c->last.restart_count + 1;
  c->phase = RDZV_PROTO_PHASE_GATHERING;
  if (c->connected) {
    if (c->authed)
      send_join(c);
    return 0;
  }
  if (why == RDZV_JOIN_FIRST) {
    if (resolve(c))
      return 0;   /* give_up() reported it */
    maybe_host(c);
    c->first_try_at = monotime_now();
    c->connect_deadline = c->first_try_at + c->o.conf.join_timeout;
    start_connect(c);
  }
  return 0;
}

static int client_report_failure(struct rdzv *r, bool final,
                                 const char *message)
{
  struct rdzv_client *c = (struct rdzv_client *)r;
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_FAILURE;
  m.u.failure.final = final;
  snprintf(m.u.failure.message, sizeof m.u.failure.message, "%s",
           message ? message : "");
  if (r->local_cause.exited_at > 0) {
    const struct rdzv_cause *lc = &r->local_cause;
    struct rdzv_proto_cause *out = &m.u.failure.cause;

    out->exited_at = lc->exited_at;
    out->rank = lc->rank;
    out->local_rank = lc->local_rank;
    out->exitcode = lc->exitcode;
    out->pid = lc->pid;
    snprintf(out->host, sizeof out->host, "%s", lc->host);
  }
  if (!c->connected || !c->authed) {
    if (!c->reconnecting && c->o.reconnect_timeout <= 0)
      return UV_ENOTCONN;
    c->pending_failure = m.u.failure;   /* sent once back */
    c->failure_pending = true;
    return 0;
  }
  return send_msg(c, &m);
}

static int client_exit_barrier(struct rdzv *r)
{
  struct rdzv_client *c = (struct rdzv_client *)r;
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_BARRIER;
  snprintf(m.u.barrier.name, sizeof m.u.barrier.name, "exit");
  m.u.barrier.round = c->round;
  c->phase = RDZV_PROTO_PHASE_EXIT;
  if (!c->connected || !c->authed) {
    if (!c->reconnecting && c->o.reconnect_timeout <= 0)
      return UV_ENOTCONN;
    c->barrier_pending = true;          /* sent once back */
    return 0;
  }
  return send_msg(c, &m);
}

static void shutdown_done(uv_shutdown_t *req, int status)
{
  struct rdzv_client *c = req->data;

  (void)status;
  close_tcp(c);
}

/* The embedded server counts as one of the client's open handles: the
 * client's memory lives until the server is stopped. */
static void server_idle(void *ctx)
{
  struct rdzv_client *c = ctx;

  rdzvd_server_stop(c->server);
  c->server = NULL;
  client_release(c);
}

static void client_destroy(struct rdzv *r)
{
  struct rdzv_client *c = (struct rdzv_client *)r;
  struct rdzv_proto_msg m;
  int others;

  c->destroyed = true;
  uv_timer_stop(&c->retry);
  uv_timer_stop(&c->keepalive);
  uv_close((uv_handle_t *)&c->retry, handle_closed);
  uv_close((uv_handle_t *)&c->keepalive, handle_closed);
  if (c->connected) {
    memset(&m, 0, sizeof m);
    m.op = RDZV_PROTO_LEAVE;
    if (c->authed)    /* mid-handshake: nothing but the handshake */
      send_msg(c, &m);
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, shutdown_done) != 0)
      close_tcp(c);
  } else {
    close_tcp(c);
  }
  if (c->server) {
    others = rdzvd_server_nodes(c->server) - (c->connected ? 1 : 0);
    if (others > 0)
      say("this node hosts the rendezvous: staying up until %d "
                 "other node%s leave%s", others, others == 1 ? "" : "s",
                 others == 1 ? "s" : "");
    rdzvd_server_on_idle(c->server, server_idle, c);
  }
}

static const struct rdzv_ops client_ops = {
  "rdzvd", client_join, client_report_failure, client_exit_barrier,
  client_destroy, false,
};

int rdzv_client_create(uv_loop_t *loop, const struct rdzv_client_opts *o,
                       const struct rdzv_callbacks *cb, struct rdzv **out)
{
  struct rdzv_client *c = calloc(1, sizeof *c);

  if (!c)
    return UV_ENOMEM;
  c->base.ops = &client_ops;
  /* rdzvd waits one keepalive window for the other reports (Note [root
   * cause]); a margin for the CLOSED to travel. */
  c->base.cause_wait = o->conf.keepalive_interval * o->conf.keepalive_misses +
                       5.0;
  c->base.cb = *cb;
  c->base.loop = loop;
  c->o = *o;
  snprintf(c->host, sizeof c->host, "%s", o->host);
  snprintf(c->id, sizeof c->id, "%s", o->id);
  snprintf(c->local_addr, sizeof c->local_addr, "%s",
           o->local_addr ? o->local_addr : "");
  if (gethostname(c->myhost, sizeof c->myhost - 1) < 0)
    snprintf(c->myhost, sizeof c->myhost, "unknown");
  c->o.host = c->host;
  c->o.id = c->id;
  c->o.local_addr = c->local_addr;
  if (o->secret)
    c->secret = *o->secret;
  c->o.secret = NULL;             /* c->secret is the copy */
  c->last_present = -1;
  c->rng = (uv_hrtime() ^ ((uint64_t)getpid() << 32)) | 1;
  uv_timer_init(loop, &c->retry);
  uv_timer_init(loop, &c->keepalive);
  c->retry.data = c;
  c->keepalive.data = c;
  c->open_handles = 2;
  *out = &c->base;
  return 0;
}

bool rdzv_endpoint_is_local(const char *host)
{
  struct addrinfo hints, *res, *ai;
  struct ifaddrs *ifs, *i;
  char name[256];
  bool local = false;

  if (strcmp(host, "localhost") == 0)
    return true;
  if (gethostname(name, sizeof name) == 0 && strcmp(name, host) == 0)
    return true;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, NULL, &hints, &res) != 0)
    return false;
  if (getifaddrs(&ifs) != 0)
    ifs = NULL;
  for (ai = res; ai && !local; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      const struct sockaddr_in *a = (const struct sockaddr_in *)ai->ai_addr;

      if ((ntohl(a->sin_addr.s_addr) >> 24) == 127)
        local = true;
      for (i = ifs; i && !local; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
                a->sin_addr.s_addr)
          local = true;
    } else if (ai->ai_family == AF_INET6) {
      const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ai->ai_addr;

      if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr))
        local = true;
      for (i = ifs; i && !local; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6 &&
            memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                   &a->sin6_addr, sizeof a->sin6_addr) == 0)
          local = true;
    }
  }
  if (ifs)
    freeifaddrs(ifs);
  freeaddrinfo(res);
  return local;
}
