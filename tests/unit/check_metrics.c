/* check_metrics.c -- unit tests for rdzvd/metrics.c: counters, histogram
 * buckets (le is inclusive), and the exposition's lines; and for the
 * HTTP responder (metrics_http.c) on loopback: idle clients cannot lock
 * the scrapes out. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics.h"
#include "metrics_http.h"

#define WAIT_MS 60000           /* bound on any wait: a hang, not a race */

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
  metrics_refusal(NULL, RDZV_PROTO_ERR_LIMIT);
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
  metrics_refusal(&m, RDZV_PROTO_ERR_CONFIG_MISMATCH);
  metrics_refusal(&m, RDZV_PROTO_ERR_CONFIG_MISMATCH);
  metrics_refusal(&m, (enum rdzv_proto_error_code)99);
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


/* ---- the HTTP responder, on its own loop in a thread ---- */

static struct {
  uv_loop_t loop;
  uv_async_t stop;
  struct metrics_http *h;
  pthread_t th;
  int port;
} H;

static int render_fixed(void *ctx, char **body, size_t *len)
{
  (void)ctx;
  *body = strdup("rdzvd_nodes 0\n");
  if (!*body)
    return -ENOMEM;
  *len = strlen(*body);
  return 0;
}

static void on_stop(uv_async_t *a)
{
  metrics_http_stop(H.h);
  uv_close((uv_handle_t *)a, NULL);
}

static void *serve(void *arg)
{
  (void)arg;
  uv_run(&H.loop, UV_RUN_DEFAULT);
  return NULL;
}

static void http_start(double header_timeout)
{
  struct metrics_http_opts o = { 0 };
  char err[256];
  int rc;

  o.host = "127.0.0.1";
  o.render = render_fixed;
  o.header_timeout = header_timeout;
  ck_assert_int_eq(uv_loop_init(&H.loop), 0);
  rc = metrics_http_start(&H.loop, &o, &H.h, err, sizeof err);
  ck_assert_msg(rc == 0, "metrics_http_start: %s", err);
  H.port = metrics_http_port(H.h);
  ck_assert_int_eq(uv_async_init(&H.loop, &H.stop, on_stop), 0);
  ck_assert_int_eq(pthread_create(&H.th, NULL, serve, NULL), 0);
}

static void http_stop(void)
{
  uv_async_send(&H.stop);
  pthread_join(H.th, NULL);
  ck_assert_int_eq(uv_loop_close(&H.loop), 0);
}

static int http_dial(void)
{
  struct sockaddr_in sa;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  ck_assert_int_ge(fd, 0);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)H.port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0,
                "connect: %s", strerror(errno));
  return fd;
}

/* Everything the server sends on fd until it closes (NUL-terminated). */
static char *read_to_eof(int fd)
{
  static char buf[65536];
  size_t len = 0;
  ssize_t k;

  for (;;) {
    struct pollfd p = { fd, POLLIN, 0 };

    ck_assert_msg(poll(&p, 1, WAIT_MS) == 1, "no end of file");
    k = recv(fd, buf + len, sizeof buf - 1 - len, 0);
    if (k <= 0)
      break;
    len += (size_t)k;
  }
  buf[len] = '\0';
  return buf;
}

/* One scrape on a fresh connection: its whole answer. */
static void scrape_ok(void)
{
  static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  int fd = http_dial();
  const char *r;

  ck_assert_int_eq(send(fd, req, sizeof req - 1, MSG_NOSIGNAL),
                   (ssize_t)sizeof req - 1);
  r = read_to_eof(fd);
  ck_assert_msg(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0,
                "the scrape got '%s'", r);
  ck_assert_ptr_nonnull(strstr(r, "rdzvd_nodes 0\n"));
  close(fd);
}

/* Issue 19, item 5: the slots full of idle clients, a scrape is still
 * answered: it evicts the oldest idle one (the header timeout is out of
 * the picture here), and so on however often they reconnect. */
START_TEST(test_idle_clients_evicted)
{
  enum { IDLE = METRICS_HTTP_MAX_CONNS + 4 };
  int fds[IDLE], round, i;

  http_start(1e6);
  for (round = 0; round < 3; round++) {
    for (i = 0; i < IDLE; i++)
      fds[i] = http_dial();
    scrape_ok();
    /* Accepted in order: the first IDLE - MAX_CONNS + 1 were evicted
     * (the scrape took the last slot); the newest is still open. */
    for (i = 0; i <= IDLE - METRICS_HTTP_MAX_CONNS; i++)
      ck_assert_str_eq(read_to_eof(fds[i]), "");
    {
      struct pollfd p = { fds[IDLE - 1], POLLIN, 0 };

      ck_assert_int_eq(poll(&p, 1, 0), 0);
    }
    for (i = 0; i < IDLE; i++)
      close(fds[i]);
  }
  http_stop();
}
END_TEST

/* A client that sends half a request head and stops is closed once the
 * header timeout has passed, unanswered. */
START_TEST(test_header_timeout)
{
  int fd;

  http_start(0.2);
  fd = http_dial();
  ck_assert_int_eq(send(fd, "GET /met", 8, MSG_NOSIGNAL), 8);
  ck_assert_str_eq(read_to_eof(fd), "");
  close(fd);
  scrape_ok();
  http_stop();
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
  tc = tcase_create("http");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_idle_clients_evicted);
  tcase_add_test(tc, test_header_timeout);
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
