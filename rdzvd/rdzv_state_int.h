/* rdzv_state_int.h -- the rendezvous state machine's own types, shared by
 * its files (rdzv_state.c, the registry and its entry points;
 * rdzv_round.c, a job's rounds; rdzv_join.c, JOIN; rdzv_failure.c,
 * FAILURE and the closing wait; rdzv_waiting.c, what gathering nodes
 * hear; rdzv_resume.c, its soft state; rdzv_tenant.c, a peer's share;
 * kv_store.c, the jobs' stores; status_render.c, its status report) and
 * by nothing else, and what crosses between them. */
#ifndef RDZV_STATE_INT_H
#define RDZV_STATE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hashtab.h"
#include "list.h"
#include "rdzv_rules.h"
#include "rdzv_state.h"
#include "rdzv_token.h"
#include "timer_heap.h"

#define WIRE_MAX_SECONDS 1e7        /* the codec's bound on durations */
#define JOB_TIMERS 4                /* a job's timer_heap nodes */

/* Note [timers]
 *
 * Every deadline is a struct timer_heap_node embedded in its owner (a
 * job's last call, progress, owed and forget timers; a node's join and keepalive
 * timers; a KV wait) and kept in the registry's one timer heap (timer_heap.h); its
 * kind says which owner and which timer it is.
 *
 * Keepalive is lazy: a message only stores last_seen (O(1)); the node's
 * keepalive timer stays where it was armed, and when it fires it either
 * finds the node silent for the whole period (dead) or moves itself to
 * last_seen + period.  So rdzv_state_tick touches a live node about once per
 * period, never on every message, and never scans the nodes. */
enum tkind {
  T_LAST_CALL,    /* struct job, t_last_call; also the end of the grace
                     period of a job being rebuilt (RUNNING), and of the
                     wait of a closing job (Note [root cause]) */
  T_PROGRESS,     /* struct job, t_progress */
  T_OWED,         /* struct job, t_owed: Note [settled waiting] */
  T_FORGET,       /* struct job, t_forget */
  T_JOIN,         /* struct node, t_join */
  T_ALIVE,        /* struct node, t_alive */
  T_KV_WAIT,      /* struct waiter, t */
};

enum phase { PH_GATHERING, PH_LAST_CALL, PH_RUNNING, PH_CLOSED, PH_FINISHED };

/* Note [node states]
 *
 * NS_PART: a participant of the current round: gathering (joined it) or
 *   running (has a rank).
 * NS_SPARE: joined, but not in the round: the waiting list.  Spares are
 *   kept in join order and promoted to participants while there is room
 *   (participants + outstanding < max_nodes).  Their join timeout runs
 *   from their JOIN, as a gathering participant's does.
 * NS_IDLE: a node of the job that has not joined the current round.  With
 *   expected set it was a participant of the previous round, was told to
 *   restart, and has a place reserved until the round completes
 *   ("outstanding"); a round of restarting nodes completes as soon as none
 *   is outstanding.  Status calls this state "left". */
enum nstate { NS_IDLE, NS_PART, NS_SPARE };

struct conn {
  void *conn;
  uint64_t h;
  struct node *node;                  /* NULL when not (or no longer) joined */
  bool dropped;                       /* drop was called: ignore what follows */
  char peer[RDZV_PROTO_MAX_ADDR + 1]; /* rdzv_state_set_peer_addr, or "" */
};

/* Note [tenant share] (rdzv_tenant.c): what one peer address holds. */
struct tenant {
  uint64_t h;
  int jobs;             /* jobs it created that hold a node */
  int spares;           /* its nodes on a waiting list */
  int refs;             /* jobs and nodes that name it: freed at 0 */
  char addr[RDZV_PROTO_MAX_ADDR + 1];
};

struct barrier {
  struct barrier *next;
  int count;                    /* participants that entered */
  bool done;
  char name[RDZV_PROTO_MAX_ID + 1];
};

struct kv {
  uint64_t h;
  size_t len;
  char *value;                  /* len bytes + NUL */
  char key[];
};

