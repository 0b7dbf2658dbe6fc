/* check_workerenv.c -- unit tests for launcher/workerenv.c. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workerenv.h"

/* A worker with distinct values everywhere, so a swapped field shows. */
static struct worker_env sample(void)
{
  struct worker_env w;

  memset(&w, 0, sizeof w);
  w.local_rank = 3;
  w.rank = 11;
  w.group_rank = 2;
  w.role_rank = 7;
  w.role_name = "trainer";
  w.local_world_size = 4;
  w.world_size = 16;
  w.group_world_size = 5;
  w.role_world_size = 13;
  w.master_addr = "node-0.example";
  w.master_port = 29511;
  w.restart_count = 1;
  w.max_restarts = 9;
  w.run_id = "job-42";
  w.use_agent_store = true;
  w.error_file = "/tmp/err/3/error.json";
  w.default_omp_threads = true;
  return w;
}

/* How many entries of env are "name=...". */
static int count_name(char *const *env, const char *name)
{
  size_t n = strlen(name);
  int c = 0;

  for (size_t i = 0; env[i]; i++)
    if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
      c++;
  return c;
}

static size_t env_len(char *const *env)
{
  size_t n = 0;

  while (env[n])
    n++;
  return n;
}

static bool env_has(char *const *env, const char *entry)
{
  for (size_t i = 0; env[i]; i++)
    if (strcmp(env[i], entry) == 0)
      return true;
  return false;
}

/* Asserts name appears exactly once, with value want. */
static void expect(char *const *env, const char *name, const char *want)
{
  const char *got = workerenv_get(env, name);

  ck_assert_msg(got != NULL, "%s missing", name);
  ck_assert_msg(strcmp(got, want) == 0, "%s='%s', want '%s'", name, got,
                want);
  ck_assert_int_eq(count_name(env, name), 1);
}

static const char *const torchrun_names[] = {
  "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
  "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
  "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
  "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
  "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
  "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING",
  "OMP_NUM_THREADS", "NODE_RANK",
};
#define N_TORCHRUN_NAMES \
  (sizeof(torchrun_names) / sizeof(torchrun_names[0]))

static void expect_sample(char *const *env)
{
  expect(env, "LOCAL_RANK", "3");
  expect(env, "RANK", "11");
  expect(env, "GROUP_RANK", "2");
  expect(env, "NODE_RANK", "2");
  expect(env, "ROLE_RANK", "7");
  expect(env, "ROLE_NAME", "trainer");
  expect(env, "LOCAL_WORLD_SIZE", "4");
  expect(env, "WORLD_SIZE", "16");
  expect(env, "GROUP_WORLD_SIZE", "5");
  expect(env, "ROLE_WORLD_SIZE", "13");
  expect(env, "MASTER_ADDR", "node-0.example");
  expect(env, "MASTER_PORT", "29511");
  expect(env, "TORCHELASTIC_RESTART_COUNT", "1");
  expect(env, "TORCHELASTIC_MAX_RESTARTS", "9");
  expect(env, "TORCHELASTIC_RUN_ID", "job-42");
  expect(env, "TORCHELASTIC_USE_AGENT_STORE", "True");
  expect(env, "TORCHELASTIC_ERROR_FILE", "/tmp/err/3/error.json");
}

