/* check_live_agent.c -- unit tests for launcher/live_agent.c, against a
 * fake agent behind live_agent.h's view and ops: live replacement within
 * a rank's budget (Note [live replacement]), the final failure asked of
 * the back ends' rule (Note [one authority], launcher/rdzv.h), restart
 * mode's paths (not opted in, Note [finished job]), and a live round. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "live_agent.h"
#include "live_handshake.h"
#include "rdzv.h"
#include "workerenv.h"

#define NPROC 2

static char dir[] = "/tmp/check_live_agent.XXXXXX";

/* The fake agent. */
struct fake {
  char wdir[NPROC][PATH_MAX];
  struct live_worker_view w[NPROC];
  enum live_group group;
  int spawned[NPROC], retired[NPROC];
  int joins, restarts, adopted, events;
  char last_event[64];
  struct rdzv_assignment assign;
};

static struct fake fk;

static void f_worker(void *ctx, int i, struct live_worker_view *v)
{
  *v = ((struct fake *)ctx)->w[i];
}

static enum live_group f_group(void *ctx)
{
  return ((struct fake *)ctx)->group;
}

static void f_spawn(void *ctx, int i)
{
  struct fake *f = ctx;

  f->spawned[i]++;
  f->w[i].pid = 2000 + i;       /* never signalled: see f_retire */
  f->w[i].running = true;
  f->w[i].streams_closed = false;
}

static void f_retire(void *ctx, int i)
{
  struct fake *f = ctx;

  f->retired[i]++;
  f->w[i].pid = 0;
}

static void f_join(void *ctx)
{
  ((struct fake *)ctx)->joins++;
}

static void f_restart_in_round(void *ctx)
{
  struct fake *f = ctx;

  f->restarts++;
  f->group = LIVE_GROUP_STOPPING;
}

static void f_adopt_round(void *ctx, const struct rdzv_assignment *as)
{
  struct fake *f = ctx;

  f->adopted++;
  f->assign = *as;
}

static void f_event(void *ctx, const char *name, const char *detail)
{
  struct fake *f = ctx;

  (void)detail;
  f->events++;
  snprintf(f->last_event, sizeof f->last_event, "%s", name);
}

static const struct live_agent_ops fake_ops = {
  f_worker, f_group, f_spawn, f_retire, f_join, f_restart_in_round,
  f_adopt_round, f_event,
};

static struct agent_opts opts;
static struct live_agent live;

/* Worker i opts in (its opt-in file exists). */
static void opt_in(int i)
{
  char p[PATH_MAX + 32];
  FILE *f;

  snprintf(p, sizeof p, "%s/%s", fk.wdir[i], LIVE_HANDSHAKE_OPT_IN);
  f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
}

/* A fake agent of NPROC running workers (pids that are never signalled:
 * live mode kills only a replacement it stops, which these tests do not
 * reach), in round 1 of one node, live mode as live says. */
static void start(bool live_mode)
{
  int i;

  memset(&fk, 0, sizeof fk);
  for (i = 0; i < NPROC; i++) {
    snprintf(fk.wdir[i], sizeof fk.wdir[i], "%s/%d", dir, i);
    ck_assert_int_eq(mkdir(fk.wdir[i], 0755), 0);
    fk.w[i].rank = i;
    fk.w[i].pid = 1000 + i;
    fk.w[i].running = true;
    fk.w[i].dir = fk.wdir[i];
  }
  fk.group = LIVE_GROUP_RUNNING;
  fk.assign.round = 1;
  fk.assign.group_world_size = 1;
  fk.assign.world_size = NPROC;
  snprintf(fk.assign.master_addr, sizeof fk.assign.master_addr, "%s",
           "127.0.0.1");
  fk.assign.master_port = 29500;
  memset(&opts, 0, sizeof opts);
  opts.nproc = NPROC;
  opts.max_restarts = 1;
  opts.run_id = "check";
  opts.run_log_dir = dir;
  opts.live = live_mode;
  ck_assert_int_eq(live_agent_init(&live, &opts, &fake_ops, &fk), 0);
}

