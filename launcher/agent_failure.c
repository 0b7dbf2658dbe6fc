/* agent_failure.c -- the worker group's failures: recording each one,
 * telling the rendezvous at once, and what comes next: a restart (after
 * Note [restart backoff]'s wait), or the job's end with its summary.
 * Whether a failure ends the job is the back ends' rule (Note [one
 * authority], rdzv.h). */
#include "agent_internal.h"

#include <stdio.h>
#include <string.h>

#include "failures.h"
#include "guardian.h"
#include "live_agent.h"
#include "say.h"

/* Note [one authority] (rdzv.h): whether this round's failure ends the
 * job, as the back ends' rules say. */
bool agent_failure_final(const struct agent *a)
{
  return rdzv_failure_final(&a->assign, a->final_replaced,
                            a->o->max_restarts);
}

/* ---- failures ----------------------------------------------------------- */

/* Records the failure of worker w (pid, code: > 0 status, -signum) now.
 * message (an exec failure, a watchdog's kill) replaces its error file. */
void agent_record_failure(struct agent *a, struct worker *w, pid_t pid,
                          int code, const char *message)
{
  struct worker_failure seen;

  memset(&seen, 0, sizeof seen);
  seen.local_rank = w->local_rank;
  seen.rank = w->rank;
  seen.pid = pid;
  seen.exitcode = code;
  /* Note [exit time] (guardian.h): when it exited, not when we saw it. */
  seen.time = guardian_exit_time(&a->guardian, pid);
  if (seen.time <= 0 || seen.time > agent_now_epoch())
    seen.time = agent_now_epoch();
  seen.error_file = w->error_file;
  seen.message = message;
  failures_record(&a->failures, &seen, a->o->error_files_read);
}

/* The job's root cause, when the rendezvous named one (Note [root
 * cause]). */
static const struct rdzv_cause *job_cause(const struct agent *a)
{
  return a->rdzv ? &a->rdzv->job_cause : NULL;
}

void agent_print_summary(struct agent *a)
{
  failures_print_summary(&a->failures, job_cause(a), a->o->target, a->host);
}

/* The group failed for good: the summary, then cdrun's status. */
void agent_finish_failed(struct agent *a)
{
  agent_print_summary(a);
  agent_finish(a, failures_exit_status(&a->failures, job_cause(a)));
}

static void close_wait_expired(uv_timer_t *t)
{
  struct agent *a = t->data;

  say("the rendezvous did not say within %.0f s how the job ended; the "
      "summary has this node's failures only", a->rdzv->cause_wait);
  agent_finish_failed(a);
}

static void backoff_expired(uv_timer_t *t)
{
  struct agent *a = t->data;

  agent_join_round(a, RDZV_JOIN_FAILURE);
}

/* A failed group with restarts left: again, at once or after the wait of
 * Note [restart backoff]. */
static void restart_after_failure(struct agent *a)
{
  const struct worker_failure *f = NULL;
  char cause[256] = "", when[48] = "";
  double delay;

  f = failures_root(&a->failures);
  if (f)
    failures_describe(f, cause, sizeof cause);
  delay = backoff_next(&a->backoff, &a->o->backoff,
                       a->failures.first_time - a->attempt_started,
                       f ? cause : NULL);
  if (delay > 0)
    snprintf(when, sizeof when, " in %.3g s", delay);
  say("worker group failed; restarting it%s (%d of %d restarts used)",
      when, a->assign.restart_count + 1, a->o->max_restarts);
  if (a->backoff.same >= 2)
    say("the same failure %d times in a row: %s", a->backoff.same, cause);
  agent_event(a, "RESTART", "restart_count=%d delay_s=%g",
              a->assign.restart_count + 1, delay);
  failures_clear(&a->failures);
  if (delay > 0) {
    /* Waiting counts as the rendezvous: a signal ends cdrun at once. */
    a->state = ST_RENDEZVOUS;
    uv_timer_start(&a->backoff_timer, backoff_expired,
                   (uint64_t)(delay * 1000.0), 0);
    return;
  }
  agent_join_round(a, RDZV_JOIN_FAILURE);
}

/* The group failed (stopped, its failure reported): again while
 * restarts are left, else the job's end. */
void agent_group_failed(struct agent *a)
{
  if (!agent_failure_final(a)) {
    restart_after_failure(a);
    return;
  }
  agent_event(a, "FAILED", "restart_count=%d", a->assign.restart_count);
  /* Note [root cause]: the job's end names its root cause, which may
   * be another node's earlier failure. */
  if (a->rdzv->cause_wait > 0 && !a->job_ended) {
    a->state = ST_CLOSING;
    uv_timer_start(&a->backoff_timer, close_wait_expired,
                   (uint64_t)(a->rdzv->cause_wait * 1000.0), 0);
    return;
  }
  agent_finish_failed(a);
}

/* Note [failure in a live round]: a failure that live recovery does not
 * take (a worker of the node had not opted in, or no longer has) while a
 * live re-join is in flight stops the group, but cannot be reported then:
 * the round it would name is over.  It is reported in the round that
 * comes, and counted as restart mode counts it: the group restarts in a
 * round with one more restart, or the job fails when none is left.
 * Starting the workers in the new round instead would restart them
 * uncounted, as often as they fail.  A round that counted a restart
 * already (another node failed meanwhile) is that restart. */
void agent_failed_in_round(struct agent *a, const struct rdzv_assignment *as)
{
  bool owed = a->owed_set;

  a->owed_set = false;
  if (!owed || as->restart_count > a->assign.restart_count) {
    failures_clear(&a->failures);
    agent_start_round(a, as);
    return;
  }
  say("worker group failed during a membership change: round %d counts "
      "it", as->round);
  a->assign = *as;
  agent_report_failure(a, a->owed_rank, a->owed_code);
  agent_group_failed(a);
}

/* Tells the rendezvous at once, so the other nodes stop their workers
 * while this one stops its own. */
void agent_report_failure(struct agent *a, int rank, int code)
{
  bool final = agent_failure_final(a);
  char msg[512];

  /* A round is forming (live recovery): a report now would name a round
   * that is over; it is made in the new round (Note [failure in a live
   * round]). */
  if (live_agent_rejoining(&a->live) && !final) {
    if (!a->owed_set) {
      a->owed_set = true;
      a->owed_rank = rank;
      a->owed_code = code;
    }
    return;
  }

  /* Note [root cause]: this node's earliest failure, with its time (the
   * error file's, else when it was reaped), for the job's root cause. */
  failures_local_cause(&a->failures, a->host, agent_now_epoch(),
                       &a->rdzv->local_cause);
  failures_report_text(&a->failures, rank, code, msg, sizeof msg);
  a->rdzv->ops->report_failure(a->rdzv, final, msg);
}

/* Note [simultaneous failures] (failures.c). */
bool agent_is_cofailure(const struct agent *a, int code)
{
  return failures_is_cofailure(&a->failures, code, a->stop_signal,
                               a->sigkill_sent, a->o->cofailure_s,
                               agent_now_epoch());
}

