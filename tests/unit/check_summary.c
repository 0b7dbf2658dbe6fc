/* check_summary.c -- unit tests for torchrun's failure summary. */
#include "summary.h"

#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "signames.h"

#define EQ60 "============================================================\n"
#define DASH60 "------------------------------------------------------------\n"
#define HINT "To enable traceback see: " \
  "https://pytorch.org/docs/stable/elastic/errors.html"
#define T0 1714564800.0  /* 2024-05-01_12:00:00 UTC */

static void utc(void)
{
  setenv("TZ", "UTC", 1);
  tzset();
}

static char *capture(const char *target, const char *host,
                     const struct worker_failure *f, size_t n)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *fp = open_memstream(&buf, &len);

  ck_assert_ptr_nonnull(fp);
  summary_print(fp, target, host, f, n);
  ck_assert_int_eq(fclose(fp), 0);
  ck_assert_ptr_nonnull(buf);
  return buf;
}

/* Compares line by line so a failure names the first differing line. */
static void assert_lines(const char *got, const char *want)
{
  int line = 1;

  for (;;) {
    const char *gn = strchr(got, '\n'), *wn = strchr(want, '\n');
    size_t gl = gn ? (size_t)(gn - got) : strlen(got);
    size_t wl = wn ? (size_t)(wn - want) : strlen(want);

    ck_assert_msg(gl == wl && memcmp(got, want, gl) == 0,
                  "line %d:\n got: '%.*s'\nwant: '%.*s'", line,
                  (int)gl, got, (int)wl, want);
    ck_assert_msg(!gn == !wn, "line %d: newline mismatch", line);
    if (!gn)
      break;
    got = gn + 1;
    want = wn + 1;
    line++;
  }
}

START_TEST(signal_names)
{
  char buf[32];

  ck_assert_str_eq(sig_name(SIGKILL, buf, sizeof(buf)),
                   "SIGKILL");
  ck_assert_str_eq(sig_name(SIGTERM, buf, sizeof(buf)),
                   "SIGTERM");
  ck_assert_str_eq(sig_name(SIGSEGV, buf, sizeof(buf)),
                   "SIGSEGV");
  ck_assert_str_eq(sig_name(SIGABRT, buf, sizeof(buf)),
                   "SIGABRT");
  ck_assert_str_eq(sig_name(SIGBUS, buf, sizeof(buf)), "SIGBUS");
  ck_assert_str_eq(sig_name(SIGINT, buf, sizeof(buf)), "SIGINT");
  ck_assert_str_eq(sig_name(9, NULL, 0), "SIGKILL");
}
END_TEST

START_TEST(signal_names_unknown)
{
  char buf[32];
  const char *s = sig_name(200, buf, sizeof(buf));

  ck_assert_ptr_eq(s, buf);
  ck_assert_str_eq(s, "SIG200");
  ck_assert_str_eq(sig_name(-3, buf, sizeof(buf)), "SIG-3");
  ck_assert_str_eq(sig_name(0, buf, sizeof(buf)), "SIG0");
  ck_assert_str_eq(sig_name(200, NULL, 0), "SIG?");
  /* truncated but terminated */
  ck_assert_str_eq(sig_name(200, buf, 4), "SIG");
}
END_TEST

START_TEST(root_cause_smallest_time)
{
  struct worker_failure f[] = {
    { .rank = 0, .time = 30 }, { .rank = 1, .time = 10 },
    { .rank = 2, .time = 20 },
  };

  ck_assert_uint_eq(summary_root_cause(f, 3), 1);
  ck_assert_uint_eq(summary_root_cause(f, 1), 0);
  f[2].time = 9.5;
  ck_assert_uint_eq(summary_root_cause(f, 3), 2);
}
END_TEST

START_TEST(root_cause_ties_lowest_rank)
{
  struct worker_failure f[] = {
    { .rank = 7, .time = 10 }, { .rank = 3, .time = 10 },
    { .rank = 5, .time = 10 }, { .rank = 1, .time = 11 },
  };

  ck_assert_uint_eq(summary_root_cause(f, 4), 1);
  f[3].time = 10;
  ck_assert_uint_eq(summary_root_cause(f, 4), 3);
}
END_TEST

START_TEST(root_cause_nan_never_wins)
{
  struct worker_failure f[] = {
    { .rank = 0, .time = NAN }, { .rank = 1, .time = 50 },
  };

  ck_assert_uint_eq(summary_root_cause(f, 2), 1);
}
END_TEST

