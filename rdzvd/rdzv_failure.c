/* rdzv_failure.c -- FAILURE: a restart, or the end of the job, and
 * the close that waits for the other participants' reports to name the
 * round's root cause (Note [root cause] in rdzv_state.h).  Part of the
 * state machine (rdzv_state.h); its private types are in
 * rdzv_state_int.h. */
#include "rdzv_state_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "rdzv_reply.h"
#include "rdzv_rules.h"

#define CLOSE_WAIT_MAX 5.0            /* closing_start: at most, seconds */

/* The job's root cause for a RESTART or CLOSED: NULL when no failure of
 * the round was reported, or only untimed ones (an older agent's). */
const struct rdzv_proto_cause *rdzv_failure_cause(const struct job *job)
{
  const struct job_cause *jc = job->cause;

  return jc && jc->held && jc->cause.exited_at > 0 ? &jc->cause : NULL;
}
/* The text of the round's root cause, for RESTART and CLOSED. */
static const char *cause_text(const struct job *job)
{
  return job->cause && job->cause->held ? job->cause->text
                                         : "workers failed";
}

/* Note [root cause] (rdzv_state.h): offers n's report as the round's
 * root cause: it wins when it is the first, or when it exited before the
 * timed one held.  An untimed report (an older agent's) holds its place
 * against later ones, as every report did before the times came. */
static void cause_offer(struct job *job, const struct node *n,
                        const struct rdzv_proto_failure *f)
{
  struct job_cause *jc = job->cause;
  char d[DESC_MAX];

  if (!jc && !(jc = job->cause = calloc(1, sizeof(*jc))))
    return;                     /* out of memory: the texts say less */
  if (jc->held && (jc->cause.exited_at <= 0 ||
                   f->cause.exited_at <= 0 ||
                   f->cause.exited_at >= jc->cause.exited_at))
    return;
  rdzv_state__describe(n, d, sizeof d);
  jc->held = true;
  jc->cause = f->cause;
  if (f->cause.exited_at > 0 && !jc->cause.host[0])
    rdzv_state__copy_str(jc->cause.host, sizeof jc->cause.host, n->host);
  snprintf(jc->text, sizeof jc->text, "%s workers failed: %.*s", d,
           RDZV_PROTO_MAX_TEXT, f->message);
}
/* The participants of a closing job whose report has not come. */
int rdzv_failure_closing_pending(const struct job *job)
{
  struct list_node *pos, *next;
  const struct node *n;
  int pending = 0;

  /* A detached node (rdzv_state_conn_reset) cannot report now: not
   * waited for. */
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    pending += n->state == NS_PART && !n->reported && n->c->conn;
  }
  return pending;
}
void rdzv_failure_closing_end(struct rdzv_state *r, struct job *job, double now)
{
  char text[RDZV_PROTO_MAX_TEXT + 1];
  int pending = rdzv_failure_closing_pending(job);

  if (job->closing_exhausted)
    snprintf(text, sizeof text, "%.*s; no restarts left (%d of %d used)",
             RDZV_PROTO_MAX_TEXT, cause_text(job), job->restart_count,
             job->conf.max_restarts);
  else
    rdzv_state__copy_str(text, sizeof text, cause_text(job));
  if (pending)
    rdzv_state__log(r, "job %s: %d node%s did not report within the wait; "
                    "closing", job->id, pending, pending == 1 ? "" : "s");
  rdzv_round_end_job(r, job, now, false, text);
}
/* A failure ends the job: the CLOSED waits until every participant of
 * the round reported its own (the earliest of them is the root cause),
 * or one keepalive window (how long a silent node may still be alive) but
 * never more than CLOSE_WAIT_MAX (a job with a long keepalive window would
 * otherwise hold its nodes for minutes), whichever comes first.
 * Participants that are healthy hear CLOSED when the wait ends. */
static void closing_start(struct rdzv_state *r, struct job *job,
                          struct node *reporter, bool exhausted, double now)
{
  struct list_node *pos, *next;
  struct node *n;

  job->closing = true;
  job->closing_exhausted = exhausted;
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    n->reported = n == reporter;
  }
  job->closing_deadline =
      now + fmin(CLOSE_WAIT_MAX,
                 rdzv_rules_keepalive_window(job->conf.keepalive_interval,
                                             job->conf.keepalive_misses));
  if (!rdzv_failure_closing_pending(job)) {
    rdzv_failure_closing_end(r, job, now);
    return;
  }
  rdzv_state__log(r, "job %s: closing: waiting up to %g s for %d more failure "
                  "report%s", job->id, job->closing_deadline - now,
                  rdzv_failure_closing_pending(job),
                  rdzv_failure_closing_pending(job) == 1 ? "" : "s");
  timer_heap_set(&r->heap, &job->t_last_call, job->closing_deadline);
}
/* FAILURE: a restart, counted once per round, or the end of the job. */
int rdzv_failure_handle(struct rdzv_state *r, struct node *n,
                        const struct rdzv_proto_failure *f, double now)
{
  enum rdzv_rules_failure verdict;
  struct job *job = n->job;
  char d[DESC_MAX];

  rdzv_state__describe(n, d, sizeof d);
  /* Only a node with workers in this job may end or restart it: a
   * participant of the current round, or one of the round that just
   * ended whose report crossed our RESTART (expected back).  A node on
   * the waiting list, or one the last round went on without, has no
   * workers to report on. */
  if (n->state != NS_PART && !(n->state == NS_IDLE && n->expected)) {
    rdzv_state__log(r, "job %s: refused a failure report from %s: not a "
                    "participant of round %d", job->id, d, job->round);
    return rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EPERM,
                             "failure report refused: not a participant of "
                             "round %d of job %s",
                             job->round, job->id);
  }
  cause_offer(job, n, f);
  if (job->closing) {
    n->reported = true;
    rdzv_state__log(r, "job %s: %s workers failed too%s: %.*s", job->id, d,
                    f->final ? " (final)" : "", RDZV_PROTO_MAX_TEXT,
                    f->message);
    if (!rdzv_failure_closing_pending(job))
      rdzv_failure_closing_end(r, job, now);
    return 0;
  }
  verdict = rdzv_rules_failure(f->final, job->restart_count,
                               job->conf.max_restarts);
  if (job->phase == PH_RUNNING && n->state == NS_PART &&
      verdict != RDZV_FAILURE_RESTART) {
    rdzv_state__log(r, "job %s: %s workers failed%s: %.*s", job->id, d,
                    f->final ? " (final)" : "", RDZV_PROTO_MAX_TEXT,
                    f->message);
    closing_start(r, job, n, verdict == RDZV_FAILURE_CLOSE_EXHAUSTED, now);
  } else if (f->final) {
    rdzv_round_end_job(r, job, now, false, cause_text(job));
  } else if (job->phase != PH_RUNNING || n->state != NS_PART) {
    /* The round already ended: this failure is part of that restart. */
    rdzv_state__log(r,
                    "job %s: %s workers failed in round %d (already "
                    "restarting): %.*s",
                    job->id, d, job->round, RDZV_PROTO_MAX_TEXT, f->message);
  } else {
    job->restart_count++;
    metrics_restart(r->metrics);
    rdzv_round_start(r, job, now, cause_text(job), n);
  }
  return 0;
}
