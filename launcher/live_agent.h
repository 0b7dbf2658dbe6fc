/* live_agent.h -- live recovery's part of the agent (man/cdrun.1, LIVE
 * RECOVERY): the opt-in decision, replacing a failed worker alone within
 * its rank's budget, joining membership rounds with the workers running,
 * the node's round file, and the live store's life.  agent.c owns the
 * state machine (restart mode's); it calls in at its decision points
 * (a round, a worker's failure, a worker's environment, ...), and in
 * restart mode (--recovery=restart) every call is a no-op or "not taken".
 *
 * Live mode never sees the agent's structs: it sees its workers through
 * struct live_worker_view and asks the agent's state machine for what it
 * needs through struct live_agent_ops, all on the agent's loop thread. */
#ifndef CDRUN_LIVE_AGENT_H
#define CDRUN_LIVE_AGENT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

#include "jobtoken.h"
#include "rdzv.h"

struct agent_opts;
struct worker_env;
struct live_store;

/* What live mode sees of one local worker, as the agent has it now. */
struct live_worker_view {
  int rank;
  pid_t pid;                    /* also its process group; 0: none */
  bool running;
  const char *dir;              /* its folder; NULL before its first
                                   start */
  bool streams_closed;          /* its output streams are closed (a
                                   replacement may take them) */
};

/* Where the agent's worker group is in its state machine. */
enum live_group {
  LIVE_GROUP_RUNNING,           /* the workers run, none failed */
  LIVE_GROUP_STOPPING,          /* the group is being torn down */
  LIVE_GROUP_OTHER,             /* a rendezvous, the exit barrier, the
                                   job's end */
};

/* What the agent gives live mode: its workers as they are, and what
 * live mode asks of the agent's state machine, which stays the agent's.
 * ctx is the agent's (live_agent_init). */
struct live_agent_ops {
  /* Local worker local_rank now. */
  void (*worker)(void *ctx, int local_rank, struct live_worker_view *v);
  enum live_group (*group)(void *ctx);
  /* Starts local worker local_rank alone in the current round (a
   * replacement); a failure to start stops the group. */
  void (*spawn)(void *ctx, int local_rank);
  /* The failed worker local_rank goes: what is left of its process
   * group, and its output streams (the replacement starts once they are
   * closed: live_agent_start_replacements). */
  void (*retire)(void *ctx, int local_rank);
  /* A membership join with the workers running (RDZV_JOIN_MEMBERSHIP);
   * when it cannot be made the agent says so and stops the group. */
  void (*join)(void *ctx);
  /* The workers cannot go on in the coming round: the group stops, and
   * starts in the round live_agent_take_round gives. */
  void (*restart_in_round)(void *ctx);
  /* The workers go on in round as: it is the agent's now (its ranks
   * too). */
  void (*adopt_round)(void *ctx, const struct rdzv_assignment *as);
  /* --event_log_handler=console: one agent event (torchrun's names). */
  void (*event)(void *ctx, const char *name, const char *detail);
};

/* One local rank's live state. */
struct live_worker {
  int replaced;                 /* replacements so far (its budget) */
  bool replace_pending;         /* Note [live replacement] */
  bool stopped;                 /* killed: it could never join (Note
                                   [finished job]) */
};

/* The agent's live state; env and replace false is restart mode. */
struct live_agent {
  const struct agent_opts *o;   /* the agent's options (agent.h) */
  const struct live_agent_ops *ops;
  void *ctx;
  struct live_worker *workers;  /* one per local rank */
  bool fixed_nodes;             /* the back end can add no node (set by
                                   the agent once it has made it) */
  bool env;                     /* the workers get the live handshake */
  bool replace;                 /* failures and membership changes may
                                   keep the workers: --recovery=live
                                   unless the live store could not be
                                   served */
  bool optin_said;              /* said that a worker did not opt in */
  double optin_window;          /* Note [opt-in window], seconds */
  bool rejoining;               /* a membership join is in flight while
                                   the workers run */
  bool pending_round_set;       /* a round to start once the group has
                                   stopped */
  struct rdzv_assignment pending_round;
  int replace_pending;          /* workers whose replacement waits */
  struct live_store *store;     /* node rank 0: the live store */
  char store_token[JOBTOKEN_HEX + 1];  /* the token it serves with */
  char store_addr[300];         /* CDRUN_LIVE_STORE */
  char round_file[PATH_MAX];    /* CDRUN_LIVE_ROUND_FILE */
  char no_store[512];           /* why this node, alone, could not serve
                                   the live store (Note [no live
                                   store]); "" when it could */
};