START_TEST(single_failure_layout)
{
  struct worker_failure f = {
    .local_rank = 3, .rank = 11, .pid = 4242, .exitcode = 1, .time = T0,
    .error_file = "/tmp/x/attempt_0/3/error.json",
    .message = "ValueError: boom",
  };
  char *got;

  utc();
  got = capture("./train", "node3.cluster", &f, 1);
  assert_lines(got,
               EQ60
               "./train FAILED\n"
               DASH60
               "Failures:\n"
               "  <NO_OTHER_FAILURES>\n"
               DASH60
               "Root Cause (first observed failure):\n"
               "[0]:\n"
               "  time      : 2024-05-01_12:00:00\n"
               "  host      : node3.cluster\n"
               "  rank      : 11 (local_rank: 3)\n"
               "  exitcode  : 1 (pid: 4242)\n"
               "  error_file: /tmp/x/attempt_0/3/error.json\n"
               "  traceback : ValueError: boom\n"
               EQ60);
  free(got);
}
END_TEST

/* Note [root cause]: the job's root cause from another node heads the
 * summary; this node's failures are all listed above it.  When the job's
 * root cause is one of this node's (rank and pid), it is printed as
 * usual, with its error file. */
START_TEST(job_root_cause_from_another_node)
{
  struct worker_failure mine[] = {
    { .local_rank = 1, .rank = 1, .pid = 301, .exitcode = 1,
      .time = T0 + 3, .message = "reset" },
    { .local_rank = 0, .rank = 0, .pid = 300, .exitcode = 104,
      .time = T0 + 2 },
  };
  struct worker_failure root = {
    .local_rank = 0, .rank = 2, .pid = 900, .exitcode = 28,
    .time = T0 + 1, .message = "on node b",
  };
  char *buf = NULL;
  size_t len = 0;
  FILE *fp;

  utc();
  fp = open_memstream(&buf, &len);
  summary_print_job(fp, "./train", "a", mine, 2, &root, "b");
  ck_assert_int_eq(fclose(fp), 0);
  assert_lines(buf,
               EQ60
               "./train FAILED\n"
               DASH60
               "Failures:\n"
               "[1]:\n"
               "  time      : 2024-05-01_12:00:02\n"
               "  host      : a\n"
               "  rank      : 0 (local_rank: 0)\n"
               "  exitcode  : 104 (pid: 300)\n"
               "  error_file: <N/A>\n"
               "  traceback : " HINT "\n"
               "[2]:\n"
               "  time      : 2024-05-01_12:00:03\n"
               "  host      : a\n"
               "  rank      : 1 (local_rank: 1)\n"
               "  exitcode  : 1 (pid: 301)\n"
               "  error_file: <N/A>\n"
               "  traceback : reset\n"
               DASH60
               "Root Cause (first observed failure):\n"
               "[0]:\n"
               "  time      : 2024-05-01_12:00:01\n"
               "  host      : b\n"
               "  rank      : 2 (local_rank: 0)\n"
               "  exitcode  : 28 (pid: 900)\n"
               "  error_file: <N/A>\n"
               "  traceback : on node b\n"
               EQ60);
  free(buf);
  /* Mine after all: the local one, printed from this node's record. */
  root.rank = 1;
  root.pid = 301;
  ck_assert_uint_eq(summary_local_index(mine, 2, &root), 0);
  buf = NULL;
  fp = open_memstream(&buf, &len);
  summary_print_job(fp, "./train", "a", mine, 2, &root, "b");
  ck_assert_int_eq(fclose(fp), 0);
  ck_assert_ptr_nonnull(strstr(buf, "Root Cause (first observed failure):\n"
                               "[0]:\n  time      : 2024-05-01_12:00:03\n"
                               "  host      : a\n"));
  free(buf);
  /* No local failure (a healthy node the job's end stopped). */
  root.rank = 2;
  root.pid = 900;
  buf = NULL;
  fp = open_memstream(&buf, &len);
  summary_print_job(fp, "./train", "a", NULL, 0, &root, "b");
  ck_assert_int_eq(fclose(fp), 0);
  ck_assert_ptr_nonnull(strstr(buf, "  <NO_OTHER_FAILURES>\n"));
  ck_assert_ptr_nonnull(strstr(buf, "  host      : b\n"));
  free(buf);
}
END_TEST

