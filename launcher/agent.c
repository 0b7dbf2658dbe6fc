/* agent.c -- the local worker group's life: rendezvous, start, watch,
 * stop, and the loop.  One libuv loop, no polling: workers are reaped on
 * SIGCHLD, their tee'd output read as it arrives (output.c).  How the
 * workers are started is agent_spawn.c's; what the agent does with a
 * failure (report it, restart, end the job) is agent_failure.c's, and
 * what a failure was and what cdrun says and returns about it
 * failures.c's; signals and the grace period are agent_signal.c's; the
 * watchdogs that kill a hung worker are hang.c's, driven from
 * agent_hang.c. */
#include "agent.h"
#include "agent_internal.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conqueue.h"
#include "contain.h"
#include "failures.h"
#include "filetimer.h"
#include "guardian.h"
#include "hang.h"
#include "jobtoken.h"
#include "live_agent.h"
#include "logdir.h"
#include "logs.h"
#include "output.h"
#include "say.h"
#include "signames.h"
#include "spawn.h"

/* How long the agent waits, once every worker is reaped, for output still
 * buffered in tee pipes (held open by a straggler outside the group). */
#define DRAIN_MS 1000
#define CONSOLE_STALL_S 0.5     /* Note [console queue]: at the end */

void agent_event(struct agent *a, const char *name, const char *fmt,
                        ...)
{
  char detail[512];
  va_list ap;

  if (!a->o->log_events)
    return;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  say("event %s run_id=%s round=%d %s", name, a->o->run_id,
            a->assign.round, detail);
}

