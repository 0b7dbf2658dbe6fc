/* server.h -- rdzvd's libuv TCP server around the rendezvous state
 * machine.  Used by the rdzvd daemon and, embedded, by a cdrun agent that
 * hosts the rendezvous itself. */
#ifndef RDZVD_SERVER_H
#define RDZVD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "rdzv_auth.h"
#include "rdzv_state.h"

struct rdzvd_server;

/* What one daemon lets its clients hold, so that no client can take it
 * down (man/rdzvd.8, "LIMITS").  A zero field takes the default. */
struct rdzvd_server_limits {
  int max_conns;              /* open connections; default 65536 */
  int max_conns_per_peer;     /* of one peer address (Note [tenant
                                 share]); default max_conns / 4, at
                                 least min(max_conns, 1024) */
  double hello_timeout;       /* seconds a new connection has to join (or
                                 end its status query); default 10 */
  size_t prejoin_frame;       /* frame body limit until joined; 16 KiB */
  size_t input_budget;        /* partial frames, every connection together;
                                 default 64 MiB: beyond, reading pauses */
  size_t output_budget;       /* unwritten replies, every connection
                                 together; default 256 MiB */
  size_t conn_output;         /* one connection's unwritten replies;
                                 default 8 MiB: beyond, it is dropped */
};

/* Fills the zero fields of l with the defaults. */
void rdzvd_server_limits_default(struct rdzvd_server_limits *l);

struct rdzvd_server_opts {
  const char *host;           /* NULL or "": every address, IPv6 + IPv4 */
  int port;                   /* 0: any free port (see rdzvd_server_port) */
  /* the state machine's; zeros: defaults */
  struct rdzv_state_limits limits;
  struct rdzvd_server_limits io;  /* connections; zeros: defaults */
  /* NULL or empty: no shared secret.  Otherwise every connection must
   * pass the handshake of proto/rdzv_auth.h first (copied). */
  const struct rdzv_auth_secret *secret;
  /* NULL or empty: node tokens under a random key per server life.
   * Otherwise the token key file's bytes (rdzv_token_key_file): a
   * restarted server checks the tokens of claims (copied). */
  const struct rdzv_auth_secret *token_key;
  /* With a token key file: the job ledger beside it (Note [job ledger],
   * job_ledger.h); NULL: none. */
  const struct rdzv_ledger *ledger;
  /* The jobs' live stores (Note [live store in rdzvd], live_stores.h);
   * NULL: none. */
  const struct rdzv_live_host *live;
  /* Where job log lines go (prefixed with a timestamp); NULL: nowhere. */
  void (*log)(void *ctx, const char *line);
  void *log_ctx;
  /* Counters to bump (metrics.h); NULL: none. */
  struct rdzvd_metrics *metrics;
  /* Runs inside a cdrun agent (this process): ROUND messages say which
   * rank hosts the rendezvous, so the others can name it when it goes. */
  bool embedded;
};

/* Binds, listens and starts serving on loop.  Returns 0, or a negative
 * libuv error with a sentence in err ("cannot listen on [::]:29400:
 * address already in use"). */
int rdzvd_server_start(uv_loop_t *loop, const struct rdzvd_server_opts *o,
                       struct rdzvd_server **out, char *err, size_t errlen);

/* The port actually bound. */
int rdzvd_server_port(const struct rdzvd_server *s);

/* Nodes currently members of some job. */
int rdzvd_server_nodes(const struct rdzvd_server *s);
/* rdzv_state_peer_counts of the server's registry, and the connections
 * refused at a peer's share (--max-conns-per-peer). */
void rdzvd_server_peer_counts(const struct rdzvd_server *s, int *peers,
                              uint64_t *refused_jobs,
                              uint64_t *refused_waiting,
                              uint64_t *refused_conns);

/* Jobs per phase (rdzv_state_jobs_by_phase), for metrics. */
void rdzvd_server_jobs_by_phase(const struct rdzvd_server *s,
                                int counts[RDZV_STATE_PHASES],
                                const char *names[RDZV_STATE_PHASES]);

/* Calls cb(ctx) once, the first time the server has no node left in any
 * job (immediately on the next loop turn if it has none now). */
void rdzvd_server_on_idle(struct rdzvd_server *s, void (*cb)(void *ctx),
                          void *ctx);

/* Tells every connection that passed the handshake GOING_AWAY (why),
 * then stops as rdzvd_server_stop: agents reconnect at once to a
 * successor instead of waiting for their keepalive window. */
void rdzvd_server_going_away(struct rdzvd_server *s, const char *why);

/* Closes the listener and every connection; frees s once every handle is
 * closed (the loop must keep running until then). */
void rdzvd_server_stop(struct rdzvd_server *s);

#endif
