/* live_agent.c -- live recovery's part of the agent (live_agent.h). */
#include "live_agent.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_internal.h"
#include "live_handshake.h"
#include "live_store.h"
#include "num.h"
#include "rdzv_rules.h"
#include "say.h"
#include "workerenv.h"

#define LIVE_OPT_IN_WINDOW_S 30.0  /* Note [opt-in window] */
#define OPT_IN_WINDOW_ENV "CDRUN_LIVE_OPT_IN_WINDOW"

void live_agent_init(struct live_agent *l, bool live,
                     const char *run_log_dir)
{
  const char *v = getenv(OPT_IN_WINDOW_ENV);

  memset(l, 0, sizeof *l);
  l->env = l->replace = live;
  l->optin_window = LIVE_OPT_IN_WINDOW_S;
  if (live && v && *v &&
      num_parse_double(v, 0, 1e6, &l->optin_window) != 0) {
    say("warning: %s=%s is not a number of seconds (0 to 1e6): using %g",
        OPT_IN_WINDOW_ENV, v, LIVE_OPT_IN_WINDOW_S);
    l->optin_window = LIVE_OPT_IN_WINDOW_S;
  }
  if (live)
    snprintf(l->round_file, sizeof l->round_file, "%s/%s", run_log_dir,
             LIVE_HANDSHAKE_ROUND);
}

void live_agent_close(struct live_agent *l)
{
  live_store_stop(l->store);
  l->store = NULL;
}

void live_agent_worker_env(const struct agent *a, const struct worker *w,
                           struct worker_env *we, char *opt_in, size_t len)
{
  if (!a->live.env)
    return;
  we->live = true;
  we->live_store = a->live.store_addr;
  we->live_round_file = a->live.round_file;
  we->worker_restarts = w->live.replaced;
  snprintf(opt_in, len, "%s/%s", w->dir, LIVE_HANDSHAKE_OPT_IN);
  unlink(opt_in);
  we->live_opt_in = opt_in;
}

/* Note [live token on one node]: without a secret, a round of one node
 * gets a token of fresh random bytes (Note [job token], case 4), which
 * no other node can know.  In live mode a node joining an elastic job
 * must get the running workers' token, so a one-node round is keyed as
 * a round of several nodes is (case 5: derived from the run id and the
 * master endpoint, said to be guessable), unless its back end can never
 * add a node (the static one: --standalone, fixed nodes). */
bool live_agent_token_private_ok(const struct agent *a)
{
  return !a->live.env || a->rdzv->ops->fixed_nodes;
}

bool live_agent_replacing(const struct agent *a)
{
  return a->live.replace_pending > 0;
}

bool live_agent_rejoining(const struct agent *a)
{
  return a->live.rejoining;
}

bool live_agent_changing(const struct agent *a)
{
  return a->live.rejoining || a->live.pending_round_set;
}

bool live_agent_take_round(struct agent *a, struct rdzv_assignment *as)
{
  if (!a->live.pending_round_set)
    return false;
  *as = a->live.pending_round;
  a->live.pending_round_set = false;
  return true;
}

/* The first local worker that has not opted in, or NULL.  A
 * replacement counts as opted in: its predecessor was, and the same
 * program in the same environment opts in again (libpg's pg_init), so a
 * membership change or its own failure before it has is no reason to
 * restart everyone. */
static struct worker *not_opted_in(struct agent *a)
{
  char path[PATH_MAX];
  int i;

  for (i = 0; i < a->o->nproc; i++) {
    struct worker *w = &a->workers[i];

    if (w->live.replaced > 0)
      continue;

    snprintf(path, sizeof path, "%s/%s", w->dir ? w->dir : "",
             LIVE_HANDSHAKE_OPT_IN);
    if (!w->dir || !live_handshake_opted_in(path))
      return w;
  }
  return NULL;
}

