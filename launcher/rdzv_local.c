/* rdzv_local.c -- the single-node rendezvous back end. */
#include "rdzv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rdzv_local {
  struct rdzv base;            /* first: a struct rdzv * is one of these */
  struct rdzv_assignment next;
  uv_timer_t defer;            /* delivers results on the next loop turn */
  enum { PENDING_NONE, PENDING_ROUND, PENDING_BARRIER } pending;
  bool failure_counted;        /* report_failure counted this round's */
};

static void deliver(uv_timer_t *t)
{
  struct rdzv_local *l = t->data;
  int what = l->pending;

  l->pending = PENDING_NONE;
  if (what == PENDING_ROUND)
    l->base.cb.on_round(l->base.cb.ctx, &l->next);
  else if (what == PENDING_BARRIER)
    l->base.cb.on_barrier(l->base.cb.ctx, 0);
}

static int local_join(struct rdzv *r, enum rdzv_join_reason why)
{
  struct rdzv_local *l = (struct rdzv_local *)r;

  if (l->pending != PENDING_NONE)
    return -EBUSY;
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
  /* One node: nobody else to wait for. */
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

  uv_timer_stop(&l->defer);
  uv_close((uv_handle_t *)&l->defer, free_on_close);
}

static const struct rdzv_ops local_ops = {
  "static", local_join, local_report_failure, local_exit_barrier,
  local_destroy,
};

int rdzv_local_create(uv_loop_t *loop, int node_rank, int nnodes, int nproc,
                      const char *master_addr, int master_port,
                      const struct rdzv_callbacks *cb, struct rdzv **out)
{
  struct rdzv_local *l = calloc(1, sizeof *l);
  int err;

  if (!l)
    return -ENOMEM;
  l->base.ops = &local_ops;
  l->base.cb = *cb;
  l->base.loop = loop;
  /* Static jobs assume every node runs nproc workers, as torchrun's
   * static back end does when ranks are derived from node_rank. */
  l->next.group_rank = node_rank;
  l->next.group_world_size = nnodes;
  l->next.rank_offset = node_rank * nproc;
  l->next.world_size = nnodes * nproc;
  snprintf(l->next.master_addr, sizeof l->next.master_addr, "%s",
           master_addr);
  l->next.master_port = master_port;
  err = uv_timer_init(loop, &l->defer);
  if (err) {
    free(l);
    return err;
  }
  l->defer.data = l;
  *out = &l->base;
  return 0;
}
