/* check_logs.c -- unit tests for launcher/logs.c. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "logdir.h"
#include "logs.h"

/* ---- std spec -------------------------------------------------------- */

START_TEST(test_spec_single_value)
{
  unsigned char m[4];
  char err[256];

  for (int v = 0; v <= 3; v++) {
    char spec[2] = { (char)('0' + v), '\0' };

    memset(m, 0xee, sizeof(m));
    ck_assert_int_eq(logs_parse_std_spec(spec, 4, m, err, sizeof(err)), 0);
    for (int i = 0; i < 4; i++)
      ck_assert_uint_eq(m[i], (unsigned)v);
  }
}
END_TEST

START_TEST(test_spec_empty_and_null)
{
  unsigned char m[3];
  char err[256];

  memset(m, 0xee, sizeof(m));
  ck_assert_int_eq(logs_parse_std_spec("", 3, m, err, sizeof(err)), 0);
  for (int i = 0; i < 3; i++)
    ck_assert_uint_eq(m[i], 0);
  memset(m, 0xee, sizeof(m));
  ck_assert_int_eq(logs_parse_std_spec(NULL, 3, m, err, sizeof(err)), 0);
  for (int i = 0; i < 3; i++)
    ck_assert_uint_eq(m[i], 0);
}
END_TEST

START_TEST(test_spec_map)
{
  unsigned char m[3];
  unsigned char big[12];
  char err[256];

  memset(m, 0xee, sizeof(m));
  ck_assert_int_eq(logs_parse_std_spec("0:3,1:1", 3, m, err, sizeof(err)),
                   0);
  ck_assert_uint_eq(m[0], LOGS_STDOUT | LOGS_STDERR);
  ck_assert_uint_eq(m[1], LOGS_STDOUT);
  ck_assert_uint_eq(m[2], 0);

  memset(m, 0xee, sizeof(m));
  ck_assert_int_eq(logs_parse_std_spec("2:2", 3, m, err, sizeof(err)), 0);
  ck_assert_uint_eq(m[0], 0);
  ck_assert_uint_eq(m[1], 0);
  ck_assert_uint_eq(m[2], LOGS_STDERR);

  /* Order does not matter; multi-digit local ranks are fine. */
  memset(big, 0xee, sizeof(big));
  ck_assert_int_eq(logs_parse_std_spec("11:3,0:0,10:2", 12, big, err,
                                       sizeof(err)), 0);
  ck_assert_uint_eq(big[11], 3);
  ck_assert_uint_eq(big[10], 2);
  for (int i = 0; i < 10; i++)
    ck_assert_uint_eq(big[i], 0);
}
END_TEST

static const struct {
  const char *spec;
  const char *needle;   /* must appear in the error message */
} bad_specs[] = {
  { "4", "invalid value '4'" },
  { "x", "invalid value 'x'" },
  { "03", "invalid value '03'" },
  { "-1", "invalid value '-1'" },
  { " 1", "invalid value ' 1'" },
  { "1,2", "invalid value '1,2'" },
  { "0:4", "invalid mask '4'" },
  { "0:", "invalid mask ''" },
  { "0:33", "invalid mask '33'" },
  { "0:3:1", "invalid mask '3:1'" },
  { ":1", "invalid local rank ''" },
  { "a:1", "invalid local rank 'a'" },
  { " 0:1", "invalid local rank ' 0'" },
  { "4:1", "local rank 4 in entry '4:1' out of range (0..3)" },
  { "99999999999:1", "invalid local rank '99999999999'" },
  { "-1:1", "local rank -1 in entry '-1:1' out of range" },
  { "0:3,", "empty entry in '0:3,'" },
  { ",0:3", "empty entry in ',0:3'" },
  { "0:3,,1:1", "empty entry" },
  { "0:3,1", "invalid entry '1' in '0:3,1'" },
  { "0:3,0:1", "duplicate local rank 0" },
};

