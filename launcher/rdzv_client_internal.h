/* rdzv_client_internal.h -- the rdzvd back end's state (struct
 * rdzv_client) and the calls that cross between its files: rdzv_client.c
 * (what the server says, the back-end operations), rdzv_client_conn.c
 * (the connection: writing, reading, connecting, reconnecting,
 * keepalives) and rdzv_client_host.c (the embedded server).  Nothing
 * else includes it: rdzv_client.h is the back end's interface. */
#ifndef CDRUN_RDZV_CLIENT_INTERNAL_H
#define CDRUN_RDZV_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "rdzv.h"
#include "rdzv_auth.h"
#include "rdzv_client.h"
#include "rdzv_proto.h"
#include "rdzv_rules.h"

struct rdzvd_server;

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

/* ---- rdzv_client.c ------------------------------------------------------- */

/* The rendezvous cannot go on: this back end gives up for good (its
 * timers stop) and reports why, once (on_error; err 0: the job finished
 * without this node). */
void rdzv_client__give_up(struct rdzv_client *c, int err, const char *fmt,
                          ...) __attribute__((format(printf, 3, 4)));

/* Sends the JOIN the agent asked for (c->pending_reason). */
void rdzv_client__send_join(struct rdzv_client *c);

/* One message from the server, once the handshake is done. */
void rdzv_client__dispatch(struct rdzv_client *c,
                           const struct rdzv_proto_msg *m);

/* One message of the handshake (Note [client handshake]); once it has
 * succeeded, rdzv_client__on_ready. */
void rdzv_client__handshake_step(struct rdzv_client *c,
                                 const struct rdzv_proto_msg *m);

/* ---- rdzv_client_conn.c -------------------------------------------------- */

/* One of c's handles (or its embedded server) is gone; the last one,
 * once destroyed, frees c.  handle_closed: the close callback of c's
 * handles. */
void rdzv_client__release(struct rdzv_client *c);
void rdzv_client__handle_closed(uv_handle_t *h);

/* Sends m on the connection: 0, UV_ENOTCONN, or a libuv error. */
int rdzv_client__send_msg(struct rdzv_client *c,
                          const struct rdzv_proto_msg *m);

/* Closes the connection (no more reading or writing). */
void rdzv_client__close_tcp(struct rdzv_client *c);

/* The connection is lost (why; going_away: the server said GOING_AWAY):
 * reconnect, or give up (Note [reconnect]). */
void rdzv_client__lost(struct rdzv_client *c, const char *why,
                       bool going_away);

/* Connects to c->addr (the first connection, or the next attempt). */
void rdzv_client__start_connect(struct rdzv_client *c);

/* Connected and authenticated: the first JOIN, or the re-assertion. */
void rdzv_client__on_ready(struct rdzv_client *c);

/* ---- rdzv_client_host.c -------------------------------------------------- */

/* Note [embedded rendezvous]: hosts the rendezvous when this node should
 * and can. */
void rdzv_client__maybe_host(struct rdzv_client *c);

#endif
