/* check_static_barrier.c -- unit tests for launcher/static_barrier.c (Note
 * [static barrier]): several "nodes" on one loop, over loopback. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "static_barrier.h"

#define MAX_NODES 4

struct node {
  struct static_barrier *b;
  int calls;
  int err;
  char message[1024];
  char nonce[40];
};

static uv_loop_t loop;
static struct node nodes[MAX_NODES];

static void done(void *ctx, int err, const char *message)
{
  struct node *n = ctx;

  n->calls++;
  n->err = err;
  snprintf(n->message, sizeof n->message, "%s", message ? message : "");
  snprintf(n->nonce, sizeof n->nonce, "%s",
           err ? "" : static_barrier_run_nonce(n->b));
  static_barrier_close(n->b);
  n->b = NULL;
}

static int free_port(void)
{
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  int fd = socket(AF_INET, SOCK_STREAM, 0), port;

  ck_assert_int_ge(fd, 0);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  port = ntohs(sa.sin_port);
  close(fd);
  return port;
}

static void start(int i, int port, int rank, int nnodes, int nproc,
                  double timeout)
{
  struct static_barrier_opts o = { "127.0.0.1", port, rank, nnodes, nproc,
                                   timeout, 0, 0 };

  ck_assert_int_eq(static_barrier_start(&loop, &o, done, NULL, &nodes[i],
                                        &nodes[i].b), 0);
  ck_assert_int_eq(nodes[i].calls, 0);  /* never from inside start */
}

static void setup(void)
{
  memset(nodes, 0, sizeof nodes);
  ck_assert_int_eq(uv_loop_init(&loop), 0);
}