START_TEST(test_spec_errors)
{
  unsigned char m[4];
  char err[256];
  const char *spec = bad_specs[_i].spec;

  memset(m, 0xee, sizeof(m));
  err[0] = '\0';
  ck_assert_int_eq(logs_parse_std_spec(spec, 4, m, err, sizeof(err)),
                   -EINVAL);
  ck_assert_msg(strstr(err, bad_specs[_i].needle) != NULL,
                "spec '%s': err '%s' lacks '%s'", spec, err,
                bad_specs[_i].needle);
  ck_assert_ptr_null(strchr(err, '\n'));
  /* A failed parse leaves the caller's array alone. */
  for (int i = 0; i < 4; i++)
    ck_assert_uint_eq(m[i], 0xee);
}
END_TEST

START_TEST(test_spec_err_buffers)
{
  unsigned char m[2] = { 7, 7 };
  char err[8];

  memset(err, 'z', sizeof(err));
  ck_assert_int_eq(logs_parse_std_spec("9", 2, m, err, sizeof(err)),
                   -EINVAL);
  ck_assert_str_eq(err, "invalid");
  ck_assert_int_eq(logs_parse_std_spec("9", 2, m, NULL, 0), -EINVAL);
  ck_assert_int_eq(logs_parse_std_spec("0:9", 2, m, err, 0), -EINVAL);
  ck_assert_int_eq(logs_parse_std_spec("1", -1, m, err, sizeof(err)),
                   -EINVAL);
  ck_assert_uint_eq(m[0], 7);
  /* nproc 0: a plain value is fine, any named rank is out of range. */
  ck_assert_int_eq(logs_parse_std_spec("3", 0, NULL, NULL, 0), 0);
  ck_assert_int_eq(logs_parse_std_spec("0:1", 0, m, NULL, 0), -EINVAL);
}
END_TEST

/* ---- ranks filter ---------------------------------------------------- */

START_TEST(test_filter_all)
{
  bool keep[3];
  char err[128];

  memset(keep, 0, sizeof(keep));
  ck_assert_int_eq(logs_parse_ranks_filter(NULL, 3, keep, err,
                                           sizeof(err)), 0);
  ck_assert(keep[0] && keep[1] && keep[2]);
  memset(keep, 0, sizeof(keep));
  ck_assert_int_eq(logs_parse_ranks_filter("", 3, keep, err,
                                           sizeof(err)), 0);
  ck_assert(keep[0] && keep[1] && keep[2]);
}
END_TEST

START_TEST(test_filter_subset)
{
  bool keep[5];
  char err[128];

  memset(keep, 1, sizeof(keep));
  ck_assert_int_eq(logs_parse_ranks_filter("0,2,3", 5, keep, err,
                                           sizeof(err)), 0);
  ck_assert(keep[0]);
  ck_assert(!keep[1]);
  ck_assert(keep[2]);
  ck_assert(keep[3]);
  ck_assert(!keep[4]);

  /* int() in torchrun allows blanks; repeats are harmless (a set). */
  memset(keep, 0, sizeof(keep));
  ck_assert_int_eq(logs_parse_ranks_filter(" 4 ,1,4", 5, keep, err,
                                           sizeof(err)), 0);
  ck_assert(!keep[0]);
  ck_assert(keep[1]);
  ck_assert(!keep[2]);
  ck_assert(!keep[3]);
  ck_assert(keep[4]);
}
END_TEST

static const struct {
  const char *spec;
  const char *needle;
} bad_filters[] = {
  { "4", "local rank 4 out of range (0..3)" },
  { "-1", "local rank -1 out of range" },
  { "x", "invalid local rank 'x'" },
  { "1.5", "invalid local rank '1.5'" },
  { "0x1", "invalid local rank '0x1'" },
  { "0,", "empty entry in '0,'" },
  { ",0", "empty entry" },
  { "0,,1", "empty entry" },
  { " ", "empty entry" },
  { "0;1", "invalid local rank '0;1'" },
  { "1 2", "invalid local rank '1 2'" },
};

