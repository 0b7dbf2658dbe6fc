/* rdzv_client.c -- the agent's rdzvd back end: what the server says (the
 * rounds and restarts it pushes, the handshake), and the back-end
 * operations.  The connection itself (writing, reading, connecting,
 * reconnecting, keepalives) is rdzv_client_conn.c's; the embedded server
 * rdzv_client_host.c's. */
#include "rdzv_client.h"
#include "rdzv_client_internal.h"

#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdzv_rules.h"
#include "monotime.h"
#include "say.h"
#include "server.h"

#define PROGRESS_EVERY_S 10.0

/* The rendezvous cannot go on: this back end gives up for good (its
 * timers stop) and reports why, once (on_error; err 0: the job finished
 * without this node), as rdzv_etcd.c's give_up does. */
void rdzv_client__give_up(struct rdzv_client *c, int err, const char *fmt, ...)
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

void rdzv_client__send_join(struct rdzv_client *c)
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
  rdzv_client__send_msg(c, &m);
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

void rdzv_client__dispatch(struct rdzv_client *c,
                           const struct rdzv_proto_msg *m)
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
    rdzv_client__lost(c, m->u.text.message, true);
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
      rdzv_client__give_up(c, 0, "the job '%s' finished: %s", c->id,
                           m->u.text.message);
    else
      rdzv_client__give_up(c, UV_ECANCELED, "the job '%s' was closed: %s",
                           c->id, m->u.text.message);
    return;
  case RDZV_PROTO_ERROR:
    if (m->u.text.code == RDZV_PROTO_ERR_AUTH) {
      rdzv_client__give_up(c, UV_EACCES, RDZV_AUTH_REFUSED
                           ": the rendezvous at %s:%d says: %s%s", c->host,
                           c->o.port, m->u.text.message,
                           c->secret.len ? ""
                           : " (give --rdzv-conf=secret_file=PATH)");
      return;
    }
    rdzv_client__give_up(c, UV_EPROTO,
                         "rendezvous '%s' at %s:%d refused: %s (%s)", c->id,
                         c->host, c->o.port, m->u.text.message,
                         rdzv_proto_error_name(m->u.text.code));
    return;
  default:
    rdzv_client__give_up(c, UV_EPROTO,
                         "unexpected '%s' message from the rendezvous server",
                         rdzv_proto_op_name(m->op));
    return;
  }
}

/* Note [client handshake]: with a secret, the first messages on a fresh
 * connection are the handshake (proto/rdzv_auth.h); the join goes out
 * once the server has proved that it knows the secret too.  A refusal is
 * final: retrying would get the same answer. */
void rdzv_client__handshake_step(struct rdzv_client *c,
                           const struct rdzv_proto_msg *m)
{
  struct rdzv_proto_msg reply;
  char err[RDZV_PROTO_MAX_TEXT + 128];
  int rc =
      rdzv_auth_client_step(&c->auth, &c->secret, m, &reply, err, sizeof err);

  if (rc == 1) {
    rdzv_client__send_msg(c, &reply);
    return;
  }
  if (rc < 0) {
    rdzv_client__close_tcp(c);
    rdzv_client__give_up(c, UV_EACCES, "%s (rendezvous at %s:%d)", err, c->host,
                         c->o.port);
    return;
  }
  c->authed = true;
  rdzv_client__on_ready(c);
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
    rdzv_client__give_up(c, UV_EAI_NONAME,
                         "cannot resolve the rendezvous endpoint '%s': %s",
                         c->host, gai_strerror(rc));
    return -1;
  }
  memcpy(&c->addr, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return 0;
}

/* ---- the back-end operations -------------------------------------------- */

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
      rdzv_client__send_join(c);
    return 0;
  }
  if (why == RDZV_JOIN_FIRST) {
    if (resolve(c))
      return 0;   /* rdzv_client__give_up() reported it */
    rdzv_client__maybe_host(c);
    c->first_try_at = monotime_now();
    c->connect_deadline = c->first_try_at + c->o.conf.join_timeout;
    rdzv_client__start_connect(c);
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
  return rdzv_client__send_msg(c, &m);
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
  return rdzv_client__send_msg(c, &m);
}

static void shutdown_done(uv_shutdown_t *req, int status)
{
  struct rdzv_client *c = req->data;

  (void)status;
  rdzv_client__close_tcp(c);
}

/* The embedded server counts as one of the client's open handles: the
 * client's memory lives until the server is stopped. */
static void server_idle(void *ctx)
{
  struct rdzv_client *c = ctx;

  rdzvd_server_stop(c->server);
  c->server = NULL;
  rdzv_client__release(c);
}

static void client_destroy(struct rdzv *r)
{
  struct rdzv_client *c = (struct rdzv_client *)r;
  struct rdzv_proto_msg m;
  int others;

  c->destroyed = true;
  uv_timer_stop(&c->retry);
  uv_timer_stop(&c->keepalive);
  uv_close((uv_handle_t *)&c->retry, rdzv_client__handle_closed);
  uv_close((uv_handle_t *)&c->keepalive, rdzv_client__handle_closed);
  if (c->connected) {
    memset(&m, 0, sizeof m);
    m.op = RDZV_PROTO_LEAVE;
    if (c->authed)    /* mid-handshake: nothing but the handshake */
      rdzv_client__send_msg(c, &m);
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, shutdown_done) != 0)
      rdzv_client__close_tcp(c);
  } else {
    rdzv_client__close_tcp(c);
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
  c->base.cause_wait = rdzv_rules_keepalive_window(o->conf.keepalive_interval,
                                                    o->conf.keepalive_misses) +
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

