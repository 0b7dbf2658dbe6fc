/* check_hostfile.c -- unit tests for launcher/hostfile.c, the head node's
 * host lists (--hostfile in mpirun/DeepSpeed style, --hosts). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostfile.h"

START_TEST(test_hostfile)
{
  struct hostfile_host *h;
  char err[256];
  int n;

  n = hostfile_parse("# cluster\n"
                            "node1 slots=8\n"
                            "\n"
                            "  node2   slots=4  max_slots=8  # two\n"
                            "user@node3\t\n"
                            "10.0.0.4 slots=1\n"
                            "[fe80::1%eth0]\n", 0, &h, err, sizeof err);
  ck_assert_msg(n == 5, "n=%d err=%s", n, err);
  ck_assert_str_eq(h[0].name, "node1");
  ck_assert_int_eq(h[0].slots, 8);
  ck_assert_str_eq(h[1].name, "node2");
  ck_assert_int_eq(h[1].slots, 4);
  ck_assert_str_eq(h[2].name, "user@node3");
  ck_assert_int_eq(h[2].slots, 0);
  ck_assert_str_eq(h[3].name, "10.0.0.4");
  ck_assert_str_eq(h[4].name, "[fe80::1%eth0]");
  free(h);
}
END_TEST

START_TEST(test_list)
{
  struct hostfile_host *h;
  char err[256];
  int n;

  n = hostfile_parse("h1,h2, h3", 1, &h, err, sizeof err);
  ck_assert_msg(n == 3, "n=%d err=%s", n, err);
  ck_assert_str_eq(h[2].name, "h3");
  free(h);
}
END_TEST

static const struct {
  const char *text;
  int is_list;
  const char *msg;
} bad[] = {
  { "", 0, "--hostfile: no host" },
  { "# only a comment\n\n", 0, "--hostfile: no host" },
  { ",,", 1, "--hosts: no host" },
  { "node1 slots=0\n", 0, "line 1: invalid 'slots=0'" },
  { "node1\nnode2 slots=x\n", 0, "line 2: invalid 'slots=x'" },
  { "node1 cpus=3\n", 0, "line 1: unknown 'cpus=3'" },
  /* slots=N is read by num.h's rule: the whole word, in range. */
  { "node1 slots=4x\n", 0, "line 1: invalid 'slots=4x'" },
  { "node1 slots=-3\n", 0, "line 1: invalid 'slots=-3'" },
  { "node1 slots=65537\n", 0, "invalid 'slots=65537' (expected slots=N, "
                              "1 <= N <= 65536)" },
  { "node1 slots=99999999999999999999\n", 0, "line 1: invalid 'slots=9" },
  { "node1 slots=0x10\n", 0, "line 1: invalid 'slots=0x10'" },
  { "-oProxyCommand=evil\n", 0, "line 1: invalid host name" },
  { "h1,-F/etc/passwd", 1, "entry 2: invalid host name" },
  { "a;rm\n", 0, "invalid host name 'a;rm'" },
};

START_TEST(test_bad)
{
  struct hostfile_host *h = (struct hostfile_host *)1;
  char err[256];

  ck_assert_int_eq(hostfile_parse(bad[_i].text, bad[_i].is_list, &h, err,
                                  sizeof err), -EINVAL);
  ck_assert_ptr_null(h);
  ck_assert_msg(strstr(err, bad[_i].msg), "'%s' lacks '%s'", err,
                bad[_i].msg);
}
END_TEST

START_TEST(test_bounded)
{
  size_t len = (HOSTFILE_MAX_HOSTS + 1) * 3;
  char *text = malloc(len + 1), err[256];
  struct hostfile_host *h;

  ck_assert_ptr_nonnull(text);
  for (size_t i = 0; i < HOSTFILE_MAX_HOSTS + 1; i++)
    memcpy(text + 3 * i, "hh\n", 3);
  text[len] = '\0';
  ck_assert_int_eq(hostfile_parse(text, 0, &h, err, sizeof err),
                   -EINVAL);
  ck_assert_msg(strstr(err, "more than"), "%s", err);
  free(text);
}
END_TEST

static Suite *hostfile_suite(void)
{
  Suite *s = suite_create("hostfile");
  TCase *tc = tcase_create("hosts");

  tcase_add_test(tc, test_hostfile);
  tcase_add_test(tc, test_list);
  tcase_add_loop_test(tc, test_bad, 0, (int)(sizeof bad / sizeof bad[0]));
  tcase_add_test(tc, test_bounded);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(hostfile_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
