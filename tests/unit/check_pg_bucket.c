/* check_pg_bucket.c -- unit tests for pg_bucket_assign (libpg/ddp/bucket.c). */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pg.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

/* n f32 parameters of the given byte sizes (multiples of 4). */
static void f32_specs(struct pg_param_spec *p, const size_t *bytes, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    p[i].numel = bytes[i] / 4;
    p[i].dtype = PG_F32;
  }
}

static void expect_buckets(const size_t *got, const size_t *want, size_t n)
{
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i], "parameter %zu: bucket %zu, want %zu",
                  i, got[i], want[i]);
}

/* DDP's rules in reverse registration order: the first bucket closes at
 * 1 MiB with the crossing parameter inside, later ones at the cap, and a
 * parameter landing exactly on the cap closes its bucket. */
START_TEST(test_ddp_rules)
{
  size_t bytes[] = { 1 * MIB, 4 * MIB, 2 * MIB, 3 * MIB, 3 * MIB / 4,
                     MIB / 2 };
  size_t want[] = { 3, 2, 1, 1, 0, 0 };
  struct pg_param_spec p[6];
  size_t b[6], nb = 99;

  f32_specs(p, bytes, 6);
  ck_assert_int_eq(pg_bucket_assign(p, 6, NULL, MIB, 4 * MIB, b, &nb), 0);
  ck_assert_uint_eq(nb, 4);
  expect_buckets(b, want, 6);
}
END_TEST

/* The last limit repeats: many equal parameters, each bucket after the
 * first holds cap / size of them. */
START_TEST(test_last_limit_repeats)
{
  struct pg_param_spec p[20];
  size_t b[20], nb = 0, i, pos;

  for (i = 0; i < 20; i++) {
    p[i].numel = 256;              /* 1 KiB of f32 */
    p[i].dtype = PG_F32;
  }
  ck_assert_int_eq(pg_bucket_assign(p, 20, NULL, 2 * KIB, 6 * KIB, b, &nb),
                   0);
  /* walk position 0,1 -> bucket 0; then 6 per bucket: 2..7, 8..13,
   * 14..19 */
  ck_assert_uint_eq(nb, 4);
  for (i = 0; i < 20; i++) {
    pos = 19 - i;
    ck_assert_uint_eq(b[i], pos < 2 ? 0 : 1 + (pos - 2) / 6);
  }
}
END_TEST

/* The defaults DDP uses: 1 MiB then 25 MiB. */
START_TEST(test_ddp_default_caps)
{
  size_t bytes[] = { 10 * MIB, 10 * MIB, 10 * MIB, 10 * MIB, 512 * KIB,
                     512 * KIB };
  size_t want[] = { 2, 1, 1, 1, 0, 0 };
  struct pg_param_spec p[6];
  size_t b[6], nb = 0;

  f32_specs(p, bytes, 6);
  ck_assert_int_eq(pg_bucket_assign(p, 6, NULL, MIB, 25 * MIB, b, &nb), 0);
  ck_assert_uint_eq(nb, 3);
  expect_buckets(b, want, 6);
}
END_TEST

/* One bucket per dtype at a time, each dtype with its own cap list;
 * buckets are numbered in the order they are opened. */
START_TEST(test_mixed_dtypes)
{
  struct pg_param_spec p[6] = {
    { 256, PG_F32 }, { 128, PG_F64 }, { 256, PG_F32 },
    { 128, PG_F64 }, { 256, PG_F32 }, { 128, PG_F64 },
  };
  size_t b[6], nb = 0;
  /* reverse walk: 5 f64 -> A, 4 f32 -> B, 3 f64 -> A, 2 f32 -> B, ... */
  size_t big[] = { 1, 0, 1, 0, 1, 0 };
  /* first cap 1 KiB closes each dtype's first bucket after its first
   * parameter; then 2 KiB: the remaining two of each dtype share one.
   * Walk: 5 f64 -> 0 (closed), 4 f32 -> 1 (closed), 3 f64 -> 2,
   * 2 f32 -> 3, 1 f64 -> 2, 0 f32 -> 3. */
  size_t small[] = { 3, 2, 3, 2, 1, 0 };

  ck_assert_int_eq(pg_bucket_assign(p, 6, NULL, 64 * KIB, 64 * KIB, b,
                                    &nb), 0);
  ck_assert_uint_eq(nb, 2);
  expect_buckets(b, big, 6);
  ck_assert_int_eq(pg_bucket_assign(p, 6, NULL, KIB, 2 * KIB, b, &nb), 0);
  ck_assert_uint_eq(nb, 4);
  expect_buckets(b, small, 6);
}
END_TEST

