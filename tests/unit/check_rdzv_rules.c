/* check_rdzv_rules.c -- unit tests for rdzvd/rdzv_rules.c: each rule on
 * its own, then each rule through BOTH back ends that apply it (rdzvd's
 * state machine, rdzv_state.h, and the etcd back end's transitions,
 * launcher/etcd_rdzv_state.h), driven by one table of cases. */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_rdzv_state.h"
#include "rdzv_rules.h"
#include "rdzv_state.h"

/* ---- each rule on its own ---- */

START_TEST(rank_order)
{
  /* Previous ranks first, in their order; then newcomers by join order. */
  ck_assert_int_lt(rdzv_rules_rank_cmp(0, 9, 1, 1), 0);
  ck_assert_int_gt(rdzv_rules_rank_cmp(2, 1, 1, 9), 0);
  ck_assert_int_lt(rdzv_rules_rank_cmp(5, 9, -1, 1), 0);
  ck_assert_int_gt(rdzv_rules_rank_cmp(-1, 1, 5, 9), 0);
  ck_assert_int_lt(rdzv_rules_rank_cmp(-1, 3, -1, 4), 0);
  ck_assert_int_gt(rdzv_rules_rank_cmp(-1, 4, -1, 3), 0);
  ck_assert_int_eq(rdzv_rules_rank_cmp(-1, 4, -1, 4), 0);
}
END_TEST

static struct rdzv_rules_job job_of(int min, int max, int part,
                                    int outstanding)
{
  struct rdzv_rules_job j = {
    .min_nodes = min, .max_nodes = max, .last_call_timeout = 10,
    .gathering = true, .n_part = part, .n_outstanding = outstanding,
  };

  return j;
}

START_TEST(admission)
{
  struct rdzv_rules_job j = job_of(2, 3, 2, 1);

  /* Gathering: the place of a node expected back stays its own. */
  ck_assert_int_eq(rdzv_rules_admit(&j, false), RDZV_ADMIT_WAIT);
  ck_assert_int_eq(rdzv_rules_admit(&j, true), RDZV_ADMIT_ROUND);
  ck_assert(!rdzv_rules_spare_fits(&j));
  ck_assert(rdzv_rules_spare_fits_at_completion(&j));
  j.n_outstanding = 0;
  ck_assert_int_eq(rdzv_rules_admit(&j, false), RDZV_ADMIT_ROUND);
  /* Running: room starts a new round; full, finishing or closing waits. */
  j.gathering = false;
  ck_assert_int_eq(rdzv_rules_admit(&j, false), RDZV_ADMIT_NEW_ROUND);
  j.exit_passed = true;
  ck_assert_int_eq(rdzv_rules_admit(&j, false), RDZV_ADMIT_WAIT);
  j.exit_passed = false;
  j.closing = true;
  ck_assert_int_eq(rdzv_rules_admit(&j, false), RDZV_ADMIT_WAIT);
  j.closing = false;
  j.n_part = 3;
  ck_assert_int_eq(rdzv_rules_admit(&j, false), RDZV_ADMIT_WAIT);
}
END_TEST

START_TEST(gathering)
{
  struct rdzv_rules_job j = job_of(2, 4, 1, 0);

  ck_assert_int_eq(rdzv_rules_gather(&j, 5), RDZV_GATHER_WAIT);
  j.n_part = 2;
  ck_assert_int_eq(rdzv_rules_gather(&j, 5), RDZV_GATHER_LAST_CALL);
  ck_assert_double_eq(rdzv_rules_last_call_wait(&j, 50), 10);
  j.n_part = 4;
  ck_assert_int_eq(rdzv_rules_gather(&j, 5), RDZV_GATHER_COMPLETE);
  /* Restarting: complete when nobody expected is missing; else the last
   * call lasts at least the rejoin window, even when it is 0 s. */
  j.n_part = 2;
  j.restarting = true;
  ck_assert_int_eq(rdzv_rules_gather(&j, 5), RDZV_GATHER_COMPLETE);
  j.n_outstanding = 1;
  j.last_call_timeout = 0;
  ck_assert_int_eq(rdzv_rules_gather(&j, 5), RDZV_GATHER_LAST_CALL);
  ck_assert_double_eq(rdzv_rules_last_call_wait(&j, 5), 5);
  j.restarting = false;
  j.n_outstanding = 0;
  ck_assert_int_eq(rdzv_rules_gather(&j, 5), RDZV_GATHER_COMPLETE);
  /* A last call that runs keeps running. */
  j.in_last_call = true;
  ck_assert_int_eq(rdzv_rules_gather(&j, 5), RDZV_GATHER_LAST_CALL);
}
END_TEST