START_TEST(test_all_vars_empty_base)
{
  char *base[] = { NULL };
  struct worker_env w = sample();
  char **env = workerenv_build(base, &w);

  ck_assert_ptr_nonnull(env);
  expect_sample(env);
  expect(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  expect(env, "NCCL_ASYNC_ERROR_HANDLING", "1");
  expect(env, "OMP_NUM_THREADS", "1");
  /* Nothing else was added. */
  ck_assert_uint_eq(env_len(env), N_TORCHRUN_NAMES);
  workerenv_free(env);

  /* A NULL base is an empty one. */
  env = workerenv_build(NULL, &w);
  ck_assert_ptr_nonnull(env);
  expect_sample(env);
  ck_assert_uint_eq(env_len(env), N_TORCHRUN_NAMES);
  workerenv_free(env);
}
END_TEST

START_TEST(test_base_kept_in_order)
{
  char *base[] = { "PATH=/usr/bin:/bin", "HOME=/root", "EMPTY=",
                   "A=b=c", NULL };
  struct worker_env w = sample();
  char **env = workerenv_build(base, &w);

  ck_assert_ptr_nonnull(env);
  ck_assert_str_eq(env[0], "PATH=/usr/bin:/bin");
  ck_assert_str_eq(env[1], "HOME=/root");
  ck_assert_str_eq(env[2], "EMPTY=");
  ck_assert_str_eq(env[3], "A=b=c");
  /* Copies, not the caller's pointers. */
  ck_assert_ptr_ne(env[0], base[0]);
  ck_assert_uint_eq(env_len(env), 4 + N_TORCHRUN_NAMES);
  expect_sample(env);
  workerenv_free(env);
}
END_TEST

START_TEST(test_owned_replaced)
{
  char *base[] = {
    "LOCAL_RANK=99", "RANK=99", "GROUP_RANK=99", "ROLE_RANK=99",
    "ROLE_NAME=old", "LOCAL_WORLD_SIZE=99", "WORLD_SIZE=99",
    "GROUP_WORLD_SIZE=99", "ROLE_WORLD_SIZE=99", "MASTER_ADDR=old",
    "MASTER_PORT=1", "TORCHELASTIC_RESTART_COUNT=99",
    "TORCHELASTIC_MAX_RESTARTS=99", "TORCHELASTIC_RUN_ID=old",
    "TORCHELASTIC_USE_AGENT_STORE=old", "TORCHELASTIC_ERROR_FILE=old",
    "KEEP=me", "RANK=98", "NODE_RANK=99", NULL,
  };
  struct worker_env w = sample();
  char **env = workerenv_build(base, &w);

  ck_assert_ptr_nonnull(env);
  expect_sample(env);
  expect(env, "KEEP", "me");
  for (size_t i = 0; i < N_TORCHRUN_NAMES; i++)
    ck_assert_msg(count_name(env, torchrun_names[i]) == 1,
                  "%s appears %d times", torchrun_names[i],
                  count_name(env, torchrun_names[i]));
  ck_assert_uint_eq(env_len(env), 1 + N_TORCHRUN_NAMES);
  workerenv_free(env);
}
END_TEST

START_TEST(test_inherited_win)
{
  char *base[] = { "TORCH_NCCL_ASYNC_ERROR_HANDLING=0",
                   "NCCL_ASYNC_ERROR_HANDLING=3", "OMP_NUM_THREADS=8",
                   NULL };
  struct worker_env w = sample();
  char **env = workerenv_build(base, &w);

  ck_assert_ptr_nonnull(env);
  expect(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0");
  expect(env, "NCCL_ASYNC_ERROR_HANDLING", "3");
  expect(env, "OMP_NUM_THREADS", "8");
  ck_assert_uint_eq(env_len(env), N_TORCHRUN_NAMES);
  workerenv_free(env);

  /* Without the OMP default the inherited value is still passed on. */
  w.default_omp_threads = false;
  env = workerenv_build(base, &w);
  ck_assert_ptr_nonnull(env);
  expect(env, "OMP_NUM_THREADS", "8");
  workerenv_free(env);

  /* An inherited empty value is still a value. */
  {
    char *b2[] = { "OMP_NUM_THREADS=", NULL };

    w.default_omp_threads = true;
    env = workerenv_build(b2, &w);
    ck_assert_ptr_nonnull(env);
    expect(env, "OMP_NUM_THREADS", "");
    workerenv_free(env);
  }
}
END_TEST

START_TEST(test_no_default_omp)
{
  char *base[] = { "X=1", NULL };
  struct worker_env w = sample();
  char **env;

  w.default_omp_threads = false;
  env = workerenv_build(base, &w);
  ck_assert_ptr_nonnull(env);
  ck_assert_ptr_null(workerenv_get(env, "OMP_NUM_THREADS"));
  ck_assert_int_eq(count_name(env, "OMP_NUM_THREADS"), 0);
  /* The NCCL defaults do not depend on that flag. */
  expect(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  expect(env, "NCCL_ASYNC_ERROR_HANDLING", "1");
  ck_assert_uint_eq(env_len(env), 1 + N_TORCHRUN_NAMES - 1);
  workerenv_free(env);
}
END_TEST

START_TEST(test_agent_store_and_error_file)
{
  char *base[] = { NULL };
  struct worker_env w = sample();
  char **env;

  w.use_agent_store = false;
  w.error_file = "";
  env = workerenv_build(base, &w);
  ck_assert_ptr_nonnull(env);
  expect(env, "TORCHELASTIC_USE_AGENT_STORE", "False");
  expect(env, "TORCHELASTIC_ERROR_FILE", "");
  ck_assert(env_has(env, "TORCHELASTIC_ERROR_FILE="));
  workerenv_free(env);

  w.error_file = NULL;
  env = workerenv_build(base, &w);
  ck_assert_ptr_nonnull(env);
  ck_assert(env_has(env, "TORCHELASTIC_ERROR_FILE="));
  workerenv_free(env);
}
END_TEST

START_TEST(test_prefix_names_kept)
{
  char *base[] = { "RANKX=1", "RANK_FOO=2", "MASTER_ADDRESS=h",
                   "LOCAL_RANKS=5", "XRANK=6", "RANK", "OMP_NUM_THREADSX=2",
                   NULL };
  struct worker_env w = sample();
  char **env = workerenv_build(base, &w);

  ck_assert_ptr_nonnull(env);
  for (size_t i = 0; base[i]; i++)
    ck_assert_msg(env_has(env, base[i]), "'%s' dropped", base[i]);
  expect(env, "RANK", "11");
  expect(env, "MASTER_ADDR", "node-0.example");
  expect(env, "LOCAL_RANK", "3");
  /* A look-alike does not count as an inherited OMP_NUM_THREADS. */
  expect(env, "OMP_NUM_THREADS", "1");
  ck_assert_uint_eq(env_len(env), 7 + N_TORCHRUN_NAMES);
  workerenv_free(env);
}
END_TEST

START_TEST(test_negative_and_large_ints)
{
  char *base[] = { NULL };
  struct worker_env w = sample();
  char **env;

  w.restart_count = 0;
  w.max_restarts = -1;
  w.master_port = 65535;
  w.world_size = 2147483647;
  env = workerenv_build(base, &w);
  ck_assert_ptr_nonnull(env);
  expect(env, "TORCHELASTIC_RESTART_COUNT", "0");
  expect(env, "TORCHELASTIC_MAX_RESTARTS", "-1");
  expect(env, "MASTER_PORT", "65535");
  expect(env, "WORLD_SIZE", "2147483647");
  workerenv_free(env);
}
END_TEST

START_TEST(test_get)
{
  char *env[] = { "A=1", "AB=2", "B=", "C", "D=x=y", "A=second", NULL };

  ck_assert_str_eq(workerenv_get(env, "A"), "1");
  ck_assert_str_eq(workerenv_get(env, "AB"), "2");
  ck_assert_str_eq(workerenv_get(env, "B"), "");
  ck_assert_str_eq(workerenv_get(env, "D"), "x=y");
  ck_assert_ptr_null(workerenv_get(env, "C"));
  ck_assert_ptr_null(workerenv_get(env, "ABC"));
  ck_assert_ptr_null(workerenv_get(env, "Z"));
  ck_assert_ptr_null(workerenv_get(NULL, "A"));
  /* The value points into the entry itself. */
  ck_assert_ptr_eq(workerenv_get(env, "AB"), env[1] + 3);
  workerenv_free(NULL);
}
END_TEST

START_TEST(test_virtual_local_rank)
{
  struct worker_env w = sample();
  char *base[] = { "CUDA_VISIBLE_DEVICES=4,6, GPU-ab ", "X=1", NULL };
  char **env;

  w.local_rank = 2;
  w.virtual_local_rank = true;
  env = workerenv_build(base, &w);
  ck_assert_str_eq(workerenv_get(env, "LOCAL_RANK"), "0");
  ck_assert_str_eq(workerenv_get(env, "CUDA_VISIBLE_DEVICES"), "GPU-ab");
  ck_assert_int_eq(count_name(env, "CUDA_VISIBLE_DEVICES"), 1);
  workerenv_free(env);
  /* No such entry, or no list: the local rank. */
  w.local_rank = 3;
  env = workerenv_build(base, &w);
  ck_assert_str_eq(workerenv_get(env, "CUDA_VISIBLE_DEVICES"), "3");
  workerenv_free(env);
  env = workerenv_build(base + 1, &w);
  ck_assert_str_eq(workerenv_get(env, "CUDA_VISIBLE_DEVICES"), "3");
  workerenv_free(env);
  /* Off: LOCAL_RANK is the local rank and the list is inherited. */
  w.virtual_local_rank = false;
  env = workerenv_build(base, &w);
  ck_assert_str_eq(workerenv_get(env, "LOCAL_RANK"), "3");
  ck_assert_str_eq(workerenv_get(env, "CUDA_VISIBLE_DEVICES"),
                   "4,6, GPU-ab ");
  workerenv_free(env);
}
END_TEST

START_TEST(test_timer_and_heartbeat_files)
{
  struct worker_env w = sample();
  char *base[] = { "TORCHELASTIC_TIMER_FILE=/old", "X=1", NULL };
  char **env;

  env = workerenv_build(base, &w);
  ck_assert_str_eq(workerenv_get(env, "TORCHELASTIC_TIMER_FILE"), "/old");
  ck_assert_ptr_null(workerenv_get(env, "CDRUN_HEARTBEAT_FILE"));
  workerenv_free(env);
  w.timer_file = "/run/t";
  w.heartbeat_file = "/run/hb";
  env = workerenv_build(base, &w);
  ck_assert_str_eq(workerenv_get(env, "TORCHELASTIC_TIMER_FILE"), "/run/t");
  ck_assert_int_eq(count_name(env, "TORCHELASTIC_TIMER_FILE"), 1);
  ck_assert_str_eq(workerenv_get(env, "CDRUN_HEARTBEAT_FILE"), "/run/hb");
  workerenv_free(env);
}
END_TEST

/* The job token replaces an inherited one (the agent's own, which is
 * only a key: jobtoken.h). */
START_TEST(test_job_token)
{
  struct worker_env w = sample();
  char *base[] = { "CDRUN_JOB_TOKEN=the-operators-key", "X=1", NULL };
  char **env;

  w.job_token = "0123abcd";
  env = workerenv_build(base, &w);
  ck_assert_str_eq(workerenv_get(env, "CDRUN_JOB_TOKEN"), "0123abcd");
  ck_assert_int_eq(count_name(env, "CDRUN_JOB_TOKEN"), 1);
  workerenv_free(env);
}
END_TEST

/* Live mode: CDRUN_RECOVERY=live and the handshake's variables. */
START_TEST(test_live)
{
  struct worker_env w = sample();
  char *base[] = { "CDRUN_LIVE_STORE=outer:1", "X=1", NULL };
  char **env;

  w.live = true;
  w.live_opt_in = "/logs/attempt_0/3/live_opt_in";
  w.live_store = "node-0.example:29512";
  w.live_round_file = "/logs/live_round";
  w.worker_restarts = 2;
  env = workerenv_build(base, &w);
  ck_assert_str_eq(workerenv_get(env, "CDRUN_RECOVERY"), "live");
  ck_assert_str_eq(workerenv_get(env, "CDRUN_LIVE_OPT_IN"),
                   "/logs/attempt_0/3/live_opt_in");
  ck_assert_str_eq(workerenv_get(env, "CDRUN_LIVE_STORE"),
                   "node-0.example:29512");
  ck_assert_int_eq(count_name(env, "CDRUN_LIVE_STORE"), 1);
  ck_assert_str_eq(workerenv_get(env, "CDRUN_LIVE_ROUND_FILE"),
                   "/logs/live_round");
  ck_assert_str_eq(workerenv_get(env, "CDRUN_WORKER_RESTARTS"), "2");
  workerenv_free(env);
}
END_TEST

/* Restart mode: none of them, not even inherited (an outer live job's
 * would make a libpg worker look for a store nobody serves). */
START_TEST(test_restart_mode_no_live)
{
  struct worker_env w = sample();
  char *base[] = { "CDRUN_RECOVERY=live", "CDRUN_LIVE_OPT_IN=/x",
                   "CDRUN_LIVE_STORE=h:1", "CDRUN_LIVE_ROUND_FILE=/r",
                   "CDRUN_WORKER_RESTARTS=1", "CDRUN_LIVE=kept", NULL };
  char **env = workerenv_build(base, &w);

  ck_assert_ptr_null(workerenv_get(env, "CDRUN_RECOVERY"));
  ck_assert_ptr_null(workerenv_get(env, "CDRUN_LIVE_OPT_IN"));
  ck_assert_ptr_null(workerenv_get(env, "CDRUN_LIVE_STORE"));
  ck_assert_ptr_null(workerenv_get(env, "CDRUN_LIVE_ROUND_FILE"));
  ck_assert_ptr_null(workerenv_get(env, "CDRUN_WORKER_RESTARTS"));
  ck_assert_str_eq(workerenv_get(env, "CDRUN_LIVE"), "kept");
  workerenv_free(env);
}
END_TEST

static Suite *workerenv_suite(void)
{
  Suite *s = suite_create("workerenv");
  TCase *tc = tcase_create("build");

  tcase_add_test(tc, test_all_vars_empty_base);
  tcase_add_test(tc, test_base_kept_in_order);
  tcase_add_test(tc, test_owned_replaced);
  tcase_add_test(tc, test_inherited_win);
  tcase_add_test(tc, test_no_default_omp);
  tcase_add_test(tc, test_agent_store_and_error_file);
  tcase_add_test(tc, test_prefix_names_kept);
  tcase_add_test(tc, test_negative_and_large_ints);
  tcase_add_test(tc, test_virtual_local_rank);
  tcase_add_test(tc, test_timer_and_heartbeat_files);
  tcase_add_test(tc, test_job_token);
  tcase_add_test(tc, test_live);
  tcase_add_test(tc, test_restart_mode_no_live);
  suite_add_tcase(s, tc);

  tc = tcase_create("get");
  tcase_add_test(tc, test_get);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(workerenv_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