/* Whether live recovery may keep the workers now: every local worker has
 * opted in.  Otherwise restart mode for this event, said once for the
 * job: a program that never opts in (a PyTorch script) is restarted at
 * every failure, and one that had not yet opted in (a membership change
 * just after a start) is live again once it has. */
static bool keeps_workers(struct agent *a)
{
  struct worker *w;

  if (!a->live.replace)
    return false;
  w = not_opted_in(a);
  if (!w)
    return true;
  if (!a->live.optin_said)
    say("worker %d (pid %d) did not opt in to live recovery: restarting "
        "the worker group instead", w->rank, (int)w->pid);
  a->live.optin_said = true;
  return false;
}

/* Note [opt-in window]: a program that cannot opt in (a PyTorch script)
 * runs in restart mode, and its user should hear so at the start, not at
 * the first failure.  Once a round's workers are up, the agent waits
 * CDRUN_LIVE_OPT_IN_WINDOW seconds (LIVE_OPT_IN_WINDOW_S by default: a
 * libpg program opts in from pg_init, long before); if no worker has
 * opted in by then it says that the job will be recovered by restart,
 * once.  Nothing else changes: each failure or membership change is
 * still decided by the workers' opt-in then (keeps_workers), so a late
 * opt-in is live after all, and a failure costs what restart mode's
 * does. */
static void optin_window_over(uv_timer_t *t)
{
  struct agent *a = t->data;
  char path[PATH_MAX];
  int i;

  if (a->state != ST_RUNNING || !a->live.replace || a->live.optin_said)
    return;
  for (i = 0; i < a->o->nproc; i++) {
    const struct worker *w = &a->workers[i];

    snprintf(path, sizeof path, "%s/%s", w->dir ? w->dir : "",
             LIVE_HANDSHAKE_OPT_IN);
    if (w->live.replaced > 0 || (w->dir && live_handshake_opted_in(path)))
      return;           /* some did: decided at each event */
  }
  say("no worker opted in to live recovery within %g s of its start (a "
      "program without the handshake, such as a PyTorch script): this job "
      "is recovered by restarting the worker group, as with "
      "--recovery=restart", a->live.optin_window);
  a->live.optin_said = true;
}

void live_agent_workers_up(struct agent *a)
{
  if (!a->live.replace || a->live.optin_said)
    return;
  uv_timer_start(&a->optin_timer, optin_window_over,
                 (uint64_t)(a->live.optin_window * 1000.0) + 1, 0);
}

/* Note [finished job]: a worker that exited 0 has left the group for
 * good, so a replacement of a peer that fails after that would wait for
 * a generation that cannot form (libpg: PG_TIMEOUT, then it fails and is
 * replaced again until the rank's budget ends the job as FAILED).  So
 * once a worker of the node finished, a failure is restart mode's: the
 * group restarts (counted) or the job fails when no restart is left,
 * exactly as without live recovery.  In the other order (the failure
 * right after the last step, its peers exiting 0 a moment later) a
 * replacement that has not joined the group when a peer finishes never
 * will: it is killed, and its failure is then restart mode's
 * (live_agent_worker_finished).  The agent knows only its own node's
 * workers: a worker here that exited 0 is one that is not running and
 * still has its pid (a failed one is replaced, pid 0, or stops the
 * group). */
static struct worker *finished_peer(struct agent *a, const struct worker *w)
{
  int i;

  for (i = 0; i < a->o->nproc; i++) {
    struct worker *p = &a->workers[i];

    if (p != w && !p->running && p->pid > 0 && !p->live.replace_pending)
      return p;
  }
  return NULL;
}

/* Whether w is a replacement that has not joined the group: it has not
 * opted in yet, or libpg says it is still joining (its opt-in file's
 * second line, Note [opt in] in libpg/recover.c).  A file without that
 * line (a program that implements the handshake alone) never says so. */