double agent_now_epoch(void)
{
  struct timeval tv;

  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* ---- the group's life ---------------------------------------------------- */

/* A removed entry: lookups probe past it, inserts may reuse it. */
static struct worker removed_slot;

static size_t pid_slot(const struct agent *a, pid_t pid)
{
  return ((size_t)pid * 2654435761u) & a->by_pid_mask;
}

void agent_pid_insert(struct agent *a, struct worker *w)
{
  size_t i = pid_slot(a, w->pid);

  while (a->by_pid[i] && a->by_pid[i] != &removed_slot)
    i = (i + 1) & a->by_pid_mask;
  a->by_pid[i] = w;
}

/* The running worker with this pid, removed from the table; NULL for any
 * other child (an orphan re-parented to us, see contain.h). */
static struct worker *pid_take(struct agent *a, pid_t pid)
{
  size_t i = pid_slot(a, pid);
  struct worker *w;

  while ((w = a->by_pid[i])) {
    if (w != &removed_slot && w->pid == pid && w->running) {
      a->by_pid[i] = &removed_slot;
      return w;
    }
    i = (i + 1) & a->by_pid_mask;
  }
  return NULL;
}

static int any_running(const struct agent *a)
{
  return a->nrunning;
}

void agent_begin_stop(struct agent *a, enum stop_reason why, int sig)
{
  a->state = ST_STOPPING;
  a->reason = why;
  uv_timer_stop(&a->heartbeat);
  a->stop_signal = sig ? sig : SIGTERM;
  a->sigkill_sent = false;
  a->forwarded = agent_signal_bit(sig);
  if (sig && any_running(a)) {
    agent_kill_running(a, sig);
    agent_start_grace(a);
  }
  agent_check_stopped(a);
}

static void drain_expired(uv_timer_t *t)
{
  struct agent *a = t->data;
  int i;

  a->drain_expired = true;
  for (i = 0; i < a->o->nproc; i++) {
    output_stream_drain_close(&a->workers[i].out);
    output_stream_drain_close(&a->workers[i].err);
  }
}

void agent_join_round(struct agent *a, enum rdzv_join_reason why)
{
  int err;

  a->state = ST_RENDEZVOUS;
  err = a->rdzv->ops->join(a->rdzv, why);
  if (err) {
    say("rendezvous (%s): cannot join: %s", a->rdzv->ops->name,
              say_strerror(err));
    agent_finish(a, AGENT_EXIT_INTERNAL);
  }
}

/* Everything of the group is gone: decide what comes next. */
static void group_finished(struct agent *a)
{
  struct rdzv_assignment as;
  int err;

  switch (a->reason) {
  case STOP_SUCCESS:
    agent_event(a, "SUCCEEDED", "workers=%d", a->o->nproc);
    a->state = ST_BARRIER;
    err = a->rdzv->ops->exit_barrier(a->rdzv);
    if (err) {
      say("exit barrier: %s", say_strerror(err));
      agent_finish(a, AGENT_EXIT_INTERNAL);
    }
    return;
  case STOP_FAILURE:
    if (!agent_failure_final(a) && live_agent_changing(&a->live)) {
      /* Note [failure in a live round] */
      a->state = ST_RENDEZVOUS;
      if (live_agent_take_round(&a->live, &as)) {
        agent_failed_in_round(a, &as);
        return;
      }
      say("worker group failed during a membership change; it restarts "
          "once the new round completes");
      return;
    }
    agent_group_failed(a);
    return;
  case STOP_FATAL:
    agent_event(a, "FAILED", "could not start the workers");
    agent_print_summary(a);
    agent_finish(a, a->exit_status);
    return;
  case STOP_SIGNAL:
    agent_finish(a, 128 + a->stop_signal);
    return;
  case STOP_MEMBERSHIP:
    if (!live_agent_changing(&a->live)) {
      agent_join_round(a, RDZV_JOIN_MEMBERSHIP);
      return;
    }
    /* The round was asked for while the workers ran (live recovery):
     * start in it now, or when it comes. */
    a->state = ST_RENDEZVOUS;
    if (live_agent_take_round(&a->live, &as))
      agent_start_round(a, &as);
    return;
  }
}

/* Called after every event while stopping: moves on once all workers are
 * reaped and all their output is read. */
void agent_check_stopped(struct agent *a)
{
  int i;

  if (a->state != ST_STOPPING || any_running(a))
    return;
  if (!a->group_cleared) {
    a->group_cleared = true;
    if (uv_is_active((uv_handle_t *)&a->grace))
      uv_timer_stop(&a->grace);
    /* Leaders are gone; kill what is left of their groups (grandchildren)
     * and whatever left the groups (contain.h), which also lets the tee
     * pipes reach EOF. */
    for (i = 0; i < a->o->nproc; i++) {
      struct worker *w = &a->workers[i];

      if (w->pid > 0) {
        kill(-w->pid, SIGKILL);
        guardian_forget(&a->guardian, w->pid);
        w->pid = 0;
      }
    }
    contain_kill_all(&a->contain, a->guardian.pid);
  }
  if (a->nstreams) {
    if (!a->drain_expired && !uv_is_active((uv_handle_t *)&a->drain))
      uv_timer_start(&a->drain, drain_expired, DRAIN_MS, 0);
    return;
  }
  uv_timer_stop(&a->drain);
  if (a->ftimer)
    filetimer_clear(a->ftimer, 0);  /* grandchildren's timers too */
  group_finished(a);
}

static void worker_exited(struct agent *a, struct worker *w, int status)
{
  enum live_failed live;
  int code;

  w->running = false;
  a->nrunning--;
  code = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
  /* A worker our watchdogs killed failed, whenever it went. */
  if (a->state == ST_STOPPING && a->reason == STOP_FAILURE &&
      (agent_is_cofailure(a, code) || w->hang.killed_why[0])) {
    say("worker %d (local rank %d, pid %d) failed too (%s %d)",
              w->rank, w->local_rank, (int)w->pid,
              code < 0 ? "signal" : "status", code < 0 ? -code : code);
    agent_record_failure(a, w, w->pid, code,
                   w->hang.killed_why[0] ? w->hang.killed_why : NULL);
  }
  if (a->ftimer)
    filetimer_clear(a->ftimer, w->pid);
  if (a->state != ST_RUNNING) {
    agent_check_stopped(a);
    return;
  }
  if (code != 0) {
    if (code < 0)
      say("worker %d (local rank %d, pid %d) was killed by %s",
                w->rank, w->local_rank, (int)w->pid, agent_signame(-code));
    else
      say("worker %d (local rank %d, pid %d) exited with status %d",
                w->rank, w->local_rank, (int)w->pid, code);
    live = live_agent_worker_failed(&a->live, w->local_rank, code);
    if (live == LIVE_FAILED_REPLACED)
      return;
    if (live == LIVE_FAILED_NO_REPLACEMENT)
      a->final_replaced = live_agent_replaced(&a->live, w->local_rank);
    agent_record_failure(a, w, w->pid, code,
                   w->hang.killed_why[0] ? w->hang.killed_why : NULL);
    agent_report_failure(a, w->rank, code);
    agent_begin_stop(a, STOP_FAILURE, SIGTERM);
    return;
  }
  live_agent_worker_finished(&a->live, w->local_rank);
  if (a->nrunning == 0 && !live_agent_replacing(&a->live))
    agent_begin_stop(a, STOP_SUCCESS, 0);
}

static void on_sigchld(uv_signal_t *h, int signum)
{
  struct agent *a = h->data;
  struct worker *w;
  int status;
  pid_t pid;

  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    if (pid == a->guardian.pid) {
      say("the guardian process died; workers may outlive cdrun "
                "if it is killed");
      a->guardian.pid = 0;
      continue;
    }
    /* Anything else is an orphan a worker left: reaped, nothing more. */
    w = pid_take(a, pid);
    if (w)
      worker_exited(a, w, status);
  }
}



