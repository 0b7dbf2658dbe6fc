/* rdzv_rules.h -- the rendezvous rules, once: what both back ends (rdzvd's
 * state machine, rdzv_state.h, and the etcd back end's transitions,
 * launcher/etcd_rdzv_state.h) decide the same way.
 *
 * Pure: no I/O, no clock, no allocation, no state of its own.  Each
 * back end keeps its own representation of a job and asks these
 * functions, through a small view of it, what to do:
 * - rank order: who gets which rank when a round completes;
 * - admission: where a joining node goes (this round, a new round, the
 *   waiting list), when a spare is promoted, when a gathering round
 *   completes or starts its last call;
 * - the config check: is a JOIN's configuration sane, and does it agree
 *   with the job's;
 * - the restart budget and the final-failure decision: whether a failure
 *   restarts the job or ends it, and whether a round's failure will be
 *   final (what the agent is told with its assignment: launcher/rdzv.h),
 *   live recovery's per-rank budget of replacements included (Note [live
 *   budget]);
 * - a lost node: whether the job goes on without it or ends (Note [a lost
 *   node]).
 *
 * The rules themselves are Note [round semantics] (rdzv_state.h). */
#ifndef RDZV_RULES_H
#define RDZV_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- rank order ---- */

/* Note [round semantics]: participants of the previous round keep their
 * relative order (so the rank-0 node keeps rank 0 while it lives), then
 * the others in join order.  prev_rank < 0: none; seq: join order.  A
 * qsort-style result: < 0 when a ranks before b. */
int rdzv_rules_rank_cmp(int prev_rank_a, uint64_t seq_a, int prev_rank_b,
                        uint64_t seq_b);

/* ---- admission ---- */

/* What the rules need to know of a job's current round. */
struct rdzv_rules_job {
  int min_nodes, max_nodes;
  double last_call_timeout;
  bool gathering;               /* the round gathers (or is in last call);
                                   false: it runs */
  bool in_last_call;            /* gathering, its last call running */
  bool closing;                 /* a failure ends the job: Note [root
                                   cause] */
  bool exit_passed;             /* the running round passed "exit" */
  bool restarting;              /* the round started with nodes expected */
  int n_part;                   /* participants of the round */
  int n_outstanding;            /* expected back, not yet re-joined */
};

enum rdzv_rules_admission {
  RDZV_ADMIT_ROUND,             /* a participant of the gathering round */
  RDZV_ADMIT_NEW_ROUND,         /* a spare whose arrival starts a new
                                   round (the running one has room) */
  RDZV_ADMIT_WAIT,              /* a spare: the round is full, finishing
                                   or closing */
};

/* Where a node that joins (new, or back after a restart) goes.
 * expected: it was a participant of the previous round, told to
 * restart, so its place is reserved. */
enum rdzv_rules_admission rdzv_rules_admit(const struct rdzv_rules_job *j,
                                           bool expected);

/* True when a spare may take a place in the gathering round now: the
 * places of nodes expected back stay theirs. */
bool rdzv_rules_spare_fits(const struct rdzv_rules_job *j);

/* True when a spare may take a place as the round completes: nobody
 * else is coming, every free place counts. */
bool rdzv_rules_spare_fits_at_completion(const struct rdzv_rules_job *j);

enum rdzv_rules_gather {
  RDZV_GATHER_WAIT,             /* below min_nodes: no last call */
  RDZV_GATHER_LAST_CALL,        /* min_nodes present: the last call runs */
  RDZV_GATHER_COMPLETE,         /* the round completes now */
};

/* How long the gathering round's last call lasts (seconds): the job's
 * last_call_timeout, but at least rejoin_window (the keepalive window)
 * while nodes told to restart are still on their way back: a round
 * without them would only send them in as newcomers, restarting the
 * others again (with last_call_timeout 0, forever). */
double rdzv_rules_last_call_wait(const struct rdzv_rules_job *j,
                                 double rejoin_window);

/* What a gathering round does now: complete at max_nodes, or when every
 * node expected back has re-joined and min_nodes are there; complete
 * also when min_nodes are there and a last call that has not started
 * would be 0 s long; else start (or keep) its last call at min_nodes;
 * else wait (a running last call is cancelled). */
enum rdzv_rules_gather rdzv_rules_gather(const struct rdzv_rules_job *j,
                                         double rejoin_window);

/* ---- the config check ---- */

/* The part of a job's configuration every node must agree on, and the
 * rules check. */
struct rdzv_rules_conf {
  int min_nodes, max_nodes;     /* 1 <= min <= max <= max_nodes_limit */
  int max_restarts;             /* >= 0 */
  double last_call_timeout;     /* seconds, >= 0, finite */
};

enum rdzv_rules_conf_verdict {
  RDZV_CONF_OK,
  RDZV_CONF_BAD,                /* out of range: problem says which */
  RDZV_CONF_NODES_DIFFER,       /* min..max differs from the job's */
  RDZV_CONF_RESTARTS_DIFFER,    /* max_restarts differs (restarts are
                                   counted per job: every node must agree
                                   on how many there may be) */
};

/* Checks a joiner's configuration c (max_nodes at most max_nodes_limit),
 * then, when job is not NULL, that it agrees with the job's.  Writes the
 * problem to problem (problem_len bytes, may be 0), naming the job as
 * job_name ("job x", "the job"): "min_nodes..max_nodes 1..3 differs from
 * the job's 2..2". */
enum rdzv_rules_conf_verdict
rdzv_rules_conf_check(const struct rdzv_rules_conf *c,
                      const struct rdzv_rules_conf *job, int max_nodes_limit,
                      const char *job_name, char *problem,
                      size_t problem_len);

