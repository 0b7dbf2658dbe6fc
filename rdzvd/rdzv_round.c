/* rdzv_round.c -- a job's rounds: completing one (ranks, ROUND), its
 * last call, restarting into the next (RESTART), ending the job (CLOSED),
 * a node leaving or lost, and the round's barriers (BARRIER, LEAVE).
 * Part of the state machine (rdzv_state.h); its private types are in
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

#define MAX_BARRIERS 64               /* distinct barrier names per round */

/* May the first spare take a place in the round: now (gathering), or as
 * it completes? */
static bool spare_fits(const struct job *job, bool completing)
{
  struct rdzv_rules_job v = rdzv_state__rules_view(job);

  return completing ? rdzv_rules_spare_fits_at_completion(&v)
                    : rdzv_rules_spare_fits(&v);
}
/* How long a node of the job may stay silent: the window in which nodes
 * told to restart may still come back. */
static double keepalive_window(const struct job *job)
{
  return rdzv_rules_keepalive_window(job->conf.keepalive_interval,
                                      job->conf.keepalive_misses);
}
/* Note [live store in rdzvd]: the round's live store, served with its
 * job token; a failure leaves the round without one (serve said why). */
static void serve_live_store(struct rdzv_state *r, struct job *job,
                             struct rdzv_proto_round *rd)
{
  static const char digits[] = "0123456789abcdef";
  char token[2 * RDZV_PROTO_TOKEN_BYTES + 1];
  int port = 0;
  size_t i;

  for (i = 0; i < RDZV_PROTO_TOKEN_BYTES; i++) {
    token[2 * i] = digits[rd->job_token[i] >> 4];
    token[2 * i + 1] = digits[rd->job_token[i] & 15];
  }
  token[2 * i] = '\0';
  if (r->live.serve(r->live.ctx, job->id, token, &port) == 0 &&
      port > 0 && port <= 65535) {
    rd->live_store_port = port;
    job->live_served = true;
  }
}
/* Ranks (rdzv_rules_rank_cmp): previous participants keep their order,
 * newcomers follow in join order. */
static int rank_cmp(const void *a, const void *b)
{
  const struct node *x = *(struct node *const *)a;
  const struct node *y = *(struct node *const *)b;

  return rdzv_rules_rank_cmp(x->prev_rank, x->seq, y->prev_rank, y->seq);
}
/* Ranks the participants and sends each its ROUND: O(N log N), the only
 * place that sorts.  The round then runs. */