/* The workers' CDRUN_JOB_TOKEN for this round (Note [job token]). */
static void round_token(struct agent *a)
{
  bool guessable;
  int err = jobtoken_make(a->o->token_secret, a->o->token_secret_len,
                          a->o->run_id, &a->assign,
                          live_agent_token_private_ok(&a->live), a->job_token,
                          &guessable);

  if (err) {
    a->job_token[0] = '\0';
    say("warning: no job token for the workers (%s): their store is open "
        "to anyone who reaches MASTER_PORT", say_strerror(err));
  } else if (guessable && !a->token_noted) {
    a->token_noted = true;
    say("warning: no rendezvous secret: the workers' %s is derived from "
        "the run id and MASTER_ADDR:MASTER_PORT, which anyone who knows "
        "them can compute (set --rdzv_conf secret_file=PATH, or %s on "
        "every node)", JOBTOKEN_VAR, JOBTOKEN_VAR);
  }
}

static void on_round(void *ctx, const struct rdzv_assignment *as)
{
  struct agent *a = ctx;

  if (live_agent_round(&a->live, as, &a->assign, a->job_token))
    return;
  if (a->state != ST_RENDEZVOUS)
    return;
  if (a->owed_set) {
    agent_failed_in_round(a, as);
    return;
  }
  agent_start_round(a, as);
}