/* An explicit order (the recorded ready order of a rebuild). */
START_TEST(test_custom_order)
{
  size_t bytes[] = { KIB, KIB, KIB, KIB, KIB };
  size_t order[] = { 2, 0, 4, 1, 3 };
  /* first cap 1 KiB: {2}; then 2 KiB: {0, 4}, {1, 3} */
  size_t want[] = { 1, 2, 0, 2, 1 };
  struct pg_param_spec p[5];
  size_t b[5], nb = 0;

  f32_specs(p, bytes, 5);
  ck_assert_int_eq(pg_bucket_assign(p, 5, order, KIB, 2 * KIB, b, &nb), 0);
  ck_assert_uint_eq(nb, 3);
  expect_buckets(b, want, 5);
}
END_TEST

START_TEST(test_bad_order)
{
  size_t bytes[] = { KIB, KIB, KIB };
  size_t dup[] = { 0, 1, 1 }, out[] = { 0, 1, 3 };
  struct pg_param_spec p[3];
  size_t b[3], nb = 7;

  f32_specs(p, bytes, 3);
  ck_assert_int_eq(pg_bucket_assign(p, 3, dup, KIB, KIB, b, &nb), -EINVAL);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), "twice"));
  ck_assert_int_eq(pg_bucket_assign(p, 3, out, KIB, KIB, b, &nb), -EINVAL);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), "order[2]"));
  ck_assert_uint_eq(nb, 7);
}
END_TEST

START_TEST(test_bad_args)
{
  struct pg_param_spec p[2] = { { 4, PG_F32 }, { 4, (pg_dtype)42 } };
  size_t b[2], nb;

  ck_assert_int_eq(pg_bucket_assign(p, 2, NULL, KIB, KIB, b, &nb),
                   -EINVAL);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), "parameter 1"));
  ck_assert_int_eq(pg_bucket_assign(p, 1, NULL, KIB, KIB, b, NULL),
                   -EINVAL);
  ck_assert_int_eq(pg_bucket_assign(NULL, 1, NULL, KIB, KIB, b, &nb),
                   -EINVAL);
  p[1].dtype = PG_F64;
  p[1].numel = SIZE_MAX / 4;
  ck_assert_int_eq(pg_bucket_assign(p, 2, NULL, KIB, KIB, b, &nb),
                   -EINVAL);
}
END_TEST

/* A parameter bigger than every cap gets a bucket of its own. */
START_TEST(test_single_huge)
{
  struct pg_param_spec one = { 100 * MIB, PG_F32 };
  struct pg_param_spec p[3] = {
    { 16, PG_F32 }, { 100 * MIB, PG_F32 }, { 16, PG_F32 },
  };
  size_t b[3], nb = 0, want[] = { 2, 1, 0 };

  ck_assert_int_eq(pg_bucket_assign(&one, 1, NULL, MIB, 25 * MIB, b, &nb),
                   0);
  ck_assert_uint_eq(nb, 1);
  ck_assert_uint_eq(b[0], 0);
  /* 2 (64 B) opens bucket 0, 1 crosses the first cap inside it... */
  ck_assert_int_eq(pg_bucket_assign(p, 3, NULL, MIB, 25 * MIB, b, &nb), 0);
  ck_assert_uint_eq(nb, 2);
  ck_assert_uint_eq(b[2], 0);
  ck_assert_uint_eq(b[1], 0);
  ck_assert_uint_eq(b[0], 1);
  /* ...and with a tiny first cap each one is alone. */
  ck_assert_int_eq(pg_bucket_assign(p, 3, NULL, 64, 64, b, &nb), 0);
  ck_assert_uint_eq(nb, 3);
  expect_buckets(b, want, 3);
}
END_TEST

START_TEST(test_empty)
{
  size_t nb = 5;

  ck_assert_int_eq(pg_bucket_assign(NULL, 0, NULL, MIB, MIB, NULL, &nb), 0);
  ck_assert_uint_eq(nb, 0);
}
END_TEST

/* numel 0 parameters add nothing: they join the open bucket, or open one
 * of their own; a list of nothing but them is one bucket. */
