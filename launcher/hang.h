/* hang.h -- hang detection: the watchdogs that kill a worker which makes
 * no progress, and say why.
 *
 * Two watchdogs: torch's file timer (a worker sets a deadline through a
 * FIFO, filetimer.h) and the heartbeat (Note [heartbeat watchdog]).  The
 * agent owns the loop's timer and the workers; here is one worker's watch
 * and what happens when it runs out: the signal, the line on stderr, and
 * the reason kept for the worker's failure (failures.h). */
#ifndef CDRUN_HANG_H
#define CDRUN_HANG_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "filetimer.h"

/* One worker's watch, embedded in the agent's worker. */
struct hang_watch {
  char heartbeat_file[PATH_MAX + 16];   /* "" without a heartbeat */
  char killed_why[512];         /* why a watchdog killed it ("" if not):
                                   the failure's message */
  double started;               /* epoch seconds */
};

/* Arms h for a worker about to start at `now` whose folder is dir: what
 * an earlier worker's watch said is forgotten; with heartbeat, dir/
 * heartbeat is created (its mtime is the start of the worker's first
 * step; CDRUN_HEARTBEAT_FILE names it).  Returns 0 or a negative errno. */
int hang_watch_start(struct hang_watch *h, const char *dir, bool heartbeat,
                     double now);

/* Note [heartbeat watchdog]: checks the running worker pid (global rank
 * `rank`) at `now`.  When its heartbeat file was not touched for timeout
 * seconds (nor was it started within them), SIGKILLs it, says so, keeps
 * the reason in h->killed_why and returns -1; otherwise returns the
 * moment it would have been silent for timeout (epoch seconds), when it
 * is due to be checked again. */
double hang_heartbeat_check(struct hang_watch *h, pid_t pid, int rank,
                            double timeout, double now);

/* Torch's file timer t expired: its pid is the worker `worker_pid` (its
 * watch h, global rank `rank`) or a process of that worker's group.
 * Sends the timer's signal to t->pid and says why; when t->pid is the
 * worker itself, the reason is kept in h->killed_why.  h NULL: t->pid is
 * no worker of this agent; that is said, and nothing is sent. */
void hang_timer_expired(struct hang_watch *h, pid_t worker_pid, int rank,
                        const struct filetimer_request *t);

#endif
