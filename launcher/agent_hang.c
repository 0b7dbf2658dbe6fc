/* agent_hang.c -- the agent's side of hang detection (hang.h): torch's
 * file timer and the heartbeat watchdog, for the running workers. */
#include "agent_internal.h"

#include <unistd.h>

#include "filetimer.h"
#include "hang.h"

/* ---- hang detection ------------------------------------------------------ */

/* The running worker pid is, or whose process group holds pid. */
static struct worker *worker_of(struct agent *a, pid_t pid)
{
  pid_t pgid = getpgid(pid);
  int i;

  for (i = 0; i < a->o->nproc; i++) {
    struct worker *w = &a->workers[i];

    if (w->running && (w->pid == pid || w->pid == pgid))
      return w;
  }
  return NULL;
}

/* A file timer expired (filetimer.h): for a worker of ours only. */
void agent_on_timer_expired(void *ctx, const struct filetimer_request *t)
{
  struct agent *a = ctx;
  struct worker *w = worker_of(a, t->pid);

  if (w)
    hang_timer_expired(&w->hang, w->pid, w->rank, t);
  else
    hang_timer_expired(NULL, 0, 0, t);
}

/* Note [heartbeat watchdog] (hang.c): checks every running worker, then
 * sleeps until the earliest moment one could be silent for too long. */
void agent_heartbeat_check(uv_timer_t *t)
{
  struct agent *a = t->data;
  double timeout = a->o->heartbeat_timeout, now = agent_now_epoch(), next = -1;
  int i;

  if (a->state != ST_RUNNING)
    return;
  for (i = 0; i < a->o->nproc; i++) {
    struct worker *w = &a->workers[i];
    double due;

    if (!w->running || w->hang.killed_why[0])
      continue;
    due = hang_heartbeat_check(&w->hang, w->pid, w->rank, timeout, now);
    if (due >= 0 && (next < 0 || due < next))
      next = due;
  }
  if (next >= 0)
    uv_timer_start(&a->heartbeat, agent_heartbeat_check,
                   (uint64_t)((next - now) * 1000.0) + 1, 0);
}