START_TEST(config_check)
{
  struct rdzv_rules_conf job = { 2, 2, 3, 10 }, c = job;
  char p[128];

  ck_assert_int_eq(rdzv_rules_conf_check(&c, NULL, 100, NULL, p, sizeof p),
                   RDZV_CONF_OK);
  ck_assert_int_eq(rdzv_rules_conf_check(&c, &job, 100, "the job", p,
                                         sizeof p), RDZV_CONF_OK);
  ck_assert_str_eq(p, "");
  c.min_nodes = 1;
  c.max_nodes = 3;
  ck_assert_int_eq(rdzv_rules_conf_check(&c, &job, 100, "the job", p,
                                         sizeof p), RDZV_CONF_NODES_DIFFER);
  ck_assert_str_eq(p, "min_nodes..max_nodes 1..3 differs from the job's "
                   "2..2");
  c = job;
  c.max_restarts = 1;
  ck_assert_int_eq(rdzv_rules_conf_check(&c, &job, 100, "job j", p,
                                         sizeof p),
                   RDZV_CONF_RESTARTS_DIFFER);
  ck_assert_str_eq(p, "max_restarts 1 differs from job j's 3");
  /* Out of range, with or without a job. */
  c = job;
  c.min_nodes = 0;
  ck_assert_int_eq(rdzv_rules_conf_check(&c, &job, 100, "the job", p,
                                         sizeof p), RDZV_CONF_BAD);
  ck_assert_str_eq(p, "min_nodes..max_nodes out of range");
  c = job;
  c.max_nodes = 101;
  ck_assert_int_eq(rdzv_rules_conf_check(&c, NULL, 100, NULL, p, sizeof p),
                   RDZV_CONF_BAD);
  c = job;
  c.min_nodes = 3;
  ck_assert_int_eq(rdzv_rules_conf_check(&c, NULL, 100, NULL, p, sizeof p),
                   RDZV_CONF_BAD);
  c = job;
  c.max_restarts = -1;
  ck_assert_int_eq(rdzv_rules_conf_check(&c, NULL, 100, NULL, p, sizeof p),
                   RDZV_CONF_BAD);
  ck_assert_str_eq(p, "max_restarts < 0");
  c = job;
  c.last_call_timeout = NAN;
  ck_assert_int_eq(rdzv_rules_conf_check(&c, NULL, 100, NULL, p, sizeof p),
                   RDZV_CONF_BAD);
  ck_assert_str_eq(p, "bad timeout");
  /* No room for the text: still a verdict. */
  ck_assert_int_eq(rdzv_rules_conf_check(&c, NULL, 100, NULL, NULL, 0),
                   RDZV_CONF_BAD);
}
END_TEST

START_TEST(restart_budget)
{
  ck_assert(rdzv_rules_restart_left(0, 1));
  ck_assert(!rdzv_rules_restart_left(1, 1));
  ck_assert(!rdzv_rules_restart_left(0, 0));
  ck_assert(!rdzv_rules_failure_final(0, 1));
  ck_assert(rdzv_rules_failure_final(1, 1));
  ck_assert(rdzv_rules_failure_final(0, 0));
  /* Note [live budget] */
  ck_assert(!rdzv_rules_replacement_final(0, 1));
  ck_assert(rdzv_rules_replacement_final(1, 1));
  ck_assert(rdzv_rules_replacement_final(0, 0));
  ck_assert_int_eq(rdzv_rules_failure(false, 0, 1), RDZV_FAILURE_RESTART);
  ck_assert_int_eq(rdzv_rules_failure(false, 1, 1),
                   RDZV_FAILURE_CLOSE_EXHAUSTED);
  ck_assert_int_eq(rdzv_rules_failure(true, 0, 1), RDZV_FAILURE_CLOSE);
  ck_assert_int_eq(rdzv_rules_failure(true, 1, 1), RDZV_FAILURE_CLOSE);
}
END_TEST

