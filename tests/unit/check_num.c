/* check_num.c -- unit tests for proto/util/num.c: the one rule for
 * numbers a user types. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "num.h"

static const struct {
  const char *s;
  long lo, hi;
  int rc;
  long want;
} longs[] = {
  { "0", 0, 10, 0, 0 },
  { "10", 0, 10, 0, 10 },
  { "+4", 1, 10, 0, 4 },
  { "-1", -5, 5, 0, -1 },
  { "11", 0, 10, -ERANGE, 0 },
  { "-1", 0, 10, -ERANGE, 0 },
  { "70000", 1, NUM_NPROC_MAX, -ERANGE, 0 },
  { "99999999999999999999", 0, LONG_MAX, -ERANGE, 0 },
  { "99999999999999999999999999999999999", 0, LONG_MAX, -ERANGE, 0 },
  { "", 0, 10, -EINVAL, 0 },
  { "-", 0, 10, -EINVAL, 0 },
  { " 1", 0, 10, -EINVAL, 0 },
  { "1 ", 0, 10, -EINVAL, 0 },
  { "1.0", 0, 10, -EINVAL, 0 },
  { "0x1", 0, 10, -EINVAL, 0 },
  { "1e3", 0, 10000, -EINVAL, 0 },
};

START_TEST(test_long)
{
  long v = -777;
  int rc = num_parse_long(longs[_i].s, longs[_i].lo, longs[_i].hi, &v);

  ck_assert_msg(rc == longs[_i].rc, "'%s': rc %d, want %d", longs[_i].s, rc,
                longs[_i].rc);
  ck_assert_int_eq(v, rc == 0 ? longs[_i].want : -777);
}
END_TEST

START_TEST(test_long_n)
{
  long v = 0;

  /* Only the first n bytes count: "12,3" is 12, then ','. */
  ck_assert_int_eq(num_parse_long_n("12,3", 2, 0, 100, &v), 0);
  ck_assert_int_eq(v, 12);
  ck_assert_int_eq(num_parse_long_n("12,3", 3, 0, 100, &v), -EINVAL);
  ck_assert_int_eq(num_parse_long_n("12", 0, 0, 100, &v), -EINVAL);
}
END_TEST

static const struct {
  const char *s;
  int64_t lo, hi;
  int rc;
  int64_t want;
} i64s[] = {
  { "0", INT64_MIN, INT64_MAX, 0, 0 },
  { "-0", INT64_MIN, INT64_MAX, 0, 0 },
  { "+17", INT64_MIN, INT64_MAX, 0, 17 },
  { "-12", INT64_MIN, INT64_MAX, 0, -12 },
  { "9223372036854775807", INT64_MIN, INT64_MAX, 0, INT64_MAX },
  { "-9223372036854775808", INT64_MIN, INT64_MAX, 0, INT64_MIN },
  { "9223372036854775808", INT64_MIN, INT64_MAX, -ERANGE, 0 },
  { "-9223372036854775809", INT64_MIN, INT64_MAX, -ERANGE, 0 },
  { "99999999999999999999", INT64_MIN, INT64_MAX, -ERANGE, 0 },
  /* Any number of digits: leading zeros do not overflow. */
  { "000000000000000000000000000000000000000042", 0, 100, 0, 42 },
  { "-000000000000000000000000000000000000000001", -1, 0, 0, -1 },
  { "101", 0, 100, -ERANGE, 0 },
  { "-1", 0, 100, -ERANGE, 0 },
  { "", INT64_MIN, INT64_MAX, -EINVAL, 0 },
  { "+", INT64_MIN, INT64_MAX, -EINVAL, 0 },
  { "--1", INT64_MIN, INT64_MAX, -EINVAL, 0 },
  { " 1", INT64_MIN, INT64_MAX, -EINVAL, 0 },
  { "1 ", INT64_MIN, INT64_MAX, -EINVAL, 0 },
  { "0x10", INT64_MIN, INT64_MAX, -EINVAL, 0 },
  { "1.5", INT64_MIN, INT64_MAX, -EINVAL, 0 },
};

START_TEST(test_i64)
{
  int64_t v = -777;
  int rc = num_parse_i64_n(i64s[_i].s, strlen(i64s[_i].s), i64s[_i].lo,
                           i64s[_i].hi, &v);

  ck_assert_msg(rc == i64s[_i].rc, "'%s': rc %d, want %d", i64s[_i].s, rc,
                i64s[_i].rc);
  ck_assert_int_eq(v, rc == 0 ? i64s[_i].want : -777);
}
END_TEST

