/* check_guardian.c -- unit tests for launcher/guardian.c (Note [no orphans]).
 *
 * Each test process is made a child subreaper, so processes orphaned by a
 * death (the grandchildren of a group, the guardian of a killed agent)
 * come back to it and their fate is read with waitpid.
 *
 * Nothing outlives a failed test (Check ends it with _exit() and SIGKILLs
 * its process group only): a test about to fail on a process that did not
 * die kills what it started first (CHECK_OR_CLEAN); group leaders forked
 * by the test die with it (PR_SET_PDEATHSIG); a guardian sees EOF when
 * its agent dies; and every helper process ends itself after HELPER_LIFE_S
 * whatever happens. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guardian.h"
#include "proc_track.h"

static void setup(void)
{
  memset(tracked, 0, sizeof tracked);
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  /* As cdrun's main does: a write to a dead guardian is -EPIPE. */
  signal(SIGPIPE, SIG_IGN);
}

static void write_full(int fd, const void *buf, size_t len)
{
  if (write(fd, buf, len) != (ssize_t)len)
    _exit(3);
}

static void read_full(int fd, void *buf, size_t len)
{
  size_t got = 0;
  ssize_t n;

  while (got < len) {
    n = read(fd, (char *)buf + got, len - got);
    if (n < 0 && errno == EINTR)
      continue;
    ck_assert_int_gt(n, 0);
    got += (size_t)n;
  }
}

/* How long a helper process lives at most, whatever becomes of the test. */
#define HELPER_LIFE_S 60

/* The start of every helper process.  Check's handlers for SIGTERM,
 * SIGINT and SIGALRM (inherited from the test) would signal the test's
 * process group: back to the defaults. */
static void helper_init(void)
{
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGALRM, SIG_DFL);
  alarm(HELPER_LIFE_S);
}

static void idle_forever(void)
{
  for (;;)
    pause();
}

/* Forks a process group: a leader and one grandchild in it, both idle.
 * close_fds (n of them) are closed in both, so neither holds a pipe the
 * test waits on.  tie: the leader dies with its parent (not for the agent
 * test, where that would do the guardian's job).  Returns the leader
 * (== pgid) and the grandchild in *gc, or -1; assertion-free so that it
 * can run in a forked helper. */
static pid_t make_group(const int *close_fds, int n, bool tie, pid_t *gc)
{
  pid_t parent = getpid(), leader, g = -1;
  int p[2];

  if (pipe2(p, O_CLOEXEC) < 0)
    return -1;
  leader = fork();
  if (leader < 0) {
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (leader == 0) {
    helper_init();
    if (tie && (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ||
                getppid() != parent))
      _exit(1);
    for (int i = 0; i < n; i++)
      close(close_fds[i]);
    close(p[0]);
    setpgid(0, 0);
    parent = getpid();
    g = fork();
    if (g == 0) {
      /* Dies with the leader, but of SIGUSR2: a SIGKILL means the whole
       * group was killed. */
      alarm(HELPER_LIFE_S);
      if (prctl(PR_SET_PDEATHSIG, SIGUSR2) < 0 || getppid() != parent)
        _exit(1);
      close(p[1]);
      idle_forever();
    }
    write_full(p[1], &g, sizeof g);
    close(p[1]);
    idle_forever();
  }
  setpgid(leader, leader);      /* either side may win; both mean it */
  close(p[1]);
  if (read(p[0], &g, sizeof g) != (ssize_t)sizeof g || g <= 0) {
    kill(leader, SIGKILL);
    waitpid(leader, NULL, 0);
    g = -1;
    leader = -1;
  }
  close(p[0]);
  *gc = g;
  return leader;
}

struct group {
  pid_t leader, gc;
};

static struct group new_group(void)
{
  struct group g;

  g.leader = make_group(NULL, 0, true, &g.gc);
  ck_assert_int_gt(g.leader, 0);
  track(g.leader);
  track(g.gc);
  ck_assert_int_eq(getpgid(g.leader), g.leader);
  ck_assert_int_eq(getpgid(g.gc), g.leader);
  return g;
}

/* The group is gone, both members SIGKILLed. */
static void expect_group_killed(struct group g)
{
  expect_killed_by(g.leader, SIGKILL);
  /* Reparented to us once its parent died. */
  expect_killed_by(g.gc, SIGKILL);
}

/* The group is alive and nobody sent it a SIGKILL: a SIGUSR1 of ours is
 * what ends both (a SIGKILL queued earlier would win). */
static void expect_group_alive_then_end(struct group g)
{
  ck_assert_int_eq(kill(-g.leader, SIGUSR1), 0);
  expect_killed_by(g.leader, SIGUSR1);
  expect_killed_by(g.gc, SIGUSR1);
}

static void start(struct guardian *g)
{
  memset(g, 0x55, sizeof *g);
  ck_assert_int_eq(guardian_start(g, NULL, NULL), 0);
  ck_assert_int_gt(g->pid, 0);
  ck_assert_int_ge(g->fd, 0);
  ck_assert_int_ne(fcntl(g->fd, F_GETFD) & FD_CLOEXEC, 0);
  track(g->pid);
}

/* A hex signal mask from /proc/<pid>/status, or 0 when unreadable. */
static unsigned long long proc_sigmask(pid_t pid, const char *field)
{
  char path[64], line[256];
  size_t flen = strlen(field);
  unsigned long long mask = 0;
  FILE *f;

  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  f = fopen(path, "r");
  if (!f)
    return 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
      mask = strtoull(line + flen + 1, NULL, 16);
      break;
    }
  fclose(f);
  return mask;
}

