/* live_agent.c -- live recovery's part of the agent (live_agent.h). */
#include "live_agent.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "live_handshake.h"
#include "live_store.h"
#include "num.h"
#include "rdzv_rules.h"
#include "say.h"
#include "workerenv.h"

#define LIVE_OPT_IN_WINDOW_S 30.0  /* Note [opt-in window] */
#define OPT_IN_WINDOW_ENV "CDRUN_LIVE_OPT_IN_WINDOW"

int live_agent_init(struct live_agent *l, const struct agent_opts *o,
                    const struct live_agent_ops *ops, void *ctx)
{
  const char *v = getenv(OPT_IN_WINDOW_ENV);
  bool live = o->live;

  memset(l, 0, sizeof *l);
  l->o = o;
  l->ops = ops;
  l->ctx = ctx;
  l->workers = calloc((size_t)(o->nproc > 0 ? o->nproc : 1),
                      sizeof *l->workers);
  if (!l->workers)
    return -ENOMEM;
  l->env = l->replace = live;
  l->optin_window = LIVE_OPT_IN_WINDOW_S;
  if (live && v && *v &&
      num_parse_double(v, 0, 1e6, &l->optin_window) != 0) {
    say("warning: %s=%s is not a number of seconds (0 to 1e6): using %g",
        OPT_IN_WINDOW_ENV, v, LIVE_OPT_IN_WINDOW_S);
    l->optin_window = LIVE_OPT_IN_WINDOW_S;
  }
  if (live)
    snprintf(l->round_file, sizeof l->round_file, "%s/%s", o->run_log_dir,
             LIVE_HANDSHAKE_ROUND);
  return 0;
}

void live_agent_close(struct live_agent *l)
{
  live_store_stop(l->store);
  l->store = NULL;
  free(l->workers);
  l->workers = NULL;
}

/* Local worker i as the agent has it now. */
static void view(const struct live_agent *l, int i, struct live_worker_view *v)
{
  l->ops->worker(l->ctx, i, v);
}

int live_agent_replaced(const struct live_agent *l, int local_rank)
{
  return l->workers[local_rank].replaced;
}

