/* check_pg_composed.c -- unit tests for libpg/core/composed.c: how one
 * operation reaches a backend, following the capabilities in the
 * backend's ops table (in_place_gathers, half_reductions) rather than its
 * name.  A recording backend stands in for a real one. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"

/* What the recording backend was last asked. */
static struct {
  int calls;
  pg_dtype dtype;
  const void *send;
  void *recv;
} seen;

static int rec_all_reduce(struct pg__comm *c, const void *send, void *recv,
                          size_t count, pg_dtype t, pg_op op,
                          double deadline)
{
  seen.calls++;
  seen.dtype = t;
  seen.send = send;
  seen.recv = recv;
  return 0;
}

static int rec_all_gather(struct pg__comm *c, const void *send, void *recv,
                          size_t count, pg_dtype t, double deadline)
{
  seen.calls++;
  seen.dtype = t;
  seen.send = send;
  seen.recv = recv;
  return 0;
}

static const struct pg__comm_ops plain_ops = {
  .name = "plain", .all_reduce = rec_all_reduce,
  .all_gather = rec_all_gather,
};
static const struct pg__comm_ops capable_ops = {
  .name = "capable", .all_reduce = rec_all_reduce,
  .all_gather = rec_all_gather,
  .in_place_gathers = true, .half_reductions = true,
};

/* A group of two, rank 1, over a backend with these ops. */
static void group_on(pg_group *g, struct pg__comm *c,
                     const struct pg__comm_ops *ops)
{
  memset(g, 0, sizeof *g);
  memset(&seen, 0, sizeof seen);
  c->ops = ops;
  g->comm = c;
  g->rank = 1;
  g->size = 2;
  g->timeout = 10;
}

/* Note [half precision]: a backend without half_reductions gets f32. */
START_TEST(test_half_widened)
{
  pg_group g;
  struct pg__comm c;
  uint16_t buf[4] = { 0 };
  struct pg_work w = { .kind = W_ALL_REDUCE, .send = buf, .recv = buf,
                       .count = 4, .dtype = PG_F16, .op = PG_SUM };

  group_on(&g, &c, &plain_ops);
  ck_assert_int_eq(pg__composed_run(&g, &w), 0);
  ck_assert_int_eq(seen.calls, 1);
  ck_assert_int_eq(seen.dtype, PG_F32);
  ck_assert_ptr_ne(seen.send, buf);
}
END_TEST

START_TEST(test_half_native)
{
  pg_group g;
  struct pg__comm c;
  uint16_t buf[4] = { 0 };
  struct pg_work w = { .kind = W_ALL_REDUCE, .send = buf, .recv = buf,
                       .count = 4, .dtype = PG_BF16, .op = PG_AVG };

  group_on(&g, &c, &capable_ops);
  ck_assert_int_eq(pg__composed_run(&g, &w), 0);
  ck_assert_int_eq(seen.calls, 1);
  ck_assert_int_eq(seen.dtype, PG_BF16);
  ck_assert_ptr_eq(seen.send, buf);
}
END_TEST

/* Note [in-place gathers]: send == recv + rank * count goes through a
 * temporary unless the backend takes it as it is. */
START_TEST(test_in_place_gather)
{
  pg_group g;
  struct pg__comm c;
  float buf[8] = { 0 };
  struct pg_work w = { .kind = W_ALL_GATHER, .send = buf + 4, .recv = buf,
                       .count = 4, .dtype = PG_F32 };

  group_on(&g, &c, &plain_ops);
  ck_assert_int_eq(pg__composed_run(&g, &w), 0);
  ck_assert_int_eq(seen.calls, 1);
  ck_assert_ptr_ne(seen.send, buf + 4);
  ck_assert_ptr_eq(seen.recv, buf);

  group_on(&g, &c, &capable_ops);
  ck_assert_int_eq(pg__composed_run(&g, &w), 0);
  ck_assert_int_eq(seen.calls, 1);
  ck_assert_ptr_eq(seen.send, buf + 4);
}
END_TEST

static Suite *composed_suite(void)
{
  Suite *s = suite_create("pg_composed");
  TCase *tc = tcase_create("capabilities");

  tcase_add_test(tc, test_half_widened);
  tcase_add_test(tc, test_half_native);
  tcase_add_test(tc, test_in_place_gather);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(composed_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