/* Note [keepalive window]. */
START_TEST(keepalive_window)
{
  ck_assert(rdzv_rules_keepalive_window(0.5, 3) == 1.5);
  ck_assert(rdzv_rules_keepalive_window(2.0, 1) == 2.0);
  ck_assert(rdzv_rules_keepalive_window(0.25, 4) == 1.0);
}
END_TEST

/* Note [a lost node]. */
START_TEST(lost_node)
{
  struct rdzv_rules_loss l = {
    .how = RDZV_LEFT_GOODBYE, .n_left = 1, .min_nodes = 2,
    .restart_count = 0, .max_restarts = 0,
  };
  char why[160];

  /* Below its size with no restart left: it ends, however it left. */
  ck_assert(rdzv_rules_lost_ends(&l));
  rdzv_rules_lost_why(&l, why, sizeof why);
  ck_assert_str_eq(why, "the job cannot reach its size (1 of 2 nodes) and "
                   "no restart is left (0 of 0 used)");
  l.how = RDZV_LEFT_SILENT;
  ck_assert(rdzv_rules_lost_ends(&l));
  /* A restart left: the node (or another) may come. */
  l.max_restarts = 1;
  ck_assert(!rdzv_rules_lost_ends(&l));
  rdzv_rules_lost_why(&l, why, sizeof why);
  ck_assert_str_eq(why, "");
  /* Elastic above min_nodes: it goes on. */
  l.max_restarts = 0;
  l.min_nodes = 1;
  ck_assert(!rdzv_rules_lost_ends(&l));
  /* Fixed nodes: gone for good ends it, a silent link may be back. */
  l.nodes_fixed = true;
  l.max_restarts = 3;
  l.min_nodes = 2;
  ck_assert(!rdzv_rules_lost_ends(&l));
  l.how = RDZV_LEFT_DIED;
  ck_assert(rdzv_rules_lost_ends(&l));
  ck_assert_str_eq(rdzv_rules_leave_name(RDZV_LEFT_DIED), "its agent died");
  ck_assert_str_eq(rdzv_rules_leave_name(RDZV_LEFT_GOODBYE),
                   "it said goodbye");
  ck_assert_str_eq(rdzv_rules_leave_name(RDZV_LEFT_SILENT),
                   "its link went silent");
}
END_TEST

/* Note [a lost host]: how long the others wait for a lost embedded host. */
START_TEST(lost_host)
{
  struct rdzv_rules_loss l = {
    .how = RDZV_LEFT_DIED, .n_left = 2, .min_nodes = 3,
    .restart_count = 0, .max_restarts = 0,
  };

  /* The job ends without it: one window after it was last heard from,
   * and the grace; never longer than reconnect_timeout. */
  ck_assert(fabs(rdzv_rules_host_wait(&l, 5, 60) -
                 (5 + RDZV_RULES_HOST_GRACE)) < 1e-9);
  ck_assert(fabs(rdzv_rules_host_wait(&l, 5, 3) - 3) < 1e-9);
  l.how = RDZV_LEFT_SILENT;     /* the window passed in silence */
  ck_assert(fabs(rdzv_rules_host_wait(&l, 5, 60) - RDZV_RULES_HOST_GRACE) <
            1e-9);
  /* It would go on without a node: only the host's return can run the
   * next round, so reconnect_timeout. */
  l.how = RDZV_LEFT_DIED;
  l.max_restarts = 1;
  ck_assert(fabs(rdzv_rules_host_wait(&l, 5, 60) - 60) < 1e-9);
  l.max_restarts = 0;
  l.min_nodes = 2;
  ck_assert(fabs(rdzv_rules_host_wait(&l, 5, 60) - 60) < 1e-9);
}
END_TEST