START_TEST(test_filter_errors)
{
  bool keep[4] = { true, false, true, false };
  char err[256];

  err[0] = '\0';
  ck_assert_int_eq(logs_parse_ranks_filter(bad_filters[_i].spec, 4, keep,
                                           err, sizeof(err)), -EINVAL);
  ck_assert_msg(strstr(err, bad_filters[_i].needle) != NULL,
                "filter '%s': err '%s' lacks '%s'", bad_filters[_i].spec,
                err, bad_filters[_i].needle);
  ck_assert(keep[0] && !keep[1] && keep[2] && !keep[3]);
}
END_TEST

/* ---- duplicate filters ----------------------------------------------- */

START_TEST(test_filters)
{
  char **f;
  int err;

  ck_assert_ptr_null(logs_parse_filters(NULL, &err));
  ck_assert_int_eq(err, 0);
  ck_assert_ptr_null(logs_parse_filters("", &err));
  f = logs_parse_filters(",,,", &err);
  ck_assert_str_eq(f[0], ",");
  ck_assert_ptr_null(f[1]);
  logs_filters_free(f);
  ck_assert_ptr_null(logs_parse_filters(",", &err));
  f = logs_parse_filters("a,,b,c,,", &err);
  ck_assert_int_eq(err, 0);
  ck_assert_ptr_nonnull(f);
  ck_assert_str_eq(f[0], "a,b");
  ck_assert_str_eq(f[1], "c,");
  ck_assert_ptr_null(f[2]);
  ck_assert(logs_filter_match(f, "xx a,b yy", 9));
  ck_assert(logs_filter_match(f, "c,", 2));
  ck_assert(!logs_filter_match(f, "a,,b", 4));
  /* Only the first len bytes count. */
  ck_assert(!logs_filter_match(f, "a,b", 2));
  ck_assert(!logs_filter_match(NULL, "a,b", 3));
  logs_filters_free(f);
  f = logs_parse_filters(",x,,", &err);
  ck_assert_str_eq(f[0], "x,");
  ck_assert_ptr_null(f[1]);
  logs_filters_free(f);
  f = logs_parse_filters("loss=", &err);
  ck_assert_str_eq(f[0], "loss=");
  logs_filters_free(f);
  logs_filters_free(NULL);
}
END_TEST



/* ---- directories ----------------------------------------------------- */

static char tmpdir[64];

static void dir_setup(void)
{
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/check_logs.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void dir_teardown(void)
{
  /* Best effort; the rmtree test already removed its tree. */
  logdir_rmtree(tmpdir);
}

static bool is_dir(const char *path)
{
  struct stat st;

  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void touch(const char *path)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, "x\n", 2), 2);
  close(fd);
}

START_TEST(test_mkdirs)
{
  char p[256];
  struct stat st;

  snprintf(p, sizeof(p), "%s/a/b/c", tmpdir);
  ck_assert_int_eq(logdir_mkdirs(p), 0);
  ck_assert(is_dir(p));
  ck_assert_int_eq(stat(p, &st), 0);
  /* Existing is fine, at every level. */
  ck_assert_int_eq(logdir_mkdirs(p), 0);
  snprintf(p, sizeof(p), "%s/a", tmpdir);
  ck_assert_int_eq(logdir_mkdirs(p), 0);
  ck_assert_int_eq(logdir_mkdirs(tmpdir), 0);
  /* Repeated and trailing slashes. */
  snprintf(p, sizeof(p), "%s//x///y/", tmpdir);
  ck_assert_int_eq(logdir_mkdirs(p), 0);
  snprintf(p, sizeof(p), "%s/x/y", tmpdir);
  ck_assert(is_dir(p));
  ck_assert_int_eq(logdir_mkdirs(""), -ENOENT);
  ck_assert_int_eq(logdir_mkdirs(NULL), -ENOENT);
}
END_TEST