/* A round completed with no workers running: start them all. */
void agent_start_round(struct agent *a, const struct rdzv_assignment *as)
{
  char path[PATH_MAX + 32], why[640];
  int err;

  if (a->lost_pending) {
    uv_timer_stop(&a->lost_timer);
    a->lost_pending = false;
    say("a round completed again after node %s was lost: the job goes "
        "on", a->lost_host);
  }
  /* A root cause named by an earlier round's restart is not this
   * round's (Note [root cause]). */
  memset(&a->rdzv->job_cause, 0, sizeof a->rdzv->job_cause);
  a->owed_set = false;
  a->final_replaced = -1;
  a->assign = *as;
  a->state = ST_RUNNING;
  a->attempt_started = agent_now_epoch();
  a->drain_expired = false;
  a->group_cleared = false;
  memset(a->by_pid, 0, (a->by_pid_mask + 1) * sizeof *a->by_pid);
  snprintf(path, sizeof path, "%s/attempt_%d", a->o->run_log_dir,
           as->restart_count);
  logdir_rmtree(path);    /* torchrun wipes a reused attempt folder */
  /* Each worker's folder is then one mkdir (prepare_worker). */
  logdir_mkdirs(path);
  round_token(a);
  err = live_agent_start_round(&a->live, &a->assign, a->job_token, why,
                               sizeof why);
  if (err) {
    /* Note [no live store] (live_agent.c): a final failure, so that
     * every node ends the job with this reason. */
    say("%s", why);
    a->rdzv->ops->report_failure(a->rdzv, true, why);
    a->exit_status = AGENT_EXIT_INTERNAL;
    agent_begin_stop(a, STOP_FATAL, 0);
    return;
  }
  agent_event(a, "START", "restart_count=%d world_size=%d master=%s:%d",
              as->restart_count, as->world_size, as->master_addr,
              as->master_port);

  if (!agent_start_workers(a, as))
    return;
  live_agent_workers_up(&a->live, &a->optin_timer);
  if (a->o->heartbeat_timeout > 0)
    uv_timer_start(&a->heartbeat, agent_heartbeat_check,
                   (uint64_t)(a->o->heartbeat_timeout * 1000.0) + 1, 0);
}

/* Note [fixed membership] (agent.h): the lost node is not back within
 * the grace period; the job cannot go on at its fixed size. */
static void lost_grace_expired(uv_timer_t *t)
{
  struct agent *a = t->data;

  if (a->state == ST_CLOSING || a->state == ST_DONE)
    return;             /* a failure ends the job already */
  say("node %s is not back after %g s: ending the job (exit status %d)",
      a->lost_host, a->o->lost_grace_s, AGENT_EXIT_NODE_LOST);
  a->exit_status = AGENT_EXIT_NODE_LOST;
  if (a->state == ST_STOPPING) {
    a->reason = STOP_FATAL;
    return;
  }
  if (a->state == ST_RUNNING) {
    agent_begin_stop(a, STOP_FATAL, SIGTERM);
    return;
  }
  agent_finish(a, AGENT_EXIT_NODE_LOST);
}

/* A participant was lost: under a launcher that cannot start it again,
 * a fixed-size job would wait for it until its join timeout, holding the
 * allocation; it ends after a short, announced grace instead. */
static void check_lost(struct agent *a)
{
  if (!a->o->fixed_source || !a->rdzv->lost_host[0] || a->lost_pending)
    return;
  snprintf(a->lost_host, sizeof a->lost_host, "%s", a->rdzv->lost_host);
  say("node %s lost (%s) and this job's size is fixed (its nodes come "
      "from %s, which cannot start it again): the job ends in %g s "
      "unless it is back (--rdzv_conf lost_node_grace=S)", a->lost_host,
      a->rdzv->lost_why[0] ? a->rdzv->lost_why : "lost", a->o->fixed_source,
      a->o->lost_grace_s);
  a->lost_pending = true;
  uv_timer_start(&a->lost_timer, lost_grace_expired,
                 (uint64_t)(a->o->lost_grace_s * 1000.0), 0);
}

static void on_restart(void *ctx, const char *reason)
{
  struct agent *a = ctx;

  if (a->state != ST_DONE && a->state != ST_CLOSING)
    check_lost(a);

  if (a->state == ST_BARRIER) {
    /* Our workers are done but another node's are not: the job goes on
     * in a new round, and so do we. */
    say("the job needs a new round: %s", reason);
    agent_join_round(a, RDZV_JOIN_MEMBERSHIP);
    return;
  }
  if (a->state != ST_RUNNING)
    return;
  if (live_agent_rejoin(&a->live, reason))
    return;
  say("restarting the worker group: %s", reason);
  agent_begin_stop(a, STOP_MEMBERSHIP, SIGTERM);
}