static unsigned long long sigbit(int sig)
{
  return 1ULL << (sig - 1);
}

/* Waits until the guardian has set itself up (it ignores signals once it
 * left our session), up to LIMIT_MS. */
static void wait_guardian_ready(pid_t pid)
{
  unsigned long long want = sigbit(SIGTERM) | sigbit(SIGINT) |
                            sigbit(SIGHUP);

  for (int waited = 0; waited < LIMIT_MS; waited += 5) {
    if ((proc_sigmask(pid, "SigIgn") & want) == want)
      return;
    sleep_ms(5);
  }
  CHECK_OR_CLEAN(false, "guardian %d never ignored SIGTERM/SIGINT/SIGHUP",
                 (int)pid);
}

/* ---- tests ----------------------------------------------------------- */

START_TEST(test_start_stop_empty)
{
  struct guardian g;
  pid_t gp, rc;
  int err;

  start(&g);
  gp = g.pid;
  guardian_stop(&g);
  ck_assert_int_eq(g.pid, 0);
  ck_assert_int_eq(g.fd, -1);
  untrack(gp);
  /* Reaped by guardian_stop. */
  rc = waitpid(gp, NULL, WNOHANG);
  err = errno;
  ck_assert_int_eq(rc, -1);
  ck_assert_int_eq(err, ECHILD);
  guardian_stop(&g);      /* idempotent */
  ck_assert_int_eq(g.pid, 0);
  ck_assert_int_eq(g.fd, -1);
  ck_assert_int_eq(guardian_watch(&g, 1), -EPIPE);
  ck_assert_int_eq(guardian_forget(&g, 1), -EPIPE);
}
END_TEST

START_TEST(test_stop_kills_group)
{
  struct group grp = new_group();
  struct guardian g;
  int st;

  start(&g);
  ck_assert_int_eq(guardian_watch(&g, grp.leader), 0);
  ck_assert_int_eq(waitpid(grp.leader, &st, WNOHANG), 0);
  untrack(g.pid);
  guardian_stop(&g);
  ck_assert_int_eq(g.pid, 0);
  expect_group_killed(grp);
}
END_TEST

