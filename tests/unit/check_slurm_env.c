/* check_slurm_env.c -- unit tests for launcher/slurm_env.c: what cdrun
 * derives from srun's environment, and that the command line and real
 * PET_* variables win over it. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "slurm_env.h"

static char *step_env[] = {
  "SLURM_JOB_ID=4242", "SLURM_STEP_ID=3", "SLURM_NODEID=2",
  "SLURM_STEP_NODELIST=gpu[07-10],cpu1", "SLURM_JOB_NODELIST=gpu[01-20]",
  "SLURM_NNODES=5", "SLURM_STEP_NUM_NODES=5", "SLURM_NTASKS=5",
  "SLURM_GPUS_ON_NODE=4", "PATH=/bin", NULL,
};

static const char *pet(const struct slurm_env *s, const char *name)
{
  size_t n = strlen(name);

  for (int i = 0; i < s->npet; i++)
    if (!strncmp(s->pet[i], name, n) && s->pet[i][n] == '=')
      return s->pet[i] + n + 1;
  return NULL;
}

START_TEST(test_step)
{
  struct slurm_env s;
  char err[256], ep[64];

  ck_assert_int_eq(slurm_env_derive(step_env, &s, err, sizeof err), 0);
  ck_assert(s.active);
  ck_assert_int_eq(s.nnodes, 5);
  ck_assert_int_eq(s.node_rank, 2);
  ck_assert_str_eq(s.first_host, "gpu07");
  ck_assert_str_eq(s.rdzv_id, "4242.3");
  ck_assert_int_eq(s.gpus_on_node, 4);
  ck_assert_int_eq(s.port, slurm_env_port("4242", "3"));
  ck_assert_int_ge(s.port, SLURM_PORT_BASE);
  ck_assert_int_lt(s.port, SLURM_PORT_BASE + SLURM_PORT_SPAN);
  ck_assert_str_eq(pet(&s, "PET_NNODES"), "5");
  ck_assert_str_eq(pet(&s, "PET_NODE_RANK"), "2");
  ck_assert_str_eq(pet(&s, "PET_RDZV_BACKEND"), "c10d");
  ck_assert_str_eq(pet(&s, "PET_RDZV_ID"), "4242.3");
  snprintf(ep, sizeof ep, "gpu07:%d", s.port);
  ck_assert_str_eq(pet(&s, "PET_RDZV_ENDPOINT"), ep);
}
END_TEST

/* Every node of a step computes the same port; another step another. */
START_TEST(test_port_agreed)
{
  int p = slurm_env_port("4242", "3");

  ck_assert_int_eq(slurm_env_port("4242", "3"), p);
  ck_assert_int_ne(slurm_env_port("4242", "4"), p);
  ck_assert_int_ne(slurm_env_port("4243", "3"), p);
}
END_TEST

START_TEST(test_port_override_and_fallbacks)
{
  char *env[] = {
    "SLURM_JOBID=9", "SLURM_STEPID=0", "SLURM_NODEID=0",
    "SLURM_JOB_NODELIST=n[1-2]", "SLURM_JOB_NUM_NODES=2",
    "CDRUN_SLURM_PORT=31000", NULL,
  };
  struct slurm_env s;
  char err[256];

  ck_assert_int_eq(slurm_env_derive(env, &s, err, sizeof err), 0);
  ck_assert(s.active);
  ck_assert_int_eq(s.port, 31000);
  ck_assert(s.port_from_env);
  ck_assert_str_eq(s.first_host, "n1");
  ck_assert_str_eq(s.nodelist_var, "SLURM_JOB_NODELIST");
  ck_assert_str_eq(s.nnodes_var, "SLURM_JOB_NUM_NODES");
  ck_assert_int_eq(s.gpus_on_node, 0);
  ck_assert_str_eq(pet(&s, "PET_RDZV_ENDPOINT"), "n1:31000");
}
END_TEST

