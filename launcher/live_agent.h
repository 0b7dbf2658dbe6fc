/* live_agent.h -- live recovery's part of the agent (man/cdrun.1, LIVE
 * RECOVERY): the opt-in decision, replacing a failed worker alone within
 * its rank's budget, joining membership rounds with the workers running,
 * the node's round file, and the live store's life.  agent.c is the
 * restart-mode state machine; it calls in at its decision points, and in
 * restart mode (--recovery=restart) every call is a no-op or "not taken".
 *
 * The agent's structs are agent_internal.h's; these functions work on
 * them from the agent's loop thread. */
#ifndef CDRUN_LIVE_AGENT_H
#define CDRUN_LIVE_AGENT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "jobtoken.h"
#include "rdzv.h"

struct agent;
struct worker;
struct worker_env;
struct live_store;

/* One local rank's live state. */
struct live_worker {
  int replaced;                 /* replacements so far (its budget) */
  bool replace_pending;         /* Note [live replacement] */
  bool stopped;                 /* killed: it could never join (Note
                                   [finished job]) */
};

/* The agent's live state; all zero is restart mode. */
struct live_agent {
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

/* Sets l up for the job: live when live is set, the round file in
 * run_log_dir. */
void live_agent_init(struct live_agent *l, bool live,
                     const char *run_log_dir);

/* Stops the live store, after the workers: it outlives them. */
void live_agent_close(struct live_agent *l);

/* Note [opt-in window] (live_agent.c): the workers of a round are up;
 * starts the wait for their opt-in. */
void live_agent_workers_up(struct agent *a);

/* A round's workers are about to start (the agent's assignment and job
 * token are the round's): no replacement waits any more; node rank 0
 * serves the live store, and the round file says the round.  Returns 0,
 * or a negative errno with the reason in why (len bytes) when node rank 0
 * cannot serve the store and the round has other nodes: the job cannot
 * run (Note [no live store]).  A job of one node runs in restart mode
 * instead, said once. */
int live_agent_start_round(struct agent *a, char *why, size_t len);

/* Worker w's live variables into we (worker_env's), its opt-in file's
 * path in opt_in (len bytes), removed so that only the new process can
 * opt in.  Nothing in restart mode. */
void live_agent_worker_env(const struct agent *a, const struct worker *w,
                           struct worker_env *we, char *opt_in, size_t len);

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
                                   with w's count, which says final */
};

/* Worker w failed with code (> 0 a status, -signum) while the group
 * runs: replaced alone when live recovery may (Note [live replacement]);
 * it decides nothing about the job's end (Note [one authority],
 * launcher/rdzv.h). */
enum live_failed live_agent_worker_failed(struct agent *a, struct worker *w,
                                          int code);

/* Worker done exited 0 while the group runs: a replacement still joining
 * the group (libpg says so in its opt-in file) never will and is killed;
 * its exit is then restart mode's (Note [finished job]). */
void live_agent_worker_finished(struct agent *a, struct worker *done);

/* Starts the replacements whose predecessor's output streams are closed
 * (called when a stream closes). */
void live_agent_start_replacements(struct agent *a);

/* jobtoken_make's private_ok: false in live mode on a back end that can
 * add nodes (Note [live token on one node]). */
bool live_agent_token_private_ok(const struct agent *a);

/* Whether a replacement waits to start: the group is not done yet. */
bool live_agent_replacing(const struct agent *a);

/* The rendezvous asks for a new round (reason) while the workers run.
 * Returns true when live recovery keeps them and joins (or a join is in
 * flight already); false: restart mode. */
bool live_agent_rejoin(struct agent *a, const char *reason);

/* Whether a live re-join is in flight. */
bool live_agent_rejoining(const struct agent *a);

/* A round came.  Returns true when live recovery took it: the workers go
 * on in it (the round file rewritten), or they stop and start in it
 * (the master endpoint moved, a restart was counted, or the group was
 * stopping already).  False: the agent's own path. */
bool live_agent_round(struct agent *a, const struct rdzv_assignment *as);

/* Whether a membership change is under way: a re-join in flight or a
 * round waiting for the group to stop. */
bool live_agent_changing(const struct agent *a);

/* Takes the round that waits for the group to stop into *as.  Returns
 * false when none does. */
bool live_agent_take_round(struct agent *a, struct rdzv_assignment *as);

#endif
