/* check_jobtoken.c -- unit tests for launcher/jobtoken.c: every node of a
 * round computes the same token from what it shares with the others
 * (Note [job token]). */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobtoken.h"

static struct rdzv_assignment round_of(int group_rank, int nodes)
{
  struct rdzv_assignment as;

  memset(&as, 0, sizeof as);
  as.round = group_rank;      /* rounds are counted per node (static) */
  as.group_rank = group_rank;
  as.group_world_size = nodes;
  as.world_size = 8;
  snprintf(as.master_addr, sizeof as.master_addr, "10.0.0.1");
  as.master_port = 29500;
  return as;
}

static void make(const char *secret, const struct rdzv_assignment *as,
                 char *out, bool *guessable)
{
  ck_assert_int_eq(jobtoken_make((const unsigned char *)secret,
                                 secret ? strlen(secret) : 0, "job-7", as,
                                 true, out, guessable), 0);
  ck_assert_uint_eq(strlen(out), JOBTOKEN_HEX);
  ck_assert_uint_eq(strspn(out, "0123456789abcdef"), JOBTOKEN_HEX);
}

START_TEST(test_secret_shared)
{
  struct rdzv_assignment n0 = round_of(0, 2), n1 = round_of(1, 2);
  char a[JOBTOKEN_HEX + 1], b[JOBTOKEN_HEX + 1], c[JOBTOKEN_HEX + 1];
  bool g;

  unsetenv(JOBTOKEN_VAR);
  make("a-rendezvous-secret-of-some-length", &n0, a, &g);
  ck_assert(!g);
  make("a-rendezvous-secret-of-some-length", &n1, b, &g);
  ck_assert_str_eq(a, b);
  make("another-secret-of-some-length", &n0, c, &g);
  ck_assert_str_ne(a, c);
  /* Another master endpoint: another token. */
  n1.master_port = 29501;
  make("a-rendezvous-secret-of-some-length", &n1, c, &g);
  ck_assert_str_ne(a, c);
}
END_TEST

START_TEST(test_operator_token)
{
  struct rdzv_assignment n0 = round_of(0, 2), n1 = round_of(1, 2);
  char a[JOBTOKEN_HEX + 1], b[JOBTOKEN_HEX + 1];
  bool g;

  setenv(JOBTOKEN_VAR, "set-by-the-operator-on-every-node", 1);
  make(NULL, &n0, a, &g);
  ck_assert(!g);
  make("a-rendezvous-secret-of-some-length", &n1, b, &g);
  ck_assert_str_eq(a, b);       /* the operator's key wins */
  ck_assert_ptr_null(strstr(a, "operator"));
  unsetenv(JOBTOKEN_VAR);
}
END_TEST

START_TEST(test_one_node_random)
{
  struct rdzv_assignment n0 = round_of(0, 1);
  char a[JOBTOKEN_HEX + 1], b[JOBTOKEN_HEX + 1];
  bool g;

  unsetenv(JOBTOKEN_VAR);
  make(NULL, &n0, a, &g);
  ck_assert(!g);
  make(NULL, &n0, b, &g);
  ck_assert_str_ne(a, b);
}
END_TEST

/* Note [live token on one node]: a one-node round whose token a node
 * joining later must know gets the derived one, the same as that
 * newcomer's two-node round computes. */
START_TEST(test_one_node_shared)
{
  struct rdzv_assignment n0 = round_of(0, 1), grown = round_of(1, 2);
  char a[JOBTOKEN_HEX + 1], b[JOBTOKEN_HEX + 1];
  bool g = false;

  unsetenv(JOBTOKEN_VAR);
  ck_assert_int_eq(jobtoken_make(NULL, 0, "job-7", &n0, false, a, &g), 0);
  ck_assert(g);
  make(NULL, &grown, b, &g);
  ck_assert_str_eq(a, b);
}
END_TEST