/* The registry's lists are list.h's.  Where the order matters
 * (creation, join order, oldest empty job first) elements go in at the
 * tail; a KV key's and a node's waiters go in at the head. */
struct wkey {                   /* the GETs waiting for one key */
  uint64_t h;
  struct list_node waiters;     /* struct waiter, by_key */
  char key[];
};

struct waiter {
  struct node *node;
  struct wkey *wk;
  struct list_node by_key;      /* wk->waiters */
  struct list_node by_node;     /* node->waiters */
  double wait;
  struct timer_heap_node t;
};

struct node {
  struct job *job;
  struct conn *c;
  struct tenant *tenant;        /* its connection's peer; NULL: unknown */
  struct list_node in_job;      /* job->nodes, creation order */
  struct list_node in_spares;   /* job->spares, join order */
  struct list_node waiters;     /* struct waiter, by_node */
  struct list_node in_owed;     /* job->owed, while owed */
  bool owed;                    /* owed the WAITING answering its JOIN */
  struct barrier *barrier;      /* the pending barrier it entered */
  enum nstate state;
  bool expected;
  int rank;                     /* in the running round, else -1 */
  int prev_rank;                /* in the previous round, else -1 */
  uint64_t seq;                 /* join order */
  double join_at, last_seen;
  struct timer_heap_node t_join, t_alive;
  int64_t pid;
  int nproc, master_port;
  /* Its own JOIN's durations within the server's ceilings: a node is
   * judged by the keepalive it promised and waits as long as it asked,
   * whatever the job's first joiner chose. */
  double alive_window, join_timeout;
  /* Note [node tokens] (proto/rdzv_token.h): the last two credentials
   * issued to it (a RESUME may present either: the newer one may still
   * be in flight), and what the gathering one vouches for. */
  unsigned char token[RDZV_PROTO_TOKEN_BYTES],
      prev_token[RDZV_PROTO_TOKEN_BYTES];
  uint64_t incarnation;         /* drawn at creation: its tokens' own */
  int token_round, token_restarts;
  bool token_gathering;
  bool reported;                /* closing: its failure report came */
  char host[RDZV_PROTO_MAX_ADDR + 1];
  char addr[RDZV_PROTO_MAX_ADDR + 1];   /* as joined; "" = the peer address */
};

/* A job's root cause (Note [root cause]), allocated at its first failure
 * and kept for its later rounds. */
struct job_cause {
  bool held;                          /* a failure of this round was reported */
  struct rdzv_proto_cause cause;      /* its worker; exited_at 0: untimed */
  char text[RDZV_PROTO_MAX_TEXT + 1]; /* "<node> workers failed: <msg>" */
};