static void setup(void)
{
  strcpy(dir, "/tmp/check_live_agent.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
  char cmd[PATH_MAX + 16];

  live_agent_close(&live);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* Note [live replacement]: replaced alone once its streams are closed;
 * then the rank's budget is spent, and the back ends' rule says final. */
START_TEST(test_replace_then_budget)
{
  start(true);
  opt_in(0);
  opt_in(1);
  ck_assert_int_eq(live_agent_worker_failed(&live, 1, -9),
                   LIVE_FAILED_REPLACED);
  ck_assert_int_eq(fk.retired[1], 1);
  ck_assert_int_eq(fk.spawned[1], 0);   /* its streams are still open */
  ck_assert(live_agent_replacing(&live));
  ck_assert_str_eq(fk.last_event, "WORKER_REPLACED");
  fk.w[1].streams_closed = true;
  live_agent_start_replacements(&live);
  ck_assert_int_eq(fk.spawned[1], 1);
  ck_assert(!live_agent_replacing(&live));
  ck_assert_int_eq(live_agent_replaced(&live, 1), 1);
  ck_assert_int_eq(live_agent_replaced(&live, 0), 0);
  ck_assert_int_eq(fk.retired[0] + fk.spawned[0], 0);   /* its peer */

  ck_assert_int_eq(live_agent_worker_failed(&live, 1, -9),
                   LIVE_FAILED_NO_REPLACEMENT);
  ck_assert_int_eq(fk.retired[1], 1);
  /* Note [one authority]: the round's budget is not spent, the rank's
   * is. */
  ck_assert(!fk.assign.failure_final);
  ck_assert(rdzv_failure_final(&fk.assign, live_agent_replaced(&live, 1),
                               opts.max_restarts));
  ck_assert(!rdzv_failure_final(&fk.assign, -1, opts.max_restarts));
}
END_TEST

/* Restart mode: nothing is taken, the workers get no live variables. */
START_TEST(test_restart_mode)
{
  struct worker_env we;
  char p[PATH_MAX];

  start(false);
  opt_in(0);
  opt_in(1);
  ck_assert_int_eq(live_agent_worker_failed(&live, 0, 1),
                   LIVE_FAILED_NOT_TAKEN);
  ck_assert(!live_agent_rejoin(&live, "a node joined"));
  ck_assert_int_eq(fk.joins, 0);
  memset(&we, 0, sizeof we);
  live_agent_worker_env(&live, 0, fk.wdir[0], &we, p, sizeof p);
  ck_assert(!we.live);
  ck_assert_int_eq(fk.retired[0], 0);
}
END_TEST

/* A worker that did not opt in turns a failure to restart mode's. */
START_TEST(test_not_opted_in)
{
  start(true);
  opt_in(1);
  ck_assert_int_eq(live_agent_worker_failed(&live, 1, 1),
                   LIVE_FAILED_NOT_TAKEN);
  ck_assert_int_eq(fk.retired[1], 0);
}
END_TEST

/* Note [finished job]: a peer exited 0, so a failure is restart mode's. */
START_TEST(test_finished_peer)
{
  start(true);
  opt_in(0);
  opt_in(1);
  fk.w[0].running = false;      /* exited 0: its pid kept */
  ck_assert_int_eq(live_agent_worker_failed(&live, 1, 1),
                   LIVE_FAILED_NOT_TAKEN);
  ck_assert_int_eq(fk.retired[1], 0);
}
END_TEST

/* A membership round with the workers running: they go on in it (the
 * agent adopts it); one that moves the master endpoint restarts them. */
START_TEST(test_live_round)
{
  struct rdzv_assignment as, got;

  start(true);
  opt_in(0);
  opt_in(1);
  ck_assert(live_agent_rejoin(&live, "a node joined"));
  ck_assert_int_eq(fk.joins, 1);
  ck_assert(live_agent_rejoining(&live));
  as = fk.assign;
  as.round = 2;
  ck_assert(live_agent_round(&live, &as, &fk.assign, ""));
  ck_assert_int_eq(fk.adopted, 1);
  ck_assert_int_eq(fk.assign.round, 2);
  ck_assert_str_eq(fk.last_event, "LIVE_ROUND");
  ck_assert(!live_agent_changing(&live));

  ck_assert(live_agent_rejoin(&live, "a node was lost"));
  as.round = 3;
  as.master_port = 29600;
  ck_assert(live_agent_round(&live, &as, &fk.assign, ""));
  ck_assert_int_eq(fk.adopted, 1);
  ck_assert_int_eq(fk.restarts, 1);
  ck_assert(live_agent_changing(&live));
  ck_assert(live_agent_take_round(&live, &got));
  ck_assert_int_eq(got.round, 3);
  ck_assert(!live_agent_take_round(&live, &got));
}
END_TEST

static Suite *live_agent_suite(void)
{
  Suite *s = suite_create("live_agent");
  TCase *tc = tcase_create("ops");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_replace_then_budget);
  tcase_add_test(tc, test_restart_mode);
  tcase_add_test(tc, test_not_opted_in);
  tcase_add_test(tc, test_finished_peer);
  tcase_add_test(tc, test_live_round);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(live_agent_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
