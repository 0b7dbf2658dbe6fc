/* agent_internal.h -- the agent's own structs (struct agent, struct
 * worker) and the calls that cross between the files that make up the
 * agent: agent.c (the worker group's life: rendezvous rounds, supervision,
 * stopping, the loop), agent_failure.c (failures: reporting, restarting,
 * the job's end), agent_signal.c (signals and the grace period),
 * agent_hang.c (hang detection) and agent_spawn.c (starting workers).
 * Each declaration below says whose it is.  Nothing else includes it:
 * agent.h is the agent's interface, and live recovery (live_agent.c)
 * sees the agent only through live_agent.h's view and ops. */
#ifndef CDRUN_AGENT_INTERNAL_H
#define CDRUN_AGENT_INTERNAL_H

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#include "agent.h"
#include "backoff.h"
#include "contain.h"
#include "failures.h"
#include "guardian.h"
#include "hang.h"
#include "jobtoken.h"
#include "live_agent.h"
#include "output.h"
#include "rdzv.h"

struct filetimer;
struct spawner;

struct worker {
  struct agent *agent;
  int local_rank;
  int rank;
  pid_t pid;                    /* also its process group; 0 before start */
  bool running;
  /* Heap strings, not arrays: the agent's memory grows with N. */
  char *dir;                    /* attempt_<k>/<local_rank> */
  char *error_file;
  struct output_stream out, err;   /* output.h */
  struct hang_watch hang;       /* hang.h */
};

enum agent_state {
  ST_RENDEZVOUS,                /* waiting for a round */
  ST_RUNNING,                   /* workers started, none failed yet */
  ST_STOPPING,                  /* tearing the group down */
  ST_BARRIER,                   /* succeeded, waiting for the exit barrier */
  ST_CLOSING,                   /* failed for good, waiting for the job's
                                   end to name its root cause */
  ST_DONE,
};

enum stop_reason {
  STOP_SUCCESS,                 /* every worker exited 0 */
  STOP_FAILURE,                 /* a worker failed: restart if allowed */
  STOP_FATAL,                   /* a worker could not start: no restart */
  STOP_SIGNAL,                  /* cdrun got a signal */
  STOP_MEMBERSHIP,              /* the rendezvous asked for a new round */
};

struct agent {
  const struct agent_opts *o;
  uv_loop_t loop;
  /* Note [console queue] (conqueue.h): tee'd lines for cdrun's stdout
   * and stderr; NULL where nothing is tee'd there. */
  struct conqueue *console[2];
  uv_signal_t sigchld;
  uv_signal_t *sigs;
  uv_timer_t grace;
  uv_timer_t drain;
  uv_timer_t heartbeat;         /* --worker_heartbeat_timeout checks */
  uv_timer_t backoff_timer;     /* the wait before a restart; in
                                   ST_CLOSING, the wait for the job's end */
  bool job_ended;               /* the rendezvous said the job ended */
  /* Note [overlapped exit] (agent.c): the temporary log folder's fate is
   * decided (once), and whether it goes. */
  bool logs_settled, logs_remove;
  uv_timer_t lost_timer;        /* Note [fixed membership] */
  uv_timer_t optin_timer;       /* Note [opt-in window] (live_agent.c) */
  bool lost_pending;
  char lost_host[256];
  struct backoff backoff;       /* Note [restart backoff] */
  double attempt_started;       /* when this attempt's workers started
                                   (epoch seconds) */
  struct guardian guardian;
  struct contain contain;
  struct spawner *spawner;      /* made at the first start of workers */
  struct rdzv *rdzv;
  struct rdzv_assignment assign;
  char job_token[JOBTOKEN_HEX + 1];   /* this round's (jobtoken.h) */
  bool token_noted;                   /* said it is guessable */
  enum agent_state state;
  enum stop_reason reason;
  int stop_signal;              /* signal that stops the group */
  bool sigkill_sent;            /* this stop escalated to SIGKILL */
  unsigned forwarded;           /* signals this stop sent, by bit:
                                   Note [signal escalation] */
  bool drain_expired;
  struct worker *workers;
  /* Note [linear supervision]: every exit is handled in O(1) -- workers
   * found by pid in an open-addressing table, counts kept, not scanned. */
  struct worker **by_pid;       /* by_pid_mask + 1 slots */
  size_t by_pid_mask;
  int nrunning;                 /* workers started and not yet reaped */
  int nstreams;                 /* tee streams not yet closed */
  bool group_cleared;           /* check_stopped killed what was left */
  struct failures failures;     /* this attempt's (failures.h) */
  int exit_status;
  char host[256];
  struct filetimer *ftimer;     /* torch's file timer, or NULL */
  struct live_agent live;       /* live recovery (live_agent.h): it sees
                                   the agent through live_ops (agent.c) */
  /* Note [failure in a live round]: a failure report that waits for the
   * round a live re-join asked for. */
  bool owed_set;
  int owed_rank, owed_code;
  /* Note [one authority] (rdzv.h): the replacements of the rank whose
   * failure live mode could not replace again, for rdzv_failure_final;
   * -1: none this round. */
  int final_replaced;
};