static void on_rdzv_error(void *ctx, int err, const char *message)
{
  struct agent *a = ctx;
  /* Note [a lost node] (rdzvd/rdzv_rules.h): the job ended on a lost
   * node, and no failure of ours is its root cause. */
  bool lost = err && a->rdzv->ended_lost && !a->rdzv->job_cause.exited_at;
  int status = lost ? AGENT_EXIT_NODE_LOST : AGENT_EXIT_INTERNAL;

  a->job_ended = true;
  if (a->state == ST_CLOSING) {
    uv_timer_stop(&a->backoff_timer);
    say("%s", message);
    agent_finish_failed(a);
    return;
  }
  if (err == 0 && a->state != ST_RUNNING && a->state != ST_STOPPING) {
    say("%s", message);
    agent_finish(a, 0);
    return;
  }
  /* A refusal (authentication) already says what it is, and so does
   * the job's end while this node stops after its own failure. */
  if (err == UV_EACCES ||
      (a->state == ST_STOPPING && a->reason == STOP_FAILURE))
    say("%s", message);
  else if (!lost)
    say("rendezvous failed: %s", message);
  else
    say("%s: ending the job (exit status %d)", message, status);
  if (a->state == ST_RUNNING) {
    agent_begin_stop(a, STOP_FATAL, SIGTERM);
    a->exit_status = status;
  } else if (a->state != ST_STOPPING) {
    agent_print_summary(a);   /* the job's root cause, when it names one */
    agent_finish(a, status);
  } else if (lost && a->reason == STOP_MEMBERSHIP) {
    a->reason = STOP_FATAL;
    a->exit_status = status;
  }
}

static void on_barrier(void *ctx, int err)
{
  struct agent *a = ctx;

  if (err)
    say("exit barrier failed: %s", say_strerror(err));
  agent_finish(a, err ? AGENT_EXIT_INTERNAL : 0);
}

/* ---- the loop: its handles, its end, agent_run ------------------------- */

static void close_cb_noop(uv_handle_t *h)
{
  (void)h;
}

void agent_finish(struct agent *a, int status)
{
  int i;

  if (a->state == ST_DONE)
    return;
  a->state = ST_DONE;
  a->exit_status = status;
  uv_close((uv_handle_t *)&a->sigchld, close_cb_noop);
  for (i = 0; i < a->o->nsignals; i++)
    uv_close((uv_handle_t *)&a->sigs[i], close_cb_noop);
  uv_close((uv_handle_t *)&a->grace, close_cb_noop);
  uv_close((uv_handle_t *)&a->drain, close_cb_noop);
  uv_close((uv_handle_t *)&a->heartbeat, close_cb_noop);
  uv_close((uv_handle_t *)&a->backoff_timer, close_cb_noop);
  uv_close((uv_handle_t *)&a->lost_timer, close_cb_noop);
  uv_close((uv_handle_t *)&a->optin_timer, close_cb_noop);
  for (i = 0; i < a->o->nproc; i++) {
    output_stream_drain_close(&a->workers[i].out);
    output_stream_drain_close(&a->workers[i].err);
  }
  if (a->rdzv) {
    a->rdzv->ops->destroy(a->rdzv);
    a->rdzv = NULL;
  }
  filetimer_close(a->ftimer);
  a->ftimer = NULL;
}

/* Sets up every handle and the rendezvous.  On failure closes what it
 * initialised, in reverse (the loop still has to run for the close
 * callbacks), and returns the error: agent_finish() is then never called. */
