/* check_rdzv_local.c -- unit tests for launcher/rdzv_local.c. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "rdzv.h"

/* What the callbacks saw. */
struct seen {
  int rounds;
  struct rdzv_assignment last;
  int barriers;
  int barrier_err;
  int restarts;
  int errors;
  struct rdzv *r;
  int rejoin_left;      /* on_round joins again this many times */
  int rejoin_rc;
};

static void on_round(void *ctx, const struct rdzv_assignment *a)
{
  struct seen *s = ctx;

  s->rounds++;
  s->last = *a;
  if (s->rejoin_left > 0) {
    s->rejoin_left--;
    s->rejoin_rc = s->r->ops->join(s->r, RDZV_JOIN_MEMBERSHIP);
  }
}

static void on_restart(void *ctx, const char *reason)
{
  struct seen *s = ctx;

  s->restarts++;
}

static void on_error(void *ctx, int err, const char *message)
{
  struct seen *s = ctx;

  s->errors++;
}

static void on_barrier(void *ctx, int err)
{
  struct seen *s = ctx;

  s->barriers++;
  s->barrier_err = err;
}

static uv_loop_t loop;
static struct seen seen;

/* The budget every node here is created with. */
#define MAX_RESTARTS 3

static struct rdzv *make_node(int node_rank, int nnodes, int nproc,
                              const char *addr, int port)
{
  struct rdzv_callbacks cb = { &seen, on_round, on_restart, on_error,
                               on_barrier };
  struct rdzv *r = NULL;

  ck_assert_int_eq(rdzv_local_create(&loop, node_rank, nnodes, nproc,
                                     MAX_RESTARTS, addr, port, 0, 0, 0, &cb,
                                     &r),
                   0);
  ck_assert_ptr_nonnull(r);
  ck_assert_ptr_nonnull(r->ops);
  ck_assert_str_eq(r->ops->name, "static");
  ck_assert_ptr_eq(r->loop, &loop);
  ck_assert_ptr_eq(r->cb.ctx, &seen);
  seen.r = r;
  return r;
}

/* One node of nproc workers (--standalone). */
static struct rdzv *make(int nproc, const char *addr, int port)
{
  return make_node(0, 1, nproc, addr, port);
}

static void setup(void)
{
  memset(&seen, 0, sizeof seen);
  seen.barrier_err = -12345;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
}

/* Destroys r, runs the loop so the close completes, and closes the loop:
 * EBUSY from uv_loop_close would mean a handle was left behind. */
static void finish(struct rdzv *r)
{
  r->ops->destroy(r);
  ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  ck_assert_int_eq(seen.restarts, 0);
  ck_assert_int_eq(seen.errors, 0);
}

static void run_loop(void)
{
  ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
}

static void expect_assignment(int round, int restart_count, int nproc,
                              const char *addr, int port)
{
  ck_assert_int_eq(seen.last.round, round);
  ck_assert_int_eq(seen.last.restart_count, restart_count);
  ck_assert_int_eq(seen.last.group_rank, 0);
  ck_assert_int_eq(seen.last.group_world_size, 1);
  ck_assert_int_eq(seen.last.rank_offset, 0);
  ck_assert_int_eq(seen.last.world_size, nproc);
  ck_assert_str_eq(seen.last.master_addr, addr);
  ck_assert_int_eq(seen.last.master_port, port);
}

START_TEST(test_first_round_async)
{
  struct rdzv *r = make(4, "127.0.0.1", 29500);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  /* Never from inside the call. */
  ck_assert_int_eq(seen.rounds, 0);
  run_loop();
  ck_assert_int_eq(seen.rounds, 1);
  expect_assignment(0, 0, 4, "127.0.0.1", 29500);
  /* Nothing more without another join. */
  run_loop();
  ck_assert_int_eq(seen.rounds, 1);
  ck_assert_int_eq(seen.barriers, 0);
  finish(r);
}
END_TEST

