/* rdzv_waiting.c -- WAITING: what a gathering node hears, and when. */
#include "rdzv_state_int.h"

#include <math.h>
#include <string.h>

#include "rdzv_reply.h"

#define container_of(p, type, member) \
  ((type *)(void *)((char *)(p) - offsetof(type, member)))

#define PROGRESS_PERIOD 1.0   /* seconds between WAITING updates */

/* Note [settled waiting]
 *
 * The WAITING that answers a JOIN is progress, not a promise: the JOIN
 * was taken either way, and its ROUND tells the node everything WAITING
 * would.  When a whole job joins at once (its first round under srun, or
 * every node re-joining after a RESTART), answering each JOIN at once
 * doubles the round's writes: N WAITINGs that are out of date before they
 * arrive, then N ROUNDs.  On loopback each write also pays the reader's
 * receive and wake-up; at 10,000 nodes that was half of rdzvd's time.
 *
 * So a JOIN that enters the gathering round is owed its WAITING: the owed
 * nodes of a job hear it once the job's JOINs have paused for
 * WAITING_SETTLE, and at the latest WAITING_MAX_DEFER after the first of
 * them; a round that completes first answers them with ROUND and nothing
 * else.  A node hears from the server well within any keepalive window
 * (at least 0.5 s, PROTOCOL.md §4.4), so nothing times out meanwhile.
 * Every other WAITING (a spare, a JOIN repeated, the progress updates) is
 * sent at once, as before. */
#define WAITING_SETTLE 0.010
#define WAITING_MAX_DEFER 0.250

void rdzv_waiting_token_store(struct node *n,
                              const unsigned char t[RDZV_PROTO_TOKEN_BYTES])
{
  memcpy(n->prev_token, n->token, RDZV_PROTO_TOKEN_BYTES);
  memcpy(n->token, t, RDZV_PROTO_TOKEN_BYTES);
}

/* n's credential for the round it gathers for, made anew only when what
 * it vouches for changed (a WAITING costs no MAC).  A MAC that fails
 * (libcrypto out of memory) leaves the node without one: it can still
 * run, it just cannot prove itself after a reconnect. */
static const unsigned char *token_gathering(const struct rdzv_state *r,
                                            struct node *n, int round,
                                            int restarts)
{
  unsigned char t[RDZV_PROTO_TOKEN_BYTES];

  if (!n->token_gathering || n->token_round != round ||
      n->token_restarts != restarts) {
    if (rdzv_token_gathering(r->tokens, n->job->id, n->job->incarnation,
                             n->host, n->pid, n->incarnation, round,
                             restarts, t))
      memset(t, 0, sizeof t);
    rdzv_waiting_token_store(n, t);
    n->token_gathering = true;
    n->token_round = round;
    n->token_restarts = restarts;
  }
  return n->token;
}

static void owed_unlink(struct node *n)
{
  if (n->owed) {
    list_remove(&n->in_owed);
    n->owed = false;
  }
}

void rdzv_waiting_send(const struct rdzv_state *r, const struct job *job,
                       struct node *n, double now)
{
  struct rdzv_proto_msg m;
  struct rdzv_proto_waiting *w = &m.u.waiting;

  owed_unlink(n);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_WAITING;
  /* The round it waits for: the next one when the job runs (none after
   * RDZV_PROTO_MAX_ROUND: the job closes when it would start). */
  w->round = job->round + (job->phase == PH_RUNNING &&
                           job->round < RDZV_PROTO_MAX_ROUND);
  w->present = job->n_part;
  w->min_nodes = job->conf.min_nodes;
  w->max_nodes = job->conf.max_nodes;
  w->deadline = rdzv_state__clamp_secs(n->join_at + n->join_timeout - now);
  w->last_call = job->phase == PH_LAST_CALL
                   ? rdzv_state__clamp_secs(job->deadline - now) : -1;
  w->restart_count = job->restart_count;
  memcpy(w->token, token_gathering(r, n, w->round, w->restart_count),
         RDZV_PROTO_TOKEN_BYTES);
  rdzv_reply_send(&r->sink, n->c->conn, &m);
}

/* When the owed WAITINGs go: the JOINs paused, or the first waited long
 * enough. */
static double owed_due(const struct job *job)
{
  return fmin(job->last_join + WAITING_SETTLE,
              job->owed_since + WAITING_MAX_DEFER);
}

void rdzv_waiting_owe(struct rdzv_state *r, struct job *job, struct node *n,
                      double now)
{
  if (list_empty(&job->owed))
    job->owed_since = now;
  job->last_join = now;
  if (!n->owed) {
    list_insert_tail(&job->owed, &n->in_owed);
    n->owed = true;
  }
  timer_heap_set(&r->heap, &job->t_owed, owed_due(job));
}

void rdzv_waiting_settled(struct rdzv_state *r, struct job *job, double now)
{
  struct list_node *pos, *next;
  struct node *n;

  /* Every owe re-arms the timer at owed_due: it fires only when due. */
  list_for_each_safe(pos, next, &job->owed) {
    n = list_entry(pos, struct node, in_owed);
    if (n->state == NS_SPARE ||
        (n->state == NS_PART && rdzv_state__gathering(job)))
      rdzv_waiting_send(r, job, n, now);
    else
      owed_unlink(n);
  }
}

void rdzv_waiting_cancel(struct rdzv_state *r, struct job *job, double now)
{
  struct list_node *pos, *next;
  struct node *n;

  timer_heap_clear(&r->heap, &job->t_owed);
  /* A spare hears no ROUND: it still gets its answer. */
  list_for_each_safe(pos, next, &job->owed) {
    n = list_entry(pos, struct node, in_owed);
    if (n->state == NS_SPARE)
      rdzv_waiting_send(r, job, n, now);
    else
      owed_unlink(n);
  }
}

void rdzv_waiting_forget(struct node *n)
{
  owed_unlink(n);
}

/* A participant count change while gathering: everyone hears of it at
 * most once per PROGRESS_PERIOD, from rdzv_state_tick. */
void rdzv_waiting_progress(struct rdzv_state *r, struct job *job, double now)
{
  job->progress_dirty = true;
  if (!timer_heap_armed(&job->t_progress))
    timer_heap_set(&r->heap, &job->t_progress,
                   fmax(now, job->progress_last + PROGRESS_PERIOD));
}

/* One WAITING per participant, at most once per PROGRESS_PERIOD. */
void rdzv_waiting_progress_timer(struct rdzv_state *r, struct job *job,
                                 double now)
{
  struct list_node *pos, *next;
  struct node *n;

  if (!rdzv_state__gathering(job) || !job->progress_dirty)
    return;
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    if (n->state == NS_PART)
      rdzv_waiting_send(r, job, n, now);
  }
  job->progress_last = now;
  job->progress_dirty = false;
}
