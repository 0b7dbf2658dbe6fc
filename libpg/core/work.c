/* work.c -- the work queue: every operation runs in issue order on the
 * group's progress thread, or inline on the caller's thread when nothing
 * is queued (so a synchronous call costs no thread hand-off); work
 * handles (pg_work_*); streams and pg_group_start/pg_group_end. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "group.h"

/* Runs w and records the outcome; called with g->mu NOT held. */
static void execute(pg_group *g, struct pg_work *w)
{
  const struct pg__hooks *h;
  int failed, err;

  pthread_mutex_lock(&g->mu);
  failed = g->failed;
  pthread_mutex_unlock(&g->mu);
  err = failed ? pg__fail(PG_EPEERFAIL, "an earlier operation of this "
                          "group failed (%s): the group is unusable",
                          pg_err_name(failed))
               : pg__composed_run(g, w);
  err = pg__group_op_err(g, err);
  if (err == PG_ERR_PEER_LOST && (h = pg__hooks_of(g)))
    h->lost(g);
  pthread_mutex_lock(&g->mu);
  if (err && !w->why)
    w->why = strdup(pg_last_error());
  if (err && !g->failed && err != PG_EPEERFAIL)
    g->failed = err;
  w->result = err;
  w->done = true;
  g->busy = false;
  pthread_cond_broadcast(&g->finished);
  /* Wake the progress thread only when work waits: a wake-up per
   * synchronous op costs microseconds on a loaded machine. */
  if (g->head)
    pthread_cond_signal(&g->queued);
  pthread_mutex_unlock(&g->mu);
}

static void work_unref(struct pg_work *w)
{
  /* Called with g->mu held. */
  if (--w->refs == 0) {
    free(w->why);
    free(w);
  }
}

/* Hands a failed async op's sentence to the thread that asked. */
static int work_result(struct pg_work *w)
{
  if (w->result && w->why)
    pg__fail(w->result, "%s", w->why);
  return w->result;
}

