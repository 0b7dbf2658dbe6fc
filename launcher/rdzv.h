/* rdzv.h -- the rendezvous back-end interface the agent talks to.
 *
 * A back end turns "this node wants to run" into an assignment (ranks,
 * sizes, master address) and tells the agent when the job needs a new
 * round.  Every call is asynchronous: results come back through the
 * callbacks on the agent's libuv loop, never from inside the call that
 * caused them (libuv's rule: a call that fails returns an error and its
 * callback never runs).  The single-node back end (rdzv_local.c) completes
 * at once; the rdzvd client and the embedded server plug in here. */
#ifndef CDRUN_RDZV_H
#define CDRUN_RDZV_H

#include <stdbool.h>
#include <uv.h>

#include "rdzv_rules.h"

/* What one completed round gives this node.  O(1) data, whatever the job's
 * size. */
struct rdzv_assignment {
  int round;              /* rendezvous round, increases by one per round */
  int restart_count;      /* restarts so far, counted per job */
  /* A failure of this round's workers ends the job: no restart is left
   * (rdzvd/rdzv_rules.h, rdzv_rules_failure_final).  The back end is the
   * one authority on the restart budget: the agent asks
   * rdzv_failure_final (below), reports its failure with the answer
   * (report_failure's final) and re-joins only when it is false; it
   * never counts restarts itself, and never changes this. */
  bool failure_final;
  int group_rank;         /* this node's rank */
  int group_world_size;   /* nodes in the round */
  int rank_offset;        /* global rank of this node's local rank 0 */
  int world_size;         /* workers in the round, all nodes */
  char master_addr[256];
  int master_port;
  /* The round's job token from the rendezvous, 64 hex digits, the same on
   * every node (launcher/jobtoken.h); "": the back end issues none. */
  char job_token[65];
  /* A nonce of this run, 32 hex digits, the same on every node of the run
   * and new for each run; bound into a job token the agent derives
   * (Note [job token], Note [static run nonce]); "": none. */
  char run_nonce[33];
  /* Note [live store in rdzvd]: the job's live store, "host:port", served
   * by the rendezvous with job_token; "": none (node 0's agent serves
   * it). */
  char live_store[256 + 8];
};

/* Note [one authority]: whether a failure of the round's workers (as)
 * ends the job.  The back ends decide, by their rules (rdzvd/rdzv_rules.h):
 * the round's restart budget (as->failure_final), and in live recovery
 * the failed rank's budget of replacements (Note [live budget]): replaced
 * is how many that rank had when live mode could not replace it again,
 * -1 when live mode did not decline for its budget (restart mode, or the
 * failure was not live mode's to take).  max_restarts is the job's, the
 * same on every node (the rules' config check).  The agent asks this,
 * live mode included; nothing else decides a final failure. */
static inline bool rdzv_failure_final(const struct rdzv_assignment *as,
                                      int replaced, int max_restarts)
{
  return as->failure_final ||
         (replaced >= 0 &&
          rdzv_rules_replacement_final(replaced, max_restarts));
}

/* Why the agent asks for a round. */
enum rdzv_join_reason {
  RDZV_JOIN_FIRST,        /* start of the job */
  RDZV_JOIN_FAILURE,      /* local workers failed: counts as a restart */
  RDZV_JOIN_MEMBERSHIP,   /* the back end asked for a new round: free */
};

struct rdzv_callbacks {
  void *ctx;
  /* A round completed; a is valid during the call only. */
  void (*on_round)(void *ctx, const struct rdzv_assignment *a);
  /* The job needs a new round (a peer failed, joined or died): stop the
   * workers and join again with RDZV_JOIN_MEMBERSHIP. */
  void (*on_restart)(void *ctx, const char *reason);
  /* The rendezvous cannot go on (timeout, closed, config mismatch); err 0:
   * the job finished without needing this node. */
  void (*on_error)(void *ctx, int err, const char *message);
  /* The exit barrier passed (err == 0) or failed. */
  void (*on_barrier)(void *ctx, int err);
};

struct rdzv;

struct rdzv_ops {
  const char *name;
  int (*join)(struct rdzv *r, enum rdzv_join_reason why);
  /* Local workers failed: tell the job at once, before the local group is
   * torn down, so other nodes start stopping theirs.  final:
   * rdzv_failure_final said so (no restart, or in live mode no
   * replacement, is left): the job ends.
   * Then join(RDZV_JOIN_FAILURE) unless final. */
  int (*report_failure)(struct rdzv *r, bool final, const char *message);
  int (*exit_barrier)(struct rdzv *r);
  /* Leaves the job and frees r; no callback runs afterwards. */
  void (*destroy)(struct rdzv *r);
  /* No node can join the job later (the static back end). */
  bool fixed_nodes;
};

/* Note [root cause] (rdzvd/rdzv_state.h): one failed worker of the job.
 * exited_at 0: none. */
struct rdzv_cause {
  double exited_at;       /* wall-clock epoch seconds it exited */
  int rank, local_rank;
  int exitcode;           /* > 0 status, < 0 -signal */
  long pid;
  char host[256];
};

/* The common head of every back end's state. */
struct rdzv {
  const struct rdzv_ops *ops;
  struct rdzv_callbacks cb;
  uv_loop_t *loop;
  /* The agent sets local_cause (this node's earliest failure) before
   * report_failure; a back end that sends it sets job_cause from the
   * RESTART or CLOSED that names the job's root cause, before the
   * callback runs.  A back end that sets cause_wait answers a final
   * report with the job's end (on_error), naming the root cause, within
   * that many seconds: the agent waits for it before its summary. */
  struct rdzv_cause local_cause;
  struct rdzv_cause job_cause;
  double cause_wait;
  /* Set before on_restart when the new round is because a participant
   * was lost (its host, and how: "its agent exited"); "" otherwise. */
  char lost_host[256];
  char lost_why[128];
  /* Set before on_error when the job ended on that lost node (Note [a
   * lost node], rdzvd/rdzv_rules.h): cdrun's exit status is 75. */
  bool ended_lost;
};

/* The static back end (also --standalone with one node): node node_rank
 * of nnodes, each with nproc workers; no elasticity.  Restarts are counted
 * locally, max_restarts of them.  With several nodes and meet_timeout > 0, the first round
 * comes once every node has met at master_addr:master_port (Note [static
 * barrier], static_barrier.h), or an error after meet_timeout seconds;
 * then they stay connected, with keepalives every keepalive_interval
 * seconds of which keepalive_misses may be missed (Note [static
 * keepalive]; 0: none). */
int rdzv_local_create(uv_loop_t *loop, int node_rank, int nnodes, int nproc,
                      int max_restarts, const char *master_addr,
                      int master_port, double meet_timeout,
                      double keepalive_interval, int keepalive_misses,
                      const struct rdzv_callbacks *cb, struct rdzv **out);

/* The rdzvd client (--rdzv_backend=c10d|rdzvd); see rdzv_client.h. */

#endif