/* ---- both back ends, one table ----
 *
 * A case is a configuration, a script of events and what every node
 * must see after it.  Events (space-separated): "jN" node N joins (or
 * re-joins after a restart), "fN" node N reports a failure, "FN" a
 * final one, "lN" node N is lost, "L" the last call runs out, "W" the
 * closing job's wait for reports runs out.  The result: the job's phase
 * (G gathering, R running, C closed, F finished), its restart count,
 * each node's rank ('-': none) and whether a failure of the round would
 * be final. */

#define NODES 5

struct rules_case {
  const char *name;
  struct rdzv_rules_conf conf;
  const char *script;
  char phase;
  int restart_count;
  const char *ranks;            /* one character per node: '0'..'9', '-' */
  bool failure_final;
  int refused;                  /* the node whose join is refused, or -1 */
};

static const struct rules_case CASES[] = {
  { "complete at max_nodes", { 2, 3, 0, 10 }, "j0 j1 j2", 'R', 0, "012--",
    true, -1 },
  { "last call at min_nodes", { 2, 3, 0, 10 }, "j0 j1", 'G', 0, "-----",
    true, -1 },
  { "last call runs out", { 2, 3, 0, 10 }, "j0 j1 L", 'R', 0, "01---",
    true, -1 },
  { "no last call when 0 s", { 2, 3, 0, 0 }, "j0 j1", 'R', 0, "01---",
    true, -1 },
  { "a full round: the rest wait", { 1, 2, 0, 10 }, "j0 j1 j2", 'R', 0,
    "01---", true, -1 },
  { "a newcomer restarts a round with room", { 1, 3, 1, 0 },
    "j0 j1 j0", 'R', 0, "01---", false, -1 },
  { "survivors keep their rank order", { 2, 3, 1, 10 },
    "j0 j1 j2 l0 j2 j1", 'R', 0, "-01--", false, -1 },
  { "the rank-0 node keeps rank 0", { 2, 3, 1, 10 },
    "j0 j1 j2 l1 j2 j0 j3 j2 j0", 'R', 0, "0-12-", false, -1 },
  { "nodes differ: refused", { 2, 2, 0, 10 }, "j0 j1 x2", 'R', 0,
    "01---", true, 2 },
  { "max_restarts differs: refused", { 2, 2, 0, 10 }, "j0 j1 y2", 'R', 0,
    "01---", true, 2 },
  { "a bad configuration: refused", { 2, 2, 0, 10 }, "j0 z1", 'G', 0,
    "-----", true, 1 },
  { "a bad first configuration: refused", { 2, 2, 0, 10 }, "z0 j1", 'G',
    0, "-----", true, 0 },
  { "a failure restarts once per round", { 2, 2, 2, 10 },
    "j0 j1 f0 f1 j0 j1", 'R', 1, "01---", false, -1 },
  { "the budget runs out", { 2, 2, 1, 10 },
    "j0 j1 f0 j0 j1", 'R', 1, "01---", true, -1 },
  { "no restart left: the job closes", { 2, 2, 1, 10 },
    "j0 j1 f0 j0 j1 f1 f0", 'C', 1, "-----", true, -1 },
  { "a final failure closes the job", { 2, 2, 5, 10 },
    "j0 j1 F0 f1", 'C', 0, "-----", false, -1 },
  { "closing: the wait runs out", { 2, 2, 0, 10 }, "j0 j1 f0 W", 'C', 0,
    "-----", true, -1 },
  { "closing admits no one", { 2, 3, 0, 10 }, "j0 j1 L f0 j2", 'R', 0,
    "01---", true, -1 },
  /* Note [a lost node] */
  { "a lost node, below min, no restart left: closed", { 2, 2, 0, 10 },
    "j0 j1 l1", 'C', 0, "-----", true, -1 },
  { "a lost node, a restart left: a new round", { 2, 2, 1, 10 },
    "j0 j1 l1", 'G', 0, "-----", false, -1 },
  { "a lost node, elastic above min: a new round", { 1, 2, 0, 10 },
    "j0 j1 l1", 'G', 0, "-----", true, -1 },
};