void *pg__work_progress_main(void *arg)
{
  pg_group *g = arg;
  struct pg_work *w;

  pthread_mutex_lock(&g->mu);
  for (;;) {
    while (!g->stop && (!g->head || g->busy))
      pthread_cond_wait(&g->queued, &g->mu);
    if (!g->head && g->stop)
      break;
    if (!g->head || g->busy)
      continue;
    w = g->head;
    g->head = w->next;
    if (!g->head)
      g->tail = NULL;
    g->busy = true;
    pthread_mutex_unlock(&g->mu);
    execute(g, w);
    pthread_mutex_lock(&g->mu);
    work_unref(w);
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

/* Note [stream model] in nccl.c: the op is enqueued on the caller's
 * thread at once (no progress thread) and returns; a synchronous call
 * then makes the caller's stream wait for it on the device (a barrier:
 * the host), an async one hands its fence to the work handle. */
static int submit_stream(pg_group *g, const struct pg_work *proto,
                         pg_work **out)
{
  struct pg__comm *c = g->comm;
  struct pg_work local = *proto, *w;
  struct pg__fence *f;
  int err;

  pthread_mutex_lock(&g->mu);
  err = pg__composed_run(g, &local);
  f = err ? NULL : c->ops->take_fence(c);
  pthread_mutex_unlock(&g->mu);
  if (err)
    return pg__group_op_err(g, err);
  if (!out) {
    if (f)
      err = c->ops->fence_wait(f, proto->kind == W_BARRIER, -1);
    c->ops->fence_free(f);
    return pg__group_op_err(g, err);
  }
  w = calloc(1, sizeof *w);
  if (!w) {
    c->ops->fence_free(f);
    return pg__fail(-ENOMEM, "out of memory for a work handle");
  }
  *w = local;
  w->g = g;
  w->fence = f;
  w->refs = 1;
  w->done = f == NULL;  /* nothing was enqueued (count 0) */
  w->why = NULL;
  w->next = NULL;
  *out = w;
  return 0;
}

/* A point-to-point op between pg_group_start and pg_group_end on a CPU
 * backend: kept for the end. */
static int batch_add(pg_group *g, const struct pg_work *proto)
{
  struct pg_work *w;

  if (proto->kind != W_SEND && proto->kind != W_RECV)
    return pg__fail(-ENOTSUP, "only pg_send and pg_recv may be issued "
                    "between pg_group_start and pg_group_end on the CPU "
                    "backends");
  w = calloc(1, sizeof *w);
  if (!w)
    return pg__fail(-ENOMEM, "out of memory queueing a grouped operation");
  *w = *proto;
  w->g = g;
  w->next = NULL;
  if (g->batch_tail)
    g->batch_tail->next = w;
  else
    g->batch = w;
  g->batch_tail = w;
  return 0;
}

/* Queues w (async) or runs it (sync); w is filled but not yet owned. */
int pg__work_submit(pg_group *g, const struct pg_work *proto,
                    pg_work **out)
{
  const struct pg__hooks *h;
  struct pg_work *w;
  int err = pg__work_check(g, proto);

  if (err)
    return err;
  if ((h = pg__hooks_of(g)) && (err = h->refuse(g, NULL)))
    return err;
  if (g->grouping && out)
    return pg__fail(-EINVAL, "between pg_group_start and pg_group_end "
                    "issue pg_send/pg_recv (no work handles): "
                    "pg_group_end completes the group");
  if (g->grouping && !pg__group_stream_ordered(g))
    return batch_add(g, proto);
  if (pg__group_stream_ordered(g))
    return submit_stream(g, proto, out);
  if (!out) {
    /* Synchronous: run inline when the queue is empty and idle. */
    struct pg_work local = *proto;

    pthread_mutex_lock(&g->mu);
    while (g->head || g->busy)
      pthread_cond_wait(&g->finished, &g->mu);
    g->busy = true;
    pthread_mutex_unlock(&g->mu);
    local.g = g;
    local.refs = 1;
    local.why = NULL;
    execute(g, &local);
    free(local.why);
    return local.result;
  }
  w = malloc(sizeof *w);
  if (!w)
    return pg__fail(-ENOMEM, "out of memory queueing an operation");
  *w = *proto;
  w->why = NULL;
  w->g = g;
  w->refs = 2;
  w->next = NULL;
  w->done = false;
  pthread_mutex_lock(&g->mu);
  if (g->tail)
    g->tail->next = w;
  else
    g->head = w;
  g->tail = w;
  pthread_cond_signal(&g->queued);
  pthread_mutex_unlock(&g->mu);
  *out = w;
  return 0;
}

int pg_work_test(pg_work *w, bool *done)
{
  int r = 0;

  if (w->fence) {
    r = w->g->comm->ops->fence_query(w->fence);
    *done = r != 0;
    return r < 0 ? pg__group_op_err(w->g, r) : 0;
  }

  pthread_mutex_lock(&w->g->mu);
  *done = w->done;
  if (w->done)
    r = work_result(w);
  pthread_mutex_unlock(&w->g->mu);
  return r;
}

int pg_work_wait(pg_work *w, double timeout)
{
  pg_group *g = w->g;
  struct timespec ts;
  double until = timeout >= 0 ? pg__now() + timeout : 0;
  int r;

  if (w->fence)
    return pg__group_op_err(g, g->comm->ops->fence_wait(w->fence, false,
                                                         timeout));
  pthread_mutex_lock(&g->mu);
  while (!w->done) {
    if (timeout < 0) {
      pthread_cond_wait(&g->finished, &g->mu);
      continue;
    }
    if (pg__now() >= until)
      break;
    clock_gettime(CLOCK_REALTIME, &ts);
    {
      double left = until - pg__now(), s = (double)ts.tv_sec +
                    (double)ts.tv_nsec / 1e9 + (left > 0 ? left : 0);

      ts.tv_sec = (time_t)s;
      ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    }
    pthread_cond_timedwait(&g->finished, &g->mu, &ts);
  }
  r = w->done ? work_result(w) : -ETIMEDOUT;
  pthread_mutex_unlock(&g->mu);
  return r;
}

int pg_work_synchronize(pg_work *w, double timeout)
{
  if (w && w->fence)
    return pg__group_op_err(w->g, w->g->comm->ops->fence_wait(w->fence,
                                                               true,
                                                               timeout));
  return w ? pg_work_wait(w, timeout)
           : pg__fail(-EINVAL, "pg_work_synchronize: NULL work");
}

int pg_set_stream(pg_group *g, void *stream)
{
  if (!g)
    return pg__fail(-EINVAL, "pg_set_stream: NULL group");
  if (!pg__group_stream_ordered(g))
    return 0;  /* host memory: no streams */
  return g->comm->ops->set_stream(g->comm, stream);
}

int pg_group_start(pg_group *g)
{
  int err = 0;

  if (!g)
    return pg__fail(-EINVAL, "pg_group_start: NULL group");
  if (pg__group_stream_ordered(g)) {
    pthread_mutex_lock(&g->mu);
    err = g->comm->ops->group_start(g->comm);
    pthread_mutex_unlock(&g->mu);
  }
  if (!err)
    g->grouping++;
  return err;
}

/* CPU backends: every send first, then every receive, each in issue
 * order; a send waiting for room receives meanwhile (shm and TCP), so a
 * group's exchange cannot deadlock. */
static int run_batch(pg_group *g)
{
  struct pg_work *w, *next;
  int pass, err = 0, e;

  for (pass = 0; pass < 2; pass++)
    for (w = g->batch; w; w = w->next)
      if ((w->kind == W_SEND) == (pass == 0) && !err) {
        e = pg__work_submit(g, w, NULL);
        if (e && !err)
          err = e;
      }
  for (w = g->batch; w; w = next) {
    next = w->next;
    free(w);
  }
  g->batch = g->batch_tail = NULL;
  return err;
}

int pg_group_end(pg_group *g)
{
  struct pg__fence *f = NULL;
  int err;

  if (!g)
    return pg__fail(-EINVAL, "pg_group_end: NULL group");
  if (g->grouping == 0)
    return pg__fail(-EINVAL, "pg_group_end without pg_group_start");
  g->grouping--;
  if (!pg__group_stream_ordered(g))
    return g->grouping ? 0 : run_batch(g);
  pthread_mutex_lock(&g->mu);
  err = g->comm->ops->group_end(g->comm);
  if (!err)
    f = g->comm->ops->take_fence(g->comm);
  pthread_mutex_unlock(&g->mu);
  if (!err && f)
    err = g->comm->ops->fence_wait(f, false, -1);
  if (f)
    g->comm->ops->fence_free(f);
  return err;
}

void pg_work_free(pg_work *w)
{
  pg_group *g;

  if (!w)
    return;
  if (w->fence || (w->g && pg__group_stream_ordered(w->g))) {
    if (w->fence)
      w->g->comm->ops->fence_free(w->fence);
    free(w->why);
    free(w);
    return;
  }
  g = w->g;
  pthread_mutex_lock(&g->mu);
  work_unref(w);
  pthread_mutex_unlock(&g->mu);
}
