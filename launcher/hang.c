/* hang.c -- the watchdogs' side of one worker; see hang.h. */
#include "hang.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "say.h"
#include "signames.h"

int hang_watch_start(struct hang_watch *h, const char *dir, bool heartbeat,
                     double now)
{
  h->killed_why[0] = '\0';
  h->heartbeat_file[0] = '\0';
  if (heartbeat) {
    int fd;

    snprintf(h->heartbeat_file, sizeof h->heartbeat_file, "%s/heartbeat",
             dir);
    /* Created now: its mtime is the start of the worker's first step. */
    fd = open(h->heartbeat_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
              0644);
    if (fd < 0)
      return -errno;
    close(fd);
  }
  h->started = now;
  return 0;
}

/* Note [heartbeat watchdog]: with --worker_heartbeat_timeout=S each
 * worker has a heartbeat file (CDRUN_HEARTBEAT_FILE) whose mtime it bumps
 * every step (libpg's pg_heartbeat).  The timer is armed for the earliest
 * moment a worker could have been silent for S; then the files are
 * stat'ed, the silent ones killed, and the timer re-armed.  A worker that
 * touches its file keeps moving its own deadline, so a healthy group
 * costs one stat per worker per S seconds. */
double hang_heartbeat_check(struct hang_watch *h, pid_t pid, int rank,
                            double timeout, double now)
{
  struct stat st;
  double last = h->started;

  if (stat(h->heartbeat_file, &st) == 0) {
    double m = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;

    if (m > last)
      last = m;
  }
  if (now - last >= timeout) {
    snprintf(h->killed_why, sizeof h->killed_why, "rank %d made no "
             "progress for %.2g s (its heartbeat file was not touched; "
             "--worker_heartbeat_timeout=%g)", rank, now - last, timeout);
    say("%s; sending SIGKILL to pid %d", h->killed_why, (int)pid);
    kill(pid, SIGKILL);
    return -1;
  }
  return last + timeout;
}

/* " 30 s" for a deadline of about 30 s, "" when it is not known. */
static void format_deadline(double secs, char *buf, size_t len)
{
  if (!(secs >= 0.05))
    snprintf(buf, len, "%s", "");
  else if (secs >= 100)
    snprintf(buf, len, " %.0f s", secs);
  else
    snprintf(buf, len, " %.2g s", secs);
}

/* torch's FileTimerServer sends the timer's signal to its pid; we do so
 * only for our own workers and their descendants, and say why. */
void hang_timer_expired(struct hang_watch *h, pid_t worker_pid, int rank,
                        const struct filetimer_request *t)
{
  char msg[512], deadline[32], sig[16];

  if (!h) {
    say("file timer: '%s' of pid %d expired, but pid %d is no worker of "
        "this agent; ignored", t->scope_id, (int)t->pid, (int)t->pid);
    return;
  }
  format_deadline(t->expiration_time - t->received, deadline,
                  sizeof deadline);
  snprintf(msg, sizeof msg, "rank %d exceeded its%s deadline in '%s'",
           rank, deadline, t->scope_id);
  say("%s; sending %s to pid %d", msg, sig_name(t->signal, sig, sizeof sig),
      (int)t->pid);
  if (t->pid == worker_pid)
    snprintf(h->killed_why, sizeof h->killed_why, "%s", msg);
  if (kill(t->pid, t->signal) < 0 && errno != ESRCH)
    say("file timer: cannot signal pid %d: %s", (int)t->pid,
        strerror(errno));
}