START_TEST(test_no_secret_guessable)
{
  struct rdzv_assignment n0 = round_of(0, 3), n2 = round_of(2, 3);
  char a[JOBTOKEN_HEX + 1], b[JOBTOKEN_HEX + 1];
  bool g = false;

  unsetenv(JOBTOKEN_VAR);
  make(NULL, &n0, a, &g);
  ck_assert(g);
  make(NULL, &n2, b, &g);
  ck_assert_str_eq(a, b);
}
END_TEST

/* The rendezvous issued a token with the round: taken as is, over the
 * secret-derived one; the operator's own still wins. */
START_TEST(test_rendezvous_issued)
{
  struct rdzv_assignment n0 = round_of(0, 2);
  char a[JOBTOKEN_HEX + 1];
  bool g = true;

  unsetenv(JOBTOKEN_VAR);
  memset(n0.job_token, 'c', JOBTOKEN_HEX);
  make("a-rendezvous-secret-of-some-length", &n0, a, &g);
  ck_assert(!g);
  ck_assert_str_eq(a, n0.job_token);
  make(NULL, &n0, a, &g);
  ck_assert(!g);
  ck_assert_str_eq(a, n0.job_token);
  setenv(JOBTOKEN_VAR, "set-by-the-operator-on-every-node", 1);
  make(NULL, &n0, a, &g);
  ck_assert_str_ne(a, n0.job_token);
  unsetenv(JOBTOKEN_VAR);
}
END_TEST

/* Note [static run nonce]: the run nonce is bound into a derived token,
 * under a secret, the operator's key or none: every node of one run (one
 * nonce) agrees, the next run (another) differs; no nonce, the token of
 * before. */
START_TEST(test_run_nonce)
{
  struct rdzv_assignment n0 = round_of(0, 2), n1 = round_of(1, 2);
  char a[JOBTOKEN_HEX + 1], b[JOBTOKEN_HEX + 1], c[JOBTOKEN_HEX + 1];
  char plain[JOBTOKEN_HEX + 1], nonce2[JOBTOKEN_NONCE_HEX + 1];
  const char *secrets[] = { "a-rendezvous-secret-of-some-length", NULL };
  bool g;

  for (int op = 0; op < 2; op++)
    for (int k = 0; k < 2; k++) {
      if (op)
        setenv(JOBTOKEN_VAR, "set-by-the-operator-on-every-node", 1);
      else
        unsetenv(JOBTOKEN_VAR);
      n0.run_nonce[0] = n1.run_nonce[0] = '\0';
      make(secrets[k], &n0, plain, &g);
      jobtoken_run_nonce(n0.run_nonce);
      ck_assert_uint_eq(strlen(n0.run_nonce), JOBTOKEN_NONCE_HEX);
      memcpy(n1.run_nonce, n0.run_nonce, sizeof n1.run_nonce);
      make(secrets[k], &n0, a, &g);
      make(secrets[k], &n1, b, &g);
      ck_assert_str_eq(a, b);
      ck_assert_str_ne(a, plain);
      jobtoken_run_nonce(nonce2);
      ck_assert_str_ne(nonce2, n0.run_nonce);
      memcpy(n1.run_nonce, nonce2, sizeof n1.run_nonce);
      make(secrets[k], &n1, c, &g);
      ck_assert_str_ne(a, c);
    }
  unsetenv(JOBTOKEN_VAR);
}
END_TEST

static Suite *jobtoken_suite(void)
{
  Suite *s = suite_create("jobtoken");
  TCase *tc = tcase_create("jobtoken");

  tcase_add_test(tc, test_secret_shared);
  tcase_add_test(tc, test_operator_token);
  tcase_add_test(tc, test_one_node_random);
  tcase_add_test(tc, test_one_node_shared);
  tcase_add_test(tc, test_no_secret_guessable);
  tcase_add_test(tc, test_rendezvous_issued);
  tcase_add_test(tc, test_run_nonce);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(jobtoken_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
