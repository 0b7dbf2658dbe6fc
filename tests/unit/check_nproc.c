/* check_nproc.c -- unit tests for launcher/nproc.c. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nproc.h"

static int online_cpus(void)
{
  long n = sysconf(_SC_NPROCESSORS_ONLN);

  ck_assert_int_ge(n, 1);
  return (int)n;
}

static const struct {
  const char *spec;
  int want;
} good[] = {
  { "1", 1 }, { "2", 2 }, { "4", 4 }, { "16", 16 }, { "007", 7 },
  { "65536", 65536 },
};

START_TEST(test_integers)
{
  char err[256];

  err[0] = '\0';
  ck_assert_int_eq(nproc_resolve(good[_i].spec, err, sizeof err),
                   good[_i].want);
}
END_TEST

static const char *const bad[] = {
  "0", "-1", "65537", "4x", "", "x", "1.5", "cpus", "GPU",
  "99999999999999999999", "2147483648",
};

START_TEST(test_invalid)
{
  char err[256], quoted[64];
  const char *spec = bad[_i];

  memset(err, 0, sizeof err);
  ck_assert_int_eq(nproc_resolve(spec, err, sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, "--nproc_per_node") != NULL,
                "spec '%s': err '%s'", spec, err);
  snprintf(quoted, sizeof quoted, "'%s'", spec);
  ck_assert_msg(strstr(err, quoted) != NULL, "spec '%s': err '%s'", spec,
                err);
  ck_assert_ptr_null(strchr(err, '\n'));
}
END_TEST

START_TEST(test_err_truncated)
{
  char err[8];

  memset(err, 'z', sizeof err);
  ck_assert_int_eq(nproc_resolve("0", err, sizeof err), -EINVAL);
  ck_assert_uint_eq(strlen(err), sizeof err - 1);
}
END_TEST

START_TEST(test_cpu)
{
  char err[256];

  ck_assert_int_eq(nproc_resolve("cpu", err, sizeof err), online_cpus());
}
END_TEST

START_TEST(test_auto)
{
  char err[256], why[256];
  int gpus = nproc_cuda_devices(why, sizeof why);
  int n = nproc_resolve("auto", err, sizeof err);

  ck_assert_int_ge(n, 1);
  if (gpus > 0)
    ck_assert_int_eq(n, gpus);
  else
    ck_assert_int_eq(n, online_cpus());
}
END_TEST

START_TEST(test_gpu)
{
  char err[256], why[256];
  int gpus;

  why[0] = '\0';
  gpus = nproc_cuda_devices(why, sizeof why);
  memset(err, 0, sizeof err);
  if (gpus > 0) {
    ck_assert_int_eq(nproc_resolve("gpu", err, sizeof err), gpus);
    return;
  }
  /* No GPU here: either no driver (an error with a reason) or a driver
   * that reports zero devices. */
  if (gpus < 0) {
    ck_assert_int_eq(gpus, -ENODEV);
    ck_assert_uint_gt(strlen(why), 0);
  } else {
    ck_assert_int_eq(gpus, 0);
  }
  ck_assert_int_eq(nproc_resolve("gpu", err, sizeof err), -ENODEV);
  ck_assert_msg(strstr(err, "no CUDA device") != NULL, "err '%s'", err);
  ck_assert_msg(strstr(err, "--nproc_per_node=gpu") != NULL, "err '%s'",
                err);
  if (gpus < 0)
    ck_assert_msg(strstr(err, why) != NULL, "err '%s' lacks '%s'", err,
                  why);
  ck_assert_ptr_null(strchr(err, '\n'));
}
END_TEST

static Suite *nproc_suite(void)
{
  Suite *s = suite_create("nproc");
  TCase *tc = tcase_create("integer");

  tcase_add_loop_test(tc, test_integers, 0,
                      (int)(sizeof(good) / sizeof(good[0])));
  tcase_add_loop_test(tc, test_invalid, 0,
                      (int)(sizeof(bad) / sizeof(bad[0])));
  tcase_add_test(tc, test_err_truncated);
  suite_add_tcase(s, tc);

  tc = tcase_create("named");
  tcase_add_test(tc, test_cpu);
  tcase_add_test(tc, test_auto);
  tcase_add_test(tc, test_gpu);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(nproc_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