START_TEST(test_failure_and_membership)
{
  struct rdzv *r = make(8, "node-a", 1234);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  run_loop();
  expect_assignment(0, 0, 8, "node-a", 1234);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FAILURE), 0);
  ck_assert_int_eq(seen.rounds, 1);
  run_loop();
  ck_assert_int_eq(seen.rounds, 2);
  expect_assignment(1, 1, 8, "node-a", 1234);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_MEMBERSHIP), 0);
  ck_assert_int_eq(seen.rounds, 2);
  run_loop();
  ck_assert_int_eq(seen.rounds, 3);
  expect_assignment(2, 1, 8, "node-a", 1234);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FAILURE), 0);
  run_loop();
  ck_assert_int_eq(seen.rounds, 4);
  expect_assignment(3, 2, 8, "node-a", 1234);
  finish(r);
}
END_TEST

START_TEST(test_membership_first)
{
  struct rdzv *r = make(1, "h", 1);

  /* A membership round right away: the round moves, restarts do not. */
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  run_loop();
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_MEMBERSHIP), 0);
  run_loop();
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_MEMBERSHIP), 0);
  run_loop();
  ck_assert_int_eq(seen.rounds, 3);
  expect_assignment(2, 0, 1, "h", 1);
  finish(r);
}
END_TEST

START_TEST(test_busy)
{
  struct rdzv *r = make(2, "127.0.0.1", 5);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), -EBUSY);
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FAILURE), -EBUSY);
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_MEMBERSHIP), -EBUSY);
  ck_assert_int_eq(r->ops->exit_barrier(r), -EBUSY);
  run_loop();
  /* One round, untouched by the refused calls. */
  ck_assert_int_eq(seen.rounds, 1);
  ck_assert_int_eq(seen.barriers, 0);
  expect_assignment(0, 0, 2, "127.0.0.1", 5);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_MEMBERSHIP), 0);
  run_loop();
  expect_assignment(1, 0, 2, "127.0.0.1", 5);

  /* A pending barrier blocks a join too. */
  ck_assert_int_eq(r->ops->exit_barrier(r), 0);
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FAILURE), -EBUSY);
  ck_assert_int_eq(r->ops->exit_barrier(r), -EBUSY);
  run_loop();
  ck_assert_int_eq(seen.barriers, 1);
  ck_assert_int_eq(seen.rounds, 2);
  finish(r);
}
END_TEST

START_TEST(test_exit_barrier)
{
  struct rdzv *r = make(3, "127.0.0.1", 7);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  run_loop();
  ck_assert_int_eq(r->ops->exit_barrier(r), 0);
  ck_assert_int_eq(seen.barriers, 0);
  run_loop();
  ck_assert_int_eq(seen.barriers, 1);
  ck_assert_int_eq(seen.barrier_err, 0);
  ck_assert_int_eq(seen.rounds, 1);
  finish(r);
}
END_TEST

START_TEST(test_join_from_callback)
{
  struct rdzv *r = make(2, "127.0.0.1", 9);

  seen.rejoin_left = 3;
  seen.rejoin_rc = -1;
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  run_loop();
  ck_assert_int_eq(seen.rejoin_rc, 0);
  ck_assert_int_eq(seen.rounds, 4);
  expect_assignment(3, 0, 2, "127.0.0.1", 9);
  finish(r);
}
END_TEST

START_TEST(test_destroy_pending)
{
  struct rdzv *r = make(2, "127.0.0.1", 9);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  /* No callback after destroy, and nothing left on the loop. */
  finish(r);
  ck_assert_int_eq(seen.rounds, 0);
  ck_assert_int_eq(seen.barriers, 0);
}
END_TEST

START_TEST(test_destroy_fresh)
{
  struct rdzv *r = make(2, "127.0.0.1", 9);

  /* Until the close completes the loop still has the handle. */
  r->ops->destroy(r);
  ck_assert_int_eq(uv_loop_close(&loop), UV_EBUSY);
  run_loop();
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  ck_assert_int_eq(seen.rounds, 0);
}
END_TEST

START_TEST(test_static_multi_node)
{
  struct rdzv *r = make_node(2, 3, 4, "10.0.0.1", 29400);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  run_loop();
  ck_assert_int_eq(seen.rounds, 1);
  ck_assert_int_eq(seen.last.round, 0);
  ck_assert_int_eq(seen.last.restart_count, 0);
  ck_assert_int_eq(seen.last.group_rank, 2);
  ck_assert_int_eq(seen.last.group_world_size, 3);
  ck_assert_int_eq(seen.last.rank_offset, 8);
  ck_assert_int_eq(seen.last.world_size, 12);
  ck_assert_str_eq(seen.last.master_addr, "10.0.0.1");
  ck_assert_int_eq(seen.last.master_port, 29400);
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FAILURE), 0);
  run_loop();
  ck_assert_int_eq(seen.last.round, 1);
  ck_assert_int_eq(seen.last.restart_count, 1);
  ck_assert_int_eq(seen.last.group_rank, 2);
  ck_assert_int_eq(seen.last.rank_offset, 8);
  finish(r);
}
END_TEST