static bool still_joining(const struct worker *w)
{
  char path[PATH_MAX], buf[64];
  FILE *f;
  size_t n;

  if (w->live.replaced == 0 || !w->running || !w->dir)
    return false;
  snprintf(path, sizeof path, "%s/%s", w->dir, LIVE_HANDSHAKE_OPT_IN);
  f = fopen(path, "re");
  if (!f)
    return true;
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, "\njoining\n") != NULL;
}

/* Note [finished job], the other order: a peer finishes while a
 * replacement is still joining (the failure came right after the last
 * step, before the peers exited), so it never will: it goes, and its
 * exit takes restart mode's path (live_agent_worker_failed). */
void live_agent_worker_finished(struct agent *a, struct worker *done)
{
  int i;

  if (!a->live.replace)
    return;
  for (i = 0; i < a->o->nproc; i++) {
    struct worker *w = &a->workers[i];

    if (w == done || w->live.stopped || !still_joining(w))
      continue;
    say("worker %d finished (exit 0) while worker %d's replacement was "
        "still joining: it never can; stopping it", done->rank, w->rank);
    w->live.stopped = true;
    kill(-w->pid, SIGKILL);
  }
}

/* Note [live replacement]: in live mode a worker that fails while it and
 * every local worker opted in is replaced alone, with the same rank and
 * environment and its own count (CDRUN_WORKER_RESTARTS), at most
 * max_restarts times per local rank; the rendezvous hears nothing.  The
 * replacement starts once the dead worker's output streams are closed
 * (they are the same structs), in attempt_<k>/<local_rank>/live_<n>/.
 * The rank's budget is the back ends' rule (Note [live budget],
 * rdzvd/rdzv_rules.h); when it is spent the failure is restart mode's,
 * and final by the same rule (Note [one authority], launcher/rdzv.h). */
enum live_failed live_agent_worker_failed(struct agent *a, struct worker *w,
                                          int code)
{
  struct worker *done;

  if (!keeps_workers(a))
    return LIVE_FAILED_NOT_TAKEN;
  if ((done = finished_peer(a, w))) {
    /* Note [finished job] */
    say("worker %d failed after worker %d finished (exit 0): a replacement "
        "could not rejoin its peers; recovering as restart mode does",
        w->rank, done->rank);
    return LIVE_FAILED_NOT_TAKEN;
  }
  if (rdzv_rules_replacement_final(w->live.replaced, a->o->max_restarts)) {
    say("worker %d has no replacement left (%d of --max_restarts %d used; "
        "live mode counts them per rank): the job fails", w->rank,
        w->live.replaced, a->o->max_restarts);
    return LIVE_FAILED_NO_REPLACEMENT;
  }
  w->live.replaced++;
  say("replacing worker %d alone (live recovery; replacement %d of %d of "
      "this rank)", w->rank, w->live.replaced, a->o->max_restarts);
  agent_event(a, "WORKER_REPLACED", "rank=%d local_rank=%d pid=%d "
              "exitcode=%d worker_restarts=%d", w->rank, w->local_rank,
              (int)w->pid, code, w->live.replaced);
  /* What is left of its process group goes with it. */
  kill(-w->pid, SIGKILL);
  guardian_forget(&a->guardian, w->pid);
  w->pid = 0;
  output_stream_drain_close(&w->out);
  output_stream_drain_close(&w->err);
  w->live.replace_pending = true;
  a->live.replace_pending++;
  live_agent_start_replacements(a);
  return LIVE_FAILED_REPLACED;
}