void rdzv_round_complete(struct rdzv_state *r, struct job *job,
                         double now)
{
  struct list_node *pos, *next;
  struct rdzv_proto_msg m;
  struct rdzv_proto_round *rd = &m.u.round;
  struct node *n, *master;
  size_t k = 0, i;
  int offset = 0;
  bool live;

  /* Places that nobody came back for go to the waiting list. */
  while (!list_empty(&job->spares) &&
         spare_fits(job, true))
    rdzv_state__node_set_state(job,
                               list_first(&job->spares, struct node, in_spares),
                               NS_PART, false);
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    if (n->state == NS_PART) {
      job->order[k++] = n;
    } else if (n->state == NS_IDLE) {
      rdzv_state__node_set_state(job, n, NS_IDLE, false);
      n->prev_rank = -1;
    }
  }
  if (!k)
    return;
  qsort(job->order, k, sizeof(*job->order), rank_cmp);
  job->world_size = 0;
  for (i = 0; i < k; i++)
    job->world_size += job->order[i]->nproc;  /* <= sum_nproc <= INT_MAX */
  master = job->order[0];
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_ROUND;
  rd->round = job->round;
  rd->restart_count = job->restart_count;
  rd->group_world_size = (int)k;
  rd->world_size = job->world_size;
  rdzv_state__copy_str(rd->master_addr, sizeof rd->master_addr,
                       rdzv_state__node_addr(master));
  rd->master_port = master->master_port;
  live = job->conf.live && r->live.serve;
  /* Note [live store in rdzvd]: a live job's token leaves the master
   * endpoint out, so that it stays when node 0 is lost (the workers keep
   * theirs); a restart still changes it. */
  if (rdzv_token_job(r->tokens, job->id, job->incarnation,
                     live ? "" : rd->master_addr, live ? 0 : rd->master_port,
                     job->restart_count, rd->job_token))
    memset(rd->job_token, 0, sizeof rd->job_token);
  if (live && !rdzv_proto_token_none(rd->job_token))
    serve_live_store(r, job, rd);
  /* Recorded before any ROUND goes out: from now on only this round's
   * tokens prove a running claim (Note [fresh tokens]). */
  job->issued_round = job->round;
  job->issued_restarts = job->restart_count;
  if (r->ledger.put) {
    struct rdzv_ledger_rec rec = { job->incarnation, job->round,
                                   job->restart_count };

    r->ledger.put(r->ledger.ctx, job->id, &rec);
  }
  for (i = 0; r->embedded_pid && i < k; i++) {
    if (job->order[i]->pid == r->embedded_pid &&
        strcmp(job->order[i]->host, r->embedded_host) == 0) {
      rd->embedded = true;
      rd->host_rank = (int)i;
      break;
    }
  }
  for (i = 0; i < k; i++) {
    n = job->order[i];
    n->rank = (int)i;
    timer_heap_clear(&r->heap, &n->t_join);
    rd->group_rank = (int)i;
    rd->rank_offset = offset;
    offset += n->nproc;
    if (rdzv_token_running(r->tokens, job->id, job->incarnation, n->host,
                           n->pid, rd, rd->token))
      memset(rd->token, 0, sizeof rd->token);
    rdzv_waiting_token_store(n, rd->token);
    n->token_gathering = false;
    rdzv_reply_send(&r->sink, n->c->conn, &m);
  }
  job->phase = PH_RUNNING;
  job->restarting = false;
  job->exit_passed = false;
  job->progress_dirty = false;
  rdzv_waiting_cancel(r, job, now);   /* ROUND answered their JOINs */
  if (job->cause)
    job->cause->held = false;
  timer_heap_clear(&r->heap, &job->t_last_call);
  timer_heap_clear(&r->heap, &job->t_progress);
  metrics_round_completed(r->metrics, now - job->round_started);
  rdzv_state__log(r, "job %s: round %d complete: %zu node%s, world size %d, "
                  "master %s:%d", job->id, job->round, k, k == 1 ? "" : "s",
                  job->world_size, rd->master_addr, rd->master_port);
}
/* Completes the gathering round, or starts or cancels its last call. */
static void decide(struct rdzv_state *r, struct job *job, double now)
{
  struct rdzv_rules_job v = rdzv_state__rules_view(job);

  if (job->rounds_spent)        /* closing: see rdzv_round_start */
    return;
  switch (rdzv_rules_gather(&v, keepalive_window(job))) {
  case RDZV_GATHER_COMPLETE:
    rdzv_round_complete(r, job, now);
    return;
  case RDZV_GATHER_LAST_CALL:
    if (job->phase == PH_LAST_CALL)
      return;
    job->phase = PH_LAST_CALL;
    job->deadline = now + rdzv_rules_last_call_wait(&v,
                                                    keepalive_window(job));
    timer_heap_set(&r->heap, &job->t_last_call, job->deadline);
    return;
  case RDZV_GATHER_WAIT:
    if (job->phase == PH_LAST_CALL) {
      job->phase = PH_GATHERING;
      timer_heap_clear(&r->heap, &job->t_last_call);
    }
    return;
  }
}
/* After any change to a gathering round: promote spares into free places,
 * then complete, start or cancel the last call.  Promoted nodes hear
 * WAITING, or ROUND if the round completes. */
void rdzv_round_recheck(struct rdzv_state *r, struct job *job, double now)
{
  size_t k = 0, i;
  struct node *n;

  if (!rdzv_state__gathering(job))
    return;
  while (!list_empty(&job->spares) &&
         spare_fits(job, false)) {
    job->order[k++] = n = list_first(&job->spares, struct node, in_spares);
    rdzv_state__node_set_state(job, n, NS_PART, false);
  }
  if (k)
    rdzv_waiting_progress(r, job, now);
  decide(r, job, now);
  for (i = 0; i < k && rdzv_state__gathering(job); i++)
    rdzv_waiting_send(r, job, job->order[i], now);
}
/* A new round: every participant of the ending one but `except` (who
 * knows already) gets RESTART with why; all of them are expected back. */
