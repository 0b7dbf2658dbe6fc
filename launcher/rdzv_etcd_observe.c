/* rdzv_etcd_observe.c -- what the job's state says, to the agent's
 * callbacks (proto/ETCD.md §4): a completed round, the last call's timer
 * and progress line while gathering, the root cause and the closing wait,
 * the job's end.  rdzv_etcd.c feeds it from the watch; what crosses is in
 * rdzv_etcd_internal.h. */
#include "rdzv_etcd_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_rdzv_state.h"
#include "monotime.h"
#include "rdzv_rules.h"
#include "say.h"

/* How often a gathering agent says who is present while nothing changes. */
#define PROGRESS_EVERY_S 10.0

void rdzv_etcd_deliver_round(struct rdzv_etcd *e, int me)
{
  struct rdzv_assignment a;
  char master_id[sizeof e->st.token_master];
  const struct etcd_rdzv_node *master = NULL;
  int i, offset = 0, world = 0, k = 0;

  memset(&a, 0, sizeof a);
  for (i = 0; i < e->st.n; i++) {
    const struct etcd_rdzv_node *n = &e->st.nodes[i];

    if (n->st != ETCD_RDZV_PART)
      continue;
    k++;
    world += n->nproc;
    if (n->rank < e->st.nodes[me].rank)
      offset += n->nproc;
    if (n->rank == 0)
      master = n;
  }
  a.round = e->st.round;
  a.restart_count = e->st.restart_count;
  a.failure_final = etcd_rdzv_state_failure_final(&e->st);
  a.group_rank = e->st.nodes[me].rank;
  a.group_world_size = k;
  a.rank_offset = offset;
  a.world_size = world;
  snprintf(a.master_addr, sizeof a.master_addr, "%s",
           master && master->addr[0] ? master->addr : "127.0.0.1");
  a.master_port = master ? master->port : 0;
  /* Note [the job token on etcd]: as drawn for this round's master. */
  snprintf(master_id, sizeof master_id, "%s:%d", a.master_addr,
           a.master_port);
  if (strlen(e->st.token) == 64 &&
      strspn(e->st.token, "0123456789abcdef") == 64 &&
      e->st.token_restart == e->st.restart_count &&
      strcmp(e->st.token_master, master_id) == 0)
    snprintf(a.job_token, sizeof a.job_token, "%s", e->st.token);
  e->delivered_round = e->st.round;
  e->restart_told_round = e->st.round;
  e->want_join = false;
  e->last_present = -1;
  uv_timer_stop(&e->join_deadline);
  uv_timer_stop(&e->last_call);
  e->lc_armed_round = -1;
  e->base.cb.on_round(e->base.cb.ctx, &a);
}

static void last_call_fire(uv_timer_t *t)
{
  struct rdzv_etcd *e = t->data;

  e->last_call_round = e->lc_armed_round;
  rdzv_etcd_kick(e);
}

/* While this node waits: progress lines, and the local last-call timer. */
static void observe_gathering(struct rdzv_etcd *e)
{
  const struct etcd_rdzv_state *s = &e->st;
  double now = monotime_now();
  double window = rdzv_rules_keepalive_window(e->o.conf.keepalive_interval,
                                              e->o.conf.keepalive_misses);
  int part, me = s->exists ? etcd_rdzv_state_find(s, e->session.id) : -1;

  etcd_rdzv_state_counts(s, &part, NULL, NULL);
  if (etcd_rdzv_state_last_call_due(s)) {
    if (e->lc_armed_round != s->round) {
      e->lc_armed_round = s->round;
      uv_timer_start(&e->last_call, last_call_fire,
                     (uint64_t)(etcd_rdzv_state_last_call_wait(s, window) * 1000), 0);
    }
  } else if (e->lc_armed_round >= 0) {
    uv_timer_stop(&e->last_call);
    e->lc_armed_round = -1;
  }
  /* Words only about a state that has this node's join in it: before,
   * a node that just restarted would read "0 present" in the round it is
   * about to enter, or "round R is full" in the round its own workers
   * just failed (its report is not in yet). */
  if (me < 0 || (s->phase == ETCD_RDZV_GATHERING &&
                 s->nodes[me].st != ETCD_RDZV_PART) ||
      (s->phase == ETCD_RDZV_RUNNING && s->nodes[me].st != ETCD_RDZV_SPARE))
    return;
  if (part == e->last_present && now - e->last_progress < PROGRESS_EVERY_S)
    return;
  e->last_present = part;
  e->last_progress = now;
  if (s->phase == ETCD_RDZV_RUNNING)
    say("rendezvous '%s': round %d is full (%d of at most %d nodes): "
        "waiting for a place; join timeout in %.0f s", e->id, s->round,
        part, s->conf.max_nodes,
        fmax(0, e->join_started + e->o.conf.join_timeout - now));
  else if (etcd_rdzv_state_last_call_due(s))
    say("rendezvous '%s' round %d: %d node%s present (min %d, max %d); "
        "starting in %.1f s unless more join", e->id, s->round, part,
        part == 1 ? "" : "s", s->conf.min_nodes, s->conf.max_nodes,
        etcd_rdzv_state_last_call_wait(s, window));
  else
    say("rendezvous '%s' round %d: waiting for nodes: %d present, at "
        "least %d needed (max %d); join timeout in %.0f s", e->id,
        s->round, part, s->conf.min_nodes,
        s->conf.max_nodes,
        fmax(0, e->join_started + e->o.conf.join_timeout - now));
}