struct job {
  struct list_node in_registry; /* r->jobs_in_order, creation order */
  struct list_node in_empty;    /* r->empty (no node), when empty_listed */
  bool empty_listed;
  bool tenant_counted;          /* in tenant->jobs (it holds a node) */
  struct tenant *tenant;        /* the peer that created it; NULL: unknown */
  uint64_t h;
  struct rdzv_proto_conf conf;
  enum phase phase;
  int round, restart_count, world_size;
  int n_nodes, n_part, n_outstanding, n_spares;
  int64_t sum_nproc;            /* over all nodes: bounds any world size */
  bool restarting;              /* the round started with nodes expected */
  bool rebuilding;              /* RUNNING, rebuilt from RESUMEs, ranks
                                   still missing: Note [soft state] */
  int rebuild_size;             /* the round's group_world_size then */
  bool rebuilt_exit;            /* ... and a node re-asserted the exit
                                   barrier */
  uint64_t incarnation;         /* Note [job ledger]: bound into its tokens */
  int issued_round;             /* the last round it issued (ROUND); -1 */
  int issued_restarts;          /* that round's restart count */
  bool live_served;             /* the daemon serves its live store */
  bool resumed;                 /* created from a RESUME in this server
                                   life and not whole again yet: its
                                   history is the agents' word */
  bool rounds_spent; /* round RDZV_PROTO_MAX_ROUND reached: closing */
  bool exit_passed;  /* the running round passed "exit" */
  /* Note [root cause] (rdzv_state.h): the round's root cause so far,
   * and the close that waits for the other participants' reports. */
  struct job_cause *cause;      /* NULL until a first failure: a
                                   quiet job need not hold it */
  bool closing;                 /* a failure ends the job: waiting for
                                   the other participants' reports */
  bool closing_exhausted;       /* ... because no restart is left */
  /* The participant whose loss starts the round (its RESTART says so):
   * set around rdzv_round_start only. */
  const char *lost_host, *lost_why;
  double closing_deadline;
  bool progress_dirty;
  double deadline;              /* last call */
  double round_started;         /* metrics: creation, or the RESTART */
  double progress_last;
  uint64_t seq;
  struct timer_heap_node t_last_call, t_progress, t_owed, t_forget;
  /* Note [settled waiting] (rdzv_waiting.c): the nodes owed the WAITING
   * answering their JOIN, the first one's JOIN, the job's last JOIN. */
  struct list_node owed;        /* struct node, in_owed */
  double owed_since, last_join;
  struct list_node nodes;       /* struct node, in_job */
  struct list_node spares;      /* struct node, in_spares */
  struct node **order;          /* scratch for ranking, >= n_nodes */
  size_t order_cap;
  struct hashtab ranks;         /* rebuilding: rank -> the node that
                                   re-asserted it; sized by arrivals */
  struct barrier *barriers;
  int n_barriers;
  struct hashtab kv;
  size_t kv_bytes;
  struct hashtab waits;         /* key -> struct wkey */
  int n_waiters;
  char id[RDZV_PROTO_MAX_ID + 1];
};

struct rdzv_state {
  struct rdzv_state_sink sink;
  struct rdzv_state_limits lim;
  uint64_t seed;
  struct hashtab jobs;          /* id -> struct job */
  struct hashtab conns;         /* conn pointer -> struct conn */
  struct list_node jobs_in_order; /* the same, creation order (in_registry) */
  struct list_node empty;       /* jobs with no node, oldest first */
  int n_jobs, n_nodes;
  size_t kv_total;              /* every job's kv_bytes */
  struct timer_heap heap;
  struct rdzvd_metrics *metrics;  /* rdzv_state_set_metrics; NULL: none */
  bool busy;                    /* an entry point is running */
  const struct rdzv_proto_resume *resume_hint; /* a gathering RESUME's round and
                                           count for the job it creates */
  struct rdzv_token_key *tokens; /* Note [node tokens] */
  struct rdzv_ledger ledger;    /* Note [job ledger]; get NULL: none */
  struct rdzv_live_host live;   /* Note [live store in rdzvd]; serve NULL:
                                   none */
  bool resuming;                /* a RESUME is being handled */
  struct hashtab tenants;       /* addr -> struct tenant (rdzv_tenant.c) */
  int n_tenants;
  uint64_t peer_refusals[2];    /* by enum tenant_limit */
  int64_t embedded_pid;         /* rdzv_state_set_embedded; 0: a daemon */
  char embedded_host[RDZV_PROTO_MAX_ADDR + 1];
};

/* What crosses between the machine's files: each section is one file's,
 * and declares only what the others call (the comments are at the
 * definitions). */

/* ---- rdzv_state.c: the registry, its entry points and timers ---- */

#define DESC_MAX                                                               \
  (2 * RDZV_PROTO_MAX_ADDR + 64) /* rdzv_state__describe's text */
