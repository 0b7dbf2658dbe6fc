/* rdzv_local.c -- the single-node rendezvous back end. */
#include "rdzv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobtoken.h"
#include "rdzv_rules.h"
#include "say.h"
#include "static_barrier.h"

struct rdzv_local {
  struct rdzv base;            /* first: a struct rdzv * is one of these */
  struct rdzv_assignment next;
  uv_timer_t defer;            /* delivers results on the next loop turn */
  enum { PENDING_NONE, PENDING_ROUND, PENDING_BARRIER } pending;
  bool failure_counted;        /* report_failure counted this round's */
  int max_restarts;
  /* Note [static barrier]: several nodes meet once before the first
   * round; meet.timeout_s 0: they do not. */
  struct static_barrier_opts meet;
  char master_addr[256];
  struct static_barrier *barrier;
};

/* The next round's assignment, handed to the agent. */
static void round_done(struct rdzv_local *l)
{
  l->next.failure_final = rdzv_rules_failure_final(l->next.restart_count,
                                                   l->max_restarts);
  l->base.cb.on_round(l->base.cb.ctx, &l->next);
}

static void deliver(uv_timer_t *t)
{
  struct rdzv_local *l = t->data;
  int what = l->pending;

  l->pending = PENDING_NONE;
  if (what == PENDING_ROUND)
    round_done(l);
  else if (what == PENDING_BARRIER)
    l->base.cb.on_barrier(l->base.cb.ctx, 0);
}

static void met(void *ctx, int err, const char *message)
{
  struct rdzv_local *l = ctx;

  if (err) {
    static_barrier_close(l->barrier);
    l->barrier = NULL;
    l->base.cb.on_error(l->base.cb.ctx, err, message);
    return;
  }
  l->pending = PENDING_NONE;
  /* Note [static run nonce]: node 0's, the same on every node. */
  snprintf(l->next.run_nonce, sizeof l->next.run_nonce, "%s",
           static_barrier_run_nonce(l->barrier));
  round_done(l);
}

/* Note [static watch] (static_barrier.h), Note [a lost node]
 * (rdzvd/rdzv_rules.h): a node of the job left.  The static back end's
 * nodes are fixed: nothing brings one back, but a silent link may come
 * back by itself.  True: the job ends on it. */
static bool peer_lost(void *ctx, int rank, const char *who,
                      enum rdzv_rules_leave how)
{
  struct rdzv_local *l = ctx;
  struct rdzv_rules_loss loss = {
    .how = how,
    .n_left = l->meet.nnodes - 1,
    .min_nodes = l->meet.nnodes,
    .restart_count = l->next.restart_count,
    .max_restarts = l->max_restarts,
    .nodes_fixed = true,
  };
  char because[160], msg[512];

  if (!rdzv_rules_lost_ends(&loss)) {
    say("static rendezvous: node rank %d (%s): %s for its keepalive "
        "window; the job goes on (a restart is left, and it may be back)",
        rank, who, rdzv_rules_leave_name(how));
    return false;
  }
  rdzv_rules_lost_why(&loss, because, sizeof because);
  /* A token is host:pid<N>:<random>; node 0 is named by its address. */
  snprintf(l->base.lost_host, sizeof l->base.lost_host, "%.*s",
           (int)strcspn(who, ":"), who);
  snprintf(l->base.lost_why, sizeof l->base.lost_why, "%s",
           how == RDZV_LEFT_GOODBYE ? "left before the exit barrier"
           : how == RDZV_LEFT_DIED  ? "its agent exited"
                                    : "its link went silent");
  l->base.ended_lost = true;
  snprintf(msg, sizeof msg, "static rendezvous: node rank %d (%s) left "
           "(%s): %s", rank, who, rdzv_rules_leave_name(how), because);
  l->base.cb.on_error(l->base.cb.ctx, UV_ECONNRESET, msg);
  return true;
}

