/* etcd_session.h -- one agent's presence in etcd, under the etcd
 * rendezvous (rdzv_etcd.c): a lease of ttl seconds, kept alive from the
 * caller's libuv loop, and the agent's alive key attached to it.  While
 * the lease lives the others count the agent in; when it expires (or is
 * revoked) etcd deletes the alive key and they count it as lost.
 *
 * The alive set is what every agent's alive key says, as the watch shows
 * it: who the agent is and what it asks for (Note [requests in alive
 * keys]); etcd_alive_value writes our own, the set reads them all.
 *
 * Async rule: every call returns at once; what etcd answers comes back
 * through the callbacks, on the loop, never from inside the call.  The
 * caller owns the session (embedded in its own struct) and the etcd
 * client; the client must outlive every call but etcd_session_close. */
#ifndef CDRUN_ETCD_SESSION_H
#define CDRUN_ETCD_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "etcd_client.h"
#include "etcd_rdzv_state.h"
#include "rdzv_proto.h"

/* etcd's smallest lease TTL. */
#define ETCD_SESSION_MIN_TTL 2

/* A call's outcome: err 0, or a negative errno and etcd's or curl's
 * message. */
typedef void (*etcd_session_cb)(void *ctx, int err, const char *msg);

struct etcd_session {
  /* Read-only for the caller. */
  int ttl;                        /* seconds */
  char lease[32];                 /* decimal, as etcd sends it; "": none */
  char id[ETCD_RDZV_ID_MAX + 1];         /* the lease id in hex: the alive key's
                                     name and the node's id in the state */
  char alive_key[RDZV_PROTO_MAX_ID + 400]; /* alive_prefix + id, once granted */

  /* Private. */
  struct etcd_client *ec;
  const char *job;                /* rdzv_id, for messages */
  char alive_prefix[RDZV_PROTO_MAX_ID + 300];
  double interval;                /* the job's keepalive_interval */
  uv_timer_t keepalive;
  double keepalive_ok;            /* last successful keepalive */
  bool keepalive_inflight;
  bool keepalive_warned;
  bool stopped;
  char also[32];                  /* another lease renewed with ours */
  etcd_session_cb grant_cb;
  void *grant_ctx;
  void (*lost)(void *ctx);        /* etcd says the lease has expired */
  void (*closed)(void *ctx);      /* etcd_session_close is done */
  void *ctx;
};

/* The lease TTL for a keepalive window of interval x misses seconds:
 * whole seconds, rounded up, within [ETCD_SESSION_MIN_TTL, 1e6]. */
int etcd_session_ttl(double interval, double misses);

/* Sets s up on loop (nothing is sent): the job's id (kept, for messages),
 * the alive keys' prefix ("<prefix><id>/alive/"), the keepalive interval
 * and window (interval x misses), and the callbacks' ctx.  lost runs when
 * a keepalive finds the lease gone (at most once per lease); closed runs
 * once, after etcd_session_close. */
void etcd_session_init(struct etcd_session *s, uv_loop_t *loop,
                       const char *job, const char *alive_prefix,
                       double interval, double misses,
                       void (*lost)(void *ctx), void (*closed)(void *ctx),
                       void *ctx);

/* Starts renewing on ec: every min(interval, ttl/3) s while there is a
 * lease, one keepalive at a time (Note [keepalive across a member's
 * loss]). */
void etcd_session_start(struct etcd_session *s, struct etcd_client *ec);

/* Asks for a new lease.  On success s->lease, s->id and s->alive_key are
 * set before cb runs.  Returns 0 or a negative errno (cb will not run). */
int etcd_session_grant(struct etcd_session *s, etcd_session_cb cb,
                       void *ctx);

/* The lease is gone (etcd said so): the next grant makes a new one. */
void etcd_session_forget(struct etcd_session *s);

/* Writes value to the alive key, under the lease.  Returns 0 or a
 * negative errno (cb will not run). */
int etcd_session_put_alive(struct etcd_session *s, const char *value,
                           etcd_reply_cb cb, void *ctx);

/* Revokes the lease (etcd deletes the alive key).  Returns 0, or a
 * negative errno when there is no lease or no call could start (cb will
 * not run). */
int etcd_session_revoke(struct etcd_session *s, etcd_reply_cb cb,
                        void *ctx);

/* Renews lease (decimal; "" or NULL: none) with every keepalive of
 * s's own, in the same request: Note [the job's lease], rdzv_etcd.c. */
void etcd_session_also(struct etcd_session *s, const char *lease);

/* No more keepalives (a keepalive in flight still reports). */
void etcd_session_stop(struct etcd_session *s);

/* Stops and closes the timer; closed runs once it is.  The client may be
 * closed already (no call is made). */
void etcd_session_close(struct etcd_session *s);

/* ---- the alive set -------------------------------------------------------- */

/* Note [requests in alive keys]: an agent's alive key also says what it
 * wants: join (from round R on), enter the exit barrier of round R, leave.
 * Whoever writes the state next applies every request it can see, not only
 * its own, so N agents that join, pass the exit barrier or leave together
 * need about N transactions, not N^2/2 (each one that loses the
 * compare-and-swap finds its request already applied).  The requests are
 * the same idempotent transitions as the agent's own, so applying one
 * twice, or late, is harmless; the agent still applies its own. */
struct etcd_peer {
  char id[ETCD_RDZV_ID_MAX + 1];  /* its lease id: the alive key's name */
  int64_t create_rev;
  struct etcd_rdzv_node node;     /* host, addr, pid, nproc, port */
  struct etcd_rdzv_conf conf;
  int join;                       /* -1: not joining */
  int exit;                       /* -1: not in the exit barrier */
  bool leave;
};

/* The agents with an alive key, in creation order (the order their
 * requests are applied in).  Zeroed: empty. */
struct etcd_alive_set {
  struct etcd_peer *peer;
  int n, cap;
};

/* The index of id's entry, or -1. */
int etcd_alive_find(const struct etcd_alive_set *a, const char *id);
/* id's alive key, created at revision create, now says value[0..len)
 * (NULL: nothing readable; then it asks for nothing).  Out of memory, a
 * new entry is dropped. */
void etcd_alive_put(struct etcd_alive_set *a, const char *id, int64_t create,
                    const char *value, size_t len);
/* id's alive key is gone. */
void etcd_alive_del(struct etcd_alive_set *a, const char *id);
/* Empties the set (a new snapshot follows); etcd_alive_free frees it. */
void etcd_alive_clear(struct etcd_alive_set *a);
void etcd_alive_free(struct etcd_alive_set *a);
/* The alive key's value for p (its node's host, addr, pid, nproc and
 * port, its conf, join, exit, leave), JSON to free(); NULL when out of
 * memory. */
char *etcd_alive_value(const struct etcd_peer *p);

#endif