/* One back end under test: the same events, the same observations. */
struct backend {
  const char *name;
  void (*start)(void);
  void (*stop)(void);
  /* 0, or a negative errno when refused. */
  int (*join)(int node, const struct rdzv_rules_conf *c);
  void (*failure)(int node, bool final);
  void (*lost)(int node);
  void (*last_call)(void);
  void (*close_wait)(void);
  char (*phase)(void);
  int (*restart_count)(void);
  int (*rank)(int node);        /* -1: none */
  bool (*failure_final)(void);
};

/* -- rdzvd's state machine, through its messages and status -- */

static char conns[NODES];
static struct {
  struct rdzv_state *r;
  double now;
  int rank[NODES];
  int restart_count;            /* the last ROUND's */
  int max_restarts_seen;        /* the case's budget */
} rd;

static int node_of(void *conn)
{
  return (int)((char *)conn - conns);
}

static void rd_send(void *ctx, void *conn, const struct rdzv_proto_msg *m)
{
  int i = node_of(conn);

  (void)ctx;
  if (m->op == RDZV_PROTO_ROUND) {
    rd.rank[i] = m->u.round.group_rank;
    rd.restart_count = m->u.round.restart_count;
  } else if (m->op == RDZV_PROTO_RESTART || m->op == RDZV_PROTO_CLOSED ||
             m->op == RDZV_PROTO_ERROR) {
    rd.rank[i] = -1;
  }
}

static void rd_drop(void *ctx, void *conn)
{
  (void)ctx;
  (void)conn;
}

static const struct rdzv_state_sink RD_SINK = { NULL, rd_send, rd_drop, NULL };

static void rd_start(void)
{
  memset(&rd, 0, sizeof rd);
  memset(rd.rank, -1, sizeof rd.rank);
  rd.now = 100;
  rd.r = rdzv_state_create(&RD_SINK, NULL);
  ck_assert_ptr_nonnull(rd.r);
}

static void rd_stop(void)
{
  rdzv_state_destroy(rd.r);
}

static int rd_join(int i, const struct rdzv_rules_conf *c)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  snprintf(m.u.join.id, sizeof m.u.join.id, "job");
  snprintf(m.u.join.host, sizeof m.u.join.host, "h%d", i);
  snprintf(m.u.join.addr, sizeof m.u.join.addr, "10.0.0.%d", i + 1);
  m.u.join.pid = 1000 + i;
  m.u.join.nproc = 1;
  m.u.join.master_port = 29500 + i;
  rdzv_proto_conf_default(&m.u.join.conf);
  m.u.join.conf.min_nodes = c->min_nodes;
  m.u.join.conf.max_nodes = c->max_nodes;
  m.u.join.conf.max_restarts = c->max_restarts;
  m.u.join.conf.last_call_timeout = c->last_call_timeout;
  /* A keepalive window longer than any wait here: nobody dies of
   * silence. */
  m.u.join.conf.keepalive_interval = 100;
  m.u.join.conf.keepalive_misses = 10;
  return rdzv_state_handle(rd.r, &conns[i], &m, rd.now);
}

static void rd_failure(int i, bool final)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_FAILURE;
  m.u.failure.final = final;
  snprintf(m.u.failure.message, sizeof m.u.failure.message, "rank %d", i);
  ck_assert_int_eq(rdzv_state_handle(rd.r, &conns[i], &m, rd.now), 0);
}

static void rd_lost(int i)
{
  rdzv_state_conn_closed(rd.r, &conns[i], rd.now);
  rd.rank[i] = -1;              /* its connection is gone */
}

/* Time passes: more than the closing wait (5 s at most) and the last
 * calls of the table, less than the keepalive window (rd_join). */
static void rd_time_passes(void)
{
  rd.now += 11;
  rdzv_state_tick(rd.r, rd.now);
}

