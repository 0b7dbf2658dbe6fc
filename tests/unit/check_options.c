/* check_options.c -- unit tests for rdzvd/options.c: rdzvd's command
 * line, parsed without exiting. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"

static struct options O;
static char E[256];

/* argv from a NULL-terminated list, argv[0] "rdzvd". */
#define PARSE(...) parse((const char *[]){ "rdzvd", __VA_ARGS__, NULL })

static int parse(const char **args)
{
  int argc = 0;

  while (args[argc])
    argc++;
  E[0] = '\0';
  return options_parse(argc, (char **)args, &O, E, sizeof E);
}

static void setup(void)
{
  unsetenv("RDZVD_SECRET_FILE");
  unsetenv("RDZVD_TOKEN_KEY_FILE");
}

START_TEST(test_defaults)
{
  ck_assert_int_eq(parse((const char *[]){ "rdzvd", NULL }), 0);
  ck_assert_int_eq(O.action, OPTIONS_SERVE);
  ck_assert_int_eq(O.server.port, 29400);
  ck_assert_ptr_null(O.server.host);
  ck_assert_int_eq(O.server.limits.max_jobs, 0);
  ck_assert(!O.quiet && !O.json);
  ck_assert_ptr_null(O.secret_file);
  setenv("RDZVD_SECRET_FILE", "/s", 1);
  setenv("RDZVD_TOKEN_KEY_FILE", "/k", 1);
  ck_assert_int_eq(PARSE("--quiet"), 0);
  ck_assert_str_eq(O.secret_file, "/s");
  ck_assert_str_eq(O.token_key_file, "/k");
  ck_assert(O.quiet);
  ck_assert_int_eq(PARSE("--secret-file", "/t"), 0);
  ck_assert_str_eq(O.secret_file, "/t");
}
END_TEST

START_TEST(test_values)
{
  ck_assert_int_eq(PARSE("--host", "::1", "--port=0", "--max-jobs", "7",
                         "--max_conns=9", "--hello-timeout", "0.5",
                         "--kv_budget=2M", "--input-budget", "64k",
                         "--conn_output_max=1G", "--prejoin-frame-max=16K",
                         "--output_budget=3", "--max_join_timeout=1e3",
                         "--max-last-call=2", "--max_close_timeout=3",
                         "--max_keepalive=4", "--resume-grace=5",
                         "--metrics", ":0", "--metrics-header-timeout=6",
                         "--log-file=/l", "--token_key_file", "/k"), 0);
  ck_assert_int_eq(O.action, OPTIONS_SERVE);
  ck_assert_str_eq(O.server.host, "::1");
  ck_assert_int_eq(O.server.port, 0);
  ck_assert_int_eq(O.server.limits.max_jobs, 7);
  ck_assert_int_eq(O.server.io.max_conns, 9);
  ck_assert_double_eq(O.server.io.hello_timeout, 0.5);
  ck_assert_uint_eq(O.server.limits.max_kv_total, 2 << 20);
  ck_assert_uint_eq(O.server.io.input_budget, 64 << 10);
  ck_assert_uint_eq(O.server.io.conn_output, 1 << 30);
  ck_assert_uint_eq(O.server.io.prejoin_frame, 16 << 10);
  ck_assert_uint_eq(O.server.io.output_budget, 3);
  ck_assert_double_eq(O.server.limits.max_join_timeout, 1000);
  ck_assert_double_eq(O.server.limits.max_last_call, 2);
  ck_assert_double_eq(O.server.limits.max_close_timeout, 3);
  ck_assert_double_eq(O.server.limits.max_keepalive, 4);
  ck_assert_double_eq(O.server.limits.resume_grace, 5);
  ck_assert_str_eq(O.metrics_ep, ":0");
  ck_assert_double_eq(O.metrics_header_timeout, 6);
  ck_assert_str_eq(O.log_path, "/l");
  ck_assert_str_eq(O.token_key_file, "/k");
}
END_TEST