/* Sets l up for the job of o (live when o->live is set, the round file
 * in o->run_log_dir), the agent's ops with ctx.  Returns 0 or -ENOMEM. */
int live_agent_init(struct live_agent *l, const struct agent_opts *o,
                    const struct live_agent_ops *ops, void *ctx);

/* Stops the live store, after the workers: it outlives them; frees l's
 * memory.  Safe on an l whose init failed. */
void live_agent_close(struct live_agent *l);

/* Note [opt-in window] (live_agent.c): the workers of a round are up;
 * starts the wait for their opt-in on t (the agent's timer, whose data
 * is l). */
void live_agent_workers_up(struct live_agent *l, uv_timer_t *t);

/* A round's workers are about to start in as (the agent's assignment,
 * with job_token the round's): no replacement waits any more; node rank
 * 0 serves the live store, and the round file says the round.  Returns
 * 0, or a negative errno with the reason in why (len bytes) when node
 * rank 0 cannot serve the store and the round has other nodes: the job
 * cannot run (Note [no live store]).  A job of one node runs in restart
 * mode instead, said once. */
int live_agent_start_round(struct live_agent *l,
                           const struct rdzv_assignment *as,
                           const char *job_token, char *why, size_t len);

/* Local worker local_rank's live variables into we (worker_env's), dir
 * its folder, its opt-in file's path in opt_in (len bytes), removed so
 * that only the new process can opt in.  Nothing in restart mode. */
void live_agent_worker_env(const struct live_agent *l, int local_rank,
                           const char *dir, struct worker_env *we,
                           char *opt_in, size_t len);

/* Replacements of local rank local_rank so far (Note [live
 * replacement]). */
int live_agent_replaced(const struct live_agent *l, int local_rank);

/* What live recovery did with a failed worker. */
enum live_failed {
  LIVE_FAILED_REPLACED,         /* taken: w is replaced alone */
  LIVE_FAILED_NOT_TAKEN,        /* restart mode's path (restart mode, a
                                   worker not opted in, or another worker
                                   of the node already exited 0: Note
                                   [finished job]) */
  LIVE_FAILED_NO_REPLACEMENT,   /* w's rank has no replacement left:
                                   restart mode's path, and the agent asks
                                   rdzv_failure_final (launcher/rdzv.h)
                                   with its count, which says final */
};

/* Local worker local_rank failed with code (> 0 a status, -signum)
 * while the group runs: replaced alone when live recovery may (Note
 * [live replacement]); it decides nothing about the job's end (Note [one
 * authority], launcher/rdzv.h). */
enum live_failed live_agent_worker_failed(struct live_agent *l,
                                          int local_rank, int code);

/* Local worker done exited 0 while the group runs: a replacement still
 * joining the group (libpg says so in its opt-in file) never will and is
 * killed; its exit is then restart mode's (Note [finished job]). */
void live_agent_worker_finished(struct live_agent *l, int done);

/* Starts the replacements whose predecessor's output streams are closed
 * (called when a stream closes). */
void live_agent_start_replacements(struct live_agent *l);

/* jobtoken_make's private_ok: false in live mode on a back end that can
 * add nodes (Note [live token on one node]). */
bool live_agent_token_private_ok(const struct live_agent *l);

/* Whether a replacement waits to start: the group is not done yet. */
bool live_agent_replacing(const struct live_agent *l);

/* The rendezvous asks for a new round (reason) while the workers run.
 * Returns true when live recovery keeps them and joins (or a join is in
 * flight already); false: restart mode. */
bool live_agent_rejoin(struct live_agent *l, const char *reason);

/* Whether a live re-join is in flight. */
bool live_agent_rejoining(const struct live_agent *l);

/* Round as came; cur is the agent's round, job_token its token.
 * Returns true when live recovery took it: the workers go on in it (the
 * round file rewritten, the agent adopts it), or they stop and start in
 * it (the master endpoint moved, a restart was counted, or the group was
 * stopping already).  False: the agent's own path. */
bool live_agent_round(struct live_agent *l, const struct rdzv_assignment *as,
                      const struct rdzv_assignment *cur,
                      const char *job_token);

/* Whether a membership change is under way: a re-join in flight or a
 * round waiting for the group to stop. */
bool live_agent_changing(const struct live_agent *l);

/* Takes the round that waits for the group to stop into *as.  Returns
 * false when none does. */
bool live_agent_take_round(struct live_agent *l, struct rdzv_assignment *as);

#endif