static const cJSON *rd_job(cJSON *st)
{
  const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(st, "jobs");

  return cJSON_GetArrayItem(jobs, 0);
}

static char rd_phase(void)
{
  cJSON *st = rdzv_state_status(rd.r, rd.now);
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(rd_job(st), "phase");
  char c;

  ck_assert(cJSON_IsString(p));
  c = strcmp(p->valuestring, "last_call") == 0 ? 'G'
      : (char)(p->valuestring[0] - 'a' + 'A');
  cJSON_Delete(st);
  return c;
}

static int rd_restart_count(void)
{
  cJSON *st = rdzv_state_status(rd.r, rd.now);
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(rd_job(st),
                                                    "restart_count");
  int v = (int)n->valuedouble;

  cJSON_Delete(st);
  return v;
}

static int rd_rank(int i)
{
  return rd.rank[i];
}

/* What the client half of the back end tells its agent with the round
 * (launcher/rdzv_client.c): the same rule, from the round's count. */
static bool rd_failure_final(void)
{
  return rdzv_rules_failure_final(rd.restart_count, rd.max_restarts_seen);
}

/* -- the etcd back end's transitions, on one job document -- */

static struct etcd_rdzv_state es;

static void es_start(void)
{
  etcd_rdzv_state_init(&es);
}

static void es_stop(void)
{
  etcd_rdzv_state_free(&es);
}

static void es_id(int i, char *id, size_t size)
{
  snprintf(id, size, "lease%d", i);
}

static int es_join_node(int i, const struct rdzv_rules_conf *c)
{
  struct etcd_rdzv_conf conf = { c->min_nodes, c->max_nodes, c->max_restarts,
                          c->last_call_timeout };
  struct etcd_rdzv_state next;
  struct etcd_rdzv_node me;
  char err[256];
  int rc;

  memset(&me, 0, sizeof me);
  es_id(i, me.id, sizeof me.id);
  snprintf(me.host, sizeof me.host, "h%d", i);
  snprintf(me.addr, sizeof me.addr, "10.0.0.%d", i + 1);
  me.pid = 1000 + i;
  me.nproc = 1;
  me.port = 29500 + i;
  me.rank = me.prev_rank = -1;
  /* As the back end does: the transition runs on a copy, stored only
   * when it succeeds (the compare-and-swap). */
  etcd_rdzv_state_init(&next);
  ck_assert_int_eq(etcd_rdzv_state_copy(&next, &es), 0);
  rc = etcd_rdzv_state_join(&next, &me, &conf, err, sizeof err);
  if (rc < 0) {
    etcd_rdzv_state_free(&next);
    return -EINVAL;
  }
  etcd_rdzv_state_free(&es);
  es = next;
  return 0;
}

static void es_failure_node(int i, bool final)
{
  char id[ETCD_RDZV_ID_MAX + 1], msg[32];
  int k;

  es_id(i, id, sizeof id);
  snprintf(msg, sizeof msg, "rank %d", i);
  /* The round its workers ran in: the current one, or the one before
   * when its report crossed the restart. */
  k = etcd_rdzv_state_find(&es, id);
  ck_assert_int_ge(k, 0);
  etcd_rdzv_state_failure(&es, id, es.nodes[k].st == ETCD_RDZV_IDLE ? es.round - 1 : es.round,
             final, msg, NULL);
}

static void es_lost(int i)
{
  char id[ETCD_RDZV_ID_MAX + 1];

  es_id(i, id, sizeof id);
  etcd_rdzv_state_remove(&es, id, "lost");
}

static void es_last_call_over(void)
{
  etcd_rdzv_state_last_call(&es, es.round);
}

static void es_close_wait(void)
{
  etcd_rdzv_state_close_wait_over(&es, es.round);
}

static char es_phase(void)
{
  static const char p[] = { 'G', 'R', 'C', 'F' };

  return p[es.phase];
}

static int es_restarts(void)
{
  return es.restart_count;
}