/* Every barrier done or closed: the loop ends with nothing left open. */
static void run_to_end(void)
{
  int i;

  uv_run(&loop, UV_RUN_DEFAULT);
  for (i = 0; i < MAX_NODES; i++)
    static_barrier_close(nodes[i].b);
  ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* Three nodes, node 0 last: all meet. */
START_TEST(test_meet)
{
  int port = free_port(), i;

  start(1, port, 1, 3, 2, 30);
  start(2, port, 2, 3, 2, 30);
  start(0, port, 0, 3, 2, 30);
  run_to_end();
  for (i = 0; i < 3; i++) {
    ck_assert_int_eq(nodes[i].calls, 1);
    ck_assert_int_eq(nodes[i].err, 0);
  }
}
END_TEST

/* Note [static run nonce]: every node of one meeting gets node 0's run
 * nonce; the next meeting of the same nodes on the same port, another. */
START_TEST(test_run_nonce)
{
  int port = free_port(), i;
  char first[40];

  start(1, port, 1, 3, 2, 30);
  start(2, port, 2, 3, 2, 30);
  start(0, port, 0, 3, 2, 30);
  run_to_end();
  ck_assert_uint_eq(strlen(nodes[0].nonce), 32);
  ck_assert_uint_eq(strspn(nodes[0].nonce, "0123456789abcdef"), 32);
  for (i = 1; i < 3; i++)
    ck_assert_str_eq(nodes[i].nonce, nodes[0].nonce);
  snprintf(first, sizeof first, "%s", nodes[0].nonce);
  setup();
  start(0, port, 0, 3, 2, 30);
  start(1, port, 1, 3, 2, 30);
  start(2, port, 2, 3, 2, 30);
  run_to_end();
  for (i = 0; i < 3; i++) {
    ck_assert_int_eq(nodes[i].err, 0);
    ck_assert_str_eq(nodes[i].nonce, nodes[0].nonce);
  }
  ck_assert_str_ne(nodes[0].nonce, first);
}
END_TEST

/* Two nodes without --node_rank are both node 0: both are told, naming
 * the flags; the second could not bind and only connected. */
START_TEST(test_duplicate_rank)
{
  int port = free_port(), i;

  start(0, port, 0, 2, 1, 30);
  start(1, port, 0, 2, 1, 30);
  run_to_end();
  for (i = 0; i < 2; i++) {
    ck_assert_int_eq(nodes[i].calls, 1);
    ck_assert_int_eq(nodes[i].err, -EINVAL);
    ck_assert_msg(strstr(nodes[i].message, "node rank 0 was claimed by two "
                         "nodes") &&
                  strstr(nodes[i].message, "--node_rank=0..1") &&
                  strstr(nodes[i].message, "--rdzv_backend=c10d"),
                  "message: %s", nodes[i].message);
  }
}
END_TEST

START_TEST(test_nproc_mismatch)
{
  int port = free_port();

  start(0, port, 0, 2, 2, 30);
  start(1, port, 1, 2, 1, 30);
  run_to_end();
  ck_assert_int_eq(nodes[1].err, -EINVAL);
  ck_assert_ptr_nonnull(strstr(nodes[1].message, "--nproc_per_node"));
  ck_assert_int_eq(nodes[0].err, -EINVAL);
}
END_TEST

/* Node 0 never comes: the others give up, saying where they looked. */
START_TEST(test_timeout)
{
  int port = free_port();

  start(1, port, 1, 2, 1, 0.2);
  run_to_end();
  ck_assert_int_eq(nodes[1].calls, 1);
  ck_assert_int_eq(nodes[1].err, -ETIMEDOUT);
  ck_assert_ptr_nonnull(strstr(nodes[1].message, "waited 0.2 s for node 0"));
}
END_TEST

static int raw_connect(int port)
{
  struct sockaddr_in sa;
  int fd = socket(AF_INET, SOCK_STREAM, 0);

  ck_assert_int_ge(fd, 0);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((unsigned short)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

/* Strangers on the port (garbage, an endless line, a hello with a rank
 * out of range) are dropped; the real nodes still meet. */
START_TEST(test_strangers)
{
  int port = free_port(), fds[3], i;
  char big[600];

  start(0, port, 0, 2, 1, 30);
  fds[0] = raw_connect(port);
  ck_assert_int_gt(write(fds[0], "GET / HTTP/1.0\r\n\r\n", 18), 0);
  fds[1] = raw_connect(port);
  memset(big, 'x', sizeof big);
  ck_assert_int_gt(write(fds[1], big, sizeof big), 0);
  fds[2] = raw_connect(port);
  ck_assert_int_gt(write(fds[2], "cdrun-static 1 7 2 1 evil\n", 26), 0);
  start(1, port, 1, 2, 1, 30);
  run_to_end();
  for (i = 0; i < 2; i++)
    ck_assert_int_eq(nodes[i].err, 0);
  for (i = 0; i < 3; i++)
    close(fds[i]);
}
END_TEST

/* ---- Note [static keepalive] ---- */

static int lost_calls, lost_rank;
static enum rdzv_rules_leave lost_how;

static void done_keep(void *ctx, int err, const char *message)
{
  struct node *n = ctx;

  n->calls++;
  n->err = err;
  snprintf(n->message, sizeof n->message, "%s", message ? message : "");
}

static bool on_lost(void *ctx, int rank, const char *who,
                    enum rdzv_rules_leave how)
{
  (void)ctx;
  (void)who;
  lost_calls++;
  lost_rank = rank;
  lost_how = how;
  return true;
}

static double now_s(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs the loop in small steps for up to secs, or until lost is called;
 * what fd received is appended to got. */
static void run_for(double secs, int fd, char *got, size_t cap)
{
  double end = now_s() + secs;
  size_t len = strlen(got);
  ssize_t k;

  while (now_s() < end && !lost_calls) {
    uv_run(&loop, UV_RUN_NOWAIT);
    k = recv(fd, got + len, cap - len - 1, MSG_DONTWAIT);
    if (k > 0)
      got[len += (size_t)k] = '\0';
    usleep(2000);
  }
}

/* Node 0 with keepalives (every 0.1 s) and a node 1 played by hand,
 * which sends its hello, "watch", and then keepalives if ka says so. */
static int silent_setup(int *fd, char *got, size_t cap, const char *ka)
{
  int port = free_port();
  struct static_barrier_opts o = { "127.0.0.1", port, 0, 2, 1, 30, 0.1, 4 };
  const char *hello = "cdrun-static 1 1 2 1 fake:pid1:00000001\n";
  char watch[64];

  lost_calls = 0;
  got[0] = '\0';
  ck_assert_int_eq(static_barrier_start(&loop, &o, done_keep, on_lost,
                                        &nodes[0], &nodes[0].b), 0);
  *fd = raw_connect(port);
  ck_assert_int_eq(write(*fd, hello, strlen(hello)), (ssize_t)strlen(hello));
  run_for(5, *fd, got, cap);
  /* "ok watch <nonce>" (Note [static run nonce]), then "ka" */
  ck_assert_msg(strncmp(got, "ok watch ", 9) == 0 &&
                strcmp(strchr(got, '\n'), "\nka\n") == 0, "got '%s'", got);
  ck_assert_int_eq(nodes[0].calls, 1);
  ck_assert_int_eq(nodes[0].err, 0);
  snprintf(watch, sizeof watch, "watch\n%s", ka);
  ck_assert_int_eq(write(*fd, watch, strlen(watch)), (ssize_t)strlen(watch));
  return port;
}

/* A node that sent keepalives and falls silent (its agent stopped: the
 * connection stays open) is lost, its link silent, after its window; its
 * keepalive is answered. */
START_TEST(test_silent_node)
{
  char got[256];
  double t0;
  int fd;

  silent_setup(&fd, got, sizeof got, "ka 0.200\n");
  t0 = now_s();
  run_for(10, fd, got, sizeof got);
  ck_assert_int_eq(lost_calls, 1);
  ck_assert_int_eq(lost_rank, 1);
  ck_assert_int_eq(lost_how, RDZV_LEFT_SILENT);
  ck_assert_double_ge(now_s() - t0, 0.2);
  ck_assert_msg(strstr(got + 12, "ka\n") != NULL, "no answer: '%s'", got);
  close(fd);
  run_to_end();
}
END_TEST

/* A node that never sent a keepalive (an older cdrun) is not judged. */
START_TEST(test_old_node_not_judged)
{
  char got[256];
  int fd;

  silent_setup(&fd, got, sizeof got, "");
  run_for(1, fd, got, sizeof got);
  ck_assert_int_eq(lost_calls, 0);
  close(fd);
  run_for(5, fd, got, sizeof got);    /* its close: its agent died */
  ck_assert_int_eq(lost_calls, 1);
  ck_assert_int_eq(lost_how, RDZV_LEFT_DIED);
  run_to_end();
}
END_TEST

/* Closed before anything happened: nothing is called, nothing leaks. */
START_TEST(test_close_at_once)
{
  int port = free_port();

  start(0, port, 0, 2, 1, 30);
  start(1, port, 1, 2, 1, 30);
  static_barrier_close(nodes[0].b);
  static_barrier_close(nodes[1].b);
  nodes[0].b = nodes[1].b = NULL;
  run_to_end();
  ck_assert_int_eq(nodes[0].calls, 0);
  ck_assert_int_eq(nodes[1].calls, 0);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("static_barrier");
  TCase *tc = tcase_create("meet");
  SRunner *sr;
  int failed;

  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_meet);
  tcase_add_test(tc, test_run_nonce);
  tcase_add_test(tc, test_duplicate_rank);
  tcase_add_test(tc, test_nproc_mismatch);
  tcase_add_test(tc, test_timeout);
  tcase_add_test(tc, test_strangers);
  tcase_add_test(tc, test_close_at_once);
  tcase_add_test(tc, test_silent_node);
  tcase_add_test(tc, test_old_node_not_judged);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