START_TEST(test_status)
{
  ck_assert_int_eq(PARSE("--status", "h:1", "--json", "--job", "j",
                         "--limit=3"), 0);
  ck_assert_int_eq(O.action, OPTIONS_STATUS);
  ck_assert_str_eq(O.status, "h:1");
  ck_assert_str_eq(O.status_job, "j");
  ck_assert_int_eq(O.status_limit, 3);
  ck_assert(O.json);
}
END_TEST

START_TEST(test_stops)
{
  /* --help and --version end parsing: what follows is not looked at. */
  ck_assert_int_eq(PARSE("--help", "--bogus"), 0);
  ck_assert_int_eq(O.action, OPTIONS_HELP);
  ck_assert_int_eq(PARSE("-h"), 0);
  ck_assert_int_eq(O.action, OPTIONS_HELP);
  ck_assert_int_eq(PARSE("--port=1", "--version", "--port=x"), 0);
  ck_assert_int_eq(O.action, OPTIONS_VERSION);
  /* What comes before is. */
  ck_assert_int_eq(PARSE("--port=x", "--version"), -EINVAL);
}
END_TEST

static const struct {
  const char *args[3];
  const char *err;
} bad[] = {
  { { "--port", "x" },
    "--port: invalid value 'x' (expected an integer 0..65535)" },
  { { "--port=65536" },
    "--port: invalid value '65536' (expected an integer 0..65535)" },
  { { "--max_jobs=0" },
    "--max_jobs: invalid value '0' (expected an integer 1..10000000)" },
  { { "--limit=0" },
    "--limit: invalid value '0' (expected an integer 1..100000)" },
  { { "--kv-budget=0" }, "--kv_budget: invalid size '0' (expected a "
    "positive byte count, optionally with K, M or G)" },
  { { "--input_budget=1T" }, "--input_budget: invalid size '1T' (expected "
    "a positive byte count, optionally with K, M or G)" },
  { { "--output_budget=-1" }, "--output_budget: invalid size '-1' "
    "(expected a positive byte count, optionally with K, M or G)" },
  { { "--hello_timeout=0" }, "--hello_timeout: invalid duration '0' "
    "(expected seconds, > 0 and <= 1e7)" },
  { { "--max_keepalive=inf" }, "--max_keepalive: invalid duration 'inf' "
    "(expected seconds, > 0 and <= 1e7)" },
  { { "--resume_grace=2e7" }, "--resume-grace: invalid duration '2e7' "
    "(expected seconds, > 0 and <= 1e7)" },
  { { "--max-last-call" }, "--max_last_call: expected a value" },
  { { "--job=" }, "--job: expected a job id of 1 to 128 bytes" },
  { { "--bogus" }, "unrecognized argument '--bogus'" },
  { { "--port2=1" }, "unrecognized argument '--port2=1'" },
  { { "port" }, "unrecognized argument 'port'" },
  { { "--bogus", "--port=x" }, "unrecognized argument '--bogus'" },
};

START_TEST(test_bad)
{
  const char *args[5] = { "rdzvd" };
  int n = 1, k;

  for (k = 0; k < 3 && bad[_i].args[k]; k++)
    args[n++] = bad[_i].args[k];
  args[n] = NULL;
  ck_assert_int_eq(parse(args), -EINVAL);
  ck_assert_str_eq(E, bad[_i].err);
}
END_TEST

START_TEST(test_long_job)
{
  char job[200], arg[210];

  memset(job, 'j', 128);
  job[128] = '\0';
  snprintf(arg, sizeof arg, "--job=%s", job);
  ck_assert_int_eq(PARSE(arg), 0);
  ck_assert_str_eq(O.status_job, job);
  strcat(arg, "j");
  ck_assert_int_eq(PARSE(arg), -EINVAL);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("options");
  TCase *tc = tcase_create("parse");
  SRunner *sr;
  int failed;

  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_values);
  tcase_add_test(tc, test_status);
  tcase_add_test(tc, test_stops);
  tcase_add_loop_test(tc, test_bad, 0, sizeof bad / sizeof bad[0]);
  tcase_add_test(tc, test_long_job);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