START_TEST(multiple_failures_in_time_order)
{
  struct worker_failure f[] = {
    { .local_rank = 0, .rank = 4, .pid = 100, .exitcode = 1,
      .time = T0 + 30, .error_file = "/e/0", .message = "late" },
    { .local_rank = 1, .rank = 5, .pid = 101, .exitcode = 2,
      .time = T0 + 1, .error_file = "/e/1", .message = "first" },
    { .local_rank = 2, .rank = 6, .pid = 102, .exitcode = 1,
      .time = T0 + 20, .error_file = "/e/2", .message = "middle" },
    /* same printed second as the root, but later: listed first */
    { .local_rank = 3, .rank = 7, .pid = 103, .exitcode = 1,
      .time = T0 + 1.5, .error_file = "/e/3", .message = "tie" },
  };
  char *got;

  utc();
  got = capture("train.py", "h", f, 4);
  assert_lines(got,
               EQ60
               "train.py FAILED\n"
               DASH60
               "Failures:\n"
               "[1]:\n"
               "  time      : 2024-05-01_12:00:01\n"
               "  host      : h\n"
               "  rank      : 7 (local_rank: 3)\n"
               "  exitcode  : 1 (pid: 103)\n"
               "  error_file: /e/3\n"
               "  traceback : tie\n"
               "[2]:\n"
               "  time      : 2024-05-01_12:00:20\n"
               "  host      : h\n"
               "  rank      : 6 (local_rank: 2)\n"
               "  exitcode  : 1 (pid: 102)\n"
               "  error_file: /e/2\n"
               "  traceback : middle\n"
               "[3]:\n"
               "  time      : 2024-05-01_12:00:30\n"
               "  host      : h\n"
               "  rank      : 4 (local_rank: 0)\n"
               "  exitcode  : 1 (pid: 100)\n"
               "  error_file: /e/0\n"
               "  traceback : late\n"
               DASH60
               "Root Cause (first observed failure):\n"
               "[0]:\n"
               "  time      : 2024-05-01_12:00:01\n"
               "  host      : h\n"
               "  rank      : 5 (local_rank: 1)\n"
               "  exitcode  : 2 (pid: 101)\n"
               "  error_file: /e/1\n"
               "  traceback : first\n"
               EQ60);
  free(got);
}
END_TEST

/* Equal times order by rank, and exact duplicates still all print. */
START_TEST(multiple_failures_equal_times)
{
  struct worker_failure f[] = {
    { .rank = 9, .pid = 9, .exitcode = 1, .time = T0 },
    { .rank = 2, .pid = 2, .exitcode = 1, .time = T0 },
    { .rank = 9, .pid = 8, .exitcode = 1, .time = T0 },
    { .rank = 4, .pid = 4, .exitcode = 1, .time = T0 },
  };
  const char *p;
  char *got;

  utc();
  got = capture("t", "h", f, 4);
  p = strstr(got, "[1]:\n");
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(strstr(p, "(pid: 4)"));
  p = strstr(p, "[2]:\n");
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(strstr(p, "(pid: 9)"));
  ck_assert(strstr(p, "(pid: 9)") < strstr(p, "[3]:\n"));
  p = strstr(p, "[3]:\n");
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(strstr(p, "(pid: 8)"));
  p = strstr(p, "[0]:\n");
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(strstr(p, "rank      : 2 (local_rank: 0)"));
  ck_assert_ptr_null(strstr(got, "[4]:"));
  ck_assert_ptr_null(strstr(got, "NO_OTHER_FAILURES"));
  free(got);
}
END_TEST

START_TEST(signal_without_error_file)
{
  struct worker_failure f = {
    .local_rank = 0, .rank = 0, .pid = 4242, .exitcode = -9, .time = T0,
    .error_file = "/tmp/x/attempt_0/0/error.json",
  };
  char *got;

  utc();
  got = capture("./train", "n", &f, 1);
  ck_assert_ptr_nonnull(strstr(got,
    "  exitcode  : -9 (SIGKILL) (pid: 4242)\n"
    "  error_file: <N/A>\n"
    "  traceback : Signal 9 (SIGKILL) received by PID 4242\n" EQ60));
  free(got);
}
END_TEST

START_TEST(signal_unknown_number)
{
  struct worker_failure f = { .pid = 7, .exitcode = -99, .time = T0 };
  char *got;

  got = capture("./train", "n", &f, 1);
  ck_assert_ptr_nonnull(strstr(got,
    "  traceback : Signal 99 (SIG99) received by PID 7\n"));
  free(got);
}
END_TEST

/* A worker killed after writing its error file: the file wins. */
START_TEST(signal_with_error_file_message)
{
  struct worker_failure f = {
    .pid = 5, .exitcode = -6, .time = T0, .error_file = "/e.json",
    .message = "RuntimeError: abort",
  };
  char *got;

  got = capture("./train", "n", &f, 1);
  ck_assert_ptr_nonnull(strstr(got,
    "  exitcode  : -6 (SIGABRT) (pid: 5)\n"
    "  error_file: /e.json\n"
    "  traceback : RuntimeError: abort\n"));
  ck_assert_ptr_null(strstr(got, "Signal"));
  free(got);
}
END_TEST

