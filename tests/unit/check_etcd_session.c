/* check_etcd_session.c -- unit tests for launcher/etcd_session.c: the
 * lease TTL rule and the session's life on a loop without etcd (the
 * calls to etcd are exercised by the t_etcd_* scenarios, on a real
 * etcd). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_session.h"

START_TEST(test_ttl)
{
  /* Whole seconds, rounded up, from interval x misses. */
  ck_assert_int_eq(etcd_session_ttl(1.0, 3), 3);
  ck_assert_int_eq(etcd_session_ttl(0.7, 3), 3);
  ck_assert_int_eq(etcd_session_ttl(5.0, 3), 15);
  /* etcd's smallest lease. */
  ck_assert_int_eq(etcd_session_ttl(0.25, 2), ETCD_SESSION_MIN_TTL);
  ck_assert_int_eq(etcd_session_ttl(0.5, 1), ETCD_SESSION_MIN_TTL);
  /* Bounded far below an int's overflow. */
  ck_assert_int_eq(etcd_session_ttl(3600, 1000), 1000000);
}
END_TEST

static int lost_calls, closed_calls;

static void on_lost(void *ctx)
{
  (void)ctx;
  lost_calls++;
}

static void on_closed(void *ctx)
{
  ck_assert_ptr_eq(ctx, &closed_calls);
  closed_calls++;
}

START_TEST(test_life_without_etcd)
{
  struct etcd_session s;
  uv_loop_t loop;

  ck_assert_int_eq(uv_loop_init(&loop), 0);
  lost_calls = closed_calls = 0;
  etcd_session_init(&s, &loop, "job1", "/cdrun/rdzv/job1/alive/", 1.0, 3,
                    on_lost, on_closed, &closed_calls);
  ck_assert_int_eq(s.ttl, 3);
  ck_assert_str_eq(s.lease, "");
  /* No lease, no client: nothing to revoke, no call made. */
  ck_assert_int_eq(etcd_session_revoke(&s, NULL, NULL), -ENOENT);
  etcd_session_stop(&s);
  etcd_session_close(&s);
  ck_assert_int_eq(closed_calls, 0);    /* on the loop, not inside */
  ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
  ck_assert_int_eq(closed_calls, 1);
  ck_assert_int_eq(lost_calls, 0);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *etcd_session_suite(void)
{
  Suite *s = suite_create("etcd_session");
  TCase *tc = tcase_create("session");

  tcase_add_test(tc, test_ttl);
  tcase_add_test(tc, test_life_without_etcd);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(etcd_session_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