/* ---- the restart budget and the final failure ---- */

/* True while the job may restart once more: restart_count restarts of
 * max_restarts used. */
bool rdzv_rules_restart_left(int restart_count, int max_restarts);

/* A failure of a round that ran with restart_count restarts used is
 * final (ends the job): what the back end tells the agent with its
 * assignment, and what the agent then reports. */
bool rdzv_rules_failure_final(int restart_count, int max_restarts);

/* Note [live budget]: in live recovery (launcher/live_agent.c) a failed
 * worker is replaced alone, and its rank's replacements are a budget of
 * the job's max_restarts too, counted by its node's agent (the rendezvous
 * never hears of a replacement).  A failure of a rank replaced
 * `replaced` times is final (ends the job) when no replacement is left,
 * whatever the round's own budget (rdzv_rules_failure_final) says; the
 * agent then reports it final.  The rule is the back ends': the agent
 * asks it, through launcher/rdzv.h's rdzv_failure_final. */
bool rdzv_rules_replacement_final(int replaced, int max_restarts);

enum rdzv_rules_failure {
  RDZV_FAILURE_RESTART,         /* a new round, one restart counted */
  RDZV_FAILURE_CLOSE,           /* the node said final: the job ends */
  RDZV_FAILURE_CLOSE_EXHAUSTED, /* no restart left: the job ends, and its
                                   end says so */
};

/* What the first failure of a running round does (later ones of the
 * same round are part of it).  reported_final: the report's own "final"
 * flag (an agent that read it from its assignment, or an older one that
 * decided alone). */
enum rdzv_rules_failure rdzv_rules_failure(bool reported_final,
                                           int restart_count,
                                           int max_restarts);

/* ---- the keepalive window ---- */

/* Note [keepalive window]: a node (or its link) is dead once it has been
 * silent for the keepalive window, keepalive_interval x keepalive_misses
 * seconds: rdzvd's dead-node check and its resume grace, the client's
 * silent-server check and its wait for the job's end, the static back
 * end's links, the config check's floor.  One rule, one home: every
 * place that needs the window asks here. */
double rdzv_rules_keepalive_window(double keepalive_interval,
                                   int keepalive_misses);

/* ---- a lost node ---- */

/* How a participant left a running round before its exit barrier. */
enum rdzv_rules_leave {
  RDZV_LEFT_GOODBYE,            /* it said so (LEAVE) */
  RDZV_LEFT_DIED,               /* its agent died: its connection closed */
  RDZV_LEFT_SILENT,             /* its link went silent for the keepalive
                                   window */
};

struct rdzv_rules_loss {
  enum rdzv_rules_leave how;
  int n_left;                   /* nodes of the job still there, spares
                                   included */
  int min_nodes;
  int restart_count, max_restarts;
  bool nodes_fixed;             /* nothing can bring a node back or put
                                   another in its place (the static back
                                   end: no rendezvous to join) */
};

/* Note [a lost node]: a lost participant starts a new round (elastic
 * jobs above min_nodes go on at once; below it, they gather until
 * join_timeout while a restart is left, for the node or another to
 * come).  The job ends instead when it can no longer reach its size and
 * no restart is left, or when its nodes are fixed and one has left for
 * good (said goodbye or died: a silent link may be back).  Ending is
 * exit status 75 on every node (launcher/agent.h, AGENT_EXIT_NODE_LOST),
 * unless a worker failure came first and is the root cause. */
bool rdzv_rules_lost_ends(const struct rdzv_rules_loss *l);

/* Note [a lost host]: a rendezvous embedded in a node's agent (the
 * endpoint names that node) dies with that agent, and with it the only
 * record of the job: nobody is left to apply Note [a lost node] to the
 * host itself.  So every other node applies it alone, from its round (the
 * host was one of group_world_size nodes; min_nodes, restarts used and
 * allowed are the job's, every node agrees on them), and the host's loss
 * (its connection closed: its agent died; or silent for the keepalive
 * window) decides how long the node waits for it:
 * - the job would go on without a node (elastic above min_nodes, or a
 *   restart left): reconnect_timeout (60 s), since only a host that comes
 *   back can run the next round;
 * - the job ends on the loss: one keepalive window after the host was
 *   last heard from (a close: the window from now; silence: the window
 *   has passed) and RDZV_RULES_HOST_GRACE, at most reconnect_timeout;
 *   then the node stops its workers and exits 75 naming the host and how
 *   it left.
 * A host that is started again within that wait hosts again: the nodes
 * re-assert their round to it and it starts a new round with every node.
 * Its restart budget starts again, since the old count died with the old
 * host: that is a new run of the job, as if it had been started again.
 * torchrun's c10d store dies with its host too, and every agent fails at
 * once. */
#define RDZV_RULES_HOST_GRACE 2.0

/* Seconds a node waits for its lost rendezvous host, from when it noticed
 * the loss (Note [a lost host]): l describes the host's loss as this node
 * sees it (nodes_fixed false); window: the keepalive window
 * (rdzv_rules_keepalive_window). */
double rdzv_rules_host_wait(const struct rdzv_rules_loss *l, double window,
                            double reconnect_timeout);

/* "it said goodbye", "its agent died", "its link went silent". */
const char *rdzv_rules_leave_name(enum rdzv_rules_leave how);

/* Why the job ends on a loss, for its end's text: "the job cannot reach
 * its size (1 of 2 nodes) and no restart is left (0 of 0 used)" or "the
 * job's nodes are fixed"; "" when it goes on. */
void rdzv_rules_lost_why(const struct rdzv_rules_loss *l, char *buf,
                         size_t len);

#endif
