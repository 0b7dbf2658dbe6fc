/* check_backoff.c -- unit tests for launcher/backoff.c: the restart
 * backoff policy (Note [restart backoff]) and CDRUN_RESTART_BACKOFF. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"

static const struct backoff_conf conf = { 1.0, 8.0, 60.0 };

/* A crash loop: at once, then 1, 2, 4, 8, 8 ... */
START_TEST(test_doubles_to_cap)
{
  struct backoff b;
  const double want[] = { 0, 1, 2, 4, 8, 8, 8 };
  size_t i;

  memset(&b, 0, sizeof b);
  for (i = 0; i < sizeof want / sizeof want[0]; i++)
    ck_assert_double_eq(backoff_next(&b, &conf, 1.4, "1:disk full"),
                        want[i]);
  ck_assert_int_eq(b.same, 7);
  ck_assert_int_eq(b.fast, 7);
}
END_TEST

/* An attempt that ran the healthy interval resets the delay. */
START_TEST(test_healthy_resets)
{
  struct backoff b;

  memset(&b, 0, sizeof b);
  backoff_next(&b, &conf, 1, "x");
  backoff_next(&b, &conf, 1, "x");
  ck_assert_double_eq(backoff_next(&b, &conf, 1, "x"), 2);
  ck_assert_double_eq(backoff_next(&b, &conf, 60, "x"), 0);
  ck_assert_int_eq(b.fast, 0);
  ck_assert_double_eq(backoff_next(&b, &conf, 1, "x"), 0);
  ck_assert_double_eq(backoff_next(&b, &conf, 1, "x"), 1);
  /* The cause repeated all along, healthy or not. */
  ck_assert_int_eq(b.same, 6);
}
END_TEST

/* The same-cause count restarts with another cause; the delay does not
 * care about causes (a loop of different crashes is still a loop). */
START_TEST(test_same_cause)
{
  struct backoff b;

  memset(&b, 0, sizeof b);
  backoff_next(&b, &conf, 1, "1:a");
  backoff_next(&b, &conf, 1, "1:a");
  ck_assert_int_eq(b.same, 2);
  ck_assert_double_eq(backoff_next(&b, &conf, 1, "2:b"), 2);
  ck_assert_int_eq(b.same, 1);
  backoff_next(&b, &conf, 1, NULL);
  ck_assert_int_eq(b.same, 0);
  backoff_next(&b, &conf, 1, NULL);
  ck_assert_int_eq(b.same, 0);
}
END_TEST

START_TEST(test_off)
{
  struct backoff_conf off = { 0, 60, 60 };
  struct backoff b;
  int i;

  memset(&b, 0, sizeof b);
  for (i = 0; i < 50; i++)
    ck_assert_double_eq(backoff_next(&b, &off, 0.1, "x"), 0);
}
END_TEST

/* Thousands of failures: no overflow, the cap holds. */
START_TEST(test_long_loop)
{
  struct backoff_conf c = { 1e-3, 1e7, 1e7 };
  struct backoff b;
  double d = 0;
  int i;

  memset(&b, 0, sizeof b);
  for (i = 0; i < 5000; i++)
    d = backoff_next(&b, &c, 0, "x");
  ck_assert_double_eq(d, 1e7);
}
END_TEST

static const struct {
  const char *s;
  int rc;
  double initial, max, healthy;
} parses[] = {
  { "2", 0, 2, 60, 60 },
  { "0.5:4", 0, 0.5, 4, 60 },
  { "0.5:4:10", 0, 0.5, 4, 10 },
  { "0", 0, 0, 60, 60 },
  { "", -EINVAL, 1, 60, 60 },
  { "1:", -EINVAL, 1, 60, 60 },
  { ":1", -EINVAL, 1, 60, 60 },
  { "1::2", -EINVAL, 1, 60, 60 },
  { "1:2:3:4", -EINVAL, 1, 60, 60 },
  { "abc", -EINVAL, 1, 60, 60 },
  { "-1", -EINVAL, 1, 60, 60 },
  { "1e30", -EINVAL, 1, 60, 60 },
  { "5:2", -EINVAL, 1, 60, 60 },
};

START_TEST(test_parse)
{
  struct backoff_conf c = BACKOFF_CONF_DEFAULT;
  char err[256] = "";
  int rc = backoff_conf_parse(parses[_i].s, &c, err, sizeof err);

  ck_assert_int_eq(rc, parses[_i].rc);
  ck_assert_double_eq(c.initial, parses[_i].initial);
  ck_assert_double_eq(c.max, parses[_i].max);
  ck_assert_double_eq(c.healthy, parses[_i].healthy);
  if (rc)
    ck_assert_ptr_nonnull(strstr(err, BACKOFF_ENV));
}
END_TEST

int main(void)
{
  Suite *s = suite_create("backoff");
  TCase *tc = tcase_create("policy");
  SRunner *sr;
  int failed;

  tcase_add_test(tc, test_doubles_to_cap);
  tcase_add_test(tc, test_healthy_resets);
  tcase_add_test(tc, test_same_cause);
  tcase_add_test(tc, test_off);
  tcase_add_test(tc, test_long_loop);
  tcase_add_loop_test(tc, test_parse, 0, sizeof parses / sizeof parses[0]);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