static int es_rank(int i)
{
  char id[ETCD_RDZV_ID_MAX + 1];
  int k;

  es_id(i, id, sizeof id);
  k = etcd_rdzv_state_find(&es, id);
  if (k < 0 || es.phase != ETCD_RDZV_RUNNING || es.nodes[k].st != ETCD_RDZV_PART)
    return -1;
  return es.nodes[k].rank;
}

static bool es_final(void)
{
  return etcd_rdzv_state_failure_final(&es);
}

static const struct backend BACKENDS[] = {
  { "rdzvd", rd_start, rd_stop, rd_join, rd_failure, rd_lost,
    rd_time_passes, rd_time_passes, rd_phase, rd_restart_count, rd_rank,
    rd_failure_final },
  { "etcd", es_start, es_stop, es_join_node, es_failure_node, es_lost,
    es_last_call_over, es_close_wait, es_phase, es_restarts, es_rank,
    es_final },
};

static void run_case(const struct backend *b, const struct rules_case *c)
{
  const char *p = c->script;
  int i;

  b->start();
  rd.max_restarts_seen = c->conf.max_restarts;
  while (*p) {
    char ev = *p++;
    int node = *p >= '0' && *p <= '9' ? *p++ - '0' : -1;
    struct rdzv_rules_conf other = c->conf;
    int rc;

    while (*p == ' ')
      p++;
    switch (ev) {
    case 'j':
    case 'x':
    case 'y':
    case 'z':
      if (ev == 'x')
        other.max_nodes++;              /* the nodes differ */
      else if (ev == 'y')
        other.max_restarts++;           /* the budget differs */
      else if (ev == 'z')
        other.min_nodes = 0;            /* out of range */
      rc = b->join(node, &other);
      ck_assert_msg((rc < 0) == (node == c->refused),
                    "%s: %s: join of node %d: %d", b->name, c->name, node,
                    rc);
      break;
    case 'f':
    case 'F':
      b->failure(node, ev == 'F');
      break;
    case 'l':
      b->lost(node);
      break;
    case 'L':
      b->last_call();
      break;
    case 'W':
      b->close_wait();
      break;
    default:
      ck_abort_msg("bad script %s", c->script);
    }
  }
  ck_assert_msg(b->phase() == c->phase, "%s: %s: phase %c, not %c",
                b->name, c->name, b->phase(), c->phase);
  ck_assert_msg(b->restart_count() == c->restart_count,
                "%s: %s: restart_count %d, not %d", b->name, c->name,
                b->restart_count(), c->restart_count);
  for (i = 0; i < NODES; i++) {
    int want = c->ranks[i] == '-' ? -1 : c->ranks[i] - '0';

    ck_assert_msg(b->rank(i) == want, "%s: %s: node %d has rank %d, not "
                  "%d", b->name, c->name, i, b->rank(i), want);
  }
  if (c->phase == 'R')
    ck_assert_msg(b->failure_final() == c->failure_final,
                  "%s: %s: failure_final %d", b->name, c->name,
                  b->failure_final());
  b->stop();
}

START_TEST(both_back_ends)
{
  size_t k = (size_t)_i / (sizeof BACKENDS / sizeof BACKENDS[0]);
  size_t b = (size_t)_i % (sizeof BACKENDS / sizeof BACKENDS[0]);

  run_case(&BACKENDS[b], &CASES[k]);
}
END_TEST

static Suite *rdzv_rules_suite(void)
{
  Suite *s = suite_create("rdzv_rules");
  TCase *tc = tcase_create("rules");

  tcase_add_test(tc, rank_order);
  tcase_add_test(tc, admission);
  tcase_add_test(tc, gathering);
  tcase_add_test(tc, config_check);
  tcase_add_test(tc, restart_budget);
  tcase_add_test(tc, keepalive_window);
  tcase_add_test(tc, lost_node);
  tcase_add_test(tc, lost_host);
  tcase_add_loop_test(tc, both_back_ends, 0,
                      (int)(sizeof CASES / sizeof CASES[0] *
                            (sizeof BACKENDS / sizeof BACKENDS[0])));
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(rdzv_rules_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
