/* check_pg_launch_env.c -- unit tests for libpg/core/launch_env.c: RANK,
 * WORLD_SIZE, ... from srun's and mpirun's environment. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_env.h"

static const char *const all_vars[] = {
  "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
  "MASTER_PORT", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID",
  "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID",
  "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
  "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "OMPI_COMM_WORLD_RANK",
  "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
  "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid",
  "PMIX_NAMESPACE", NULL,
};

static void clear_env(void)
{
  for (int i = 0; all_vars[i]; i++)
    unsetenv(all_vars[i]);
}

static const char *get(const char *name)
{
  static char buf[256];

  return pg__launch_env(name, buf, sizeof buf);
}

static void slurm_step(void)
{
  setenv("SLURM_JOB_ID", "812", 1);
  setenv("SLURM_STEP_ID", "1", 1);
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "2", 1);
  setenv("SLURM_NODEID", "1", 1);
  setenv("SLURM_TASKS_PER_NODE", "3(x2),2", 1);
  setenv("SLURM_STEP_NODELIST", "gpu-a[07-09],gpu-b1", 1);
}

START_TEST(test_slurm)
{
  char want[16];

  clear_env();
  slurm_step();
  ck_assert_str_eq(get("RANK"), "5");
  ck_assert_str_eq(get("WORLD_SIZE"), "8");
  ck_assert_str_eq(get("LOCAL_RANK"), "2");
  ck_assert_str_eq(get("LOCAL_WORLD_SIZE"), "3");
  ck_assert_str_eq(get("MASTER_ADDR"), "gpu-a07");
  snprintf(want, sizeof want, "%d", pg__agreed_port("libpg.812.1"));
  ck_assert_str_eq(get("MASTER_PORT"), want);
  setenv("SLURM_NODEID", "2", 1);
  ck_assert_str_eq(get("LOCAL_WORLD_SIZE"), "2");
  setenv("SLURM_NODEID", "3", 1);
  ck_assert_ptr_null(get("LOCAL_WORLD_SIZE"));
  /* A node id or task list that is not numbers derives nothing (atoi
   * took "x" for node 0). */
  setenv("SLURM_NODEID", "x", 1);
  ck_assert_ptr_null(get("LOCAL_WORLD_SIZE"));
  setenv("SLURM_NODEID", "1", 1);
  setenv("SLURM_TASKS_PER_NODE", "3(x)", 1);
  ck_assert_ptr_null(get("LOCAL_WORLD_SIZE"));
  setenv("SLURM_TASKS_PER_NODE", "+3(x2)", 1);
  ck_assert_ptr_null(get("LOCAL_WORLD_SIZE"));
  setenv("SLURM_TASKS_PER_NODE", "3(x2),2", 1);
  /* Explicit values win, one by one. */
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  setenv("MASTER_PORT", "29999", 1);
  ck_assert_str_eq(get("MASTER_ADDR"), "10.0.0.1");
  ck_assert_str_eq(get("MASTER_PORT"), "29999");
  /* With RANK or WORLD_SIZE set (cdrun, torchrun), nothing is derived. */
  setenv("WORLD_SIZE", "2", 1);
  ck_assert_ptr_null(get("RANK"));
  ck_assert_ptr_null(get("LOCAL_RANK"));
  ck_assert_str_eq(get("WORLD_SIZE"), "2");
}
END_TEST

START_TEST(test_ompi)
{
  char want[16];

  clear_env();
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  setenv("OMPI_MCA_ess_base_jobid", "867631105", 1);
  ck_assert_str_eq(get("RANK"), "3");
  ck_assert_str_eq(get("WORLD_SIZE"), "4");
  ck_assert_str_eq(get("LOCAL_RANK"), "3");
  ck_assert_str_eq(get("LOCAL_WORLD_SIZE"), "4");
  ck_assert_str_eq(get("MASTER_ADDR"), "127.0.0.1");
  snprintf(want, sizeof want, "%d", pg__agreed_port("libpg.ompi.867631105"));
  ck_assert_str_eq(get("MASTER_PORT"), want);
  /* Across hosts Open MPI does not say where rank 0 is. */
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  ck_assert_ptr_null(get("MASTER_ADDR"));
  setenv("MASTER_ADDR", "node0", 1);
  ck_assert_str_eq(get("MASTER_ADDR"), "node0");
}
END_TEST

START_TEST(test_none)
{
  clear_env();
  ck_assert_ptr_null(get("RANK"));
  ck_assert_ptr_null(get("MASTER_ADDR"));
  /* A batch script (no step, no PROCID) derives nothing. */
  setenv("SLURM_JOB_ID", "1", 1);
  setenv("SLURM_JOB_NODELIST", "n1", 1);
  ck_assert_ptr_null(get("RANK"));
  ck_assert_ptr_null(get("MASTER_ADDR"));
}
END_TEST

static const struct {
  const char *list, *first;
} firsts[] = {
  { "n[01-04,07],gpu-a[1-2]", "n01" }, { "rack[1-2]-node[01-02]",
  "rack1-node01" }, { "n7", "n7" }, { "n[9,1-3]", "n9" },
  { " ,a,b", "a" }, { "x[007]", "x007" }, { "h-[3-4]y[5]", "h-3y5" },
  { "n[1-3", NULL }, { "n1]", NULL }, { "n[]", NULL }, { "", NULL },
  { "n[a]", NULL }, { "n[[1]]", NULL },
};

START_TEST(test_hostlist_first)
{
  char out[32];
  int rc = pg__hostlist_first(firsts[_i].list, out, sizeof out);

  if (!firsts[_i].first) {
    ck_assert_msg(rc == -EINVAL, "'%s' accepted as '%s'", firsts[_i].list,
                  out);
    return;
  }
  ck_assert_int_eq(rc, 0);
  ck_assert_str_eq(out, firsts[_i].first);
}
END_TEST

START_TEST(test_hostlist_first_small)
{
  char out[4];

  ck_assert_int_eq(pg__hostlist_first("abcd", out, sizeof out), -EINVAL);
  ck_assert_int_eq(pg__hostlist_first("a[1234]", out, sizeof out), -EINVAL);
  ck_assert_int_eq(pg__hostlist_first("a[12]", out, sizeof out), 0);
  ck_assert_str_eq(out, "a12");
}
END_TEST

static Suite *launch_suite(void)
{
  Suite *s = suite_create("pg_launch_env");
  TCase *tc = tcase_create("env");

  tcase_add_test(tc, test_slurm);
  tcase_add_test(tc, test_ompi);
  tcase_add_test(tc, test_none);
  tcase_add_loop_test(tc, test_hostlist_first, 0,
                      (int)(sizeof firsts / sizeof firsts[0]));
  tcase_add_test(tc, test_hostlist_first_small);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(launch_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