static int local_join(struct rdzv *r, enum rdzv_join_reason why)
{
  struct rdzv_local *l = (struct rdzv_local *)r;

  if (l->pending != PENDING_NONE)
    return -EBUSY;
  if (why == RDZV_JOIN_FIRST && l->meet.timeout_s > 0 &&
      l->meet.nnodes > 1) {
    int err = static_barrier_start(r->loop, &l->meet, met, peer_lost, l,
                                   &l->barrier);

    if (err == 0)
      l->pending = PENDING_ROUND;
    return err;
  }
  if (why != RDZV_JOIN_FIRST)
    l->next.round++;
  if (why == RDZV_JOIN_FAILURE && !l->failure_counted)
    l->next.restart_count++;
  l->failure_counted = false;
  l->pending = PENDING_ROUND;
  return uv_timer_start(&l->defer, deliver, 0, 0);
}

static int local_report_failure(struct rdzv *r, bool final,
                                const char *message)
{
  struct rdzv_local *l = (struct rdzv_local *)r;

  (void)message;
  if (!final && !l->failure_counted) {
    l->next.restart_count++;
    l->failure_counted = true;
  }
  return 0;
}

static int local_exit_barrier(struct rdzv *r)
{
  struct rdzv_local *l = (struct rdzv_local *)r;

  if (l->pending != PENDING_NONE)
    return -EBUSY;
  /* No exit barrier across static nodes: this one leaves, and says its
   * workers succeeded (Note [static watch]). */
  static_barrier_leave(l->barrier, true);
  l->pending = PENDING_BARRIER;
  return uv_timer_start(&l->defer, deliver, 0, 0);
}

static void free_on_close(uv_handle_t *h)
{
  free(h->data);
}

static void local_destroy(struct rdzv *r)
{
  struct rdzv_local *l = (struct rdzv_local *)r;

  static_barrier_leave(l->barrier, false);    /* a no-op after "done" */
  static_barrier_close(l->barrier);
  l->barrier = NULL;
  uv_timer_stop(&l->defer);
  uv_close((uv_handle_t *)&l->defer, free_on_close);
}

static const struct rdzv_ops local_ops = {
  "static", local_join, local_report_failure, local_exit_barrier,
  local_destroy, true,
};

int rdzv_local_create(uv_loop_t *loop, int node_rank, int nnodes, int nproc,
                      int max_restarts, const char *master_addr,
                      int master_port, double meet_timeout,
                      double keepalive_interval, int keepalive_misses,
                      const struct rdzv_callbacks *cb, struct rdzv **out)
{
  struct rdzv_local *l = calloc(1, sizeof *l);
  int err;

  if (!l)
    return -ENOMEM;
  l->base.ops = &local_ops;
  l->base.cb = *cb;
  l->base.loop = loop;
  l->max_restarts = max_restarts;
  /* Static jobs assume every node runs nproc workers, as torchrun's
   * static back end does when ranks are derived from node_rank. */
  l->next.group_rank = node_rank;
  l->next.group_world_size = nnodes;
  l->next.rank_offset = node_rank * nproc;
  l->next.world_size = nnodes * nproc;
  snprintf(l->next.master_addr, sizeof l->next.master_addr, "%s",
           master_addr);
  l->next.master_port = master_port;
  snprintf(l->master_addr, sizeof l->master_addr, "%s", master_addr);
  l->meet.master_addr = l->master_addr;
  l->meet.port = master_port;
  l->meet.node_rank = node_rank;
  l->meet.nnodes = nnodes;
  l->meet.nproc = nproc;
  l->meet.timeout_s = meet_timeout;
  l->meet.keepalive_interval = keepalive_interval;
  l->meet.keepalive_misses = keepalive_misses;
  /* Note [static run nonce]: one node has no one to agree with: its
   * own.  Several nodes take node 0's when they meet (met). */
  if (nnodes == 1)
    jobtoken_run_nonce(l->next.run_nonce);
  err = uv_timer_init(loop, &l->defer);
  if (err) {
    free(l);
    return err;
  }
  l->defer.data = l;
  *out = &l->base;
  return 0;
}
