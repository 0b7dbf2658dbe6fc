/* check_worker_contract.c -- unit tests for proto/worker/worker_contract.h:
 * each CDRUN_* variable the agent gives a worker (launcher/workerenv.c) is
 * the one libpg reads (libpg/core/knobs.c), with the value the agent meant;
 * and the live store's port rule.  The round file's grammar has its own
 * suite (check_round_file.c). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "knobs.h"
#include "workerenv.h"
#include "worker_contract.h"

static struct worker_env live_worker(void)
{
  struct worker_env w;

  memset(&w, 0, sizeof w);
  w.role_name = "default";
  w.local_world_size = 2;
  w.world_size = 4;
  w.group_world_size = 2;
  w.role_world_size = 4;
  w.master_addr = "node-0.example";
  w.master_port = 29511;
  w.run_id = "job-42";
  w.error_file = "";
  w.heartbeat_file = "/logs/attempt_0/1/heartbeat";
  w.job_token = "0123456789abcdef0123456789abcdef";
  w.live = true;
  w.live_opt_in = "/logs/attempt_0/1/live_opt_in";
  w.live_store = "node-0.example:29513";
  w.live_round_file = "/logs/live_round";
  w.worker_restarts = 3;
  return w;
}

/* The worker's process gets env as its environment. */
static void become_worker(char **env)
{
  clearenv();
  for (size_t i = 0; env[i]; i++)
    ck_assert_int_eq(putenv(env[i]), 0);
}

/* Each test runs in its own process (CK_FORK): libpg's knobs are read
 * once per process, here after the worker's environment is in place. */
START_TEST(test_agent_sets_what_libpg_reads)
{
  static const struct {
    enum pg__knob knob;
    const char *name, *value;
  } rows[] = {
    { PG_KNOB_JOB_TOKEN, WORKER_ENV_JOB_TOKEN,
      "0123456789abcdef0123456789abcdef" },
    { PG_KNOB_HEARTBEAT_FILE, WORKER_ENV_HEARTBEAT_FILE,
      "/logs/attempt_0/1/heartbeat" },
    { PG_KNOB_RECOVERY, WORKER_ENV_RECOVERY, WORKER_RECOVERY_LIVE },
    { PG_KNOB_LIVE_OPT_IN, WORKER_ENV_LIVE_OPT_IN,
      "/logs/attempt_0/1/live_opt_in" },
    { PG_KNOB_LIVE_STORE, WORKER_ENV_LIVE_STORE, "node-0.example:29513" },
    { PG_KNOB_LIVE_ROUND_FILE, WORKER_ENV_LIVE_ROUND_FILE,
      "/logs/live_round" },
  };
  struct worker_env w = live_worker();
  char **env = workerenv_build(NULL, &w);
  size_t i;

  ck_assert_ptr_nonnull(env);
  become_worker(env);
  for (i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    ck_assert_str_eq(pg__knob_name(rows[i].knob), rows[i].name);
    ck_assert_msg(pg__knob(rows[i].knob) &&
                  strcmp(pg__knob(rows[i].knob), rows[i].value) == 0,
                  "%s: libpg read '%s', the agent set '%s'", rows[i].name,
                  pg__knob(rows[i].knob) ? pg__knob(rows[i].knob) : "(unset)",
                  rows[i].value);
  }
  /* Not libpg's: the program's own (examples/train_mlp reads it). */
  ck_assert_str_eq(getenv(WORKER_ENV_WORKER_RESTARTS), "3");
  free(env);    /* its strings are the environment now */
}
END_TEST

/* Restart mode: libpg sees none of live recovery's names, and its
 * default mode is the contract's restart. */
START_TEST(test_restart_mode)
{
  struct worker_env w = live_worker();
  char **env;

  w.live = false;
  env = workerenv_build(NULL, &w);
  ck_assert_ptr_nonnull(env);
  become_worker(env);
  ck_assert_ptr_null(pg__knob(PG_KNOB_RECOVERY));
  ck_assert_ptr_null(pg__knob(PG_KNOB_LIVE_STORE));
  ck_assert_ptr_null(pg__knob(PG_KNOB_LIVE_ROUND_FILE));
  ck_assert_ptr_null(pg__knob(PG_KNOB_LIVE_OPT_IN));
  ck_assert_str_eq(pg__knobs[PG_KNOB_RECOVERY].dflt, WORKER_RECOVERY_RESTART);
  free(env);
}
END_TEST

/* Note [live store port]: an odd MASTER_PORT gives an odd store port. */
START_TEST(test_live_store_port)
{
  ck_assert_int_gt(LIVE_STORE_PORT_OFFSET, 0);
  ck_assert_int_eq(LIVE_STORE_PORT_OFFSET % 2, 0);
}
END_TEST

static Suite *worker_contract_suite(void)
{
  Suite *s = suite_create("worker_contract");
  TCase *tc = tcase_create("names");

  tcase_add_test(tc, test_agent_sets_what_libpg_reads);
  tcase_add_test(tc, test_restart_mode);
  tcase_add_test(tc, test_live_store_port);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(worker_contract_suite());
  int failed;

  srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
