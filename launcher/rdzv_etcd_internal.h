/* rdzv_etcd_internal.h -- what the etcd back end's three files share:
 * rdzv_etcd.c (boot, the watches, the back-end operations, leaving),
 * rdzv_etcd_observe.c (the state to the agent's callbacks) and
 * rdzv_etcd_step.c (the sync step: intents to a transaction).  The
 * back end's state, and the calls that cross.  rdzv_etcd.h is the back
 * end's interface; nothing but these three files includes this. */
#ifndef CDRUN_RDZV_ETCD_INTERNAL_H
#define CDRUN_RDZV_ETCD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "etcd_client.h"
#include "etcd_rdzv_state.h"
#include "etcd_session.h"
#include "rdzv_etcd.h"

#define RETRY_MS 500

enum boot { B_IDLE, B_GRANT, B_ALIVE, B_SYNC, B_READY };

struct rdzv_etcd {
  struct rdzv base;               /* first: a struct rdzv * is one */
  struct rdzv_etcd_opts o;
  char endpoints[1024];
  char id[RDZV_PROTO_MAX_ID + 1];
  char local_addr[RDZV_PROTO_MAX_ADDR + 1];
  char myhost[RDZV_PROTO_MAX_ADDR + 1];
  char *user, *password, *cacert, *cert, *key;

  char prefix[RDZV_PROTO_MAX_ID + 256];   /* <prefix><id>/ */
  char state_key[RDZV_PROTO_MAX_ID + 300];
  char alive_prefix[RDZV_PROTO_MAX_ID + 300];

  struct etcd_client *ec;
  struct etcd_watch *watch;       /* Note [what an agent watches]: the
                                     prefix (full_view), or the state */
  struct etcd_watch *alive_watch; /* ... the alive keys' deletes (NOPUT) */
  bool full_view;                 /* ... this agent sees every request */
  bool want_resync;               /* ... it is the helper now: read again */
  bool synced;                    /* a snapshot was read once */
  enum boot boot;
  bool call_inflight;             /* one boot call or transaction */
  struct etcd_rdzv_state txn_state;      /* what the transaction in flight writes */
  bool txn_clear_failure;         /* ... and the intents it carries */
  bool txn_clear_barrier;
  struct etcd_session session;    /* lease, keepalives, alive key */
  char end_lease[32];             /* Note [the ended job's marker]; "0":
                                     none could be had */
  bool end_lease_used;            /* ... and the state is stored under it */
  char job_lease[24];             /* Note [the job's lease]: granted here */
  char dead_lease[24];            /* a job lease etcd no longer has */
  bool emptied;                   /* our write removed the last node */
  char emptied_lease[24];         /* ... from a state under this lease */
  int revokes;                    /* revocations in flight at the end */
  char last_error[512];

  /* What this agent knows. */
  struct etcd_rdzv_state st;
  int64_t st_mod;                 /* mod_revision of st; 0: absent */
  int64_t view_rev;               /* the (state's) watch delivered up to
                                     here */
  struct etcd_alive_set alive;    /* agents with an alive key */
  bool publish_inflight;          /* our alive key being rewritten */
  bool publish_dirty;             /* ... and it must be again */
  char *published;                /* the value last put there (or NULL) */
  int join_round;                 /* the round our join asks for */
  bool was_member;

  /* Intents. */
  bool want_join;
  bool want_failure;
  int failure_round;
  bool failure_final;
  char failure_msg[RDZV_PROTO_MAX_TEXT + 1];
  struct rdzv_proto_cause
      failure_cause;              /* Note [root cause]; exited_at 0: none */
  int close_wait_round;           /* the wait of this closing round ran
                                     out here; -1: none */
  int cw_armed_round;             /* local close-wait timer, -1: none */
  int barrier_round;              /* -1: not waiting in the barrier */
  bool barrier_written;
  int last_call_round;            /* the last call of this round ran out */
  bool want_leave;

  /* What the agent was told. */
  int delivered_round;            /* -1: none */
  int restart_told_round;
  int last_present;
  double last_progress;
  int lc_armed_round;             /* local last-call timer, -1: none */
  double join_started;

  uv_timer_t kick;                /* step() outside any callback */
  uv_timer_t retry;
  uv_timer_t last_call;
  uv_timer_t close_wait;          /* Note [root cause]: a closing round */
  uv_timer_t join_deadline;
  uv_timer_t leave_guard;
  uv_timer_t catchup;             /* Note [writing from the watch's view] */
  bool catchup_expired;
  uv_timer_t defer;               /* Note [one helper] */
  double txn_sent, txn_rtt;       /* a transaction's round trip, smoothed */
  bool defer_expired;
  int open_handles;
  bool failed;
  bool destroyed;
  bool closing;
};

/* ---- rdzv_etcd.c ------------------------------------------------------- */

/* The rendezvous cannot go on: gives up for good and reports why, once. */
void rdzv_etcd_give_up(struct rdzv_etcd *e, int err, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
/* This agent's lease is gone (ctx: the back end). */
void rdzv_etcd_lease_lost(void *ctx);
/* One key-value from a range or an event: the state, or an alive key. */
void rdzv_etcd_take_kv(struct rdzv_etcd *e, const cJSON *kv, bool deleted);
/* Rewrites our alive key with what we ask for now. */
void rdzv_etcd_publish(struct rdzv_etcd *e);
/* The boot's next call (lease, alive key, snapshot, watch). */
void rdzv_etcd_boot_next(struct rdzv_etcd *e);
/* Tells the agent its round (me: its place in it). */
void rdzv_etcd_deliver_round(struct rdzv_etcd *e, int me);
/* What the state says, to the agent's callbacks. */
void rdzv_etcd_observe(struct rdzv_etcd *e);
/* Note [what an agent watches]: reads the job again (once no call is in
 * flight) and watches what this agent needs then. */
void rdzv_etcd_resync(struct rdzv_etcd *e);
/* Out of the state (or giving up on it): revokes this agent's lease and
 * what else is left to expire, then closes. */
void rdzv_etcd_leave_finish(struct rdzv_etcd *e);

/* ---- rdzv_etcd_step.c -------------------------------------------------- */

/* step() soon, from the loop: never from inside the call that caused it. */
void rdzv_etcd_kick(struct rdzv_etcd *e);
/* The retry timer's callback: the boot's next call, or step() again. */
void rdzv_etcd_retry_cb(uv_timer_t *t);
/* Note [one helper]: whether this agent is the one that helps. */
bool rdzv_etcd_is_helper(const struct rdzv_etcd *e);
/* Note [leaving a finished job]: whether this agent leaves by revoking
 * its lease. */
bool rdzv_etcd_leave_by_revoke(const struct rdzv_etcd *e);

#endif