void rdzv_round_start(struct rdzv_state *r, struct job *job, double now,
                      const char *why, const struct node *except)
{
  struct list_node *pos, *next;
  char text[RDZV_PROTO_MAX_TEXT + 1], cancelled[RDZV_PROTO_MAX_TEXT + 1] = "";
  size_t len = 0;
  struct barrier *b;
  struct node *n;

  /* A closing job starts no round: what changed may end its wait for
   * reports (rdzv_state_tick, outside the caller's walk). */
  if (job->closing) {
    timer_heap_set(&r->heap, &job->t_last_call, now);
    return;
  }
  for (b = job->barriers; b; b = b->next)
    if (!b->done && len < sizeof cancelled)
      len += (size_t)snprintf(cancelled + len, sizeof cancelled - len,
                              "%s%s", len ? ", " : "", b->name);
  if (len)
    snprintf(text, sizeof text, "%s (cancels barrier %s)", why, cancelled);
  else
    rdzv_state__copy_str(text, sizeof text, why);
  /* Round numbers are spent (a job driven through 2^30 rounds, or
   * resumed near that): the restart goes on as any other, no round
   * completes (decide), and rdzv_state_tick closes the job, outside the
   * caller's walk, rather than send a round no peer may accept. */
  if (job->round < RDZV_PROTO_MAX_ROUND)
    job->round++;
  else
    job->rounds_spent = true;
  job->phase = PH_GATHERING;
  rdzv_state__ranks_clear(job);
  job->exit_passed = false;
  job->progress_dirty = false;
  job->progress_last = now;
  job->round_started = now;
  timer_heap_clear(&r->heap, &job->t_last_call);
  timer_heap_clear(&r->heap, &job->t_progress);
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    n->barrier = NULL;
    if (n->state != NS_PART)
      continue;
    n->prev_rank = n->rank;
    n->rank = -1;
    rdzv_state__node_set_state(job, n, NS_IDLE, true);
    if (n != except)
      rdzv_state__send_text_cause(r, n->c->conn, RDZV_PROTO_RESTART, 0,
                                  false, text, rdzv_failure_cause(job), job);
  }
  rdzv_state__barriers_free(job);
  job->restarting = job->n_outstanding + job->n_spares > 0;
  rdzv_state__log(r, "job %s: restart, new round %d (restart_count %d of %d): "
                  "%s", job->id, job->round, job->restart_count,
                  job->conf.max_restarts, text);
  rdzv_round_recheck(r, job, now);
  if (job->rounds_spent)
    timer_heap_set(&r->heap, &job->t_last_call, now);
}
/* Sends CLOSED to every node of the job and drops them; the job stays
 * close_timeout seconds so that late joiners learn it ended. */
void rdzv_round_end_job(struct rdzv_state *r, struct job *job, double now,
                        bool success, const char *text)
{
  job->phase = success ? PH_FINISHED : PH_CLOSED;
  job->closing = false;
  timer_heap_clear(&r->heap, &job->t_last_call);
  timer_heap_clear(&r->heap, &job->t_progress);
  timer_heap_clear(&r->heap, &job->t_owed);   /* CLOSED answers them */
  rdzv_state__log(r, "job %s: %s: %s", job->id,
                  success ? "finished" : "closed", text);
  while (!list_empty(&job->nodes)) {
    struct node *n = list_first(&job->nodes, struct node, in_job);
    void *conn = n->c->conn;

    rdzv_state__send_text_cause(r, conn, RDZV_PROTO_CLOSED, 0, success, text,
                                success ? NULL : rdzv_failure_cause(job), job);
    rdzv_state__node_free(r, n);
    rdzv_state__conn_drop(r, conn);
  }
  rdzv_state__barriers_free(job);
  timer_heap_set(&r->heap, &job->t_forget, now + job->conf.close_timeout);
}
void rdzv_round_barrier_check(struct rdzv_state *r, struct job *job,
                              struct barrier *b)
{
  struct list_node *pos, *next;
  struct rdzv_proto_msg m;
  struct node *n;

