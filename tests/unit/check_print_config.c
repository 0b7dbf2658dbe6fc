/* check_print_config.c -- unit tests for --print-config: args_describe's
 * origins (flag, PET_*, default) and launcher/print_config.c's report of
 * Slurm-derived values. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "print_config.h"
#include "rdzv_config.h"
#include "slurm_env.h"

static enum args_origin origin(const struct cdrun_args *a, const char *name,
                               char *val, size_t vlen)
{
  enum args_origin o;
  const char *n;
  char env[64];

  for (size_t i = 0; args_describe(a, i, &n, val, vlen, &o, env, sizeof env);
       i++)
    if (n && strcmp(n, name) == 0)
      return o;
  ck_abort_msg("no option %s", name);
  return ARGS_DEFAULT;
}

START_TEST(test_origins)
{
  char *argv[] = { "cdrun", "--max-restarts=4", "--print-config", NULL };
  char *env[] = { "PET_NNODES=1:3", "PET_STANDALONE=0", NULL };
  struct cdrun_args a;
  char err[256], val[64];

  /* --print-config needs no training script. */
  ck_assert_int_eq(args_parse(&a, 3, argv, env, err, sizeof err), 0);
  ck_assert(a.print_config);
  ck_assert_int_eq(origin(&a, "max_restarts", val, sizeof val), ARGS_FLAG);
  ck_assert_str_eq(val, "4");
  ck_assert_int_eq(origin(&a, "nnodes", val, sizeof val), ARGS_ENV);
  ck_assert_str_eq(val, "1:3");
  ck_assert_int_eq(origin(&a, "standalone", val, sizeof val), ARGS_ENV);
  ck_assert_str_eq(val, "0");
  ck_assert_int_eq(origin(&a, "rdzv_backend", val, sizeof val),
                   ARGS_DEFAULT);
  ck_assert_str_eq(val, "static");
  ck_assert_int_eq(origin(&a, "print_config", val, sizeof val), ARGS_FLAG);
  ck_assert_int_eq(args_origin_of(&a, "nnodes"), ARGS_ENV);
  ck_assert_int_eq(args_origin_of(&a, "max_restarts"), ARGS_FLAG);
  ck_assert_int_eq(args_origin_of(&a, "role"), ARGS_DEFAULT);
  ck_assert_int_eq(args_origin_of(&a, "no_such_option"), ARGS_DEFAULT);
  args_free(&a);
}
END_TEST

START_TEST(test_new_flags)
{
  char *argv[] = { "cdrun", "--hostfile", "/h", "--hosts=a,b",
                   "--stdin-watchdog", "x", NULL };
  char *bad[] = { "cdrun", "--stdin_watchdog=1", "x", NULL };
  struct cdrun_args a;
  char err[256];

  ck_assert_int_eq(args_parse(&a, 6, argv, NULL, err, sizeof err), 0);
  ck_assert_str_eq(a.hostfile, "/h");
  ck_assert_str_eq(a.hosts, "a,b");
  ck_assert(a.stdin_watchdog);
  args_free(&a);
  ck_assert_int_ne(args_parse(&a, 3, bad, NULL, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "does not take a value"), "%s", err);
}
END_TEST

START_TEST(test_report_slurm)
{
  char *slurm[] = {
    "SLURM_JOB_ID=31", "SLURM_STEP_ID=2", "SLURM_NODEID=0",
    "SLURM_STEP_NODELIST=gpu[3-4]", "SLURM_NNODES=2", NULL,
  };
  char *argv[] = { "cdrun", "--print-config", "--rdzv_id=mine", NULL };
  struct cdrun_args a;
  struct slurm_env s;
  struct rdzv_config c;
  char err[256], warn[64], *out = NULL, **aug;
  size_t len = 0;
  FILE *f;

  ck_assert_int_eq(slurm_env_derive(slurm, &s, err, sizeof err), 0);
  aug = slurm_env_augment(slurm, &s);
  ck_assert_int_eq(args_parse(&a, 3, argv, aug, err, sizeof err), 0);
  ck_assert_int_eq(rdzv_config_resolve(&a, a.rdzv_id, &c, err, sizeof err,
                                       warn, sizeof warn), 0);
  c.host_mode = RDZV_HOST_ALWAYS;
  f = open_memstream(&out, &len);
  ck_assert_ptr_nonnull(f);
  print_config(f, &a, slurm, &s, &c, 2, "Slurm (SLURM_GPUS_ON_NODE)");
  fclose(f);
  ck_assert_msg(strstr(out, "rdzv_id") && strstr(out, "flag --rdzv_id"),
                "%s", out);
  ck_assert_msg(strstr(out, "Slurm (SLURM_NNODES)"), "%s", out);
  ck_assert_msg(strstr(out, "Slurm (SLURM_NODEID)"), "%s", out);
  ck_assert_msg(strstr(out, "gpu3:"), "%s", out);
  ck_assert_msg(strstr(out, "(rendezvous served by) this node"), "%s", out);
  ck_assert_msg(strstr(out, "max_restarts           0"), "%s", out);
  free(out);
  free(aug);
  args_free(&a);
}
END_TEST

static Suite *print_config_suite(void)
{
  Suite *s = suite_create("print_config");
  TCase *tc = tcase_create("origins");

  tcase_add_test(tc, test_origins);
  tcase_add_test(tc, test_new_flags);
  tcase_add_test(tc, test_report_slurm);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(print_config_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