/* The replacements whose worker's streams are closed now start. */
void live_agent_start_replacements(struct agent *a)
{
  int i;

  for (i = 0; a->live.replace_pending && i < a->o->nproc; i++) {
    struct worker *w = &a->workers[i];

    if (!w->live.replace_pending || w->out.state != OUTPUT_NONE ||
        w->err.state != OUTPUT_NONE)
      continue;
    w->live.replace_pending = false;
    a->live.replace_pending--;
    if (a->state != ST_RUNNING)
      continue;
    w->live.stopped = false;
    agent_spawn_worker(a, w);
    /* A peer finished while it waited to start (Note [finished job]). */
    if (w->running && finished_peer(a, w)) {
      say("a worker finished before worker %d's replacement started: it "
          "could never join; stopping it", w->rank);
      w->live.stopped = true;
      kill(-w->pid, SIGKILL);
    }
  }
}

/* Rewrites the node's round file for the current round. */
static void write_round(struct agent *a)
{
  struct live_round r = { a->assign.round, a->assign.world_size,
                          a->assign.rank_offset, a->o->nproc };
  int err = live_handshake_write_round(a->live.round_file, &r);

  if (err)
    say("cannot write the live round file %s: %s", a->live.round_file,
        say_strerror(err));
}

/* A round's live set-up before its workers start: node rank 0 serves the
 * live store (with this round's token: a new one after a restart), and
 * the round file says the round. */
/* Note [no live store]: every node's workers get CDRUN_LIVE_STORE, node
 * rank 0's, when their round starts, and no message of the rendezvous
 * tells the other nodes whether node 0 serves it.  When it cannot (no
 * libpg.so, the port taken), their live workers could not form a group,
 * and node 0's workers in restart mode would serve a store that the
 * others do not look at.  So in a round of several nodes node 0 ends the
 * job with a final failure naming the reason, which every node ends
 * with; a job of one node falls back to restart mode, consistent there. */
int live_agent_start_round(struct agent *a, char *why, size_t len)
{
  char msg[512];
  int i, err, port = a->assign.master_port + LIVE_STORE_PORT_OFFSET;

  for (i = 0; i < a->o->nproc; i++) {
    a->workers[i].live.replace_pending = false;
    a->workers[i].live.stopped = false;
  }
  a->live.replace_pending = 0;
  if (a->live.no_store[0] && a->assign.group_world_size > 1) {
    /* Alone at first, in restart mode; now others came. */
    snprintf(why, len, "node rank 0 cannot serve the live store (%s): "
             "the job cannot run with --recovery=live", a->live.no_store);
    return -ENOENT;
  }
  if (!a->live.env)
    return 0;
  if (a->assign.live_store[0]) {
    /* Note [live store in rdzvd]: the rendezvous serves it; node 0 is
     * no one special. */
    live_store_stop(a->live.store);
    a->live.store = NULL;
    a->live.store_token[0] = '\0';
    snprintf(a->live.store_addr, sizeof a->live.store_addr, "%s",
             a->assign.live_store);
    write_round(a);
    return 0;
  }
  if (a->assign.group_rank == 0 &&
      (!a->live.store || strcmp(a->live.store_token, a->job_token) != 0)) {
    live_store_stop(a->live.store);
    a->live.store = NULL;
    err = live_store_start(NULL, &port, a->job_token, &a->live.store, msg,
                           sizeof msg);
    if (err && a->assign.group_world_size > 1) {
      /* Note [no live store]: the other nodes' workers have the live
       * variables already, and cannot run without the store. */
      snprintf(why, len, "node rank 0 cannot serve the live store (%s): "
               "the job cannot run with --recovery=live", msg);
      return err;
    }
    if (err) {
      say("cannot serve the live store (%s): live recovery is off, this "
          "node's workers run in restart mode", msg);
      snprintf(a->live.no_store, sizeof a->live.no_store, "%s", msg);
      a->live.env = false;
      a->live.replace = false;
      return 0;
    }
    snprintf(a->live.store_token, sizeof a->live.store_token, "%s",
             a->job_token);
  }
  snprintf(a->live.store_addr, sizeof a->live.store_addr, "%s:%d",
           a->assign.master_addr, port);
  write_round(a);
  return 0;
}

/* The job needs a new round and live recovery keeps the workers: join
 * with them running.  False: restart mode. */
