/* proc_track.h -- process bookkeeping for the unit suites that start real
 * processes (check_spawn, check_guardian): what a test started is tracked
 * by pid so a failing check kills it first (CHECK_OR_CLEAN), and children
 * (or orphans re-parented to the test, a child subreaper) are reaped with
 * a bounded wait.  Each including file gets its own copy of the list. */
#ifndef CHECK_PROC_TRACK_H
#define CHECK_PROC_TRACK_H

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

/* The bound of every wait for a process. */
#define LIMIT_MS 10000
#define MAX_TRACKED 32

static pid_t tracked[MAX_TRACKED];

static inline void track(pid_t pid)
{
  for (int i = 0; i < MAX_TRACKED; i++)
    if (tracked[i] == 0) {
      tracked[i] = pid;
      return;
    }
  ck_abort_msg("too many tracked processes");
}

static inline void untrack(pid_t pid)
{
  for (int i = 0; i < MAX_TRACKED; i++)
    if (tracked[i] == pid)
      tracked[i] = 0;
}

/* Workers lead their own sessions and groups, out of reach of Check's
 * killpg of the test's own group. */
static inline void kill_tracked(void)
{
  for (int i = 0; i < MAX_TRACKED; i++)
    if (tracked[i] > 0) {
      kill(-tracked[i], SIGKILL);
      kill(tracked[i], SIGKILL);
      tracked[i] = 0;
    }
}

static inline void sleep_ms(int ms)
{
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

/* Reaps pid (a child, or an orphan that will be reparented to us),
 * polling up to limit_ms.  Returns true with *status set once reaped. */
static inline bool reap_within(pid_t pid, int *status, int limit_ms)
{
  for (int waited = 0;; waited += 5) {
    pid_t r = waitpid(pid, status, WNOHANG);

    if (r == pid) {
      untrack(pid);
      return true;
    }
    if (r < 0 && errno != EINTR && errno != ECHILD)
      return false;
    if (waited >= limit_ms)
      return false;
    sleep_ms(5);
  }
}

/* ck_assert_msg, but first SIGKILLs whatever the test started. */
#define CHECK_OR_CLEAN(expr, ...)                       \
  do {                                                  \
    if (!(expr)) {                                      \
      kill_tracked();                                   \
      ck_abort_msg(__VA_ARGS__);                        \
    }                                                   \
  } while (0)

static inline void expect_killed_by(pid_t pid, int sig)
{
  int st = 0;

  CHECK_OR_CLEAN(reap_within(pid, &st, LIMIT_MS), "pid %d still alive",
                 (int)pid);
  CHECK_OR_CLEAN(WIFSIGNALED(st) && WTERMSIG(st) == sig,
                 "pid %d: status 0x%x, want signal %d", (int)pid, st,
                 sig);
}

static inline void expect_exit(pid_t pid, int code)
{
  int st = 0;

  CHECK_OR_CLEAN(reap_within(pid, &st, LIMIT_MS), "pid %d still alive",
                 (int)pid);
  CHECK_OR_CLEAN(WIFEXITED(st) && WEXITSTATUS(st) == code,
                 "pid %d: status 0x%x, want exit %d", (int)pid, st,
                 code);
}

#endif