START_TEST(test_zero_numel)
{
  struct pg_param_spec p[4] = {
    { 0, PG_F32 }, { 256, PG_F32 }, { 0, PG_F32 }, { 0, PG_F32 },
  };
  struct pg_param_spec z[3] = { { 0, PG_F32 }, { 0, PG_F64 }, { 0, PG_F32 } };
  size_t b[4], nb = 0, want[] = { 1, 0, 0, 0 }, wz[] = { 0, 1, 0 };

  /* walk 3, 2 (0 B, open), 1 (1 KiB: reaches the cap, closes), 0 -> new */
  ck_assert_int_eq(pg_bucket_assign(p, 4, NULL, KIB, KIB, b, &nb), 0);
  ck_assert_uint_eq(nb, 2);
  expect_buckets(b, want, 4);
  ck_assert_int_eq(pg_bucket_assign(z, 3, NULL, KIB, KIB, b, &nb), 0);
  ck_assert_uint_eq(nb, 2);
  expect_buckets(b, wz, 3);
}
END_TEST

/* Random lists against the rules, stated as invariants: every bucket has
 * one dtype and holds a contiguous run of its dtype's parameters in walk
 * order; every bucket but the last of its dtype reached its limit; no
 * bucket reached it before its last parameter; buckets are numbered by
 * their first parameter's position. */
START_TEST(test_random_invariants)
{
  enum { N = 64 };
  struct pg_param_spec p[N];
  size_t order[N], b[N], nb, i, k, j, t;
  unsigned seed = 12345 + (unsigned)_i;

  for (int round = 0; round < 200; round++) {
    size_t n = 1 + (size_t)(rand_r(&seed) % N);
    size_t first = (size_t)(rand_r(&seed) % 4096);
    size_t cap = (size_t)(rand_r(&seed) % 16384);
    size_t size[N] = { 0 }, last[N] = { 0 }, cnt[N] = { 0 }, opened = 0;
    size_t ndt[PG_DTYPE_COUNT] = { 0 }, seq[PG_DTYPE_COUNT][N];
    pg_dtype dt_of[N];
    bool seen[N] = { false }, use_order = rand_r(&seed) % 2;

    for (i = 0; i < n; i++) {
      p[i].numel = (size_t)(rand_r(&seed) % 1500);
      p[i].dtype = (pg_dtype)(rand_r(&seed) % PG_DTYPE_COUNT);
      order[i] = i;
    }
    for (i = n - 1; i > 0; i--) {
      j = (size_t)rand_r(&seed) % (i + 1);
      t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    ck_assert_int_eq(pg_bucket_assign(p, n, use_order ? order : NULL,
                                      first, cap, b, &nb), 0);
    ck_assert_uint_le(nb, n);
    for (k = 0; k < n; k++) {
      i = use_order ? order[k] : n - 1 - k;
      ck_assert_uint_lt(b[i], nb);
      if (!seen[b[i]]) {
        ck_assert_uint_eq(b[i], opened);
        opened++;
        seen[b[i]] = true;
        dt_of[b[i]] = p[i].dtype;
        seq[p[i].dtype][ndt[p[i].dtype]++] = b[i];
      }
      ck_assert_int_eq(dt_of[b[i]], p[i].dtype);
      /* contiguous per dtype: always the dtype's newest bucket */
      ck_assert_uint_eq(seq[p[i].dtype][ndt[p[i].dtype] - 1], b[i]);
      last[b[i]] = p[i].numel * pg_dtype_size(p[i].dtype);
      size[b[i]] += last[b[i]];
      cnt[b[i]]++;
    }
    ck_assert_uint_eq(opened, nb);
    for (t = 0; t < PG_DTYPE_COUNT; t++) {
      for (j = 0; j < ndt[t]; j++) {
        size_t id = seq[t][j], limit = j == 0 ? first : cap;

        if (j + 1 < ndt[t])
          ck_assert_uint_ge(size[id], limit);
        /* closed by its last parameter, not earlier */
        if (cnt[id] > 1 && size[id] >= limit)
          ck_assert_uint_lt(size[id] - last[id], limit);
      }
    }
  }
}
END_TEST

static Suite *pg_bucket_suite(void)
{
  Suite *s = suite_create("pg_bucket");
  TCase *tc = tcase_create("assign");

  tcase_add_test(tc, test_ddp_rules);
  tcase_add_test(tc, test_last_limit_repeats);
  tcase_add_test(tc, test_ddp_default_caps);
  tcase_add_test(tc, test_mixed_dtypes);
  tcase_add_test(tc, test_custom_order);
  tcase_add_test(tc, test_bad_order);
  tcase_add_test(tc, test_bad_args);
  tcase_add_test(tc, test_single_huge);
  tcase_add_test(tc, test_empty);
  tcase_add_test(tc, test_zero_numel);
  tcase_add_loop_test(tc, test_random_invariants, 0, 4);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(pg_bucket_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
