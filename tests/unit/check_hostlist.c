/* check_hostlist.c -- unit tests for launcher/hostlist.c: known
 * expansions, Slurm's own `scontrol show hostnames` as the oracle on many
 * patterns (when scontrol is installed), and hostile input. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostlist.h"

/* Space-joined expansion of list, or "ERR" on error. */
static char *expand_joined(const char *list, size_t max)
{
  static char buf[1 << 16];
  char **h, err[256];
  size_t n, i, len = 0;
  int rc;

  rc = hostlist_expand(list, max, &h, &n, err, sizeof err);
  if (rc) {
    ck_assert_msg(err[0], "no message for '%s'", list);
    snprintf(buf, sizeof buf, "ERR");
    return buf;
  }
  buf[0] = '\0';
  for (i = 0; i < n; i++)
    len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s",
                            i ? " " : "", h[i]);
  hostlist_free(h, n);
  return buf;
}

static const struct {
  const char *list, *want;
} known[] = {
  { "n[01-04,07],gpu-a[1-2]", "n01 n02 n03 n04 n07 gpu-a1 gpu-a2" },
  { "rack[1-2]-node[01-02]",
    "rack1-node01 rack1-node02 rack2-node01 rack2-node02" },
  { "a[1-2]b[1-2]c[1-2]", "a1b1c1 a1b1c2 a2b1c1 a2b1c2 a1b2c1 a1b2c2 "
    "a2b2c1 a2b2c2" },
  { "n[1-10]", "n1 n2 n3 n4 n5 n6 n7 n8 n9 n10" },
  { "n[001-10]", "n001 n002 n003 n004 n005 n006 n007 n008 n009 n010" },
  { "n[1-010]", "n1 n2 n3 n4 n5 n6 n7 n8 n9 n10" },
  { "n[099-101]", "n099 n100 n101" },
  { "a,b,a", "a b a" },
  { " n1 , n2 ", "n1 n2" },
  { "n[1-2],,m", "n1 n2 m" },
  { "n[1-2] m", "n1 n2 m" },
  { "[1-2]", "1 2" },
  { "node7", "node7" },
  { "n[5-5,3]", "n5 n3" },
  { "", "" },
};

START_TEST(test_known)
{
  ck_assert_str_eq(expand_joined(known[_i].list, 1000), known[_i].want);
}
END_TEST

static const char *const malformed[] = {
  "n[3-1]", "n[1-3", "n1-3]", "n[]", "n[a-b]", "n[-1]", "n[1-]",
  "n[1--3]", "n[9-11]x", "n[1-3]y[7]z", "n[[1-2]]", "n[1,,2]", "n[,1]",
  "n[1-2]x,y[3-4]z", "n[ 1-2]", "n[1234567890123456789]",
  "a[1]b[1]c[1]d[1]e[1]f[1]g[1]h[1]i[1]",
};

START_TEST(test_malformed)
{
  char **h = (char **)1, err[256], first[64];
  size_t n = 99;
  int rc;

  rc = hostlist_expand(malformed[_i], 1000, &h, &n, err, sizeof err);
  ck_assert_msg(rc == -EINVAL, "'%s' accepted (rc %d)", malformed[_i], rc);
  ck_assert_ptr_null(h);
  ck_assert_uint_eq(n, 0);
  ck_assert_msg(strstr(err, "hostlist"), "message '%s'", err);
  rc = hostlist_first(malformed[_i], first, sizeof first, err, sizeof err);
  ck_assert_int_eq(rc, -EINVAL);
}
END_TEST

START_TEST(test_messages)
{
  char err[256], first[64];

  ck_assert_int_eq(hostlist_first("n[3-1]", first, sizeof first, err,
                                  sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, "invalid range '3-1'"), "%s", err);
  ck_assert_int_eq(hostlist_first("n[1-3", first, sizeof first, err,
                                  sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, "'[' without ']'"), "%s", err);
  ck_assert_int_eq(hostlist_first("n[1]x", first, sizeof first, err,
                                  sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, "after the last ']'"), "%s", err);
  ck_assert_int_eq(hostlist_first(" , ", first, sizeof first, err,
                                  sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, "no host"), "%s", err);
}
END_TEST

/* Huge ranges are refused at the bound, not allocated. */
START_TEST(test_bounded)
{
  char **h, err[256], first[64];
  size_t n;

  ck_assert_int_eq(hostlist_expand("n[1-999999999999999999]", 65536, &h, &n,
                                   err, sizeof err), -E2BIG);
  ck_assert_msg(strstr(err, "more than 65536 hosts"), "%s", err);
  ck_assert_int_eq(hostlist_expand("a[1-100000]b[1-100000]c[1-100000]"
                                   "d[1-100000]", 65536, &h, &n, err,
                                   sizeof err), -E2BIG);
  ck_assert_int_eq(hostlist_expand("n[1-3],m[1-3]", 5, &h, &n, err,
                                   sizeof err), -E2BIG);
  ck_assert_int_eq(hostlist_expand("n[1-3],m[1-2]", 5, &h, &n, err,
                                   sizeof err), 0);
  hostlist_free(h, n);
  /* The first host of a huge list costs nothing. */
  ck_assert_int_eq(hostlist_first("n[000000001-999999999999999999],x",
                                  first, sizeof first, err, sizeof err), 0);
  ck_assert_str_eq(first, "n000000001");
  ck_assert_int_eq(hostlist_first("rack[7,1-2]-gpu[03-04]", first,
                                  sizeof first, err, sizeof err), 0);
  ck_assert_str_eq(first, "rack7-gpu03");
  /* Names longer than a host name can be are refused. */
  {
    char big[600], msg[1024];

    memset(big, 'a', 300);
    snprintf(big + 300, sizeof big - 300, "[1-2]");
    ck_assert_int_eq(hostlist_expand(big, 10, &h, &n, msg, sizeof msg),
                     -EINVAL);
    ck_assert_msg(strstr(msg, "longer than 255"), "%s", msg);
    ck_assert_int_eq(hostlist_first(big, first, sizeof first, err,
                                    sizeof err), -EINVAL);
  }
  /* Too small an output buffer for the first host. */
  ck_assert_int_eq(hostlist_first("averylonghostname", first, 4, err,
                                  sizeof err), -EINVAL);
}
END_TEST