/* ---- agent.c ------------------------------------------------------------- */

/* Starts tearing the group down: sig to every running worker's process
 * group, SIGKILL after the grace period.  sig 0 sends nothing (every
 * worker already exited). */
void agent_begin_stop(struct agent *a, enum stop_reason why, int sig);

/* --event_log_handler=console: one line per agent event, torchrun's
 * event names. */
void agent_event(struct agent *a, const char *name, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* For agent_spawn.c: the wall clock (epoch seconds); w running,
 * findable by pid; whether the group has stopped (what a closed tee
 * stream may complete). */
double agent_now_epoch(void);
void agent_pid_insert(struct agent *a, struct worker *w);
void agent_check_stopped(struct agent *a);

/* Joins the rendezvous (why); cdrun's end when it cannot. */
void agent_join_round(struct agent *a, enum rdzv_join_reason why);

/* A round completed with no workers running: start them all. */
void agent_start_round(struct agent *a, const struct rdzv_assignment *as);

/* The agent's end with cdrun's exit status: every handle closes. */
void agent_finish(struct agent *a, int status);

/* ---- agent_failure.c ----------------------------------------------------- */

/* Worker w's failure (pid, code: > 0 status, -signum; message replaces
 * its error file), recorded now. */
void agent_record_failure(struct agent *a, struct worker *w, pid_t pid,
                          int code, const char *message);

/* Note [one authority] (rdzv.h): whether this round's failure ends the
 * job. */
bool agent_failure_final(const struct agent *a);

/* Tells the rendezvous of the failure (rank, code) at once, so the other
 * nodes stop their workers while this one stops its own (Note [failure
 * in a live round]: or later, in the round that comes). */
void agent_report_failure(struct agent *a, int rank, int code);

/* Note [simultaneous failures] (failures.c): whether a worker's exit
 * (code) while the group stops after a failure is a failure too. */
bool agent_is_cofailure(const struct agent *a, int code);

/* The group failed (stopped, its failure reported): again while
 * restarts are left, else the job's end. */
void agent_group_failed(struct agent *a);

/* Note [failure in a live round]: round as came while a failure was
 * owed to the rendezvous. */
void agent_failed_in_round(struct agent *a, const struct rdzv_assignment *as);

/* The failure summary; the group failed for good: the summary, then
 * cdrun's status. */
void agent_print_summary(struct agent *a);
void agent_finish_failed(struct agent *a);

/* ---- agent_signal.c ------------------------------------------------------ */

/* A signal's name ("SIGTERM"), valid until the next call. */
const char *agent_signame(int sig);

/* sig to every running worker's process group. */
void agent_kill_running(struct agent *a, int sig);

/* Note [signal escalation]: a stop's forwarded signals, by bit; the
 * grace period, SIGKILL when it ends; a handled signal's arrival. */
unsigned agent_signal_bit(int sig);
void agent_start_grace(struct agent *a);
void agent_on_signal(uv_signal_t *h, int signum);

/* ---- agent_hang.c -------------------------------------------------------- */

/* A file timer expired (filetimer.h); Note [heartbeat watchdog]
 * (hang.c): the heartbeat timer's check. */
struct filetimer_request;
void agent_on_timer_expired(void *ctx, const struct filetimer_request *t);
void agent_heartbeat_check(uv_timer_t *t);

/* ---- agent_spawn.c ------------------------------------------------------- */

/* Starts the round's workers (as: the assignment, in a->assign
 * already); false when one could not start (the group is stopping then,
 * agent_start_failed). */
bool agent_start_workers(struct agent *a, const struct rdzv_assignment *as);

/* Starts worker w alone in the current round (a live replacement, for
 * live mode's spawn op in agent.c): its folder, environment and streams,
 * then the process; a failure to start stops the group as at a round's
 * start. */
void agent_spawn_worker(struct agent *a, struct worker *w);

/* Worker w could not be started (err; pid: the child whose exec failed,
 * or 0): fails without restarting (a target that cannot be executed will
 * not be executable next time either). */
void agent_start_failed(struct agent *a, struct worker *w, int err,
                        pid_t pid);

#endif
