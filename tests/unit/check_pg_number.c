/* check_pg_number.c -- unit tests for the numbers libpg reads, through
 * proto/util/num.c, which libpg compiles in (Note [libpg's own copies] in
 * the Makefile): the whole string is the number, in [lo, hi]; and the
 * errors that name a bad environment variable. */
#include <check.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "num.h"
#include "pg_internal.h"
#include "pg.h"

START_TEST(test_long)
{
  long v = 7;

  ck_assert_int_eq(num_parse_long("42", 0, 100, &v), 0);
  ck_assert_int_eq(v, 42);
  ck_assert_int_eq(num_parse_long("-3", -5, 5, &v), 0);
  ck_assert_int_eq(v, -3);
  ck_assert_int_eq(num_parse_long("+3", 0, 5, &v), 0);
  ck_assert_int_eq(v, 3);
  ck_assert_int_eq(num_parse_long("0", 0, 0, &v), 0);
  /* Not a number: the whole string or nothing. */
  v = 7;
  ck_assert_int_eq(num_parse_long("", 0, 100, &v), -EINVAL);
  ck_assert_int_eq(num_parse_long(" 4", 0, 100, &v), -EINVAL);
  ck_assert_int_eq(num_parse_long("4 ", 0, 100, &v), -EINVAL);
  ck_assert_int_eq(num_parse_long("4x", 0, 100, &v), -EINVAL);
  ck_assert_int_eq(num_parse_long("0x10", 0, 100, &v), -EINVAL);
  ck_assert_int_eq(num_parse_long("-", 0, 100, &v), -EINVAL);
  ck_assert_int_eq(num_parse_long("lots", 0, 100, &v), -EINVAL);
  /* Out of range, both ends included. */
  ck_assert_int_eq(num_parse_long("101", 0, 100, &v), -ERANGE);
  ck_assert_int_eq(num_parse_long("-1", 0, 100, &v), -ERANGE);
  ck_assert_int_eq(num_parse_long("100", 0, 100, &v), 0);
  ck_assert_int_eq(v, 100);
  v = 7;
  ck_assert_int_eq(num_parse_long("99999999999999999999", LONG_MIN,
                                   LONG_MAX, &v), -ERANGE);
  ck_assert_int_eq(num_parse_long("0000000000000000000000000000000001",
                                   0, 10, &v), -ERANGE);
  ck_assert_int_eq(v, 7);    /* untouched on error */
}
END_TEST

START_TEST(test_long_n)
{
  long v = 0;

  ck_assert_int_eq(num_parse_long_n("12(x3)", 2, 0, 100, &v), 0);
  ck_assert_int_eq(v, 12);
  ck_assert_int_eq(num_parse_long_n("4096\n", 4, 0, 1 << 20, &v), 0);
  ck_assert_int_eq(v, 4096);
  ck_assert_int_eq(num_parse_long_n("(x3)", 0, 0, 100, &v), -EINVAL);
}
END_TEST

START_TEST(test_size)
{
  size_t v = 7;

  ck_assert_int_eq(num_parse_count("65536", 1, SIZE_MAX, &v), 0);
  ck_assert_uint_eq(v, 65536);
  ck_assert_int_eq(num_parse_count("18446744073709551615", 0, SIZE_MAX,
                                   &v), 0);
  ck_assert_uint_eq(v, SIZE_MAX);
  v = 7;
  ck_assert_int_eq(num_parse_count("18446744073709551616", 0, SIZE_MAX,
                                   &v), -ERANGE);
  ck_assert_int_eq(num_parse_count("-1", 0, SIZE_MAX, &v), -EINVAL);
  ck_assert_int_eq(num_parse_count("+1", 0, SIZE_MAX, &v), -EINVAL);
  ck_assert_int_eq(num_parse_count("1k", 0, SIZE_MAX, &v), -EINVAL);
  ck_assert_int_eq(num_parse_count("", 0, SIZE_MAX, &v), -EINVAL);
  ck_assert_int_eq(num_parse_count("9", 10, 20, &v), -ERANGE);
  ck_assert_int_eq(num_parse_count("21", 10, 20, &v), -ERANGE);
  ck_assert_uint_eq(v, 7);
}
END_TEST

