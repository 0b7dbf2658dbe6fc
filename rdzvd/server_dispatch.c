/* server_dispatch.c -- what a connection's frames do: the handshake
 * first (Note [authentication gate]), STATUS answered here, everything
 * else handed to the state machine; and the machine's sink, which
 * encodes and writes what it sends back.  Part of rdzvd's server
 * (server.c); its types are in server_int.h. */
#include "server_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "list.h"
#include "metrics.h"
#include "monotime.h"
#include "rdzv_auth.h"
#include "rdzv_proto.h"
#include "err.h"
#include "rdzv_proto_frames.h"

/* Replies up to this size are encoded on the stack (Note [replies
 * written at once]); every reply of a round is far smaller. */
#define SEND_FRAME 1024

bool server_dispatch_is_loopback(const char *addr)
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
void server_dispatch_send(void *ctx, void *connp,
                          const struct rdzv_proto_msg *m)
{
  struct conn *c = connp;
  struct rdzv_proto_msg copy;
  char frame[SEND_FRAME], *data;
  size_t len;
  int err;

  (void)ctx;
  if (c->closing || c->close_pending)
    return;
  if (m->op == RDZV_PROTO_ERROR)
    metrics_refusal(c->s->metrics, m->u.text.code);
  if (m->op == RDZV_PROTO_ROUND &&
      server_dispatch_is_loopback(m->u.round.master_addr) &&
      !c->peer_loopback && c->local[0]) {
    copy = *m;
    snprintf(copy.u.round.master_addr, sizeof copy.u.round.master_addr,
             "%s", c->local);
    m = &copy;
  }
  err = rdzv_proto_encode_into(m, frame, sizeof frame, &data, &len);
  if (err) {
    rdzvd_server__log(c->s, "internal: cannot encode %s for %s: %s",
                      rdzv_proto_op_name(m->op), c->peer, err_str(err));
    return;
  }
  server_conn_send(c, data, len);
  if (data != frame)
    free(data);
}
void server_dispatch_drop(void *ctx, void *connp)
{
  struct conn *c = connp;

  (void)ctx;
  if (c->closing || c->close_pending)
    return;
  c->drop_after_write = true;
  if (c->pending == 0)
    server_conn_close(c);
}
void server_dispatch_log(void *ctx, const char *line)
{
  struct rdzvd_server *s = ctx;

  rdzvd_server__log(s, "%s", line);
}
/* A frame the codec refused: answer with an ERROR and close. */
static void reject(struct conn *c, const char *why)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_ERROR;
  m.u.text.code = RDZV_PROTO_ERR_BAD_REQUEST;
  snprintf(m.u.text.message, sizeof m.u.text.message, "%s", why);
  rdzvd_server__log(c->s, "bad request from %s: %s", c->peer, why);
  metrics_frame_error(c->s->metrics);
  server_dispatch_send(c->s, c, &m);
  server_dispatch_drop(c->s, c);
}
/* Note [authentication gate]: with a secret, a connection's frames go to the
 * handshake (proto/rdzv_auth.c) until it has succeeded; nothing reaches the
 * state machine before (not even the connection's address), and a pre-auth
 * frame may not exceed RDZV_AUTH_PREAUTH_MAX_FRAME.  Returns true when m may
 * go on to rdzv_state_handle. */
