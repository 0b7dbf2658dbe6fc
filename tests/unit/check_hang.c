/* check_hang.c -- unit tests for launcher/hang.c: one worker's watch. */
#include "hang.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/check_hang.XXXXXX";

static void setup(void)
{
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
  char path[256];

  snprintf(path, sizeof path, "%s/heartbeat", tmpdir);
  unlink(path);
  rmdir(tmpdir);
  memcpy(tmpdir + strlen(tmpdir) - 6, "XXXXXX", 6);
}

/* A child that waits to be killed, with the default dispositions
 * (Check's runner handles SIGTERM by killing the test's group); it says
 * through a pipe when it has them. */
static pid_t start_sleeper(void)
{
  int p[2];
  char c;
  pid_t pid;

  ck_assert_int_eq(pipe(p), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGUSR1, SIG_DFL);
    if (write(p[1], "r", 1) != 1)
      _exit(1);
    for (;;)
      pause();
  }
  close(p[1]);
  ck_assert_int_eq(read(p[0], &c, 1), 1);
  close(p[0]);
  return pid;
}

/* The signal that ended pid (reaped here). */
static int reap_signal(pid_t pid)
{
  int status;

  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFSIGNALED(status));
  return WTERMSIG(status);
}

/* The heartbeat file's mtime, epoch seconds. */
static double mtime_of(const char *path)
{
  struct stat st;

  ck_assert_int_eq(stat(path, &st), 0);
  return (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
}

START_TEST(test_watch_start)
{
  struct hang_watch h;

  memset(&h, 'x', sizeof h);
  ck_assert_int_eq(hang_watch_start(&h, tmpdir, false, 12.0), 0);
  ck_assert_str_eq(h.heartbeat_file, "");
  ck_assert_str_eq(h.killed_why, "");
  ck_assert(h.started == 12.0);
  ck_assert_int_eq(hang_watch_start(&h, tmpdir, true, 12.0), 0);
  ck_assert_ptr_nonnull(strstr(h.heartbeat_file, "/heartbeat"));
  ck_assert_int_eq(access(h.heartbeat_file, F_OK), 0);
  ck_assert_int_lt(hang_watch_start(&h, "/nonexistent/dir", true, 1.0), 0);
}
END_TEST

START_TEST(test_heartbeat_due_and_kill)
{
  struct hang_watch h;
  double touched, due;
  pid_t pid;

  ck_assert_int_eq(hang_watch_start(&h, tmpdir, true, 0.0), 0);
  touched = mtime_of(h.heartbeat_file);
  pid = start_sleeper();
  /* Touched within the timeout: due when it would be silent for it. */
  due = hang_heartbeat_check(&h, pid, 3, 10.0, touched + 5.0);
  ck_assert(due == touched + 10.0);
  ck_assert_str_eq(h.killed_why, "");
  /* Silent for the timeout: killed, and why is kept. */
  ck_assert(hang_heartbeat_check(&h, pid, 3, 10.0, touched + 10.0) < 0);
  ck_assert_ptr_nonnull(strstr(h.killed_why, "rank 3 made no progress"));
  ck_assert_int_eq(reap_signal(pid), SIGKILL);
}
END_TEST

START_TEST(test_heartbeat_start_counts)
{
  struct hang_watch h;
  pid_t pid = start_sleeper();
  double due;

  /* No file: the start time is the last sign of life. */
  ck_assert_int_eq(hang_watch_start(&h, tmpdir, false, 100.0), 0);
  due = hang_heartbeat_check(&h, pid, 0, 5.0, 102.0);
  kill(pid, SIGKILL);
  ck_assert_int_eq(reap_signal(pid), SIGKILL);
  ck_assert(due == 105.0);
}
END_TEST

START_TEST(test_timer_expired)
{
  struct hang_watch h;
  struct filetimer_request t;
  pid_t pid;

  memset(&t, 0, sizeof t);
  ck_assert_int_eq(hang_watch_start(&h, tmpdir, false, 0.0), 0);
  pid = start_sleeper();
  t.pid = pid;
  snprintf(t.scope_id, sizeof t.scope_id, "step");
  t.signal = SIGTERM;
  t.received = 100.0;
  t.expiration_time = 130.0;
  /* Not ours: nothing is sent (the signal would end it first). */
  hang_timer_expired(NULL, 0, 0, &t);
  kill(pid, SIGUSR1);
  ck_assert_int_eq(reap_signal(pid), SIGUSR1);
  /* A descendant of the worker: signalled, the worker's reason untouched. */
  pid = start_sleeper();
  t.pid = pid;
  hang_timer_expired(&h, pid + 1000000, 2, &t);
  ck_assert_int_eq(reap_signal(pid), SIGTERM);
  ck_assert_str_eq(h.killed_why, "");
  /* The worker itself: its reason is kept. */
  pid = start_sleeper();
  t.pid = pid;
  hang_timer_expired(&h, pid, 2, &t);
  ck_assert_int_eq(reap_signal(pid), SIGTERM);
  ck_assert_str_eq(h.killed_why, "rank 2 exceeded its 30 s deadline in "
                   "'step'");
}
END_TEST

static Suite *hang_suite(void)
{
  Suite *s = suite_create("hang");
  TCase *tc = tcase_create("watch");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_watch_start);
  tcase_add_test(tc, test_heartbeat_due_and_kill);
  tcase_add_test(tc, test_heartbeat_start_counts);
  tcase_add_test(tc, test_timer_expired);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(hang_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