START_TEST(test_mkdirs_file_in_way)
{
  char p[256];

  snprintf(p, sizeof(p), "%s/f", tmpdir);
  touch(p);
  ck_assert_int_eq(logdir_mkdirs(p), -ENOTDIR);
  snprintf(p, sizeof(p), "%s/f/sub", tmpdir);
  ck_assert_int_eq(logdir_mkdirs(p), -ENOTDIR);
}
END_TEST

START_TEST(test_rmtree)
{
  char root[256], p[512], keep[256];

  snprintf(root, sizeof(root), "%s/attempt_0", tmpdir);
  snprintf(p, sizeof(p), "%s/0/deep/er", root);
  ck_assert_int_eq(logdir_mkdirs(p), 0);
  snprintf(p, sizeof(p), "%s/1", root);
  ck_assert_int_eq(logdir_mkdirs(p), 0);
  snprintf(p, sizeof(p), "%s/0/stdout.log", root);
  touch(p);
  snprintf(p, sizeof(p), "%s/0/deep/er/x", root);
  touch(p);
  snprintf(p, sizeof(p), "%s/1/stderr.log", root);
  touch(p);
  /* A symlink out of the tree is removed, not followed. */
  snprintf(keep, sizeof(keep), "%s/outside", tmpdir);
  ck_assert_int_eq(logdir_mkdirs(keep), 0);
  snprintf(p, sizeof(p), "%s/outside/precious", tmpdir);
  touch(p);
  snprintf(p, sizeof(p), "%s/1/link", root);
  ck_assert_int_eq(symlink(keep, p), 0);

  /* Deeper than the quick walk goes (Note [quick rmtree]): nftw ends it. */
  snprintf(p, sizeof(p), "%s/1/a/b/c/d/e/f/g/h/i/j/k/l", root);
  ck_assert_int_eq(logdir_mkdirs(p), 0);
  snprintf(p, sizeof(p), "%s/1/a/b/c/d/e/f/g/h/i/j/k/l/bottom", root);
  touch(p);
  /* An empty folder goes with one call. */
  snprintf(p, sizeof(p), "%s/2", root);
  ck_assert_int_eq(logdir_mkdirs(p), 0);
  ck_assert_int_eq(logdir_rmtree(p), 0);
  ck_assert(!is_dir(p));

  ck_assert_int_eq(logdir_rmtree(root), 0);
  ck_assert(access(root, F_OK) == -1 && errno == ENOENT);
  snprintf(p, sizeof(p), "%s/outside/precious", tmpdir);
  ck_assert_int_eq(access(p, F_OK), 0);

  ck_assert_int_eq(logdir_rmtree(root), -ENOENT);
  ck_assert_int_eq(logdir_rmtree(p), -ENOTDIR);
  ck_assert_int_eq(access(p, F_OK), 0);
  ck_assert_int_eq(logdir_rmtree(tmpdir), 0);
  ck_assert(!is_dir(tmpdir));
}
END_TEST

static Suite *logs_suite(void)
{
  Suite *s = suite_create("logs");
  TCase *tc = tcase_create("spec");

  tcase_add_test(tc, test_spec_single_value);
  tcase_add_test(tc, test_spec_empty_and_null);
  tcase_add_test(tc, test_spec_map);
  tcase_add_loop_test(tc, test_spec_errors, 0,
                      (int)(sizeof(bad_specs) / sizeof(bad_specs[0])));
  tcase_add_test(tc, test_spec_err_buffers);
  suite_add_tcase(s, tc);

  tc = tcase_create("filter");
  tcase_add_test(tc, test_filter_all);
  tcase_add_test(tc, test_filter_subset);
  tcase_add_loop_test(tc, test_filter_errors, 0,
                      (int)(sizeof(bad_filters) / sizeof(bad_filters[0])));
  suite_add_tcase(s, tc);

  tc = tcase_create("dirs");
  tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
  tcase_add_test(tc, test_filters);
  tcase_add_test(tc, test_mkdirs);
  tcase_add_test(tc, test_mkdirs_file_in_way);
  tcase_add_test(tc, test_rmtree);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(logs_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