START_TEST(test_double)
{
  double v = 7;

  ck_assert_int_eq(num_parse_double("0.25", 0, 1, &v), 0);
  ck_assert_double_eq(v, 0.25);
  ck_assert_int_eq(num_parse_double("1e3", 0, 1e9, &v), 0);
  ck_assert_double_eq(v, 1000);
  ck_assert_int_eq(num_parse_double("1e-400", 0, 1, &v), 0);
  ck_assert_double_eq(v, 0);
  v = 7;
  ck_assert_int_eq(num_parse_double("inf", 0, DBL_MAX, &v), -EINVAL);
  ck_assert_int_eq(num_parse_double("nan", 0, DBL_MAX, &v), -EINVAL);
  ck_assert_int_eq(num_parse_double("0x10", 0, DBL_MAX, &v), -EINVAL);
  ck_assert_int_eq(num_parse_double(" 1", 0, DBL_MAX, &v), -EINVAL);
  ck_assert_int_eq(num_parse_double("1.5s", 0, DBL_MAX, &v), -EINVAL);
  ck_assert_int_eq(num_parse_double("", 0, DBL_MAX, &v), -EINVAL);
  ck_assert_int_eq(num_parse_double("1e999", 0, DBL_MAX, &v), -ERANGE);
  ck_assert_int_eq(num_parse_double("-1", 0, 1, &v), -ERANGE);
  ck_assert_int_eq(num_parse_double("2", 0, 1, &v), -ERANGE);
  ck_assert_double_eq(v, 7);
}
END_TEST

/* The options' defaults: every field from the environment. */
START_TEST(test_options_init)
{
  struct pg_options o = PG_OPTIONS_INIT;

  ck_assert_int_eq(o.rank, -1);
  ck_assert_int_eq(o.world_size, -1);
  ck_assert_int_eq(o.local_rank, -1);
  ck_assert_int_eq(o.local_world_size, -1);
  ck_assert_ptr_null(o.master_addr);
  ck_assert_int_eq(o.master_port, 0);
  ck_assert_int_eq(o.backend, PG_BACKEND_AUTO);
  ck_assert_double_eq(o.timeout, 0);
  ck_assert_ptr_null(o.host_id);
  ck_assert_int_eq(o.device, -1);
  ck_assert_ptr_null(o.job_token);
}
END_TEST

/* A bad launcher variable or knob fails pg_init with its name. */
static void init_fails_naming(const char *var, const char *val,
                              const char *want)
{
  struct pg_options o = PG_OPTIONS_INIT;
  pg_group *g = NULL;

  setenv(var, val, 1);
  ck_assert_int_eq(pg_init(&o, &g), -EINVAL);
  ck_assert_ptr_null(g);
  ck_assert_msg(strstr(pg_last_error(), want), "'%s' lacks '%s'",
                pg_last_error(), want);
}

START_TEST(test_env_world_size)
{
  init_fails_naming("WORLD_SIZE", "2x",
                    "WORLD_SIZE is '2x', expected an integer 1..");
}
END_TEST

START_TEST(test_env_rank)
{
  setenv("WORLD_SIZE", "2", 1);
  init_fails_naming("RANK", "2", "RANK is '2', expected an integer 0..1");
}
END_TEST

START_TEST(test_env_timeout)
{
  setenv("WORLD_SIZE", "1", 1);
  setenv("RANK", "0", 1);
  init_fails_naming("PG_TIMEOUT", "inf",
                    "PG_TIMEOUT is 'inf', expected seconds > 0");
}
END_TEST

/* PG_SHM_BUF was ignored when bad: now every rank fails at once. */
START_TEST(test_env_shm_buf)
{
  struct pg__setup s = { .n = 2, .me = 1, .timeout = 1 };
  struct pg__comm *c = NULL;

  setenv("PG_SHM_BUF", "1000", 1);
  ck_assert_int_eq(pg__shm_create(&s, &c), -EINVAL);
  ck_assert_ptr_null(c);
  ck_assert_msg(strstr(pg_last_error(), "PG_SHM_BUF is '1000', expected "
                       "bytes 65536..268435456"), "%s", pg_last_error());
}
END_TEST

static Suite *number_suite(void)
{
  Suite *s = suite_create("pg_number");
  TCase *tc = tcase_create("number");

  tcase_add_test(tc, test_long);
  tcase_add_test(tc, test_long_n);
  tcase_add_test(tc, test_size);
  tcase_add_test(tc, test_double);
  tcase_add_test(tc, test_options_init);
  suite_add_tcase(s, tc);
  /* Knobs are read once per process: each of these runs in its own
   * (Check forks each test by default). */
  tc = tcase_create("env");
  tcase_add_test(tc, test_env_world_size);
  tcase_add_test(tc, test_env_rank);
  tcase_add_test(tc, test_env_timeout);
  tcase_add_test(tc, test_env_shm_buf);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(number_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
