/* check_port.c -- unit tests for launcher/port.c (Note [port reservation]).
 * Loopback and port 0 only. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "port.h"

static struct sockaddr_in addr4(uint32_t host_order_ip, int port)
{
  struct sockaddr_in sa;

  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(host_order_ip);
  sa.sin_port = htons((uint16_t)port);
  return sa;
}

static int reserve(int *port)
{
  int fd;

  *port = -1;
  fd = port_reserve(port);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_ge(*port, 1);
  ck_assert_int_le(*port, 65535);
  return fd;
}

/* A socket like TCPStore's server: SO_REUSEADDR, bound and listening on
 * ip:port.  Returns the fd or -errno. */
static int reuse_listener(uint32_t ip, int port)
{
  struct sockaddr_in sa = addr4(ip, port);
  int fd, one = 1, err;

  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
                              sizeof one), 0);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
      listen(fd, 8) < 0) {
    err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

/* Connects to 127.0.0.1:port, accepts on lfd and passes a byte. */
static void expect_connect(int lfd, int port)
{
  struct sockaddr_in sa = addr4(INADDR_LOOPBACK, port);
  int c, s;
  char b = 0;

  c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(c, 0);
  ck_assert_msg(connect(c, (struct sockaddr *)&sa, sizeof sa) == 0,
                "connect to port %d: %s", port, strerror(errno));
  s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  ck_assert_int_ge(s, 0);
  ck_assert_int_eq(write(c, "k", 1), 1);
  ck_assert_int_eq(read(s, &b, 1), 1);
  ck_assert_int_eq(b, 'k');
  close(s);
  close(c);
}

START_TEST(test_reserve_basic)
{
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  int port, fd = reserve(&port), listening = -1, type = -1;
  socklen_t ol = sizeof listening;

  /* Close-on-exec, so workers do not inherit it. */
  ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  ck_assert_int_eq(sa.sin_family, AF_INET);
  ck_assert_int_eq(ntohs(sa.sin_port), port);
  ck_assert_uint_eq(ntohl(sa.sin_addr.s_addr), INADDR_ANY);
  /* A TCP socket that never listens. */
  ck_assert_int_eq(getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening,
                              &ol), 0);
  ck_assert_int_eq(listening, 0);
  ol = sizeof type;
  ck_assert_int_eq(getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &ol), 0);
  ck_assert_int_eq(type, SOCK_STREAM);
  close(fd);
}
END_TEST

START_TEST(test_two_reservations_differ)
{
  int p1, p2, p3;
  int f1 = reserve(&p1), f2 = reserve(&p2), f3 = reserve(&p3);

  ck_assert_int_ne(p1, p2);
  ck_assert_int_ne(p1, p3);
  ck_assert_int_ne(p2, p3);
  close(f1);
  close(f2);
  close(f3);
}
END_TEST

START_TEST(test_reuse_any)
{
  int port, fd = reserve(&port), l;

  l = reuse_listener(INADDR_ANY, port);
  ck_assert_msg(l >= 0, "listen on 0.0.0.0:%d: %s", port, strerror(-l));
  expect_connect(l, port);
  close(l);
  close(fd);
}
END_TEST

START_TEST(test_reuse_loopback)
{
  int port, fd = reserve(&port), l;

  l = reuse_listener(INADDR_LOOPBACK, port);
  ck_assert_msg(l >= 0, "listen on 127.0.0.1:%d: %s", port, strerror(-l));
  expect_connect(l, port);
  close(l);
  /* Again, after the first server went away (a restarted worker). */
  l = reuse_listener(INADDR_ANY, port);
  ck_assert_msg(l >= 0, "second listen on port %d: %s", port,
                strerror(-l));
  expect_connect(l, port);
  close(l);
  close(fd);
}
END_TEST