  if (b->done || b->count < job->n_part || job->rebuilding)
    return;
  b->done = true;
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_BARRIER_DONE;
  rdzv_state__copy_str(m.u.barrier.name, sizeof m.u.barrier.name, b->name);
  m.u.barrier.round = job->round;
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    if (n->barrier == b) {
      n->barrier = NULL;
      rdzv_reply_send(&r->sink, n->c->conn, &m);
    }
  }
  if (strcmp(b->name, "exit") == 0)
    job->exit_passed = true;
  rdzv_state__log(r, "job %s: round %d: barrier %s passed by %d nodes",
                  job->id, job->round, b->name, b->count);
}
/* Repairs the job after a node that needs no new round went away. */
static void job_settle(struct rdzv_state *r, struct job *job, double now,
                       bool was_part)
{
  struct barrier *b;

  if (rdzv_state__gathering(job)) {
    if (was_part)
      rdzv_waiting_progress(r, job, now);
    /* Nobody of the previous round is left to wait for: a fresh round
     * that waits for its last call again. */
    if (!job->n_part && !job->n_outstanding)
      job->restarting = false;
    rdzv_round_recheck(r, job, now);
  } else if (job->phase == PH_RUNNING && job->exit_passed) {
    if (!job->n_part) {
      rdzv_round_end_job(r, job, now, true,
                         "every node left after the exit barrier");
      return;
    }
    for (b = job->barriers; b; b = b->next)
      rdzv_round_barrier_check(r, job, b);
  }
  if (!job->n_nodes && !timer_heap_armed(&job->t_forget))
    timer_heap_set(&r->heap, &job->t_forget, now + job->conf.close_timeout);
}
/* Note [a lost node] (rdzv_rules.h): the job ends on its lost
 * participant (text: "<node> <why>") when the rules say so: CLOSED, with
 * the lost node's host and how it left, to every other node.  The caller
 * set job->lost_host and lost_why; they are cleared when it ends. */
static bool lost_ends(struct rdzv_state *r, struct job *job, const char *why,
                      const char *text, double now)
{
  char because[160], end[RDZV_PROTO_MAX_TEXT + 1];
  struct rdzv_rules_loss l = {
    .n_left = job->n_nodes,
    .min_nodes = job->conf.min_nodes,
    .restart_count = job->restart_count,
    .max_restarts = job->conf.max_restarts,
  };

  if (strcmp(why, "lost: connection closed") == 0)
    l.how = RDZV_LEFT_DIED;
  else if (strcmp(why, "lost: left before the exit barrier") == 0)
    l.how = RDZV_LEFT_GOODBYE;
  else if (strncmp(why, "lost: ", 6) == 0)
    l.how = RDZV_LEFT_SILENT;
  else
    return false;               /* not lost: superseded, refused */
  if (job->closing || !rdzv_rules_lost_ends(&l))
    return false;
  rdzv_rules_lost_why(&l, because, sizeof because);
  snprintf(end, sizeof end, "%s (%s): %s", text, rdzv_rules_leave_name(l.how),
           because);
  rdzv_round_end_job(r, job, now, false, end);
  job->lost_host = job->lost_why = NULL;
  return true;
}
/* Removes n (the caller logged why).  A participant of a running round
 * before its exit barrier is a lost node: the survivors start a new round
 * ("<node> <why>"); otherwise the job just settles. */