START_TEST(test_forget)
{
  struct group a = new_group(), b = new_group(), c = new_group();
  struct guardian g;

  start(&g);
  ck_assert_int_eq(guardian_watch(&g, a.leader), 0);
  ck_assert_int_eq(guardian_watch(&g, b.leader), 0);
  ck_assert_int_eq(guardian_watch(&g, c.leader), 0);
  /* The first of three: the list is compacted, the others stay. */
  ck_assert_int_eq(guardian_forget(&g, a.leader), 0);
  /* Forgetting an unknown group is harmless. */
  ck_assert_int_eq(guardian_forget(&g, 999999), 0);
  untrack(g.pid);
  guardian_stop(&g);
  expect_group_killed(b);
  expect_group_killed(c);
  expect_group_alive_then_end(a);
}
END_TEST

START_TEST(test_forget_then_watch_again)
{
  struct group a = new_group(), b = new_group();
  struct guardian g;

  start(&g);
  ck_assert_int_eq(guardian_watch(&g, a.leader), 0);
  ck_assert_int_eq(guardian_watch(&g, b.leader), 0);
  ck_assert_int_eq(guardian_forget(&g, b.leader), 0);
  ck_assert_int_eq(guardian_forget(&g, a.leader), 0);
  ck_assert_int_eq(guardian_watch(&g, b.leader), 0);
  untrack(g.pid);
  guardian_stop(&g);
  expect_group_killed(b);
  expect_group_alive_then_end(a);
}
END_TEST

START_TEST(test_guardian_gone)
{
  struct guardian g;

  start(&g);
  ck_assert_int_eq(kill(g.pid, SIGKILL), 0);
  expect_killed_by(g.pid, SIGKILL);
  /* SIGPIPE is ignored here, as in cdrun. */
  ck_assert_int_eq(guardian_watch(&g, 12345), -EPIPE);
  g.pid = 0;              /* already reaped above */
  guardian_stop(&g);
  ck_assert_int_eq(g.fd, -1);
}
END_TEST

START_TEST(test_own_session_and_signals)
{
  struct group grp = new_group();
  struct guardian g;
  pid_t gp;
  int st;

  start(&g);
  gp = g.pid;
  wait_guardian_ready(gp);
  ck_assert_int_eq(getsid(gp), gp);
  ck_assert_int_eq(guardian_watch(&g, grp.leader), 0);
  /* Ctrl-C and friends sent straight to it while the agent lives. */
  ck_assert_int_eq(kill(gp, SIGTERM), 0);
  ck_assert_int_eq(kill(gp, SIGINT), 0);
  ck_assert_int_eq(kill(gp, SIGHUP), 0);
  ck_assert_int_eq(kill(gp, SIGQUIT), 0);
  ck_assert_int_eq(waitpid(gp, &st, WNOHANG), 0);
  ck_assert_int_eq(waitpid(grp.leader, &st, WNOHANG), 0);
  /* Still on duty: closing the pipe kills the group, then it exits 0 (a
   * fatal signal above would show as WIFSIGNALED here). */
  close(g.fd);
  g.fd = -1;
  expect_exit(gp, 0);
  g.pid = 0;
  expect_group_killed(grp);
}
END_TEST

START_TEST(test_holds_no_inherited_fd)
{
  struct guardian g;
  struct pollfd pfd;
  int p[2], saved;
  char b;

  /* A plain (inheritable) pipe as our stdout and at its own number, as a
   * shell pipeline waiting for EOF would give the agent. */
  ck_assert_int_eq(pipe(p), 0);
  saved = dup(1);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_eq(dup2(p[1], 1), 1);
  start(&g);
  ck_assert_int_eq(dup2(saved, 1), 1);
  close(saved);
  close(p[1]);
  /* EOF with the guardian alive: it kept no copy of the write end. */
  pfd.fd = p[0];
  pfd.events = POLLIN;
  ck_assert_int_eq(poll(&pfd, 1, LIMIT_MS), 1);
  ck_assert_int_eq(read(p[0], &b, 1), 0);
  ck_assert_int_eq(kill(g.pid, 0), 0);
  close(p[0]);
  untrack(g.pid);
  guardian_stop(&g);
}
END_TEST