static int agent_init_handles(struct agent *a)
{
  struct rdzv_callbacks cb = { a, on_round, on_restart, on_rdzv_error,
                               on_barrier };
  int i = 0, err;

  err = uv_signal_init(&a->loop, &a->sigchld);
  if (err)
    return err;
  a->sigchld.data = a;
  err = uv_signal_start(&a->sigchld, on_sigchld, SIGCHLD);
  if (err)
    goto undo_sigchld;
  for (i = 0; i < a->o->nsignals; i++) {
    err = uv_signal_init(&a->loop, &a->sigs[i]);
    if (err)
      goto undo_sigs;
    a->sigs[i].data = a;
    err = uv_signal_start(&a->sigs[i], agent_on_signal, a->o->signals[i]);
    if (err) {
      i++;      /* this one is initialised: close it too */
      goto undo_sigs;
    }
  }
  err = uv_timer_init(&a->loop, &a->grace);
  if (err)
    goto undo_sigs;
  a->grace.data = a;
  err = uv_timer_init(&a->loop, &a->drain);
  if (err)
    goto undo_grace;
  a->drain.data = a;
  err = uv_timer_init(&a->loop, &a->heartbeat);
  if (err)
    goto undo_drain;
  a->heartbeat.data = a;
  err = uv_timer_init(&a->loop, &a->backoff_timer);
  if (err)
    goto undo_heartbeat;
  a->backoff_timer.data = a;
  err = uv_timer_init(&a->loop, &a->lost_timer);
  if (err)
    goto undo_backoff;
  a->lost_timer.data = a;
  err = uv_timer_init(&a->loop, &a->optin_timer);
  if (err)
    goto undo_lost;
  a->optin_timer.data = &a->live;   /* live mode's (live_agent.h) */
  if (a->o->timer_file) {
    a->ftimer = filetimer_new(0, agent_on_timer_expired, a);
    if (!a->ftimer) {
      err = UV_ENOMEM;
      goto undo_optin;
    }
    err = filetimer_listen(a->ftimer, &a->loop, a->o->timer_file);
    if (err) {
      say("file timer: cannot serve %s: %s", a->o->timer_file,
          err == -EEXIST ? "it exists and is not a FIFO" : strerror(-err));
      goto undo_ftimer;
    }
  }
  err = a->o->rdzv_create(a->o->rdzv_arg, &a->loop, &cb, &a->rdzv);
  if (err)
    goto undo_ftimer;
  a->live.fixed_nodes = a->rdzv->ops->fixed_nodes;
  return 0;

undo_ftimer:
  filetimer_close(a->ftimer);
  a->ftimer = NULL;
undo_optin:
  uv_close((uv_handle_t *)&a->optin_timer, close_cb_noop);
undo_lost:
  uv_close((uv_handle_t *)&a->lost_timer, close_cb_noop);
undo_backoff:
  uv_close((uv_handle_t *)&a->backoff_timer, close_cb_noop);
undo_heartbeat:
  uv_close((uv_handle_t *)&a->heartbeat, close_cb_noop);
undo_drain:
  uv_close((uv_handle_t *)&a->drain, close_cb_noop);
undo_grace:
  uv_close((uv_handle_t *)&a->grace, close_cb_noop);
undo_sigs:
  while (i-- > 0)
    uv_close((uv_handle_t *)&a->sigs[i], close_cb_noop);
undo_sigchld:
  uv_close((uv_handle_t *)&a->sigchld, close_cb_noop);
  a->rdzv = NULL;
  return err;
}

/* ---- what live mode sees of the agent (live_agent.h) -------------------- */

static void live_worker(void *ctx, int local_rank, struct live_worker_view *v)
{
  const struct worker *w = &((struct agent *)ctx)->workers[local_rank];

  v->rank = w->rank;
  v->pid = w->pid;
  v->running = w->running;
  v->dir = w->dir;
  v->streams_closed = w->out.state == OUTPUT_NONE &&
                      w->err.state == OUTPUT_NONE;
}

static enum live_group live_group(void *ctx)
{
  const struct agent *a = ctx;

  return a->state == ST_RUNNING    ? LIVE_GROUP_RUNNING
         : a->state == ST_STOPPING ? LIVE_GROUP_STOPPING
                                   : LIVE_GROUP_OTHER;
}

static void live_spawn(void *ctx, int local_rank)
{
  struct agent *a = ctx;

  agent_spawn_worker(a, &a->workers[local_rank]);
}

/* Note [live replacement] (live_agent.c): the failed worker's process
 * group goes with it, and its streams close for the replacement. */
