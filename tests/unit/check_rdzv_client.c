/* check_rdzv_client.c -- the embedded host's choice of listen address. */
#include "rdzv_client.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

static struct sockaddr_storage v4(const char *a)
{
  struct sockaddr_storage ss;
  struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

  memset(&ss, 0, sizeof ss);
  s4->sin_family = AF_INET;
  ck_assert_int_eq(inet_pton(AF_INET, a, &s4->sin_addr), 1);
  return ss;
}

static struct sockaddr_storage v6(const char *a)
{
  struct sockaddr_storage ss;
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

  memset(&ss, 0, sizeof ss);
  s6->sin6_family = AF_INET6;
  ck_assert_int_eq(inet_pton(AF_INET6, a, &s6->sin6_addr), 1);
  return ss;
}

static const char *bind_for(const char *host, struct sockaddr_storage ss)
{
  static char out[INET6_ADDRSTRLEN];

  rdzv_host_bind_addr(host, (const struct sockaddr *)&ss, out, sizeof out);
  return out;
}

START_TEST(loopback_stays_loopback)
{
  ck_assert_str_eq(bind_for("127.0.0.1", v4("127.0.0.1")), "127.0.0.1");
  ck_assert_str_eq(bind_for("localhost", v4("127.0.0.1")), "127.0.0.1");
  ck_assert_str_eq(bind_for("localhost", v6("::1")), "::1");
  ck_assert_str_eq(bind_for("::1", v6("::1")), "::1");
}
END_TEST

START_TEST(interface_address_as_resolved)
{
  ck_assert_str_eq(bind_for("10.1.2.3", v4("10.1.2.3")), "10.1.2.3");
  ck_assert_str_eq(bind_for("node1", v4("10.1.2.3")), "10.1.2.3");
  ck_assert_str_eq(bind_for("node1", v6("fd00::5")), "fd00::5");
}
END_TEST

/* This machine's name mapped to 127.0.1.1 here, to a real address
 * elsewhere: every address, or the other nodes could not connect. */
START_TEST(own_name_on_loopback_means_every_address)
{
  ck_assert_str_eq(bind_for("node1", v4("127.0.1.1")), "");
}
END_TEST

static Suite *rdzv_client_suite(void)
{
  Suite *s = suite_create("rdzv_client");
  TCase *tc = tcase_create("bind");

  tcase_add_test(tc, loopback_stays_loopback);
  tcase_add_test(tc, interface_address_as_resolved);
  tcase_add_test(tc, own_name_on_loopback_means_every_address);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(rdzv_client_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