/* The agent side of the SIGKILL test: starts a guardian, makes a group,
 * watches it, reports { guardian, leader, grandchild }, waits to die. */
static void agent_main(int wfd)
{
  struct guardian g;
  pid_t pids[3];

  helper_init();
  if (guardian_start(&g, NULL, NULL) != 0)
    _exit(2);
  {
    int fds[2] = { g.fd, wfd };

    pids[1] = make_group(fds, 2, false, &pids[2]);
  }
  if (pids[1] < 0 || guardian_watch(&g, pids[1]) != 0)
    _exit(2);
  pids[0] = g.pid;
  write_full(wfd, pids, sizeof pids);
  idle_forever();
}

static double epoch_now(void)
{
  struct timeval tv;

  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* Note [exit time]: the guardian notes when a watched worker exited,
 * however late the agent reaps it; forget clears the note. */
START_TEST(test_exit_time)
{
  struct guardian g;
  volatile double *child_at = mmap(NULL, sizeof(double),
                                   PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  double at = 0, reaped;
  int p[2], st, i;
  char c = 'x';
  pid_t pid;

  ck_assert_ptr_ne((void *)child_at, MAP_FAILED);
  ck_assert_int_eq(guardian_start(&g, NULL, NULL), 0);
  ck_assert_int_eq(pipe(p), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    guardian_watch(&g, getpid());
    if (read(p[0], &c, 1) != 1)
      _exit(1);
    *child_at = epoch_now();
    _exit(3);
  }
  ck_assert_int_eq(write(p[1], &c, 1), 1);
  /* The agent is late: the worker is a zombie while the note comes. */
  for (i = 0; i < 6000 && (at = guardian_exit_time(&g, pid)) <= 0; i++)
    usleep(5000);
  ck_assert(at > 0);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  reaped = epoch_now();
  ck_assert(at >= *child_at);
  ck_assert(at <= reaped);
  ck_assert(guardian_exit_time(&g, pid) == at);
  ck_assert_int_eq(guardian_forget(&g, pid), 0);
  for (i = 0; i < 6000 && guardian_exit_time(&g, pid) > 0; i++)
    usleep(5000);
  ck_assert(guardian_exit_time(&g, pid) == 0);
  ck_assert(guardian_exit_time(&g, 12345678) == 0);
  guardian_stop(&g);
  close(p[0]);
  close(p[1]);
}
END_TEST

START_TEST(test_agent_sigkill)
{
  pid_t agent, pids[3];
  struct group grp;
  int p[2];

  ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
  agent = fork();
  ck_assert_int_ge(agent, 0);
  if (agent == 0) {
    close(p[0]);
    agent_main(p[1]);
  }
  track(agent);
  close(p[1]);
  read_full(p[0], pids, sizeof pids);
  close(p[0]);
  track(pids[0]);
  track(pids[1]);
  track(pids[2]);
  grp.leader = pids[1];
  grp.gc = pids[2];
  ck_assert_int_eq(getpgid(grp.gc), grp.leader);
  ck_assert_int_eq(kill(grp.leader, 0), 0);

  ck_assert_int_eq(kill(agent, SIGKILL), 0);
  expect_killed_by(agent, SIGKILL);
  /* All three come back to us: the guardian saw EOF, killed the group
   * and exited normally. */
  expect_exit(pids[0], 0);
  expect_group_killed(grp);
}
END_TEST

static Suite *guardian_suite(void)
{
  Suite *s = suite_create("guardian");
  TCase *tc = tcase_create("guardian");

  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, test_start_stop_empty);
  tcase_add_test(tc, test_exit_time);
  tcase_add_test(tc, test_stop_kills_group);
  tcase_add_test(tc, test_forget);
  tcase_add_test(tc, test_forget_then_watch_again);
  tcase_add_test(tc, test_guardian_gone);
  tcase_add_test(tc, test_own_session_and_signals);
  tcase_add_test(tc, test_holds_no_inherited_fd);
  tcase_add_test(tc, test_agent_sigkill);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(guardian_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