START_TEST(test_plain_bind_conflicts)
{
  struct sockaddr_in sa;
  int port, fd = reserve(&port), s, rc, err;

  /* A socket without SO_REUSEADDR cannot take the held port. */
  sa = addr4(INADDR_ANY, port);
  s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(s, 0);
  rc = bind(s, (struct sockaddr *)&sa, sizeof sa);
  err = errno;
  ck_assert_int_eq(rc, -1);
  ck_assert_int_eq(err, EADDRINUSE);
  close(s);
  close(fd);
}
END_TEST

START_TEST(test_bind0_avoids_reserved)
{
  int port, fd = reserve(&port);
  int held[200];

  /* Held open at once, so each bind(0) gets yet another port. */
  for (int i = 0; i < 200; i++) {
    struct sockaddr_in sa = addr4(INADDR_ANY, 0);
    socklen_t len = sizeof sa;

    held[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(held[i], 0);
    ck_assert_int_eq(bind(held[i], (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(held[i], (struct sockaddr *)&sa, &len),
                     0);
    ck_assert_int_ne(ntohs(sa.sin_port), port);
  }
  for (int i = 0; i < 200; i++)
    close(held[i]);
  close(fd);
}
END_TEST

/* port_reserve_at: a given port, held as port_reserve holds one, that a
 * SO_REUSEADDR listener (libpg's live store) can take. */
START_TEST(test_reserve_at)
{
  int port, fd = reserve(&port), at, l;

  close(fd);    /* a port that was free a moment ago */
  at = port_reserve_at(port);
  ck_assert_msg(at >= 0, "reserve port %d: %s", port, strerror(-at));
  ck_assert_int_ne(fcntl(at, F_GETFD) & FD_CLOEXEC, 0);
  l = reuse_listener(INADDR_ANY, port);
  ck_assert_msg(l >= 0, "listen on 0.0.0.0:%d: %s", port, strerror(-l));
  expect_connect(l, port);
  close(l);
  close(at);
  ck_assert_int_eq(port_reserve_at(0), -EINVAL);
  ck_assert_int_eq(port_reserve_at(65536), -EINVAL);
}
END_TEST

/* A port an outgoing connection (its port picked by connect()) left in
 * TIME_WAIT: refused, it would keep a listener off (Note [live store
 * port] in proto/worker/worker_contract.h). */
START_TEST(test_reserve_at_refuses_time_wait)
{
  struct sockaddr_in sa = addr4(INADDR_LOOPBACK, 0);
  socklen_t len = sizeof sa;
  int lport, lfd = reserve(&lport), l, c, s, cport, at;

  l = reuse_listener(INADDR_LOOPBACK, lport);
  ck_assert_int_ge(l, 0);
  c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(c, 0);
  sa = addr4(INADDR_LOOPBACK, lport);
  ck_assert_int_eq(connect(c, (struct sockaddr *)&sa, sizeof sa), 0);
  ck_assert_int_eq(getsockname(c, (struct sockaddr *)&sa, &len), 0);
  cport = ntohs(sa.sin_port);
  s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
  ck_assert_int_ge(s, 0);
  close(c);     /* the client closes first: its port goes TIME_WAIT */
  close(s);
  at = port_reserve_at(cport);
  if (at >= 0)
    close(at);
  ck_assert_int_eq(at, -EADDRINUSE);
  close(l);
  close(lfd);
}
END_TEST

static Suite *port_suite(void)
{
  Suite *s = suite_create("port");
  TCase *tc = tcase_create("reserve");

  tcase_add_test(tc, test_reserve_basic);
  tcase_add_test(tc, test_two_reservations_differ);
  tcase_add_test(tc, test_reuse_any);
  tcase_add_test(tc, test_reuse_loopback);
  tcase_add_test(tc, test_plain_bind_conflicts);
  tcase_add_test(tc, test_bind0_avoids_reserved);
  tcase_add_test(tc, test_reserve_at);
  tcase_add_test(tc, test_reserve_at_refuses_time_wait);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(port_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
