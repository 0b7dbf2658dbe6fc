/* check_live_handshake.c -- unit tests for launcher/live_handshake.c: the
 * opt-in check and the round file of live recovery, written as the worker
 * contract says (its grammar's own tests: check_round_file.c). */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "live_handshake.h"

static char dir[] = "/tmp/check_live_handshake.XXXXXX";
static char path[PATH_MAX];

static void setup(void)
{
  strcpy(dir, "/tmp/check_live_handshake.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
  char cmd[PATH_MAX + 16];

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

static const char *in_dir(const char *name)
{
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return path;
}

static void slurp(const char *p, char *buf, size_t len)
{
  FILE *f = fopen(p, "r");
  size_t n;

  ck_assert_ptr_nonnull(f);
  n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
}

START_TEST(test_opted_in)
{
  FILE *f;

  ck_assert(!live_handshake_opted_in(NULL));
  ck_assert(!live_handshake_opted_in(in_dir("live_opt_in")));
  f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "1234\n");
  fclose(f);
  ck_assert(live_handshake_opted_in(path));
  /* An empty file is an opt-in too (a script's `touch`). */
  f = fopen(in_dir("empty"), "w");
  fclose(f);
  ck_assert(live_handshake_opted_in(path));
  /* A folder is not. */
  ck_assert_int_eq(mkdir(in_dir("a_dir"), 0755), 0);
  ck_assert(!live_handshake_opted_in(path));
}
END_TEST

/* Written whole, replaced whole, nothing left beside it. */
START_TEST(test_write_round)
{
  struct live_round r = { 0, 2, 0, 2 }, got;
  char buf[256];

  ck_assert_int_eq(live_handshake_write_round(in_dir("live_round"), &r), 0);
  slurp(path, buf, sizeof buf);
  ck_assert_str_eq(buf, "round=0 world=2 rank_offset=0 local_world=2\n");
  r = (struct live_round){ 3, 1000, 996, 4 };
  ck_assert_int_eq(live_handshake_write_round(path, &r), 0);
  slurp(path, buf, sizeof buf);
  ck_assert_str_eq(buf,
                   "round=3 world=1000 rank_offset=996 local_world=4\n");
  ck_assert_int_eq(round_file_parse(buf, strlen(buf), &got, NULL, 0), 0);
  ck_assert_int_eq(got.round, 3);
  ck_assert_int_eq(got.world, 1000);
  ck_assert_int_eq(got.rank_offset, 996);
  ck_assert_int_eq(got.local_world, 4);
  ck_assert_int_eq(access(in_dir("live_round.tmp"), F_OK), -1);
}
END_TEST

/* A folder that is not there: the error, and no temporary file. */
START_TEST(test_write_round_error)
{
  struct live_round r = { 0, 1, 0, 1 };

  ck_assert_int_eq(live_handshake_write_round(in_dir("no/live_round"), &r),
                   -ENOENT);
}
END_TEST

/* A rename, not a rewrite in place: a reader holding the old file keeps
 * the old line whole. */
START_TEST(test_write_round_atomic)
{
  struct live_round r = { 1, 4, 0, 2 };
  char buf[256];
  FILE *old;
  size_t n;

  ck_assert_int_eq(live_handshake_write_round(in_dir("live_round"), &r), 0);
  old = fopen(path, "r");
  ck_assert_ptr_nonnull(old);
  r.round = 2;
  r.world = 2;
  ck_assert_int_eq(live_handshake_write_round(path, &r), 0);
  n = fread(buf, 1, sizeof buf - 1, old);
  buf[n] = '\0';
  fclose(old);
  ck_assert_str_eq(buf, "round=1 world=4 rank_offset=0 local_world=2\n");
  slurp(path, buf, sizeof buf);
  ck_assert_str_eq(buf, "round=2 world=2 rank_offset=0 local_world=2\n");
}
END_TEST

static Suite *live_handshake_suite(void)
{
  Suite *s = suite_create("live_handshake");
  TCase *tc = tcase_create("files");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_opted_in);
  tcase_add_test(tc, test_write_round);
  tcase_add_test(tc, test_write_round_error);
  tcase_add_test(tc, test_write_round_atomic);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(live_handshake_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
