/* server_int.h -- rdzvd's server's own types, shared by its files
 * (server.c, the server's life; server_conn.c, a connection's bytes;
 * server_dispatch.c, its frames) and by nothing else, and what crosses
 * between them. */
#ifndef RDZVD_SERVER_INT_H
#define RDZVD_SERVER_INT_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "hashtab.h"
#include "list.h"
#include "rdzv_auth.h"
#include "rdzv_proto.h"
#include "rdzv_state.h"
#include "server.h"

#define READ_CHUNK 65536

/* Note [tenant share]: the connections one peer address holds. */
struct peer_conns {
  uint64_t h;
  int n;
  char addr[INET6_ADDRSTRLEN];
};
struct conn {
  uv_tcp_t tcp;               /* first: the handle's data is the conn */
  struct rdzvd_server *s;
  struct peer_conns *pc;      /* its address's count; NULL: none */
  char *buf;                  /* bytes read, not yet framed */
  size_t len, cap;
  char peer[INET6_ADDRSTRLEN];
  char local[INET6_ADDRSTRLEN];
  bool peer_loopback;
  bool closing;
  bool close_pending;           /* Note [deferred close] */
  bool drop_after_write;        /* close once the write queue drains */
  bool joined;                  /* a JOIN was accepted: Note [budgets] */
  bool reset;                   /* read failed other than by EOF */
  bool reading;                 /* uv_read_start is in effect */
  bool in_hello;                /* not joined yet (s->hello) */
  bool in_paused;               /* waits for input budget (s->paused) */
  bool out_paused;              /* too many unwritten replies */
  struct list_node in_close;    /* s->close_list, when close_pending */
  size_t pending;               /* write_cost of the queued replies */
  size_t burst;                 /* ... and of those written at once in
                                   loop turn burst_turn (Note [replies
                                   written at once]) */
  uint64_t burst_turn;
  struct rdzv_auth_server auth; /* the shared-secret handshake */
  double accepted_at;
  struct list_node in_server; /* s->conns: every open connection */
  struct list_node hello;     /* s->hello: not joined yet, accept order */
  struct list_node paused;    /* s->paused: waiting for input budget */
};
struct write_req {
  uv_write_t req;
  struct conn *c;
  size_t cost;                /* what it holds: write_cost(its bytes) */
  char *data;
};
struct rdzvd_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  uv_timer_t timer;
  struct rdzv_state *reg;
  struct list_node conns;     /* newest first */
  struct list_node close_list; /* closes requested while in the machine,
                                * latest first */
  int in_machine;             /* depth of rdzv_state_* calls running */
  struct rdzvd_server_limits lim;
  int n_conns;
  struct hashtab peers;       /* addr -> struct peer_conns */
  uint64_t peer_seed;
  uint64_t peer_refused;      /* connections refused at a peer's share */
  size_t in_bytes;            /* partial-frame buffers, every conn */
  size_t out_bytes;           /* write_cost of unwritten replies, all */
  size_t burst_bytes;         /* write_cost of this turn's written at once */
  uint64_t turn;              /* loop turns (turn_check) */
  uv_prepare_t turn_check;
  int n_partial;              /* conns holding a partial frame */
  int n_paused;               /* of which waiting for input budget */
  struct list_node hello;     /* oldest first */
  struct list_node paused;    /* first come, first served */
  uv_timer_t hello_timer;
  int port;
  int open_handles;
  bool stopping;
  void (*log)(void *ctx, const char *line);
  void *log_ctx;
  void (*idle_cb)(void *ctx);
  void *idle_ctx;
  uv_idle_t idle_check;
  struct rdzvd_metrics *metrics;  /* NULL: none kept */
  struct rdzv_auth_secret secret; /* len 0: none */
  char rbuf[READ_CHUNK];          /* Note [read buffers] */
};

/* What an unwritten reply of len bytes costs the daemon: its bytes, its
 * write request and two allocations' overhead.  The output limits count
 * this, so that many tiny replies (pongs) are bounded like a few big
 * ones. */
static inline size_t write_cost(size_t len)
{
  return len + sizeof(struct write_req) + 2 * 16;
}
/* With a secret, the state machine learns of a connection only once its
 * handshake has succeeded (Note [authentication gate]). */
static inline bool server_conn_known(const struct conn *c)
{
  return c->s->secret.len == 0 || c->auth.state == RDZV_AUTH_S_DONE;
}

/* ---- server.c ---- */

/* A line to the server's log (if any). */
__attribute__((format(printf, 2, 3)))
void rdzvd_server__log(struct rdzvd_server *s, const char *fmt, ...);
/* One handle of s is closed; the last one, once stopping, frees s. */
void rdzvd_server__handle_released(struct rdzvd_server *s);
/* Runs due deadlines and arms the timer for the next one. */
void rdzvd_server__schedule(struct rdzvd_server *s);
/* The idle callback runs once no node is left (rdzvd_server_on_idle). */
void rdzvd_server__check_idle(struct rdzvd_server *s);

/* ---- server_conn.c: a connection's bytes ---- */

/* Every call into the state machine is between these (Note [deferred
 * close]); a close requested inside waits for the outermost leave. */
void server_conn_machine_enter(struct rdzvd_server *s);
void server_conn_machine_leave(struct rdzvd_server *s);
/* Closes c: now, or once the machine has returned. */
void server_conn_close(struct conn *c);
/* uv_close's callback for a connection's handle. */
void server_conn_freed(uv_handle_t *h);
/* c has joined, or is closing: off the hello list. */
void server_conn_hello_remove(struct conn *c);
/* Reads from c exactly when nothing holds it back. */
void server_conn_read_update(struct conn *c);
/* Counts a connection from addr (Note [tenant share]); NULL when it
 * cannot be counted. */
struct peer_conns *server_conn_peer_ref(struct rdzvd_server *s,
                                        const char *addr);
/* Writes frame[0..len) to c within the output limits (the caller keeps
 * frame). */
void server_conn_send(struct conn *c, const char *frame, size_t len);
/* The loop's prepare callback: a new turn (Note [replies written at
 * once]). */
void server_conn_turn_begin(uv_prepare_t *h);

/* ---- server_dispatch.c: a connection's frames ---- */

/* Handles every whole frame in data[0..len); returns the bytes used, or
 * -1 when the connection is being closed. */
ssize_t server_dispatch_consume(struct conn *c, const char *data, size_t len);
/* The state machine's sink (struct rdzv_state_sink): send, drop, log. */
void server_dispatch_send(void *ctx, void *connp,
                          const struct rdzv_proto_msg *m);
void server_dispatch_drop(void *ctx, void *connp);
void server_dispatch_log(void *ctx, const char *line);
bool server_dispatch_is_loopback(const char *addr);

#endif