static void live_retire(void *ctx, int local_rank)
{
  struct agent *a = ctx;
  struct worker *w = &a->workers[local_rank];

  kill(-w->pid, SIGKILL);
  guardian_forget(&a->guardian, w->pid);
  w->pid = 0;
  output_stream_drain_close(&w->out);
  output_stream_drain_close(&w->err);
}

static void live_join(void *ctx)
{
  struct agent *a = ctx;
  int err = a->rdzv->ops->join(a->rdzv, RDZV_JOIN_MEMBERSHIP);

  if (err) {
    say("rendezvous (%s): cannot join: %s", a->rdzv->ops->name,
        say_strerror(err));
    agent_begin_stop(a, STOP_FATAL, SIGTERM);
    a->exit_status = AGENT_EXIT_INTERNAL;
  }
}

static void live_restart_in_round(void *ctx)
{
  agent_begin_stop(ctx, STOP_MEMBERSHIP, SIGTERM);
}

static void live_adopt_round(void *ctx, const struct rdzv_assignment *as)
{
  struct agent *a = ctx;
  int i;

  a->assign = *as;
  for (i = 0; i < a->o->nproc; i++)
    a->workers[i].rank = as->rank_offset + i;
}

static void live_event(void *ctx, const char *name, const char *detail)
{
  agent_event(ctx, name, "%s", detail);
}

static const struct live_agent_ops live_ops = {
  live_worker, live_group, live_spawn, live_retire, live_join,
  live_restart_in_round, live_adopt_round, live_event,
};

/* Note [overlapped exit]: on a disk, removing a folder costs (on this
 * project's test machines, /tmp's ext4 discards each freed block
 * synchronously: about 80 us per folder, 11 of them for 8 workers), and
 * the agent's own teardown (the loop's handles, the spawning threads, the
 * guardian) is as long again.  Neither needs the other, so once the exit
 * status is known the guardian, another process and idle by then,
 * removes the temporary log folder while the agent tears down; the agent
 * waits for the guardian anyway.  A job of /bin/true workers exits that
 * much sooner (scripts/bench/all's launch row). */
static void settle_logs(struct agent *a)
{
  const struct agent_opts *o = a->o;

  if (a->logs_settled)
    return;
  a->logs_settled = true;
  a->logs_remove = o->temp_log_base && o->logs_disposable &&
                   o->logs_disposable(o->rdzv_arg, a->exit_status);
  if (a->logs_remove && a->guardian.pid > 0)
    guardian_remove_temp(&a->guardian);
}

/* Note [console queue] (conqueue.h): a queue for each of cdrun's stdout
 * and stderr that some worker's tee'd stream reaches. */
static void open_consoles(struct agent *a)
{
  const struct output_conf *c = &a->o->output;
  int lr, k, err;

  for (lr = 0; lr < a->o->nproc; lr++)
    for (k = 0; k < 2; k++)
      if (!a->console[k] && c->console[lr] &&
          (c->tee[lr] & (k ? LOGS_STDERR : LOGS_STDOUT))) {
        err = conqueue_create(k + 1, 0, &a->console[k]);
        if (err)        /* written in place, as before */
          say("cannot queue the console's lines: %s", say_strerror(err));
      }
}

/* Lets the queues drain while their console reads (a console that stalls
 * for CONSOLE_STALL_S is left behind), and says what was dropped; not on
 * a stderr that is itself stalled. */
static void close_consoles(struct agent *a)
{
  uint64_t dropped[2];
  int k;

  for (k = 1; k >= 0; k--)
    dropped[k] = conqueue_close(a->console[k], CONSOLE_STALL_S);
  for (k = 0; k < 2; k++)
    if (dropped[k] && (!a->console[1] || !dropped[1] || k == 0))
      say("%llu line%s of the workers' %s did not reach the console (it did "
          "not keep up; the workers' log files have them all: %s)",
          (unsigned long long)dropped[k], dropped[k] == 1 ? "" : "s",
          k ? "stderr" : "stdout", a->o->run_log_dir);
  a->console[0] = a->console[1] = NULL;
}