void rdzv_round_node_remove(struct rdzv_state *r, struct node *n, double now,
                            const char *why)
{
  struct job *job = n->job;
  bool was_part = n->state == NS_PART;
  char d[DESC_MAX], text[RDZV_PROTO_MAX_TEXT + 1];

  if (job->phase == PH_RUNNING && was_part && !job->exit_passed) {
    char host[RDZV_PROTO_MAX_ADDR + 1], how[RDZV_PROTO_MAX_ID + 1];

    rdzv_state__describe(n, d, sizeof d);
    snprintf(text, sizeof text, "%s %s", d, why);
    /* What the RESTART tells of the loss (a launcher that cannot bring
     * the node back ends the job on it: cdrun(1)). */
    rdzv_state__copy_str(host, sizeof host,
                         n->host[0] ? n->host : rdzv_state__node_addr(n));
    if (strcmp(why, "lost: connection closed") == 0)
      rdzv_state__copy_str(how, sizeof how, "its agent exited");
    else
      rdzv_state__copy_str(how, sizeof how,
                           strncmp(why, "lost: ", 6) == 0 ? why + 6 : why);
    rdzv_state__node_free(r, n);
    job->lost_host = host;
    job->lost_why = how;
    if (lost_ends(r, job, why, text, now))
      return;
    rdzv_round_start(r, job, now, text, NULL);
    job->lost_host = job->lost_why = NULL;
    if (!job->n_nodes)
      timer_heap_set(&r->heap, &job->t_forget, now + job->conf.close_timeout);
    return;
  }
  rdzv_state__node_free(r, n);
  job_settle(r, job, now, was_part);
}
void rdzv_round_node_lost(struct rdzv_state *r, struct node *n, double now,
                          const char *why)
{
  char d[DESC_MAX];

  rdzv_state__describe(n, d, sizeof d);
  rdzv_state__log(r, "job %s: %s %s", n->job->id, d, why);
  rdzv_round_node_remove(r, n, now, why);
}
/* BARRIER: a node waits in at most one barrier; a repeat is harmless, and
 * one for a barrier that already completed is answered at once. */
int rdzv_round_barrier(struct rdzv_state *r, struct node *n,
                       const struct rdzv_proto_barrier *m)
{
  struct job *job = n->job;
  void *conn = n->c->conn;
  struct barrier *b;
  struct rdzv_proto_msg done;

  if (job->phase != PH_RUNNING || n->state != NS_PART ||
      m->round != job->round)
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EINVAL,
                             "barrier %.*s for round %d: not a participant of "
                             "a running round %d",
                             RDZV_PROTO_MAX_ID, m->name, m->round, job->round);
  for (b = job->barriers; b; b = b->next)
    if (strncmp(b->name, m->name, sizeof b->name) == 0)
      break;
  if (!b) {
    if (job->n_barriers >= MAX_BARRIERS)
      return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_LIMIT, -ENOSPC,
                               "too "
                               "many barriers in round %d",
                               job->round);
    b = calloc(1, sizeof(*b));
    if (!b)
      return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_LIMIT, -ENOMEM,
                               "out of "
                               "memory");
    rdzv_state__copy_str(b->name, sizeof b->name, m->name);
    b->next = job->barriers;
    job->barriers = b;
    job->n_barriers++;
  }
  if (b->done) {                /* a repeat after it completed */
    memset(&done, 0, sizeof done);
    done.op = RDZV_PROTO_BARRIER_DONE;
    done.u.barrier = *m;
    rdzv_reply_send(&r->sink, conn, &done);
    return 0;
  }
  if (n->barrier == b)
    return 0;
  if (n->barrier)
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EINVAL, "already waiting in barrier %s",
                             n->barrier->name);
  n->barrier = b;
  b->count++;
  rdzv_round_barrier_check(r, job, b);
  return 0;
}
/* LEAVE: quiet after the exit barrier, a lost node before it. */
int rdzv_round_leave(struct rdzv_state *r, struct node *n, double now)
{
  struct job *job = n->job;
  char d[DESC_MAX];

  if (job->phase == PH_RUNNING && n->state == NS_PART && !job->exit_passed) {
    rdzv_round_node_lost(r, n, now, "lost: left before the exit barrier");
    return 0;
  }
  rdzv_state__describe(n, d, sizeof d);
  rdzv_state__log(r, "job %s: %s left", job->id, d);
  rdzv_round_node_remove(r, n, now, "left");
  return 0;
}