START_TEST(test_i64_n)
{
  int64_t v = 0;

  /* Only the first n bytes count; a NUL among them is not a digit. */
  ck_assert_int_eq(num_parse_i64_n("-12,3", 3, -100, 100, &v), 0);
  ck_assert_int_eq(v, -12);
  ck_assert_int_eq(num_parse_i64_n("12\0003", 4, -100, 100, &v), -EINVAL);
  ck_assert_int_eq(num_parse_i64_n("12", 0, -100, 100, &v), -EINVAL);
}
END_TEST

static const struct {
  const char *s;
  double lo, hi;
  int rc;
  double want;
} doubles[] = {
  { "0", 0, NUM_SECONDS_MAX, 0, 0 },
  { "0.5", 0, NUM_SECONDS_MAX, 0, 0.5 },
  { "1e3", 0, NUM_SECONDS_MAX, 0, 1000 },
  { "10000000", 0, NUM_SECONDS_MAX, 0, 1e7 },
  { "1e-400", 0, 1, 0, 0 },
  { "10000001", 0, NUM_SECONDS_MAX, -ERANGE, 0 },
  { "1e30", 0, NUM_SECONDS_MAX, -ERANGE, 0 },
  { "1e999", 0, NUM_SECONDS_MAX, -ERANGE, 0 },
  { "-1", 0, NUM_SECONDS_MAX, -ERANGE, 0 },
  { "inf", 0, NUM_SECONDS_MAX, -EINVAL, 0 },
  { "nan", 0, NUM_SECONDS_MAX, -EINVAL, 0 },
  { "0x10", 0, NUM_SECONDS_MAX, -EINVAL, 0 },
  { " 1", 0, NUM_SECONDS_MAX, -EINVAL, 0 },
  { "", 0, NUM_SECONDS_MAX, -EINVAL, 0 },
  { "1.5.2", 0, NUM_SECONDS_MAX, -EINVAL, 0 },
  { "e", 0, NUM_SECONDS_MAX, -EINVAL, 0 },
};

START_TEST(test_double)
{
  double v = -777;
  int rc = num_parse_double(doubles[_i].s, doubles[_i].lo, doubles[_i].hi,
                            &v);

  ck_assert_msg(rc == doubles[_i].rc, "'%s': rc %d, want %d", doubles[_i].s,
                rc, doubles[_i].rc);
  if (rc == 0)
    ck_assert_double_eq(v, doubles[_i].want);
  else
    ck_assert_double_eq(v, -777);
}
END_TEST

static const struct {
  const char *s;
  size_t lo, hi;
  int rc;
  size_t want;
} sizes[] = {
  { "1", 1, (size_t)1 << 50, 0, 1 },
  { "16K", 1, (size_t)1 << 50, 0, 16 << 10 },
  { "16k", 1, (size_t)1 << 50, 0, 16 << 10 },
  { "8M", 1, (size_t)1 << 50, 0, 8 << 20 },
  { "2G", 1, (size_t)1 << 50, 0, (size_t)2 << 30 },
  { "1048576G", 1, (size_t)1 << 50, 0, (size_t)1 << 50 },
  { "1048577G", 1, (size_t)1 << 50, -ERANGE, 0 },
  { "99999999999999999999G", 1, SIZE_MAX, -ERANGE, 0 },
  { "17179869184G", 1, SIZE_MAX, -ERANGE, 0 },
  { "0", 1, 10, -ERANGE, 0 },
  { "0K", 1, 10, -ERANGE, 0 },
  { "", 1, 10, -EINVAL, 0 },
  { "K", 1, 10, -EINVAL, 0 },
  { "-1", 1, 10, -EINVAL, 0 },
  { "+1", 1, 10, -EINVAL, 0 },
  { " 1", 1, 10, -EINVAL, 0 },
  { "1KB", 1, 1 << 20, -EINVAL, 0 },
  { "1T", 1, 10, -EINVAL, 0 },
  { "1.5M", 1, 1 << 30, -EINVAL, 0 },
};

START_TEST(test_size)
{
  size_t v = 777;
  int rc = num_parse_size(sizes[_i].s, sizes[_i].lo, sizes[_i].hi, &v);

  ck_assert_msg(rc == sizes[_i].rc, "'%s': rc %d, want %d", sizes[_i].s, rc,
                sizes[_i].rc);
  ck_assert_uint_eq(v, rc == 0 ? sizes[_i].want : 777);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("num");
  TCase *tc = tcase_create("parse");
  SRunner *sr;
  int failed;

  tcase_add_loop_test(tc, test_long, 0, sizeof longs / sizeof longs[0]);
  tcase_add_test(tc, test_long_n);
  tcase_add_loop_test(tc, test_i64, 0, sizeof i64s / sizeof i64s[0]);
  tcase_add_test(tc, test_i64_n);
  tcase_add_loop_test(tc, test_double, 0,
                      sizeof doubles / sizeof doubles[0]);
  tcase_add_loop_test(tc, test_size, 0, sizeof sizes / sizeof sizes[0]);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