static bool auth_gate(struct conn *c, const struct rdzv_proto_msg *m)
{
  struct rdzv_proto_msg reply;
  char why[256];

  switch (rdzv_auth_server_step(&c->auth, &c->s->secret, m, &reply, why,
                         sizeof why)) {
  case RDZV_AUTH_PASS:
    return true;
  case RDZV_AUTH_REPLY:
    server_dispatch_send(c->s, c, &reply);
    /* Only now does the state machine learn of the connection. */
    if (c->auth.state == RDZV_AUTH_S_DONE) {
      server_conn_machine_enter(c->s);
      rdzv_state_set_peer_addr(c->s->reg, c, c->peer);
      server_conn_machine_leave(c->s);
    }
    return false;
  case RDZV_AUTH_REFUSE:
    rdzvd_server__log(c->s, "authentication failed from %s: %s", c->peer, why);
    metrics_auth_failure(c->s->metrics);
    server_dispatch_send(c->s, c, &reply);
    server_dispatch_drop(c->s, c);
    return false;
  }
  return false;
}
/* The announced body length of the frame at data (4 bytes there). */
static size_t frame_body_len(const char *data)
{
  const unsigned char *p = (const unsigned char *)data;

  return (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
}
/* STATUS, answered here: the machine's report (its size bounded by what
 * it shows, Note [status size]) and the server's own figures. */
static void server_status(struct conn *c, const struct rdzv_proto_status_req *q)
{
  struct rdzvd_server *s = c->s;
  struct rdzv_proto_msg m;
  cJSON *st, *sv = NULL;
  char *text = NULL;
  int err;

  st = rdzv_state_status_query(s->reg, q, monotime_now(), &err);
  if (st && (sv = cJSON_AddObjectToObject(st, "server")) &&
      cJSON_AddNumberToObject(sv, "connections", s->n_conns) &&
      cJSON_AddNumberToObject(sv, "max_conns", s->lim.max_conns) &&
      cJSON_AddNumberToObject(sv, "max_conns_per_peer",
                              s->lim.max_conns_per_peer) &&
      cJSON_AddNumberToObject(sv, "peer_refusals_connections",
                              (double)s->peer_refused) &&
      cJSON_AddNumberToObject(sv, "input_bytes", (double)s->in_bytes) &&
      cJSON_AddNumberToObject(sv, "input_budget",
                              (double)s->lim.input_budget) &&
      cJSON_AddNumberToObject(sv, "reading_paused", s->n_paused) &&
      cJSON_AddNumberToObject(sv, "output_bytes", (double)s->out_bytes) &&
      cJSON_AddNumberToObject(sv, "output_budget",
                              (double)s->lim.output_budget))
    text = cJSON_PrintUnformatted(st);
  cJSON_Delete(st);
  memset(&m, 0, sizeof m);
  if (text) {
    m.op = RDZV_PROTO_STATUS_REPLY;
    m.u.status_json = text;
  } else {
    m.op = RDZV_PROTO_ERROR;
    m.u.text.code =
        err == -ENOENT ? RDZV_PROTO_ERR_BAD_REQUEST : RDZV_PROTO_ERR_LIMIT;
    snprintf(m.u.text.message, sizeof m.u.text.message, "%s%.*s",
             err == -ENOENT ? "no job " : "out of memory",
             err == -ENOENT ? RDZV_PROTO_MAX_ID : 0, q->job);
  }
  server_dispatch_send(s, c, &m);
  cJSON_free(text);
}
/* One decoded message from c, for the machine.  Stops the frame loop
 * once c is going away. */
static int on_frame(void *ctx, struct rdzv_proto_msg *m)
{
  struct conn *c = ctx;
  struct rdzvd_server *s = c->s;
  int rc;

  if (!auth_gate(c, m))         /* a handshake step, or refused */
    return 1;                   /* the frame limit may change: re-read */
  if (m->op == RDZV_PROTO_STATUS) {
    server_status(c, &m->u.status);
    return c->closing || c->close_pending || c->drop_after_write;
  }
  if (m->op == RDZV_PROTO_JOIN)
    metrics_join(s->metrics);
  server_conn_machine_enter(s);
  rc = rdzv_state_handle(s->reg, c, m, monotime_now());
  server_conn_machine_leave(s);
  if ((m->op == RDZV_PROTO_JOIN || m->op == RDZV_PROTO_RESUME) && rc == 0 &&
      !c->joined && !c->closing && !c->close_pending && !c->drop_after_write) {
    c->joined = true;
    server_conn_hello_remove(c);
    return 1;                   /* read on with the joined frame limit */
  }
  return c->closing || c->close_pending || c->drop_after_write;
}
/* Handles every whole frame in data[0..len); returns the bytes used, or
 * -1 when the connection is being closed. */
ssize_t server_dispatch_consume(struct conn *c, const char *data, size_t len)
{
  struct rdzvd_server *s = c->s;
  struct rdzv_proto_msg m;
  char err[256];
  size_t off = 0, max_body;
  ssize_t used;
  enum rdzv_auth_server_state auth;
  bool joined, authed;

  /* Note [pipelined handshake]: a handshake step stops the frame loop
   * (the frame limit may change), and the loop goes on at once with the
   * bytes already here: a frame sent in the same packet as hello (or
   * auth) is answered now, not when more bytes arrive.  Behind hello the
   * only frame that may follow is an auth, and one read with the hello
   * was sent before the challenge was seen (read_with_hello), so it
   * cannot carry a valid proof: either is refused by the handshake
   * (error auth, close).  Frames behind a valid auth are the session's
   * first. */
  do {
    if (len - off >= RDZV_PROTO_FRAME_HEADER &&
        rdzv_auth_server_frame_too_big(&c->auth, &s->secret,
                                frame_body_len(data + off))) {
      memset(&m, 0, sizeof m);
      m.op = RDZV_PROTO_ERROR;
      m.u.text.code = RDZV_PROTO_ERR_AUTH;
      snprintf(m.u.text.message, sizeof m.u.text.message,
               "this server requires a shared secret");
      rdzvd_server__log(s, "authentication failed from %s: no shared secret: a "
                        "frame of %zu bytes before authenticating", c->peer,
                        frame_body_len(data + off));
      metrics_auth_failure(s->metrics);
      server_dispatch_send(s, c, &m);
      server_dispatch_drop(s, c);
      return -1;
    }
    /* The frame limit depends on how far the connection got: tiny before
     * the handshake, small until it joined (Note [budgets]). */
    joined = c->joined;
    auth = c->auth.state;
    authed = server_conn_known(c);
    max_body = joined ? RDZV_PROTO_MAX_FRAME : s->lim.prejoin_frame;
    if (!authed && max_body > RDZV_AUTH_PREAUTH_MAX_FRAME)
      max_body = RDZV_AUTH_PREAUTH_MAX_FRAME;
    used = rdzv_proto_frames_read(data + off, len - off, max_body, on_frame, c,
                                  err, sizeof err);
    if (used < 0) {
      reject(c, err);
      return -1;
    }
    off += (size_t)used;
    if (c->closing || c->close_pending || c->drop_after_write)
      return -1;
    /* The frames still here were read with the hello. */
    c->auth.read_with_hello = auth == RDZV_AUTH_S_HELLO &&
                              c->auth.state == RDZV_AUTH_S_PROOF;
  } while (used > 0 && (joined != c->joined || auth != c->auth.state));
  c->auth.read_with_hello = false;
  return (ssize_t)off;
}
