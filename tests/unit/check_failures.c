/* check_failures.c -- unit tests for launcher/failures.c: records, the
 * root cause, the lines about it, and cdrun's exit status. */
#include "failures.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"

static char tmpdir[] = "/tmp/check_failures.XXXXXX";
static char efile[256];

static void setup(void)
{
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  snprintf(efile, sizeof efile, "%s/error.json", tmpdir);
}

static void teardown(void)
{
  unlink(efile);
  rmdir(tmpdir);
  memcpy(tmpdir + strlen(tmpdir) - 6, "XXXXXX", 6);
}

static void write_efile(const char *text)
{
  FILE *fp = fopen(efile, "w");

  ck_assert_ptr_nonnull(fp);
  fputs(text, fp);
  ck_assert_int_eq(fclose(fp), 0);
}

/* Records worker rank (local rank rank % 4, pid 1000 + rank) with code. */
static void record(struct failures *fs, int rank, int code, double time,
                   const char *message, bool *read)
{
  struct worker_failure seen;

  memset(&seen, 0, sizeof seen);
  seen.local_rank = rank % 4;
  seen.rank = rank;
  seen.pid = 1000 + rank;
  seen.exitcode = code;
  seen.time = time;
  seen.error_file = efile;
  seen.message = message;
  failures_record(fs, &seen, read);
}

START_TEST(test_record_without_error_file)
{
  struct failures fs = { 0 };
  bool read = false;

  record(&fs, 3, 1, 100.0, NULL, &read);
  ck_assert_uint_eq(fs.n, 1);
  ck_assert(!read);
  ck_assert_ptr_null(fs.list[0].message);
  ck_assert_ptr_null(fs.list[0].error_file);
  ck_assert_int_eq(fs.list[0].rank, 3);
  ck_assert_int_eq(fs.list[0].local_rank, 3);
  ck_assert_int_eq(fs.list[0].pid, 1003);
  ck_assert(fs.first_time == 100.0);
  failures_clear(&fs);
  ck_assert_uint_eq(fs.n, 0);
  ck_assert_ptr_null(fs.list);
}
END_TEST

START_TEST(test_record_error_file)
{
  struct failures fs = { 0 };
  bool read = false;

  write_efile("{\"message\": \"ValueError: boom\", \"timestamp\": 50}");
  record(&fs, 1, 1, 100.0, NULL, &read);
  ck_assert(read);
  ck_assert_str_eq(fs.list[0].message, "ValueError: boom");
  ck_assert_str_eq(fs.list[0].error_file, efile);
  /* The error file's time is the failure's; the first record's time is
   * when it was seen. */
  ck_assert(fs.list[0].time == 50.0);
  ck_assert(fs.first_time == 100.0);
  failures_clear(&fs);
}
END_TEST

START_TEST(test_record_bad_error_file)
{
  struct failures fs = { 0 };
  bool read = false;

  write_efile("not json");
  record(&fs, 2, 1, 100.0, NULL, &read);
  ck_assert(read);
  ck_assert_ptr_nonnull(strstr(fs.list[0].message,
                               "cannot use error file"));
  ck_assert_str_eq(fs.list[0].error_file, efile);
  failures_clear(&fs);
}
END_TEST

START_TEST(test_record_message_wins)
{
  struct failures fs = { 0 };

  write_efile("{\"message\": \"from the file\"}");
  record(&fs, 0, -9, 100.0, "rank 0 made no progress", NULL);
  ck_assert_str_eq(fs.list[0].message, "rank 0 made no progress");
  ck_assert_ptr_null(fs.list[0].error_file);
  failures_clear(&fs);
}
END_TEST

START_TEST(test_root_and_exit_status)
{
  struct failures fs = { 0 };
  struct rdzv_cause jc;

  ck_assert_ptr_null(failures_root(&fs));
  ck_assert_int_eq(failures_exit_status(&fs, NULL), AGENT_EXIT_INTERNAL);
  record(&fs, 5, 3, 200.0, NULL, NULL);
  record(&fs, 4, -SIGKILL, 150.0, NULL, NULL);
  record(&fs, 2, 7, 150.0, NULL, NULL);
  /* Earliest, then the lowest rank. */
  ck_assert_int_eq(failures_root(&fs)->rank, 2);
  ck_assert_int_eq(failures_exit_status(&fs, NULL), 7);
  /* The job's root cause, when known, decides. */
  memset(&jc, 0, sizeof jc);
  ck_assert_int_eq(failures_exit_status(&fs, &jc), 7);
  jc.exited_at = 10;
  jc.exitcode = -SIGTERM;
  ck_assert_int_eq(failures_exit_status(&fs, &jc), 128 + SIGTERM);
  jc.exitcode = 300;
  ck_assert_int_eq(failures_exit_status(&fs, &jc), AGENT_EXIT_INTERNAL);
  failures_clear(&fs);
  record(&fs, 0, -SIGSEGV, 1.0, NULL, NULL);
  ck_assert_int_eq(failures_exit_status(&fs, NULL), 128 + SIGSEGV);
  failures_clear(&fs);
}
END_TEST