void live_agent_worker_env(const struct live_agent *l, int local_rank,
                           const char *dir, struct worker_env *we,
                           char *opt_in, size_t len)
{
  if (!l->env)
    return;
  we->live = true;
  we->live_store = l->store_addr;
  we->live_round_file = l->round_file;
  we->worker_restarts = l->workers[local_rank].replaced;
  snprintf(opt_in, len, "%s/%s", dir, LIVE_HANDSHAKE_OPT_IN);
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
bool live_agent_token_private_ok(const struct live_agent *l)
{
  return !l->env || l->fixed_nodes;
}

bool live_agent_replacing(const struct live_agent *l)
{
  return l->replace_pending > 0;
}

bool live_agent_rejoining(const struct live_agent *l)
{
  return l->rejoining;
}

bool live_agent_changing(const struct live_agent *l)
{
  return l->rejoining || l->pending_round_set;
}

bool live_agent_take_round(struct live_agent *l, struct rdzv_assignment *as)
{
  if (!l->pending_round_set)
    return false;
  *as = l->pending_round;
  l->pending_round_set = false;
  return true;
}

/* The first local worker that has not opted in, or NULL.  A
 * replacement counts as opted in: its predecessor was, and the same
 * program in the same environment opts in again (libpg's pg_init), so a
 * membership change or its own failure before it has is no reason to
 * restart everyone. */
static bool not_opted_in(const struct live_agent *l,
                         struct live_worker_view *w)
{
  char path[PATH_MAX];
  int i;

  for (i = 0; i < l->o->nproc; i++) {
    if (l->workers[i].replaced > 0)
      continue;

    view(l, i, w);
    snprintf(path, sizeof path, "%s/%s", w->dir ? w->dir : "",
             LIVE_HANDSHAKE_OPT_IN);
    if (!w->dir || !live_handshake_opted_in(path))
      return true;
  }
  return false;
}

/* Whether live recovery may keep the workers now: every local worker has
 * opted in.  Otherwise restart mode for this event, said once for the
 * job: a program that never opts in (a PyTorch script) is restarted at
 * every failure, and one that had not yet opted in (a membership change
 * just after a start) is live again once it has. */
static bool keeps_workers(struct live_agent *l)
{
  struct live_worker_view w;

  if (!l->replace)
    return false;
  if (!not_opted_in(l, &w))
    return true;
  if (!l->optin_said)
    say("worker %d (pid %d) did not opt in to live recovery: restarting "
        "the worker group instead", w.rank, (int)w.pid);
  l->optin_said = true;
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
  struct live_agent *l = t->data;
  struct live_worker_view w;
  char path[PATH_MAX];
  int i;

  if (l->ops->group(l->ctx) != LIVE_GROUP_RUNNING || !l->replace ||
      l->optin_said)
    return;
  for (i = 0; i < l->o->nproc; i++) {
    view(l, i, &w);
    snprintf(path, sizeof path, "%s/%s", w.dir ? w.dir : "",
             LIVE_HANDSHAKE_OPT_IN);
    if (l->workers[i].replaced > 0 ||
        (w.dir && live_handshake_opted_in(path)))
      return;           /* some did: decided at each event */
  }
  say("no worker opted in to live recovery within %g s of its start (a "
      "program without the handshake, such as a PyTorch script): this job "
      "is recovered by restarting the worker group, as with "
      "--recovery=restart", l->optin_window);
  l->optin_said = true;
}

void live_agent_workers_up(struct live_agent *l, uv_timer_t *t)
{
  if (!l->replace || l->optin_said)
    return;
  uv_timer_start(t, optin_window_over,
                 (uint64_t)(l->optin_window * 1000.0) + 1, 0);
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
static int finished_peer(const struct live_agent *l, int w)
{
  struct live_worker_view p;
  int i;

  for (i = 0; i < l->o->nproc; i++) {
    if (i == w)
      continue;
    view(l, i, &p);
    if (!p.running && p.pid > 0 && !l->workers[i].replace_pending)
      return i;
  }
  return -1;
}

/* Whether w is a replacement that has not joined the group: it has not
 * opted in yet, or libpg says it is still joining (its opt-in file's
 * second line, Note [opt in] in libpg/live/recover.c).  A file without that
 * line (a program that implements the handshake alone) never says so. */
static bool still_joining(const struct live_worker *lw,
                          const struct live_worker_view *w)
{
  char path[PATH_MAX], buf[64];
  FILE *f;
  size_t n;

  if (lw->replaced == 0 || !w->running || !w->dir)
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
void live_agent_worker_finished(struct live_agent *l, int done)
{
  struct live_worker_view d, w;
  int i;

  if (!l->replace)
    return;
  view(l, done, &d);
  for (i = 0; i < l->o->nproc; i++) {
    struct live_worker *lw = &l->workers[i];

    if (i == done || lw->stopped)
      continue;
    view(l, i, &w);
    if (!still_joining(lw, &w))
      continue;
    say("worker %d finished (exit 0) while worker %d's replacement was "
        "still joining: it never can; stopping it", d.rank, w.rank);
    lw->stopped = true;
    kill(-w.pid, SIGKILL);
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
enum live_failed live_agent_worker_failed(struct live_agent *l,
                                          int local_rank, int code)
{
  struct live_worker *lw = &l->workers[local_rank];
  struct live_worker_view w, d;
  char detail[256];
  int done;

  if (!keeps_workers(l))
    return LIVE_FAILED_NOT_TAKEN;
  view(l, local_rank, &w);
  if ((done = finished_peer(l, local_rank)) >= 0) {
    /* Note [finished job] */
    view(l, done, &d);
    say("worker %d failed after worker %d finished (exit 0): a replacement "
        "could not rejoin its peers; recovering as restart mode does",
        w.rank, d.rank);
    return LIVE_FAILED_NOT_TAKEN;
  }
  if (rdzv_rules_replacement_final(lw->replaced, l->o->max_restarts)) {
    say("worker %d has no replacement left (%d of --max_restarts %d used; "
        "live mode counts them per rank): the job fails", w.rank,
        lw->replaced, l->o->max_restarts);
    return LIVE_FAILED_NO_REPLACEMENT;
  }
  lw->replaced++;
  say("replacing worker %d alone (live recovery; replacement %d of %d of "
      "this rank)", w.rank, lw->replaced, l->o->max_restarts);
  snprintf(detail, sizeof detail, "rank=%d local_rank=%d pid=%d "
           "exitcode=%d worker_restarts=%d", w.rank, local_rank,
           (int)w.pid, code, lw->replaced);
  l->ops->event(l->ctx, "WORKER_REPLACED", detail);
  /* What is left of its process group goes with it. */
  l->ops->retire(l->ctx, local_rank);
  lw->replace_pending = true;
  l->replace_pending++;
  live_agent_start_replacements(l);
  return LIVE_FAILED_REPLACED;
}

/* The replacements whose worker's streams are closed now start. */
void live_agent_start_replacements(struct live_agent *l)
{
  struct live_worker_view w;
  int i;

  for (i = 0; l->replace_pending && i < l->o->nproc; i++) {
    struct live_worker *lw = &l->workers[i];

    if (!lw->replace_pending)
      continue;
    view(l, i, &w);
    if (!w.streams_closed)
      continue;
    lw->replace_pending = false;
    l->replace_pending--;
    if (l->ops->group(l->ctx) != LIVE_GROUP_RUNNING)
      continue;
    lw->stopped = false;
    l->ops->spawn(l->ctx, i);
    /* A peer finished while it waited to start (Note [finished job]). */
    view(l, i, &w);
    if (w.running && finished_peer(l, i) >= 0) {
      say("a worker finished before worker %d's replacement started: it "
          "could never join; stopping it", w.rank);
      lw->stopped = true;
      kill(-w.pid, SIGKILL);
    }
  }
}

/* Rewrites the node's round file for the current round. */
static void write_round(struct live_agent *l,
                        const struct rdzv_assignment *as)
{
  struct live_round r = { as->round, as->world_size, as->rank_offset,
                          l->o->nproc };
  int err = live_handshake_write_round(l->round_file, &r);

  if (err)
    say("cannot write the live round file %s: %s", l->round_file,
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
int live_agent_start_round(struct live_agent *l,
                           const struct rdzv_assignment *as,
                           const char *job_token, char *why, size_t len)
{
  char msg[512];
  int i, err, port = as->master_port + LIVE_STORE_PORT_OFFSET;

  for (i = 0; i < l->o->nproc; i++) {
    l->workers[i].replace_pending = false;
    l->workers[i].stopped = false;
  }
  l->replace_pending = 0;
  if (l->no_store[0] && as->group_world_size > 1) {
    /* Alone at first, in restart mode; now others came. */
    snprintf(why, len, "node rank 0 cannot serve the live store (%s): "
             "the job cannot run with --recovery=live", l->no_store);
    return -ENOENT;
  }
  if (!l->env)
    return 0;
  if (as->live_store[0]) {
    /* Note [live store in rdzvd]: the rendezvous serves it; node 0 is
     * no one special. */
    live_store_stop(l->store);
    l->store = NULL;
    l->store_token[0] = '\0';
    snprintf(l->store_addr, sizeof l->store_addr, "%s",
             as->live_store);
    write_round(l, as);
    return 0;
  }
  if (as->group_rank == 0 &&
      (!l->store || strcmp(l->store_token, job_token) != 0)) {
    live_store_stop(l->store);
    l->store = NULL;
    err = live_store_start(NULL, &port, job_token, &l->store, msg,
                           sizeof msg);
    if (err && as->group_world_size > 1) {
      /* Note [no live store]: the other nodes' workers have the live
       * variables already, and cannot run without the store. */
      snprintf(why, len, "node rank 0 cannot serve the live store (%s): "
               "the job cannot run with --recovery=live", msg);
      return err;
    }
    if (err) {
      say("cannot serve the live store (%s): live recovery is off, this "
          "node's workers run in restart mode", msg);
      snprintf(l->no_store, sizeof l->no_store, "%s", msg);
      l->env = false;
      l->replace = false;
      return 0;
    }
    snprintf(l->store_token, sizeof l->store_token, "%s",
             job_token);
  }
  snprintf(l->store_addr, sizeof l->store_addr, "%s:%d",
           as->master_addr, port);
  write_round(l, as);
  return 0;
}

/* The job needs a new round and live recovery keeps the workers: join
 * with them running.  False: restart mode. */
bool live_agent_rejoin(struct live_agent *l, const char *reason)
{
  if (l->rejoining)
    return true;        /* the join in flight serves this change too */
  if (!keeps_workers(l))
    return false;
  say("the job needs a new round (%s): re-joining with the workers "
      "running (live recovery)", reason);
  l->rejoining = true;
  l->ops->join(l->ctx);
  return true;
}

/* The round a live re-join asked for: the workers go on in it, and learn
 * it from the round file, unless what they hold changed (the master
 * endpoint: node 0 was lost; the restart count or the job token: the job
 * restarted); then they restart in it.  old is the round they run in,
 * job_token its token.  Returns false when the agent is not running them
 * any more. */
static bool go_on_in_round(struct live_agent *l,
                           const struct rdzv_assignment *as,
                           const struct rdzv_assignment *cur,
                           const char *job_token)
{
  char token[JOBTOKEN_HEX + 1], detail[128];
  struct rdzv_assignment old = *cur;
  bool guessable, master_moved;

  if (l->ops->group(l->ctx) != LIVE_GROUP_RUNNING)
    return false;
  if (jobtoken_make(l->o->token_secret, l->o->token_secret_len,
                    l->o->run_id, as, live_agent_token_private_ok(l),
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
      (as->group_world_size > 1 && strcmp(token, job_token) != 0)) {
    say("round %d moves the master endpoint or the live store, or "
        "restarts the job (master %s:%d, was %s:%d; live store %s, was %s; "
        "restart %d, was %d; or another job token): live recovery cannot "
        "keep the workers; restarting them",
        as->round, as->master_addr,
        as->master_port, old.master_addr, old.master_port,
        as->live_store[0] ? as->live_store : "node 0's",
        old.live_store[0] ? old.live_store : "node 0's",
        as->restart_count, old.restart_count);
    l->pending_round = *as;
    l->pending_round_set = true;
    l->ops->restart_in_round(l->ctx);
    return true;
  }
  l->ops->adopt_round(l->ctx, as);
  write_round(l, as);
  say("round %d: world %d on %d node%s, this node's ranks from %d; the "
      "workers go on (live recovery)", as->round, as->world_size,
      as->group_world_size, as->group_world_size == 1 ? "" : "s",
      as->rank_offset);
  snprintf(detail, sizeof detail, "world_size=%d group_rank=%d "
           "rank_offset=%d", as->world_size, as->group_rank,
           as->rank_offset);
  l->ops->event(l->ctx, "LIVE_ROUND", detail);
  return true;
}


bool live_agent_round(struct live_agent *l, const struct rdzv_assignment *as,
                      const struct rdzv_assignment *cur,
                      const char *job_token)
{
  if (!l->rejoining)
    return false;
  l->rejoining = false;
  if (go_on_in_round(l, as, cur, job_token))
    return true;
  if (l->ops->group(l->ctx) == LIVE_GROUP_STOPPING) {
    /* The group stops (a failure live recovery did not take): it
     * starts in this round once stopped. */
    l->pending_round = *as;
    l->pending_round_set = true;
    return true;
  }
  return false;
}