/* One line of what happened to a job, to the sink's log (if any). */
__attribute__((format(printf, 2, 3)))
void rdzv_state__log(const struct rdzv_state *r, const char *f, ...);
/* A bounded copy: at most size - 1 bytes of src, NUL-terminated. */
void rdzv_state__copy_str(char *dst, size_t size, const char *src);
void rdzv_state__describe(const struct node *n, char *buf, size_t size);
bool rdzv_state__gathering(const struct job *job);
struct rdzv_rules_job rdzv_state__rules_view(const struct job *job);
uint64_t rdzv_state__rank_hash(const struct rdzv_state *r, int rank);
void rdzv_state__ranks_clear(struct job *job);
void rdzv_state__send_text(const struct rdzv_state *r, void *conn,
                           enum rdzv_proto_op op,
                           enum rdzv_proto_error_code code, bool success,
                           const char *text);
void rdzv_state__send_text_cause(const struct rdzv_state *r, void *conn,
                                 enum rdzv_proto_op op,
                                 enum rdzv_proto_error_code code, bool success,
                                 const char *text,
                                 const struct rdzv_proto_cause *cause,
                                 const struct job *job);
struct conn *rdzv_state__conn_get(struct rdzv_state *r, void *conn,
                                  bool create);
void rdzv_state__conn_drop(struct rdzv_state *r, void *conn);
void rdzv_state__node_set_state(struct job *job, struct node *n,
                                enum nstate st, bool expected);
void rdzv_state__empty_add(struct rdzv_state *r, struct job *job);
void rdzv_state__empty_remove(struct rdzv_state *r, struct job *job);
void rdzv_state__node_free(struct rdzv_state *r, struct node *n);
void rdzv_state__barriers_free(struct job *job);
void rdzv_state__job_forget(struct rdzv_state *r, struct job *job);
void rdzv_state__job_free(struct rdzv_state *r, struct job *job);
struct job *rdzv_state__job_find(const struct rdzv_state *r, const char *id);

/* ---- rdzv_round.c: a job's rounds, BARRIER and LEAVE ---- */

void rdzv_round_complete(struct rdzv_state *r, struct job *job, double now);
void rdzv_round_recheck(struct rdzv_state *r, struct job *job, double now);
void rdzv_round_start(struct rdzv_state *r, struct job *job, double now,
                      const char *why, const struct node *except);
void rdzv_round_end_job(struct rdzv_state *r, struct job *job, double now,
                        bool success, const char *text);
void rdzv_round_barrier_check(struct rdzv_state *r, struct job *job,
                              struct barrier *b);
void rdzv_round_node_remove(struct rdzv_state *r, struct node *n, double now,
                            const char *why);
void rdzv_round_node_lost(struct rdzv_state *r, struct node *n, double now,
                          const char *why);
int rdzv_round_barrier(struct rdzv_state *r, struct node *n,
                       const struct rdzv_proto_barrier *m);
int rdzv_round_leave(struct rdzv_state *r, struct node *n, double now);

/* ---- rdzv_join.c: JOIN ---- */

int rdzv_join_handle(struct rdzv_state *r, struct conn *c, void *conn,
                     const struct rdzv_proto_join *j, double now);
int rdzv_join_node(struct rdzv_state *r, struct conn *c, void *conn,
                   const struct rdzv_proto_join *j, double now,
                   struct node **created);
__attribute__((format(printf, 8, 9))) int rdzv_join_refuse(
    struct rdzv_state *r, void *conn, struct node *n, double now,
    const char *why, enum rdzv_proto_error_code code, int err, const char *f,
    ...);

/* ---- rdzv_failure.c: FAILURE, the closing wait, the root cause ---- */

int rdzv_failure_handle(struct rdzv_state *r, struct node *n,
                        const struct rdzv_proto_failure *f, double now);
const struct rdzv_proto_cause *rdzv_failure_cause(const struct job *job);
int rdzv_failure_closing_pending(const struct job *job);
void rdzv_failure_closing_end(struct rdzv_state *r, struct job *job,
                              double now);

/* ---- rdzv_waiting.c: what a gathering node hears, and when ----
 *
 * Note [settled waiting].  send: a WAITING now; owe: the WAITING
 * answering n's JOIN, once the job's JOINs settle; settled: the job's
 * owed timer fired; cancel: the round completed (ROUND answers the owed
 * participants; owed spares hear WAITING now); forget: n is freed;
 * progress: the count changed (everyone hears within PROGRESS_PERIOD);
 * progress_timer: the job's progress timer fired.  token_store: n's new
 * credential. */
