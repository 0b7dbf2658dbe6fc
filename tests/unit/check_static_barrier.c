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
                                   timeout };

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
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