/* A batch script or salloc shell (no step), CDRUN_SLURM=0, no Slurm. */
START_TEST(test_inactive)
{
  char *batch[] = {
    "SLURM_JOB_ID=5", "SLURM_JOB_NODELIST=n[1-4]", "SLURM_NNODES=4",
    "SLURM_NODEID=0", NULL,
  };
  char *off[] = {
    "SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_NODEID=0",
    "SLURM_STEP_NODELIST=n1", "SLURM_NNODES=1", "CDRUN_SLURM=0", NULL,
  };
  char *none[] = { "PATH=/bin", NULL };
  struct slurm_env s;
  char err[256];

  ck_assert_int_eq(slurm_env_derive(batch, &s, err, sizeof err), 0);
  ck_assert(!s.active);
  ck_assert_int_eq(slurm_env_derive(off, &s, err, sizeof err), 0);
  ck_assert(!s.active);
  ck_assert_int_eq(slurm_env_derive(none, &s, err, sizeof err), 0);
  ck_assert(!s.active);
  ck_assert_int_eq(slurm_env_derive(NULL, &s, err, sizeof err), 0);
  ck_assert(!s.active);
}
END_TEST

static const struct {
  const char *var, *msg;
} bad[] = {
  { "SLURM_NNODES=zero", "SLURM_STEP_NUM_NODES" },
  { "SLURM_NODEID=7", "SLURM_NODEID: invalid value '7'" },
  { "SLURM_STEP_NODELIST=n[3-1]", "SLURM_STEP_NODELIST: hostlist" },
  { "SLURM_NTASKS=8", "SLURM_NTASKS=8 tasks on 2 nodes" },
  { "CDRUN_SLURM_PORT=70000", "CDRUN_SLURM_PORT: invalid value" },
  { "SLURM_GPUS_ON_NODE=x", "SLURM_GPUS_ON_NODE: invalid" },
};

START_TEST(test_bad)
{
  char *env[] = {
    "SLURM_JOB_ID=1", "SLURM_STEP_ID=0", (char *)bad[_i].var,
    "SLURM_NODEID=0", "SLURM_STEP_NODELIST=n[1-2]", "SLURM_NNODES=2",
    "SLURM_STEP_NUM_NODES=2", NULL,
  };
  struct slurm_env s;
  char err[256];

  /* The variable under test comes first, so it wins over the defaults. */
  if (strncmp(bad[_i].var, "SLURM_NNODES", 12) == 0)
    env[2] = "SLURM_STEP_NUM_NODES=zero";
  ck_assert_int_eq(slurm_env_derive(env, &s, err, sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, bad[_i].msg), "'%s' lacks '%s'", err,
                bad[_i].msg);
}
END_TEST

/* Flags win over real PET_*, which win over Slurm's. */
START_TEST(test_precedence)
{
  char *env[16], **aug;
  struct cdrun_args a;
  struct slurm_env s;
  char err[256];
  char *argv[] = { "cdrun", "--rdzv_id=mine", "train.py", NULL };
  size_t n = 0;

  for (char **e = step_env; *e; e++)
    env[n++] = *e;
  env[n++] = "PET_NNODES=1:5";
  env[n] = NULL;
  ck_assert_int_eq(slurm_env_derive(env, &s, err, sizeof err), 0);
  aug = slurm_env_augment(env, &s);
  ck_assert_ptr_nonnull(aug);
  ck_assert_int_eq(args_parse(&a, 3, argv, aug, err, sizeof err), 0);
  ck_assert_str_eq(a.rdzv_id, "mine");
  ck_assert_int_eq(a.nnodes_min, 1);
  ck_assert_int_eq(a.nnodes_max, 5);
  ck_assert_int_eq(a.node_rank, 2);
  ck_assert_str_eq(a.rdzv_backend, "c10d");
  ck_assert_ptr_nonnull(strstr(a.rdzv_endpoint, "gpu07:"));
  ck_assert_ptr_null(slurm_env_source(&s, env, "PET_NNODES"));
  ck_assert_str_eq(slurm_env_source(&s, env, "PET_NODE_RANK"),
                   "SLURM_NODEID");
  args_free(&a);
  free(aug);
}
END_TEST

static Suite *slurm_suite(void)
{
  Suite *s = suite_create("slurm_env");
  TCase *tc = tcase_create("derive");

  tcase_add_test(tc, test_step);
  tcase_add_test(tc, test_port_agreed);
  tcase_add_test(tc, test_port_override_and_fallbacks);
  tcase_add_test(tc, test_inactive);
  tcase_add_loop_test(tc, test_bad, 0, (int)(sizeof bad / sizeof bad[0]));
  tcase_add_test(tc, test_precedence);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(slurm_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