START_TEST(not_available_hint)
{
  struct worker_failure f[] = {
    { .rank = 1, .pid = 1, .exitcode = 1, .time = T0,
      .error_file = "/never/written.json" },
    { .rank = 2, .pid = 2, .exitcode = 3, .time = T0 + 1 },
  };
#define NA_BLOCK "  exitcode  : %d (pid: %d)\n" \
                 "  error_file: <N/A>\n" \
                 "  traceback : " HINT "\n"
  char want[256];
  char *got;

  got = capture("./train", "n", f, 2);
  snprintf(want, sizeof(want), NA_BLOCK, 1, 1);
  ck_assert_ptr_nonnull(strstr(got, want));
  snprintf(want, sizeof(want), NA_BLOCK, 3, 2);
  ck_assert_ptr_nonnull(strstr(got, want));
  ck_assert_ptr_null(strstr(got, "/never/written.json"));
  free(got);
#undef NA_BLOCK
}
END_TEST

START_TEST(multiline_traceback)
{
  struct worker_failure f = {
    .local_rank = 1, .rank = 1, .pid = 77, .exitcode = 1, .time = T0,
    .error_file = "/e.json", .message = "ValueError: boom",
    .traceback = "Traceback (most recent call last):\n"
                 "  File \"train.py\", line 3, in <module>\n"
                 "    main()\n"
                 "ValueError: boom\n",
  };
  char *got;

  utc();
  got = capture("train.py", "h", &f, 1);
  assert_lines(got,
               EQ60
               "train.py FAILED\n"
               DASH60
               "Failures:\n"
               "  <NO_OTHER_FAILURES>\n"
               DASH60
               "Root Cause (first observed failure):\n"
               "[0]:\n"
               "  time      : 2024-05-01_12:00:00\n"
               "  host      : h\n"
               "  rank      : 1 (local_rank: 1)\n"
               "  exitcode  : 1 (pid: 77)\n"
               "  error_file: /e.json\n"
               "  traceback : Traceback (most recent call last):\n"
               "    File \"train.py\", line 3, in <module>\n"
               "      main()\n"
               "  ValueError: boom\n"
               EQ60);
  free(got);
}
END_TEST

START_TEST(multiline_message_without_traceback)
{
  struct worker_failure f = {
    .pid = 1, .exitcode = 1, .time = T0, .error_file = "/e.json",
    .message = "first\nsecond", .traceback = "",
  };
  char *got;

  got = capture("t", "h", &f, 1);
  ck_assert_ptr_nonnull(strstr(got,
    "  traceback : first\n"
    "  second\n" EQ60));
  free(got);
}
END_TEST

START_TEST(time_truncates_fraction)
{
  struct worker_failure f = { .exitcode = 1, .time = T0 + 59.999 };
  char *got;

  utc();
  got = capture("t", "h", &f, 1);
  ck_assert_ptr_nonnull(strstr(got, "  time      : 2024-05-01_12:00:59\n"));
  free(got);
  f.time = NAN;
  got = capture("t", "h", &f, 1);
  ck_assert_ptr_nonnull(strstr(got, "  time      : <N/A>\n"));
  free(got);
}
END_TEST

START_TEST(time_is_local)
{
  struct worker_failure f = { .exitcode = 1, .time = T0 };
  char *got;

  setenv("TZ", "UTC-2", 1);  /* POSIX sign: two hours east */
  tzset();
  got = capture("t", "h", &f, 1);
  ck_assert_ptr_nonnull(strstr(got, "  time      : 2024-05-01_14:00:00\n"));
  free(got);
  utc();
}
END_TEST

START_TEST(nothing_to_print)
{
  struct worker_failure f = { .exitcode = 1 };
  char *got;

  got = capture("t", "h", &f, 0);
  ck_assert_str_eq(got, "");
  free(got);
  got = capture("t", "h", NULL, 3);
  ck_assert_str_eq(got, "");
  free(got);
  summary_print(NULL, "t", "h", &f, 1);
}
END_TEST

static Suite *summary_suite(void)
{
  Suite *s = suite_create("summary");
  TCase *tc = tcase_create("summary");

  tcase_add_test(tc, signal_names);
  tcase_add_test(tc, signal_names_unknown);
  tcase_add_test(tc, root_cause_smallest_time);
  tcase_add_test(tc, root_cause_ties_lowest_rank);
  tcase_add_test(tc, root_cause_nan_never_wins);
  tcase_add_test(tc, job_root_cause_from_another_node);
  tcase_add_test(tc, single_failure_layout);
  tcase_add_test(tc, multiple_failures_in_time_order);
  tcase_add_test(tc, multiple_failures_equal_times);
  tcase_add_test(tc, signal_without_error_file);
  tcase_add_test(tc, signal_unknown_number);
  tcase_add_test(tc, signal_with_error_file_message);
  tcase_add_test(tc, not_available_hint);
  tcase_add_test(tc, multiline_traceback);
  tcase_add_test(tc, multiline_message_without_traceback);
  tcase_add_test(tc, time_truncates_fraction);
  tcase_add_test(tc, time_is_local);
  tcase_add_test(tc, nothing_to_print);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(summary_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