void rdzv_waiting_send(const struct rdzv_state *r, const struct job *job,
                       struct node *n, double now);
void rdzv_waiting_owe(struct rdzv_state *r, struct job *job, struct node *n,
                      double now);
void rdzv_waiting_settled(struct rdzv_state *r, struct job *job, double now);
void rdzv_waiting_cancel(struct rdzv_state *r, struct job *job, double now);
void rdzv_waiting_forget(struct node *n);
void rdzv_waiting_progress(struct rdzv_state *r, struct job *job, double now);
void rdzv_waiting_progress_timer(struct rdzv_state *r, struct job *job,
                                 double now);
void rdzv_waiting_token_store(struct node *n,
                              const unsigned char t[RDZV_PROTO_TOKEN_BYTES]);

/* ---- rdzv_resume.c: RESUME from conn (c: its entry, or NULL); the
 * grace period of a job being rebuilt ran out ---- */
int rdzv_resume_handle(struct rdzv_state *r, struct conn *c, void *conn,
                       const struct rdzv_proto_resume *a, double now);
void rdzv_resume_expired(struct rdzv_state *r, struct job *job,
                         double now);

/* ---- status_render.c: a phase's name, as status and metrics show it ---- */
const char *status_render_phase_name(enum phase p);

/* ---- kv_store.c ---- */
/* KV_SET, KV_GET, KV_ADD from node n; a waiting GET freed
 * (its node goes); one timed out (ERROR timeout); a job's store freed. */
int kv_store_handle(struct rdzv_state *r, struct node *n,
                    const struct rdzv_proto_msg *m, double now);
void kv_store_waiter_free(struct rdzv_state *r, struct job *job,
                          struct waiter *w);
void kv_store_timeout(struct rdzv_state *r, struct waiter *w);
void kv_store_job_free(struct rdzv_state *r, struct job *job);

static inline const char *rdzv_state__node_addr(const struct node *n)
{
  if (n->addr[0])
    return n->addr;
  return n->c->peer[0] ? n->c->peer : "127.0.0.1";
}

static inline bool rdzv_state__job_eq(const void *item, const void *key)
{
  return strcmp(((const struct job *)item)->id, key) == 0;
}

static inline double rdzv_state__clamp_secs(double s)
{
  return s < 0 ? 0 : s > WIRE_MAX_SECONDS ? WIRE_MAX_SECONDS : s;
}

/* ---- rdzv_tenant.c: one peer address's share (Note [tenant share]) ---- */

enum tenant_limit { TENANT_JOBS, TENANT_WAITING };

/* The tenant of addr, with a reference taken; NULL for "" (unknown) or
 * out of memory (then nothing is counted). */
struct tenant *rdzv_tenant_ref(struct rdzv_state *r, const char *addr);
/* Drops a reference; the tenant goes when nothing names it. */
void rdzv_tenant_unref(struct rdzv_state *r, struct tenant *t);
/* A job starts or stops holding nodes; a node enters or leaves a waiting
 * list: the counts of its tenant. */
void rdzv_tenant_job_held(struct job *job, bool held);
void rdzv_tenant_spare(struct node *n, bool spare);
/* 0, or a refusal to send: the limit the tenant of conn's peer is at
 * (creating: the JOIN creates a job; would_wait: it would go on a
 * waiting list), with its sentence in text. */
int rdzv_tenant_check(struct rdzv_state *r, const struct conn *c,
                      bool creating, bool would_wait, char *text,
                      size_t len);
/* Under pressure (the job table full, no empty job to forget): a job
 * that never ran and holds only gathering nodes, of the tenant with the
 * most jobs, its oldest; NULL if none. */
struct job *rdzv_tenant_reclaimable(struct rdzv_state *r);

#endif
