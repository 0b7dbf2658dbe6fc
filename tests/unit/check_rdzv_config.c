/* check_rdzv_config.c -- --rdzv_conf keys (launcher/rdzv_config.c). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "rdzv_config.h"

static int resolve(const char *conf, struct rdzv_config *c, char *err,
                   size_t errlen, char *warn, size_t warnlen)
{
  char flag[256];
  char *argv[] = { "cdrun", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1",
                   flag, "t", NULL };
  struct cdrun_args a;
  int rc;

  snprintf(flag, sizeof flag, "--rdzv_conf=%s", conf);
  ck_assert_int_eq(args_parse(&a, 5, argv, NULL, err, errlen), 0);
  rc = rdzv_config_resolve(&a, "job", c, err, errlen, warn, warnlen);
  args_free(&a);
  return rc;
}

/* torch's c10d names for the keepalive settings land in the same place
 * as cdrun's own. */
START_TEST(test_keep_alive_keys)
{
  struct rdzv_config c;
  char err[256], warn[256];

  ck_assert_int_eq(resolve("keep_alive_interval=2.5,keep_alive_max_attempt=7",
                           &c, err, sizeof err, warn, sizeof warn), 0);
  ck_assert_str_eq(warn, "");
  ck_assert_double_eq(c.conf.keepalive_interval, 2.5);
  ck_assert_int_eq(c.conf.keepalive_misses, 7);
  ck_assert_int_eq(resolve("keepalive_interval=0.5,keepalive_misses=3", &c,
                           err, sizeof err, warn, sizeof warn), 0);
  ck_assert_double_eq(c.conf.keepalive_interval, 0.5);
  ck_assert_int_eq(c.conf.keepalive_misses, 3);
  ck_assert_int_eq(resolve("keep_alive_max_attempt=2.5", &c, err,
                           sizeof err, warn, sizeof warn), -EINVAL);
  ck_assert_str_eq(err, "--rdzv_conf: invalid value '2.5' for "
                   "keep_alive_max_attempt");
  ck_assert_int_eq(resolve("keep_alive_interval=0", &c, err, sizeof err,
                           warn, sizeof warn), -EINVAL);
  ck_assert_int_eq(resolve("keep_alive_intervall=1", &c, err, sizeof err,
                           warn, sizeof warn), 0);
  ck_assert_str_eq(warn, "'keep_alive_intervall'");
}
END_TEST

/* Soft state: how long to reconnect; 0 is today's fail-at-once. */
START_TEST(test_reconnect_timeout)
{
  struct rdzv_config c;
  char err[256], warn[256];

  ck_assert_int_eq(resolve("join_timeout=5", &c, err, sizeof err, warn,
                           sizeof warn), 0);
  ck_assert_double_eq(c.reconnect_timeout, 60);
  ck_assert_int_eq(resolve("reconnect_timeout=0", &c, err, sizeof err, warn,
                           sizeof warn), 0);
  ck_assert_str_eq(warn, "");
  ck_assert_double_eq(c.reconnect_timeout, 0);
  ck_assert_int_eq(resolve("reconnect_timeout=2.5", &c, err, sizeof err,
                           warn, sizeof warn), 0);
  ck_assert_double_eq(c.reconnect_timeout, 2.5);
  ck_assert_int_eq(resolve("reconnect_timeout=-1", &c, err, sizeof err,
                           warn, sizeof warn), -EINVAL);
  ck_assert_str_eq(err, "--rdzv_conf: invalid value '-1' for "
                   "reconnect_timeout");
}
END_TEST

/* Note [fixed membership]: the grace before a lost node ends the job. */
START_TEST(test_lost_node_grace)
{
  struct rdzv_config c;
  char err[256], warn[256];

  ck_assert_int_eq(resolve("join_timeout=5", &c, err, sizeof err, warn,
                           sizeof warn), 0);
  ck_assert_double_eq(c.lost_node_grace, 30);
  ck_assert_int_eq(resolve("lost_node_grace=0.5", &c, err, sizeof err, warn,
                           sizeof warn), 0);
  ck_assert_str_eq(warn, "");
  ck_assert_double_eq(c.lost_node_grace, 0.5);
  ck_assert_int_eq(resolve("lost_node_grace=soon", &c, err, sizeof err,
                           warn, sizeof warn), -EINVAL);
  ck_assert_str_eq(err, "--rdzv_conf: invalid value 'soon' for "
                   "lost_node_grace");
}
END_TEST

int main(void)
{
  Suite *s = suite_create("rdzv_config");
  TCase *tc = tcase_create("conf");
  SRunner *sr;
  int failed;

  tcase_add_test(tc, test_keep_alive_keys);
  tcase_add_test(tc, test_reconnect_timeout);
  tcase_add_test(tc, test_lost_node_grace);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