START_TEST(test_report_failure)
{
  struct rdzv *r = make(2, "127.0.0.1", 9);

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  run_loop();
  /* Reported, then the join for it: one restart, not two. */
  ck_assert_int_eq(r->ops->report_failure(r, false, "rank 1 died"), 0);
  ck_assert_int_eq(seen.rounds, 1);
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FAILURE), 0);
  run_loop();
  expect_assignment(1, 1, 2, "127.0.0.1", 9);
  /* Reported twice for the same failure: still one. */
  ck_assert_int_eq(r->ops->report_failure(r, false, "x"), 0);
  ck_assert_int_eq(r->ops->report_failure(r, false, "x"), 0);
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FAILURE), 0);
  run_loop();
  expect_assignment(2, 2, 2, "127.0.0.1", 9);
  /* Each new failure counts again. */
  ck_assert_int_eq(r->ops->report_failure(r, false, NULL), 0);
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FAILURE), 0);
  run_loop();
  expect_assignment(3, 3, 2, "127.0.0.1", 9);
  /* The final failure is no restart; no callback of its own either. */
  ck_assert_int_eq(r->ops->report_failure(r, true, "out of restarts"), 0);
  ck_assert_int_eq(r->ops->exit_barrier(r), 0);
  run_loop();
  ck_assert_int_eq(seen.rounds, 4);
  ck_assert_int_eq(seen.barriers, 1);
  ck_assert_int_eq(seen.last.restart_count, 3);
  finish(r);
}
END_TEST

/* The back end decides whether a round's failure is final (the restart
 * budget, rdzv_rules.h); the agent takes it from the assignment. */
START_TEST(test_failure_final)
{
  struct rdzv *r = make(2, "127.0.0.1", 9);
  int i;

  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  run_loop();
  for (i = 0; i < MAX_RESTARTS; i++) {
    ck_assert_int_eq(seen.last.restart_count, i);
    ck_assert_msg(!seen.last.failure_final, "round %d: a restart is left",
                  i);
    ck_assert_int_eq(r->ops->report_failure(r, false, "x"), 0);
    ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FAILURE), 0);
    run_loop();
  }
  ck_assert_int_eq(seen.last.restart_count, MAX_RESTARTS);
  ck_assert(seen.last.failure_final);
  /* A membership round spends nothing: still final. */
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_MEMBERSHIP), 0);
  run_loop();
  ck_assert(seen.last.failure_final);
  finish(r);
}
END_TEST

START_TEST(test_long_addr)
{
  char addr[400];
  struct rdzv *r;

  memset(addr, 'a', sizeof addr - 1);
  addr[sizeof addr - 1] = '\0';
  r = make(1, addr, 80);
  ck_assert_int_eq(r->ops->join(r, RDZV_JOIN_FIRST), 0);
  run_loop();
  ck_assert_uint_eq(strlen(seen.last.master_addr),
                    sizeof seen.last.master_addr - 1);
  ck_assert(strncmp(seen.last.master_addr, addr,
                    sizeof seen.last.master_addr - 1) == 0);
  finish(r);
}
END_TEST

static Suite *rdzv_local_suite(void)
{
  Suite *s = suite_create("rdzv_local");
  TCase *tc = tcase_create("local");

  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, test_first_round_async);
  tcase_add_test(tc, test_failure_and_membership);
  tcase_add_test(tc, test_membership_first);
  tcase_add_test(tc, test_busy);
  tcase_add_test(tc, test_exit_barrier);
  tcase_add_test(tc, test_join_from_callback);
  tcase_add_test(tc, test_destroy_pending);
  tcase_add_test(tc, test_destroy_fresh);
  tcase_add_test(tc, test_static_multi_node);
  tcase_add_test(tc, test_report_failure);
  tcase_add_test(tc, test_failure_final);
  tcase_add_test(tc, test_long_addr);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(rdzv_local_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
