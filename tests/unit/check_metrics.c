/* check_metrics.c -- unit tests for rdzvd/metrics.c: counters, histogram
 * buckets (le is inclusive), and the exposition's lines. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

/* The rendered text of m with no jobs, for line checks. */
static char *render(const struct rdzvd_metrics *m)
{
  struct metrics_gauges g;
  char *text;
  size_t len;

  memset(&g, 0, sizeof g);
  g.phase_names[0] = "gathering";
  g.jobs_by_phase[0] = 3;
  g.nodes = 7;
  ck_assert_int_eq(metrics_render(m, &g, &text, &len), 0);
  ck_assert_uint_eq(strlen(text), len);
  return text;
}

static void has_line(const char *text, const char *line)
{
  char want[256];

  snprintf(want, sizeof want, "\n%s\n", line);
  ck_assert_msg(strstr(text, want), "no line '%s' in:\n%s", line, text);
}

START_TEST(test_null_is_a_no_op)
{
  metrics_round_completed(NULL, 1);
  metrics_restart(NULL);
  metrics_join(NULL);
  metrics_refusal(NULL, RP_ERR_LIMIT);
  metrics_auth_failure(NULL);
  metrics_reconnect(NULL);
  metrics_conn_opened(NULL);
  metrics_conn_closed(NULL);
  metrics_bytes_in(NULL, 1);
  metrics_bytes_out(NULL, 1);
  metrics_frame_error(NULL);
}
END_TEST

START_TEST(test_histogram_buckets)
{
  struct rdzvd_metrics m;
  char *text;

  metrics_init(&m);
  metrics_round_completed(&m, 0.01);    /* on the bound: le="0.01" */
  metrics_round_completed(&m, 0.02);
  metrics_round_completed(&m, 3);
  metrics_round_completed(&m, 1e6);     /* only +Inf */
  metrics_round_completed(&m, -1);      /* a clock gone wrong counts 0 */
  text = render(&m);
  has_line(text, "rdzvd_round_completion_seconds_bucket{le=\"0.01\"} 2");
  has_line(text, "rdzvd_round_completion_seconds_bucket{le=\"0.05\"} 3");
  has_line(text, "rdzvd_round_completion_seconds_bucket{le=\"2.5\"} 3");
  has_line(text, "rdzvd_round_completion_seconds_bucket{le=\"5\"} 4");
  has_line(text, "rdzvd_round_completion_seconds_bucket{le=\"600\"} 4");
  has_line(text, "rdzvd_round_completion_seconds_bucket{le=\"+Inf\"} 5");
  has_line(text, "rdzvd_round_completion_seconds_count 5");
  has_line(text, "rdzvd_round_completion_seconds_sum 1000003.03");
  has_line(text, "rdzvd_rounds_completed_total 5");
  free(text);
}
END_TEST

START_TEST(test_counters_and_labels)
{
  struct rdzvd_metrics m;
  char *text;

  metrics_init(&m);
  metrics_refusal(&m, RP_ERR_CONFIG_MISMATCH);
  metrics_refusal(&m, RP_ERR_CONFIG_MISMATCH);
  metrics_refusal(&m, (enum rp_error_code)99);
  metrics_conn_opened(&m);
  metrics_conn_opened(&m);
  metrics_conn_closed(&m);
  metrics_bytes_in(&m, 10);
  metrics_bytes_out(&m, 20);
  metrics_restart(&m);
  metrics_join(&m);
  metrics_auth_failure(&m);
  metrics_reconnect(&m);
  metrics_frame_error(&m);
  text = render(&m);
  has_line(text, "rdzvd_refusals_total{reason=\"config_mismatch\"} 2");
  has_line(text, "rdzvd_refusals_total{reason=\"limit\"} 0");
  has_line(text, "rdzvd_refusals_total{reason=\"other\"} 1");
  has_line(text, "rdzvd_connections_open 1");
  has_line(text, "rdzvd_connections_accepted_total 2");
  has_line(text, "rdzvd_received_bytes_total 10");
  has_line(text, "rdzvd_sent_bytes_total 20");
  has_line(text, "rdzvd_restarts_total 1");
  has_line(text, "rdzvd_joins_total 1");
  has_line(text, "rdzvd_auth_failures_total 1");
  has_line(text, "rdzvd_reconnects_total 1");
  has_line(text, "rdzvd_frame_errors_total 1");
  has_line(text, "rdzvd_jobs{phase=\"gathering\"} 3");
  has_line(text, "rdzvd_nodes 7");
  has_line(text, "# TYPE rdzvd_round_completion_seconds histogram");
  has_line(text, "# TYPE rdzvd_refusals_total counter");
  ck_assert(text[strlen(text) - 1] == '\n');
  free(text);
}
END_TEST

static Suite *metrics_suite(void)
{
  Suite *s = suite_create("metrics");
  TCase *tc = tcase_create("metrics");

  tcase_add_test(tc, test_null_is_a_no_op);
  tcase_add_test(tc, test_histogram_buckets);
  tcase_add_test(tc, test_counters_and_labels);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(metrics_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