/* Note [root cause]: the job's root cause, as the state names it. */
static void take_cause(struct rdzv_etcd *e)
{
  const struct rdzv_proto_cause *in = &e->st.cause;
  struct rdzv_cause *out = &e->base.job_cause;

  if (!e->st.cause_held || in->exited_at <= 0)
    return;
  out->exited_at = in->exited_at;
  out->rank = in->rank;
  out->local_rank = in->local_rank;
  out->exitcode = in->exitcode;
  out->pid = (long)in->pid;
  snprintf(out->host, sizeof out->host, "%s", in->host);
}

static void close_wait_fire(uv_timer_t *t)
{
  struct rdzv_etcd *e = t->data;

  e->close_wait_round = e->cw_armed_round;
  rdzv_etcd_kick(e);
}

/* A closing round waits for the other participants' reports for one
 * lease TTL (the keepalive window) from when this agent saw it; the first
 * agent whose wait ends closes it. */
static void observe_closing(struct rdzv_etcd *e)
{
  const struct etcd_rdzv_state *s = &e->st;

  if (s->exists && s->closing && s->phase == ETCD_RDZV_RUNNING) {
    if (e->cw_armed_round != s->round) {
      e->cw_armed_round = s->round;
      uv_timer_start(&e->close_wait, close_wait_fire,
                     (uint64_t)e->session.ttl * 1000, 0);
    }
  } else if (e->cw_armed_round >= 0) {
    uv_timer_stop(&e->close_wait);
    e->cw_armed_round = -1;
    e->close_wait_round = -1;
  }
}

void rdzv_etcd_observe(struct rdzv_etcd *e)
{
  const struct etcd_rdzv_state *s = &e->st;
  int me;

  if (e->boot != B_READY || e->failed || e->destroyed)
    return;
  observe_closing(e);
  if (s->exists && s->phase == ETCD_RDZV_CLOSED && e->was_member) {
    take_cause(e);
    e->base.ended_lost = s->ended_lost;     /* Note [a lost node] */
    rdzv_etcd_give_up(e, UV_ECANCELED, "the job '%s' was closed: %s", e->id,
                      s->why);
    return;
  }
  me = s->exists ? etcd_rdzv_state_find(s, e->session.id) : -1;
  /* Note [the job's lease]: renewed by every node listed. */
  etcd_session_also(&e->session, me >= 0 ? s->lease : NULL);
  if (s->exists && s->phase == ETCD_RDZV_FINISHED && e->was_member) {
    rdzv_etcd_give_up(e, 0, "the job '%s' finished: %s", e->id, s->why);
    return;
  }
  if (me < 0) {
    if (e->was_member && e->view_rev >= e->st_mod)
      rdzv_etcd_give_up(e, UV_ECONNRESET, "rendezvous '%s': the other nodes "
                        "removed this one from the job (its etcd lease "
                        "expired?)", e->id);
    return;
  }
  e->was_member = true;
  if (s->phase == ETCD_RDZV_RUNNING && s->nodes[me].st == ETCD_RDZV_PART &&
      e->want_join && s->round != e->delivered_round) {
    rdzv_etcd_deliver_round(e, me);
    return;
  }
  if (e->delivered_round >= 0 && s->round > e->restart_told_round &&
      !e->want_join) {
    e->restart_told_round = s->round;
    e->barrier_round = -1;
    /* A round after this agent closed its alive-deletes watch (the exit
     * barrier passed): it must know the helper again. */
    if (!e->full_view && !e->alive_watch)
      e->want_resync = true;
    take_cause(e);
    e->base.cb.on_restart(e->base.cb.ctx, s->why);
    return;
  }
  if (e->barrier_round >= 0 && e->barrier_written &&
      s->round == e->barrier_round && s->phase == ETCD_RDZV_RUNNING &&
      s->exit_passed) {
    e->barrier_round = -1;
    /* Note [leaving a finished job]: a node that goes now starts no
     * round, and this agent leaves next: the others' revokes, which come
     * at the same time, need not reach it (Note [what an agent
     * watches]). */
    if (e->alive_watch)
      etcd_watch_stop(e->alive_watch);
    e->alive_watch = NULL;
    e->base.cb.on_barrier(e->base.cb.ctx, 0);
    return;
  }
  if (e->want_join)
    observe_gathering(e);
}