START_TEST(test_cofailure)
{
  struct failures fs = { 0 };

  ck_assert(!failures_is_cofailure(&fs, 1, SIGTERM, false, 0.1, 100.0));
  record(&fs, 0, 1, 100.0, NULL, NULL);
  ck_assert(failures_is_cofailure(&fs, 1, SIGTERM, false, 0.1, 100.05));
  ck_assert(!failures_is_cofailure(&fs, 0, SIGTERM, false, 0.1, 100.05));
  ck_assert(!failures_is_cofailure(&fs, 1, SIGTERM, false, 0.1, 100.2));
  /* Our own stop signal is no failure; SIGKILL only once we sent it. */
  ck_assert(!failures_is_cofailure(&fs, -SIGTERM, SIGTERM, false, 0.1,
                                   100.05));
  ck_assert(failures_is_cofailure(&fs, -SIGKILL, SIGTERM, false, 0.1,
                                  100.05));
  ck_assert(!failures_is_cofailure(&fs, -SIGKILL, SIGTERM, true, 0.1,
                                   100.05));
  failures_clear(&fs);
}
END_TEST

START_TEST(test_describe_and_report_text)
{
  struct failures fs = { 0 };
  char buf[256];

  record(&fs, 3, -SIGKILL, 1.0, NULL, NULL);
  failures_describe(&fs.list[0], buf, sizeof buf);
  ck_assert_str_eq(buf, "killed by SIGKILL");
  failures_report_text(&fs, 3, -SIGKILL, buf, sizeof buf);
  ck_assert_str_eq(buf, "rank 3 was killed by SIGKILL");
  failures_clear(&fs);
  record(&fs, 3, 2, 1.0, "oops\nline two", NULL);
  failures_describe(&fs.list[0], buf, sizeof buf);
  ck_assert_str_eq(buf, "exited with status 2: oops");
  failures_report_text(&fs, 3, 2, buf, sizeof buf);
  ck_assert_str_eq(buf, "rank 3: oops\nline two");
  failures_clear(&fs);
  failures_report_text(&fs, 4, 9, buf, sizeof buf);
  ck_assert_str_eq(buf, "rank 4 exited with status 9");
}
END_TEST

START_TEST(test_local_cause)
{
  struct failures fs = { 0 };
  struct rdzv_cause lc;

  memset(&lc, 0xee, sizeof lc);
  failures_local_cause(&fs, "h", 5.0, &lc);
  ck_assert(lc.exited_at == 0);
  ck_assert_int_eq(lc.rank, 0);
  record(&fs, 6, 1000, 40.0, NULL, NULL);
  record(&fs, 2, 1, 0.0, NULL, NULL);   /* no plausible time: now */
  failures_local_cause(&fs, "nodeA", 77.0, &lc);
  ck_assert_int_eq(lc.rank, 2);
  ck_assert_int_eq(lc.local_rank, 2);
  ck_assert(lc.exited_at == 77.0);
  ck_assert_int_eq(lc.pid, 1002);
  ck_assert_str_eq(lc.host, "nodeA");
  failures_clear(&fs);
  record(&fs, 6, 1000, 40.0, NULL, NULL);
  failures_local_cause(&fs, "nodeA", 77.0, &lc);
  ck_assert(lc.exited_at == 40.0);
  ck_assert_int_eq(lc.exitcode, 255);   /* clamped */
  failures_clear(&fs);
}
END_TEST

static Suite *failures_suite(void)
{
  Suite *s = suite_create("failures");
  TCase *tc = tcase_create("record");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_record_without_error_file);
  tcase_add_test(tc, test_record_error_file);
  tcase_add_test(tc, test_record_bad_error_file);
  tcase_add_test(tc, test_record_message_wins);
  tcase_add_test(tc, test_root_and_exit_status);
  tcase_add_test(tc, test_cofailure);
  tcase_add_test(tc, test_describe_and_report_text);
  tcase_add_test(tc, test_local_cause);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(failures_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