int agent_run(const struct agent_opts *o)
{
  struct agent a;
  int err, status;

  memset(&a, 0, sizeof a);
  a.o = o;
  a.exit_status = AGENT_EXIT_INTERNAL;
  a.final_replaced = -1;
  if (gethostname(a.host, sizeof a.host) < 0)
    snprintf(a.host, sizeof a.host, "localhost");
  a.host[sizeof a.host - 1] = '\0';
  err = live_agent_init(&a.live, o, &live_ops, &a);
  a.workers = calloc((size_t)o->nproc, sizeof *a.workers);
  a.sigs = calloc((size_t)(o->nsignals ? o->nsignals : 1), sizeof *a.sigs);
  /* At most half full, so probes stay short and always end. */
  a.by_pid_mask = 7;
  while (a.by_pid_mask + 1 < 2 * (size_t)o->nproc)
    a.by_pid_mask = a.by_pid_mask * 2 + 1;
  a.by_pid = calloc(a.by_pid_mask + 1, sizeof *a.by_pid);
  if (err || !a.workers || !a.sigs || !a.by_pid) {
    say("out of memory");
    live_agent_close(&a.live);
    free(a.workers);
    free(a.sigs);
    free(a.by_pid);
    a.guardian.pid = 0;         /* none: settle_logs removes nothing */
    settle_logs(&a);
    if (a.logs_remove)
      logdir_rmtree(o->temp_log_base);
    return AGENT_EXIT_INTERNAL;
  }

  /* Before the guardian, which must know the workers' cgroup. */
  err = contain_init(&a.contain);
  /* Inherited by every worker and whatever it starts. */
  setenv(CONTAIN_ENV, a.contain.token, 1);
  if (err)
    say("cannot become a child subreaper: %s; descendants that leave "
        "their worker's process group may outlive it", say_strerror(err));
  /* The guardian is forked before the loop exists: it must inherit as
   * little as possible.  See Note [no orphans]. */
  err = guardian_start(&a.guardian, &a.contain, o->temp_log_base);
  if (err) {
    say("cannot start the guardian process: %s", say_strerror(err));
    goto out_free;
  }
  err = uv_loop_init(&a.loop);
  if (err) {
    say("cannot create the event loop: %s", say_strerror(err));
    goto out_guardian;
  }
  open_consoles(&a);
  err = agent_init_handles(&a);
  if (err) {
    say("cannot set up the agent: %s", say_strerror(err));
    a.state = ST_DONE;          /* the ladder closed what was open */
    a.exit_status = AGENT_EXIT_INTERNAL;
  } else {
    agent_join_round(&a, RDZV_JOIN_FIRST);
  }
  uv_run(&a.loop, UV_RUN_DEFAULT);
  settle_logs(&a);
  /* agent_finish() closed every handle; let the close callbacks run. */
  uv_run(&a.loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&a.loop) != 0)
    say("internal: event loop closed with handles left open");

  live_agent_close(&a.live);   /* after the workers: it outlives them */
  close_consoles(&a);

out_guardian:
  /* Its threads' workers are gone (Note [spawning threads], spawn.c). */
  spawner_stop(a.spawner);
  /* Anything left in the workers' groups dies with the guardian's SIGKILL
   * now; normally nothing is. */
  guardian_release(&a.guardian);
out_free:
  settle_logs(&a);              /* when the loop never ran */
  guardian_wait(&a.guardian);   /* a no-op when it never started */
  /* What the guardian did not remove (it is gone, or never started):
   * normally nothing, one rmdir that finds nothing. */
  if (a.logs_remove)
    logdir_rmtree(o->temp_log_base);
  contain_destroy(&a.contain);
  status = a.exit_status;
  failures_clear(&a.failures);
  for (int i = 0; i < o->nproc; i++) {
    free(a.workers[i].dir);
    free(a.workers[i].error_file);
  }
  free(a.workers);
  free(a.sigs);
  free(a.by_pid);
  return status;
}