bool live_agent_rejoin(struct agent *a, const char *reason)
{
  int err;

  if (a->live.rejoining)
    return true;        /* the join in flight serves this change too */
  if (!keeps_workers(a))
    return false;
  say("the job needs a new round (%s): re-joining with the workers "
      "running (live recovery)", reason);
  a->live.rejoining = true;
  err = a->rdzv->ops->join(a->rdzv, RDZV_JOIN_MEMBERSHIP);
  if (err) {
    say("rendezvous (%s): cannot join: %s", a->rdzv->ops->name,
        say_strerror(err));
    agent_begin_stop(a, STOP_FATAL, SIGTERM);
    a->exit_status = AGENT_EXIT_INTERNAL;
  }
  return true;
}

/* The round a live re-join asked for: the workers go on in it, and learn
 * it from the round file, unless what they hold changed (the master
 * endpoint: node 0 was lost; the restart count or the job token: the job
 * restarted); then they restart in it.  Returns false when the agent is
 * not running them any more. */
static bool go_on_in_round(struct agent *a, const struct rdzv_assignment *as)
{
  char token[JOBTOKEN_HEX + 1];
  struct rdzv_assignment old = a->assign;
  bool guessable, master_moved;
  int i;

  if (a->state != ST_RUNNING)
    return false;
  if (jobtoken_make(a->o->token_secret, a->o->token_secret_len,
                    a->o->run_id, as, live_agent_token_private_ok(a),
                    token, &guessable))
    token[0] = '\0';
  /* Note [live store in rdzvd]: with the rendezvous' store the master
   * endpoint is nobody's business in live mode (libpg meets through the
   * store), so node 0's loss keeps the workers: the store must not move. */
  master_moved = strcmp(as->master_addr, old.master_addr) != 0 ||
                 as->master_port != old.master_port;
  if (as->live_store[0] && strcmp(as->live_store, old.live_store) == 0)
    master_moved = false;
  if (master_moved || strcmp(as->live_store, old.live_store) != 0 ||
      as->restart_count != old.restart_count ||
      (as->group_world_size > 1 && strcmp(token, a->job_token) != 0)) {
    say("round %d moves the master endpoint or the live store, or "
        "restarts the job (master %s:%d, was %s:%d; live store %s, was %s; "
        "restart %d, was %d; or another job token): live recovery cannot "
        "keep the workers; restarting them",
        as->round, as->master_addr,
        as->master_port, old.master_addr, old.master_port,
        as->live_store[0] ? as->live_store : "node 0's",
        old.live_store[0] ? old.live_store : "node 0's",
        as->restart_count, old.restart_count);
    a->live.pending_round = *as;
    a->live.pending_round_set = true;
    agent_begin_stop(a, STOP_MEMBERSHIP, SIGTERM);
    return true;
  }
  a->assign = *as;
  for (i = 0; i < a->o->nproc; i++)
    a->workers[i].rank = as->rank_offset + i;
  write_round(a);
  say("round %d: world %d on %d node%s, this node's ranks from %d; the "
      "workers go on (live recovery)", as->round, as->world_size,
      as->group_world_size, as->group_world_size == 1 ? "" : "s",
      as->rank_offset);
  agent_event(a, "LIVE_ROUND", "world_size=%d group_rank=%d "
              "rank_offset=%d", as->world_size, as->group_rank,
              as->rank_offset);
  return true;
}


bool live_agent_round(struct agent *a, const struct rdzv_assignment *as)
{
  if (!a->live.rejoining)
    return false;
  a->live.rejoining = false;
  if (go_on_in_round(a, as))
    return true;
  if (a->state == ST_STOPPING) {
    /* The group stops (a failure live recovery did not take): it
     * starts in this round once stopped. */
    a->live.pending_round = *as;
    a->live.pending_round_set = true;
    return true;
  }
  return false;
}