/* ---- Slurm's own expansion as the oracle ---- */

static const char *const oracle[] = {
  "n[01-04,07],gpu-a[1-2]", "rack[1-2]-node[01-02]", "a[1-2]b[1-2]c[1-2]",
  "a[1-2]b[1-2]c[1-2]d[1-2]", "a[1-3]b[5,7]", "x[1-2]y[01-02]z[3]",
  "n[1-10]", "n[001-10]", "n[1-010]", "n[099-101]", "n[98-101]",
  "n[0-3]", "n[00-00]", "n[0-0]", "n[1,1]", "a,b,a", "n[1-2],,m",
  "n[1-2] m", "[1-2]", "n[5-5,3]", "n01,n[2-3]", "n[7]", "x[08-11]",
  "n[1-2,5-6,9]", "gpu-a[1-2],gpu-b[10-12],cpu[001-003]",
  "node-[1-3]-x[1-2]", "a.b.c[1-3]", "host_[9-12]", "n[1-2][3-4]",
  "n[01-3]", "n[8-12,100-102]", "c[1-4]-r[1-2]s[1-2]", "x", "x,y,z",
  "ab[0001-0003]", "n[1-3],m[1-3],n[1-3]",
};

/* scontrol needs a configuration to start even for this local command:
 * a minimal one in a temporary file. */
static const char *slurm_conf(void)
{
  static char path[] = "/tmp/check_hostlist_XXXXXX";
  static bool done;
  char host[256];
  int fd;
  FILE *f;

  if (done)
    return path;
  fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  f = fdopen(fd, "w");
  ck_assert_ptr_nonnull(f);
  if (gethostname(host, sizeof host))
    snprintf(host, sizeof host, "localhost");
  host[strcspn(host, ".")] = '\0';
  fprintf(f, "ClusterName=check\nSlurmctldHost=%s(127.0.0.1)\n"
          "NodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n", host);
  fclose(f);
  done = true;
  return path;
}

START_TEST(test_scontrol_oracle)
{
  char cmd[512], line[512], want[1 << 16];
  size_t len = 0;
  FILE *p;

  if (system("command -v scontrol >/dev/null 2>&1") != 0) {
    fprintf(stderr, "SKIP check_hostlist oracle: scontrol is not "
            "installed\n");
    return;
  }
  snprintf(cmd, sizeof cmd, "SLURM_CONF=%s scontrol show hostnames '%s' "
           "2>&1", slurm_conf(), oracle[_i]);
  p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  want[0] = '\0';
  while (fgets(line, sizeof line, p)) {
    line[strcspn(line, "\n")] = '\0';
    len += (size_t)snprintf(want + len, sizeof want - len, "%s%s",
                            len ? " " : "", line);
  }
  ck_assert_int_eq(pclose(p), 0);
  ck_assert_msg(!strstr(want, "error") && !strstr(want, "Invalid"),
                "scontrol refused '%s': %s", oracle[_i], want);
  ck_assert_str_eq(expand_joined(oracle[_i], 65536), want);
}
END_TEST

START_TEST(test_oracle_first)
{
  char first[HOSTLIST_MAX_NAME + 1], err[256], **h;
  size_t n;

  ck_assert_int_eq(hostlist_expand(oracle[_i], 65536, &h, &n, err,
                                   sizeof err), 0);
  ck_assert_int_eq(hostlist_first(oracle[_i], first, sizeof first, err,
                                  sizeof err), 0);
  ck_assert_str_eq(first, h[0]);
  hostlist_free(h, n);
}
END_TEST

static void cleanup_conf(void)
{
  unlink(slurm_conf());
}

static Suite *hostlist_suite(void)
{
  Suite *s = suite_create("hostlist");
  TCase *tc = tcase_create("syntax");

  tcase_add_loop_test(tc, test_known, 0,
                      (int)(sizeof known / sizeof known[0]));
  tcase_add_loop_test(tc, test_malformed, 0,
                      (int)(sizeof malformed / sizeof malformed[0]));
  tcase_add_test(tc, test_messages);
  tcase_add_test(tc, test_bounded);
  suite_add_tcase(s, tc);
  tc = tcase_create("scontrol");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_scontrol_oracle, 0,
                      (int)(sizeof oracle / sizeof oracle[0]));
  tcase_add_loop_test(tc, test_oracle_first, 0,
                      (int)(sizeof oracle / sizeof oracle[0]));
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(hostlist_suite());
  int failed;

  /* One process: the configuration file is written once and removed. */
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  cleanup_conf();
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
