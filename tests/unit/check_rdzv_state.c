/* check_rdzv_state.c -- unit tests for the rendezvous state machine. */
#include "rdzv_state.h"
#include "metrics.h"
#include "rdzv_auth.h"

#include <check.h>
#include <malloc.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fake connections: node i is &conn_mem[i], host "h<i>", address
 * 10.0.0.<i+1>, pid 1000 + i, master port 29500 + i. */
enum { A, B, C, D, E, X, MANY0, NCONN = MANY0 + 64 };
static char conn_mem[NCONN];
#define CONN(i) ((void *)&conn_mem[i])

/* What the machine sent, dropped and logged (the recording sink). */
struct sent {
  void *conn;
  struct rdzv_proto_msg m;
};

static struct {
  struct sent *msgs;
  size_t n, cap;
  void **drops;
  size_t nd, capd;
  char **logs;
  size_t nl, capl;
  bool encode;          /* check every message with the wire encoder */
  /* The last token each connection was given (ROUND or WAITING): what
   * its agent would present in a RESUME.  clear() keeps them. */
  unsigned char tok[NCONN][RDZV_PROTO_TOKEN_BYTES];
} rec;

static struct rdzv_state *R;
static struct rdzv_proto_conf CF;   /* the configuration join() offers */

static void *grow(void *p, size_t *cap, size_t n, size_t size)
{
  if (n < *cap)
    return p;
  *cap = *cap ? *cap * 2 : 64;
  p = realloc(p, *cap * size);
  ck_assert_ptr_nonnull(p);
  return p;
}

static void rec_send(void *ctx, void *conn, const struct rdzv_proto_msg *m)
{
  struct sent *s;
  char *out;
  size_t len;
  int rc;

  (void)ctx;
  if (rec.encode) {
    rc = rdzv_proto_encode(m, &out, &len);
    ck_assert_msg(rc == 0, "op %d does not encode: %d", (int)m->op, rc);
    free(out);
  }
  for (size_t i = 0; i < NCONN; i++) {
    const unsigned char *t = m->op == RDZV_PROTO_ROUND ? m->u.round.token
                             : m->op == RDZV_PROTO_WAITING ? m->u.waiting.token
                             : NULL;

    if (conn == CONN(i) && t && !rdzv_proto_token_none(t))
      memcpy(rec.tok[i], t, RDZV_PROTO_TOKEN_BYTES);
  }
  rec.msgs = grow(rec.msgs, &rec.cap, rec.n, sizeof(*rec.msgs));
  s = &rec.msgs[rec.n++];
  s->conn = conn;
  s->m = *m;
  /* The sink must copy heap parts during the call. */
  if (m->op == RDZV_PROTO_KV_VALUE) {
    s->m.u.kv.value = malloc(m->u.kv.value_len + 1);
    ck_assert_ptr_nonnull(s->m.u.kv.value);
    if (m->u.kv.value_len)
      memcpy(s->m.u.kv.value, m->u.kv.value, m->u.kv.value_len);
    s->m.u.kv.value[m->u.kv.value_len] = '\0';
  } else if (m->op == RDZV_PROTO_STATUS_REPLY) {
    s->m.u.status_json = strdup(m->u.status_json);
    ck_assert_ptr_nonnull(s->m.u.status_json);
  }
}

static void rec_drop(void *ctx, void *conn)
{
  (void)ctx;
  rec.drops = grow(rec.drops, &rec.capd, rec.nd, sizeof(*rec.drops));
  rec.drops[rec.nd++] = conn;
}

static void rec_log(void *ctx, const char *line)
{
  (void)ctx;
  rec.logs = grow(rec.logs, &rec.capl, rec.nl, sizeof(*rec.logs));
  rec.logs[rec.nl] = strdup(line);
  ck_assert_ptr_nonnull(rec.logs[rec.nl]);
  rec.nl++;
}

static const struct rdzv_state_sink SINK = { NULL, rec_send, rec_drop,
                                             rec_log };

/* Forgets what was recorded so far (messages and drops; logs stay). */
static void clear(void)
{
  size_t i;

  for (i = 0; i < rec.n; i++) {
    if (rec.msgs[i].m.op == RDZV_PROTO_KV_VALUE)
      free(rec.msgs[i].m.u.kv.value);
    else if (rec.msgs[i].m.op == RDZV_PROTO_STATUS_REPLY)
      free(rec.msgs[i].m.u.status_json);
  }
  rec.n = 0;
  rec.nd = 0;
}

static struct rdzv_proto_conf conf_of(int min, int max)
{
  struct rdzv_proto_conf cf;

  rdzv_proto_conf_default(&cf);
  cf.min_nodes = min;
  cf.max_nodes = max;
  /* Long enough that only the keepalive tests ever see a death. */
  cf.keepalive_interval = 100;
  cf.keepalive_misses = 10;
  return cf;
}

static void setup(void)
{
  memset(&rec, 0, sizeof rec);
  rec.encode = true;
  CF = conf_of(1, 1);
  /* conf_of's keepalive window (1000 s) is above the default ceiling. */
  R = rdzv_state_create(&SINK,
                        &(struct rdzv_state_limits){ .max_keepalive = 1e6 });
  ck_assert_ptr_nonnull(R);
}

static void teardown(void)
{
  size_t i;

  rdzv_state_destroy(R);
  clear();
  free(rec.msgs);
  free(rec.drops);
  for (i = 0; i < rec.nl; i++)
    free(rec.logs[i]);
  free(rec.logs);
}

/* ---- driving ---- */

static int join_job(int i, const char *id, const char *addr, int nproc,
                    double now)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  snprintf(m.u.join.id, sizeof m.u.join.id, "%s", id);
  if (addr)
    snprintf(m.u.join.addr, sizeof m.u.join.addr, "%s", addr);
  else
    snprintf(m.u.join.addr, sizeof m.u.join.addr, "10.0.0.%d", i + 1);
  snprintf(m.u.join.host, sizeof m.u.join.host, "h%d", i);
  m.u.join.pid = 1000 + i;
  m.u.join.nproc = nproc;
  m.u.join.master_port = 29500 + i;
  m.u.join.reason = RDZV_PROTO_REASON_FIRST;
  m.u.join.conf = CF;
  return rdzv_state_handle(R, CONN(i), &m, now);
}

static int join(int i, int nproc, double now)
{
  return join_job(i, "job1", NULL, nproc, now);
}

/* Note [settled waiting] (rdzvd/rdzv_waiting.c): the WAITING answering a
 * JOIN goes once the job's JOINs have paused for 10 ms; the server's
 * loop ticks then.  Times in it are 0.01 s later than the JOIN's. */
#define SETTLE 0.01
#define SETTLE_TOL 0.0101

static void settle(double now)
{
  rdzv_state_tick(R, now + SETTLE);
}

static int op(int i, enum rdzv_proto_op o, double now)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = o;
  return rdzv_state_handle(R, CONN(i), &m, now);
}

static int failure(int i, bool final, const char *msg, double now)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_FAILURE;
  m.u.failure.final = final;
  snprintf(m.u.failure.message, sizeof m.u.failure.message, "%s", msg);
  return rdzv_state_handle(R, CONN(i), &m, now);
}

/* A failure report naming its worker (Note [root cause]). */
static int failure_at(int i, bool final, const char *msg, double now,
                      double exited_at, int rank, int exitcode)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_FAILURE;
  m.u.failure.final = final;
  snprintf(m.u.failure.message, sizeof m.u.failure.message, "%s", msg);
  m.u.failure.cause.exited_at = exited_at;
  m.u.failure.cause.rank = rank;
  m.u.failure.cause.exitcode = exitcode;
  m.u.failure.cause.pid = 4000 + rank;
  return rdzv_state_handle(R, CONN(i), &m, now);
}

static int barrier(int i, const char *name, int round, double now)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_BARRIER;
  snprintf(m.u.barrier.name, sizeof m.u.barrier.name, "%s", name);
  m.u.barrier.round = round;
  return rdzv_state_handle(R, CONN(i), &m, now);
}

static int kv(int i, enum rdzv_proto_op o, const char *key, const char *value,
              int64_t delta, double wait, double now)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = o;
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "%s", key);
  m.u.kv.value = (char *)value;
  m.u.kv.value_len = value ? strlen(value) : 0;
  m.u.kv.delta = delta;
  m.u.kv.wait = wait;
  return rdzv_state_handle(R, CONN(i), &m, now);
}

/* ---- looking at what was recorded ---- */

static int count(int i, enum rdzv_proto_op o)
{
  size_t k;
  int n = 0;

  for (k = 0; k < rec.n; k++)
    n += rec.msgs[k].conn == CONN(i) && rec.msgs[k].m.op == o;
  return n;
}

static int total(enum rdzv_proto_op o)
{
  size_t k;
  int n = 0;

  for (k = 0; k < rec.n; k++)
    n += rec.msgs[k].m.op == o;
  return n;
}

/* The last message of op o to node i; fails the test if there is none. */
static const struct rdzv_proto_msg *last(int i, enum rdzv_proto_op o)
{
  size_t k;

  for (k = rec.n; k-- > 0;)
    if (rec.msgs[k].conn == CONN(i) && rec.msgs[k].m.op == o)
      return &rec.msgs[k].m;
  ck_abort_msg("no message of op %d to node %d", (int)o, i);
  return NULL;
}

static bool dropped(int i)
{
  size_t k;

  for (k = 0; k < rec.nd; k++)
    if (rec.drops[k] == CONN(i))
      return true;
  return false;
}

static bool logged(const char *s)
{
  size_t k;

  for (k = 0; k < rec.nl; k++)
    if (strstr(rec.logs[k], s))
      return true;
  return false;
}

static void assert_round(int i, int round, int rank, int gws, int offset,
                         int world, int master)
{
  const struct rdzv_proto_msg *m = last(i, RDZV_PROTO_ROUND);
  char addr[32];

  snprintf(addr, sizeof addr, "10.0.0.%d", master + 1);
  ck_assert_int_eq(m->u.round.round, round);
  ck_assert_int_eq(m->u.round.group_rank, rank);
  ck_assert_int_eq(m->u.round.group_world_size, gws);
  ck_assert_int_eq(m->u.round.rank_offset, offset);
  ck_assert_int_eq(m->u.round.world_size, world);
  ck_assert_str_eq(m->u.round.master_addr, addr);
  ck_assert_int_eq(m->u.round.master_port, 29500 + master);
}

static void assert_error(int i, enum rdzv_proto_error_code code)
{
  ck_assert_int_eq(last(i, RDZV_PROTO_ERROR)->u.text.code, code);
}

/* STATUS from node i, parsed.  Caller frees with cJSON_Delete. */
static cJSON *status_of(int i, double now)
{
  cJSON *j;

  ck_assert_int_eq(op(i, RDZV_PROTO_STATUS, now), 0);
  j = cJSON_Parse(last(i, RDZV_PROTO_STATUS_REPLY)->u.status_json);
  ck_assert_ptr_nonnull(j);
  return j;
}

static double num(const cJSON *o, const char *k)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

  ck_assert_msg(cJSON_IsNumber(v), "%s is not a number", k);
  return v->valuedouble;
}

static const char *str(const cJSON *o, const char *k)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

  ck_assert_msg(cJSON_IsString(v), "%s is not a string", k);
  return v->valuestring;
}

static const cJSON *job0(const cJSON *st)
{
  const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(st, "jobs");

  ck_assert(cJSON_IsArray(jobs));
  ck_assert_ptr_nonnull(jobs->child);
  return jobs->child;
}

/* Two nodes A (nproc 1) and B (nproc 1) in a running round 0. */
static void running_pair(void)
{
  CF = conf_of(2, 2);
  CF.max_restarts = 3;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_ROUND), 1);
  clear();
}

/* ---- rounds ---- */

START_TEST(single_node_round)
{
  ck_assert_int_eq(join(A, 4, 0), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 1);
  assert_round(A, 0, 0, 1, 0, 4, A);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.restart_count, 0);
  ck_assert_int_eq(rdzv_state_job_count(R), 1);
  ck_assert_int_eq(rdzv_state_node_count(R), 1);
  ck_assert(logged("job job1: created"));
  ck_assert(logged("job job1: round 0 complete: 1 node, world size 4, "
                   "master 10.0.0.1:29500"));
}
END_TEST

START_TEST(last_call_completes_at_deadline)
{
  const struct rdzv_proto_waiting *w;

  CF = conf_of(2, 4);
  CF.last_call_timeout = 5;
  ck_assert_int_eq(join(A, 3, 0), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 0);
  settle(0);
  w = &last(A, RDZV_PROTO_WAITING)->u.waiting;
  ck_assert_int_eq(w->round, 0);
  ck_assert_int_eq(w->present, 1);
  ck_assert_int_eq(w->min_nodes, 2);
  ck_assert_int_eq(w->max_nodes, 4);
  ck_assert_double_eq_tol(w->deadline, 600, SETTLE_TOL);
  ck_assert_double_eq(w->last_call, -1);
  ck_assert_int_eq(join(B, 5, 1), 0);
  settle(1);
  w = &last(B, RDZV_PROTO_WAITING)->u.waiting;
  ck_assert_int_eq(w->present, 2);
  ck_assert_double_eq_tol(w->last_call, 5, SETTLE_TOL);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 0);
  ck_assert_double_le(rdzv_state_tick(R, 5.9), 6);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 0);
  rdzv_state_tick(R, 6);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_ROUND), 1);
  assert_round(A, 0, 0, 2, 0, 8, A);
  assert_round(B, 0, 1, 2, 3, 8, A);
}
END_TEST

START_TEST(max_completes_at_once)
{
  CF = conf_of(1, 2);
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 0);
  ck_assert_int_eq(join(B, 2, 1), 0);
  assert_round(A, 0, 0, 2, 0, 3, A);
  assert_round(B, 0, 1, 2, 1, 3, A);
}
END_TEST

START_TEST(config_mismatch_refused)
{
  CF = conf_of(2, 4);
  ck_assert_int_eq(join(A, 1, 0), 0);
  CF = conf_of(1, 4);
  ck_assert_int_lt(join(X, 1, 1), 0);
  assert_error(X, RDZV_PROTO_ERR_CONFIG_MISMATCH);
  ck_assert_ptr_nonnull(strstr(last(X, RDZV_PROTO_ERROR)->u.text.message,
                               "1..4 differs from job job1's 2..4"));
  ck_assert(dropped(X));
  ck_assert(logged("config mismatch"));
  ck_assert_int_eq(rdzv_state_node_count(R), 1);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART) + count(A, RDZV_PROTO_ERROR),
                   0);
  /* The job goes on with the right configuration. */
  CF = conf_of(2, 4);
  ck_assert_int_eq(join(B, 1, 2), 0);
  settle(2);
  ck_assert_int_eq(last(B, RDZV_PROTO_WAITING)->u.waiting.present, 2);
}
END_TEST

START_TEST(max_restarts_mismatch_refused)
{
  CF = conf_of(2, 4);
  CF.max_restarts = 3;
  ck_assert_int_eq(join(A, 1, 0), 0);
  CF.max_restarts = 1;
  ck_assert_int_lt(join(X, 1, 1), 0);
  assert_error(X, RDZV_PROTO_ERR_CONFIG_MISMATCH);
  ck_assert_ptr_nonnull(strstr(last(X, RDZV_PROTO_ERROR)->u.text.message,
                               "max_restarts 1 differs from job job1's 3"));
  ck_assert(dropped(X));
  ck_assert_int_eq(rdzv_state_node_count(R), 1);
}
END_TEST

START_TEST(join_sends_progress_once_per_second)
{
  CF = conf_of(4, 4);
  ck_assert_int_eq(join(A, 1, 0), 0);
  settle(0);
  ck_assert_int_eq(join(B, 1, 0.2), 0);
  settle(0.2);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_WAITING), 1);
  ck_assert_double_eq(rdzv_state_tick(R, 0.5), 1.0);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 1);
  rdzv_state_tick(R, 1.0);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 2);
  ck_assert_int_eq(count(B, RDZV_PROTO_WAITING), 2);
  ck_assert_int_eq(last(A, RDZV_PROTO_WAITING)->u.waiting.present, 2);
  ck_assert_double_eq(last(A, RDZV_PROTO_WAITING)->u.waiting.deadline, 599);
  ck_assert_int_eq(join(C, 1, 1.5), 0);
  rdzv_state_tick(R, 1.9);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 2);
  rdzv_state_tick(R, 2.0);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 3);
  ck_assert_int_eq(count(C, RDZV_PROTO_WAITING), 2);
  ck_assert_int_eq(last(A, RDZV_PROTO_WAITING)->u.waiting.present, 3);
  /* No change, no message. */
  rdzv_state_tick(R, 10);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 3);
}
END_TEST

START_TEST(death_while_gathering_cancels_last_call)
{
  cJSON *st;

  CF = conf_of(2, 3);
  CF.last_call_timeout = 5;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  rdzv_state_conn_closed(R, CONN(B), 1);
  ck_assert(logged("node h1 (10.0.0.2, pid 1001) lost: connection closed"));
  st = status_of(X, 1);
  ck_assert_str_eq(str(job0(st), "phase"), "gathering");
  cJSON_Delete(st);
  rdzv_state_tick(R, 6);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 0);
  ck_assert_int_eq(join(C, 1, 7), 0);
  rdzv_state_tick(R, 11.9);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 0);
  rdzv_state_tick(R, 12);
  assert_round(A, 0, 0, 2, 0, 2, A);
  assert_round(C, 0, 1, 2, 1, 2, A);
}
END_TEST

/* ---- membership changes ---- */

START_TEST(scale_up_from_waiting_list)
{
  CF = conf_of(2, 4);
  CF.last_call_timeout = 5;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 1), 0);
  rdzv_state_tick(R, 6);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 2);
  clear();
  ck_assert_int_eq(join(C, 1, 10), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(C, RDZV_PROTO_RESTART), 0);
  ck_assert_str_eq(last(A, RDZV_PROTO_RESTART)->u.text.message,
                   "node h2 (10.0.0.3, pid 1002) joined");
  ck_assert_int_eq(count(C, RDZV_PROTO_WAITING), 1);
  ck_assert_int_eq(last(C, RDZV_PROTO_WAITING)->u.waiting.round, 1);
  ck_assert(logged("joined running round 0"));
  ck_assert_int_eq(join(A, 1, 11), 0);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 0);
  /* Every expected node back: no last-call wait. */
  ck_assert_int_eq(join(B, 1, 12), 0);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 3);
  assert_round(A, 1, 0, 3, 0, 3, A);
  assert_round(B, 1, 1, 3, 1, 3, A);
  assert_round(C, 1, 2, 3, 2, 3, A);
  ck_assert_int_eq(last(C, RDZV_PROTO_ROUND)->u.round.restart_count, 0);
}
END_TEST

START_TEST(full_round_keeps_spare)
{
  CF = conf_of(1, 2);
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 1), 0);
  clear();
  ck_assert_int_eq(join(C, 1, 2), 0);
  ck_assert_int_eq(count(C, RDZV_PROTO_WAITING), 1);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert(logged("round 0 is full"));
  rdzv_state_conn_closed(R, CONN(B), 3);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_str_eq(last(A, RDZV_PROTO_RESTART)->u.text.message,
                   "node h1 (10.0.0.2, pid 1001) lost: connection closed");
  /* Which node was lost, and how: a fixed-size job ends on it. */
  ck_assert_str_eq(last(A, RDZV_PROTO_RESTART)->u.text.lost_why,
                   "its agent exited");
  ck_assert_int_eq(count(C, RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(count(C, RDZV_PROTO_WAITING), 2);   /* now in the round */
  ck_assert_int_eq(join(A, 1, 4), 0);
  assert_round(A, 1, 0, 2, 0, 2, A);
  assert_round(C, 1, 1, 2, 1, 2, A);
}
END_TEST

START_TEST(worker_failure_restarts)
{
  running_pair();
  ck_assert_int_eq(failure(B, false, "exitcode 1", 5), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_RESTART), 0);
  ck_assert_str_eq(last(A, RDZV_PROTO_RESTART)->u.text.message,
                   "node h1 (10.0.0.2, pid 1001) workers failed: "
                   "exitcode 1");
  ck_assert_str_eq(last(A, RDZV_PROTO_RESTART)->u.text.lost_host, "");
  ck_assert(logged("restart_count 1 of 3"));
  /* A's workers fail too before it hears: the same restart. */
  ck_assert_int_eq(failure(A, false, "exitcode 2", 5.1), 0);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(join(B, 1, 6), 0);
  ck_assert_int_eq(join(A, 1, 7), 0);
  assert_round(A, 1, 0, 2, 0, 2, A);
  assert_round(B, 1, 1, 2, 1, 2, A);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.restart_count, 1);
  ck_assert_int_eq(last(B, RDZV_PROTO_ROUND)->u.round.restart_count, 1);
}
END_TEST

START_TEST(restarts_exhausted_close)
{
  cJSON *st;

  CF = conf_of(2, 2);
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  clear();
  ck_assert_int_eq(failure(B, false, "exitcode 1", 5), 0);
  /* Note [root cause]: A may report its own; its keepalive window, at
   * most 5 s. */
  ck_assert_int_eq(total(RDZV_PROTO_CLOSED), 0);
  ck_assert(logged("closing: waiting up to 5 s for 1 more failure"));
  rdzv_state_tick(R, 9.9);
  ck_assert_int_eq(total(RDZV_PROTO_CLOSED), 0);
  rdzv_state_tick(R, 10);
  ck_assert(logged("1 node did not report within the wait"));
  ck_assert_int_eq(count(A, RDZV_PROTO_CLOSED), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_CLOSED), 1);
  ck_assert(!last(A, RDZV_PROTO_CLOSED)->u.text.success);
  ck_assert_ptr_nonnull(strstr(last(A, RDZV_PROTO_CLOSED)->u.text.message,
                               "no restarts left"));
  ck_assert(dropped(A));
  ck_assert(dropped(B));
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(rdzv_state_node_count(R), 0);
  st = status_of(X, 5);
  ck_assert_str_eq(str(job0(st), "phase"), "closed");
  cJSON_Delete(st);
  ck_assert_int_lt(join(C, 1, 6), 0);
  assert_error(C, RDZV_PROTO_ERR_CLOSED);
  ck_assert(dropped(C));
}
END_TEST

START_TEST(final_failure_closes)
{
  running_pair();
  ck_assert_int_eq(failure(A, true, "exitcode 3", 5), 0);
  ck_assert_int_eq(total(RDZV_PROTO_CLOSED), 0);
  /* B's report ends the wait. */
  ck_assert_int_eq(failure(B, true, "exitcode 4", 5.5), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_CLOSED), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_CLOSED), 1);
  ck_assert(!last(B, RDZV_PROTO_CLOSED)->u.text.success);
  ck_assert(dropped(A) && dropped(B));
  ck_assert(logged("closed"));
  /* Messages from a dropped conn are ignored, silently. */
  clear();
  ck_assert_int_eq(op(A, RDZV_PROTO_KEEPALIVE, 6), -ENOTCONN);
  ck_assert_int_eq((int)rec.n, 0);
}
END_TEST

/* Note [root cause]: A's report arrives first, but B's worker exited
 * earlier: the CLOSED each node gets names B's, with its host. */
START_TEST(root_cause_earliest_exit_wins)
{
  const struct rdzv_proto_cause *c;

  running_pair();
  ck_assert_int_eq(failure_at(A, true, "rank 0: connection reset", 5,
                              1700000002.5, 0, 1), 0);
  ck_assert_int_eq(total(RDZV_PROTO_CLOSED), 0);
  ck_assert_int_eq(failure_at(B, true, "rank 1: disk full", 5.2,
                              1700000001.25, 1, 28), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_CLOSED), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_CLOSED), 1);
  c = &last(A, RDZV_PROTO_CLOSED)->u.text.cause;
  ck_assert_double_eq(c->exited_at, 1700000001.25);
  ck_assert_int_eq(c->rank, 1);
  ck_assert_int_eq(c->exitcode, 28);
  ck_assert_int_eq(c->pid, 4001);
  ck_assert_str_eq(c->host, "h1");
  ck_assert_str_eq(last(A, RDZV_PROTO_CLOSED)->u.text.message,
                   "node h1 (10.0.0.2, pid 1001) workers failed: "
                   "rank 1: disk full");
  ck_assert_int_eq(last(B, RDZV_PROTO_CLOSED)->u.text.cause.rank, 1);
}
END_TEST

/* In the right order, the later report is secondary; RESTART carries the
 * cause it was sent for, and a report crossing it that exited earlier
 * becomes the round's root cause (the CLOSED of a later close names it). */
START_TEST(root_cause_restart_and_late_reports)
{
  running_pair();
  ck_assert_int_eq(failure_at(A, false, "rank 0: boom", 5, 100.0, 0, 3),
                   0);
  ck_assert_int_eq(count(B, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(last(B, RDZV_PROTO_RESTART)->u.text.cause.rank, 0);
  ck_assert_double_eq(last(B, RDZV_PROTO_RESTART)->u.text.cause.exited_at,
                      100.0);
  /* B's crossed the RESTART and exited later: secondary. */
  ck_assert_int_eq(failure_at(B, false, "rank 1: reset", 5.1, 101.0, 1, 1),
                   0);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 1);
  /* A report without a time (an older agent) never displaces a timed
   * one, and a restart with no failure carries no cause. */
  ck_assert_int_eq(join(A, 1, 6), 0);
  ck_assert_int_eq(join(B, 1, 6), 0);
  clear();
  ck_assert_int_eq(failure(A, false, "old agent", 7), 0);
  ck_assert_double_eq(last(B, RDZV_PROTO_RESTART)->u.text.cause.exited_at, 0);
  ck_assert_int_eq(failure_at(B, false, "rank 1: earlier?", 7.1, 50.0, 1,
                              9), 0);
  ck_assert_int_eq(join(A, 1, 8), 0);
  ck_assert_int_eq(join(B, 1, 8), 0);
  clear();
  rdzv_state_conn_closed(R, CONN(B), 9);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_double_eq(last(A, RDZV_PROTO_RESTART)->u.text.cause.exited_at, 0);
}
END_TEST

/* A closing job starts no round when a participant is lost or a node
 * joins: the lost one ends the wait. */
START_TEST(root_cause_closing_survives_loss)
{
  CF = conf_of(2, 3);
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  rdzv_state_tick(R, CF.last_call_timeout + 1);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 1);
  clear();
  ck_assert_int_eq(failure_at(A, true, "rank 0: boom", 40, 100.0, 0, 3), 0);
  ck_assert_int_eq(join(C, 1, 41), 0);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(total(RDZV_PROTO_CLOSED), 0);
  rdzv_state_conn_closed(R, CONN(B), 42);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  rdzv_state_tick(R, 42);
  ck_assert_int_eq(count(A, RDZV_PROTO_CLOSED), 1);
  ck_assert_int_eq(count(C, RDZV_PROTO_CLOSED), 1);
  ck_assert_int_eq(last(C, RDZV_PROTO_CLOSED)->u.text.cause.exitcode, 3);
}
END_TEST

START_TEST(lost_connection_restarts_survivors)
{
  CF = conf_of(2, 3);
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  ck_assert_int_eq(join(C, 1, 0), 0);
  clear();
  rdzv_state_conn_closed(R, CONN(B), 5);
  rdzv_state_conn_closed(R, CONN(B), 5);    /* twice, or unknown: harmless */
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(C, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(rdzv_state_node_count(R), 2);
  ck_assert(logged("lost: connection closed"));
  ck_assert_int_eq(join(C, 1, 6), 0);
  ck_assert_int_eq(join(A, 1, 6), 0);
  assert_round(A, 1, 0, 2, 0, 2, A);
  assert_round(C, 1, 1, 2, 1, 2, A);
}
END_TEST

START_TEST(keepalive_silence_kills)
{
  CF = conf_of(2, 2);
  CF.max_restarts = 1;           /* Note [a lost node]: it may wait */
  CF.keepalive_interval = 1;
  CF.keepalive_misses = 3;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  ck_assert_double_eq(rdzv_state_tick(R, 0), 3);
  clear();
  ck_assert_int_eq(op(B, RDZV_PROTO_KEEPALIVE, 2.5), 0);
  ck_assert_int_eq(count(B, RDZV_PROTO_PONG), 1);
  rdzv_state_tick(R, 2.9);
  ck_assert_int_eq(rdzv_state_node_count(R), 2);
  rdzv_state_tick(R, 3.1);
  ck_assert_int_eq(rdzv_state_node_count(R), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_RESTART), 1);
  ck_assert_ptr_nonnull(strstr(last(B, RDZV_PROTO_RESTART)->u.text.message,
                               "node h0 (10.0.0.1, pid 1000) lost: no "
                               "keepalive for 3.1 s"));
  rdzv_state_tick(R, 4);
  ck_assert_int_eq(rdzv_state_node_count(R), 1);
  ck_assert_double_eq(rdzv_state_tick(R, 5.4), 5.5);
  rdzv_state_tick(R, 5.6);
  ck_assert_int_eq(rdzv_state_node_count(R), 0);
  ck_assert(logged("node h1 (10.0.0.2, pid 1001) lost: no keepalive"));
}
END_TEST

/* Note [a lost node] (rdzv_rules.h): a 2:2 job with no restart left
 * ends on its lost node: CLOSED naming it and how it left. */
START_TEST(lost_node_ends_fixed_job)
{
  const struct rdzv_proto_msg *m;

  CF = conf_of(2, 2);
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  rdzv_state_conn_closed(R, CONN(B), 1);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 0);
  m = last(A, RDZV_PROTO_CLOSED);
  ck_assert_ptr_nonnull(m);
  ck_assert(!m->u.text.success);
  ck_assert_str_eq(m->u.text.lost_host, "h1");
  ck_assert_str_eq(m->u.text.lost_why, "its agent exited");
  ck_assert_ptr_nonnull(strstr(m->u.text.message,
                               "lost: connection closed (its agent died): "
                               "the job cannot reach its size (1 of 2 "
                               "nodes) and no restart is left (0 of 0 "
                               "used)"));
  ck_assert(dropped(A));
}
END_TEST

/* ... but an elastic job above min_nodes goes on without it. */
START_TEST(lost_node_elastic_goes_on)
{
  CF = conf_of(1, 2);
  CF.last_call_timeout = 0;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  rdzv_state_conn_closed(R, CONN(B), 1);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(A, RDZV_PROTO_CLOSED), 0);
}
END_TEST

START_TEST(join_timeout_below_min)
{
  CF = conf_of(2, 2);
  CF.max_restarts = 1;           /* Note [a lost node]: it may wait */
  CF.join_timeout = 10;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  rdzv_state_conn_closed(R, CONN(B), 1);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(join(A, 1, 2), 0);
  settle(2);
  ck_assert_int_eq(last(A, RDZV_PROTO_WAITING)->u.waiting.present, 1);
  ck_assert_double_eq_tol(last(A, RDZV_PROTO_WAITING)->u.waiting.deadline, 10,
                          SETTLE_TOL);
  rdzv_state_tick(R, 11.9);
  ck_assert(!dropped(A));
  rdzv_state_tick(R, 12);
  assert_error(A, RDZV_PROTO_ERR_JOIN_TIMEOUT);
  ck_assert_str_eq(last(A, RDZV_PROTO_ERROR)->u.text.message,
                   "waited 10 s: 1 of at least 2 nodes present");
  ck_assert(dropped(A));
  ck_assert_int_eq(rdzv_state_node_count(R), 0);
  ck_assert(logged("join timeout"));
  /* The empty job is forgotten after close_timeout. */
  rdzv_state_tick(R, 12 + 30);
  ck_assert_int_eq(rdzv_state_job_count(R), 0);
}
END_TEST

START_TEST(expected_nodes_all_gone)
{
  CF = conf_of(1, 2);
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  rdzv_state_conn_closed(R, CONN(A), 1);
  rdzv_state_conn_closed(R, CONN(B), 1);
  ck_assert_int_eq(rdzv_state_node_count(R), 0);
  clear();
  /* A newcomer is not a restarting node: it waits for the last call. */
  ck_assert_int_eq(join(C, 1, 2), 0);
  settle(2);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 0);
  ck_assert_double_eq_tol(last(C, RDZV_PROTO_WAITING)->u.waiting.last_call, 30,
                          SETTLE_TOL);
  rdzv_state_tick(R, 32);
  assert_round(C, 1, 0, 1, 0, 1, C);
}
END_TEST

START_TEST(spare_times_out)
{
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 1), 0);
  ck_assert_double_eq(last(B, RDZV_PROTO_WAITING)->u.waiting.deadline, 600);
  ck_assert_double_eq(last(B, RDZV_PROTO_WAITING)->u.waiting.last_call, -1);
  rdzv_state_tick(R, 600.9);
  ck_assert(!dropped(B));
  rdzv_state_tick(R, 601);
  assert_error(B, RDZV_PROTO_ERR_JOIN_TIMEOUT);
  ck_assert_str_eq(last(B, RDZV_PROTO_ERROR)->u.text.message,
                   "waited 600 s: round 0 is full (1 of at most 1 nodes)");
  ck_assert(dropped(B));
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(rdzv_state_node_count(R), 1);
}
END_TEST

START_TEST(ranks_stable_across_rounds)
{
  CF = conf_of(1, 3);
  CF.max_restarts = 5;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  ck_assert_int_eq(join(C, 1, 0), 0);
  assert_round(C, 0, 2, 3, 2, 3, A);
  ck_assert_int_eq(failure(A, false, "boom", 1), 0);
  /* A comes back last, yet keeps rank 0. */
  ck_assert_int_eq(join(C, 1, 2), 0);
  ck_assert_int_eq(join(B, 1, 3), 0);
  ck_assert_int_eq(join(A, 1, 4), 0);
  assert_round(A, 1, 0, 3, 0, 3, A);
  assert_round(B, 1, 1, 3, 1, 3, A);
  assert_round(C, 1, 2, 3, 2, 3, A);
  /* Rank 0 dies: the next in order takes it, whatever the join order. */
  rdzv_state_conn_closed(R, CONN(A), 5);
  ck_assert_int_eq(join(C, 1, 6), 0);
  ck_assert_int_eq(join(B, 1, 7), 0);
  assert_round(B, 2, 0, 2, 0, 2, B);
  assert_round(C, 2, 1, 2, 1, 2, B);
}
END_TEST

START_TEST(rejoin_rules)
{
  CF = conf_of(2, 3);
  ck_assert_int_eq(join(A, 1, 0), 0);
  settle(0);
  /* Already gathering: a no-op that answers WAITING again. */
  ck_assert_int_eq(join(A, 1, 1), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 2);
  ck_assert_int_eq(last(A, RDZV_PROTO_WAITING)->u.waiting.present, 1);
  /* A conn in job1 may not join another job. */
  ck_assert_int_lt(join_job(A, "job2", NULL, 1, 1), 0);
  assert_error(A, RDZV_PROTO_ERR_BAD_REQUEST);
  ck_assert(!dropped(A));
  ck_assert_int_eq(rdzv_state_job_count(R), 1);
  ck_assert_int_eq(join(B, 1, 2), 0);
  ck_assert_int_eq(join(C, 1, 3), 0);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 3);
  /* A participant of the running round cannot join it again. */
  ck_assert_int_lt(join(A, 1, 4), 0);
  assert_error(A, RDZV_PROTO_ERR_BAD_REQUEST);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
}
END_TEST

START_TEST(peer_address_fallback)
{
  /* Peer address known before the JOIN. */
  rdzv_state_set_peer_addr(R, CONN(A), "192.168.1.7");
  ck_assert_int_eq(join_job(A, "pa", "", 1, 0), 0);
  ck_assert_str_eq(last(A, RDZV_PROTO_ROUND)->u.round.master_addr,
                   "192.168.1.7");
  /* No peer address at all. */
  ck_assert_int_eq(join_job(B, "pb", "", 1, 0), 0);
  ck_assert_str_eq(last(B, RDZV_PROTO_ROUND)->u.round.master_addr, "127.0.0.1");
  /* Peer address learned after the JOIN. */
  CF = conf_of(2, 2);
  ck_assert_int_eq(join_job(C, "pc", "", 1, 0), 0);
  rdzv_state_set_peer_addr(R, CONN(C), "10.9.9.9");
  ck_assert_int_eq(join_job(D, "pc", NULL, 1, 0), 0);
  ck_assert_str_eq(last(D, RDZV_PROTO_ROUND)->u.round.master_addr, "10.9.9.9");
  ck_assert_int_eq(rdzv_state_job_count(R), 3);
}
END_TEST

START_TEST(two_jobs_independent)
{
  CF = conf_of(2, 2);
  ck_assert_int_eq(join_job(A, "j1", NULL, 1, 0), 0);
  CF = conf_of(1, 1);
  ck_assert_int_eq(join_job(C, "j2", NULL, 7, 0), 0);
  assert_round(C, 0, 0, 1, 0, 7, C);
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), 1);
  rdzv_state_conn_closed(R, CONN(C), 1);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 0);
  CF = conf_of(2, 2);
  ck_assert_int_eq(join_job(B, "j1", NULL, 1, 2), 0);
  assert_round(A, 0, 0, 2, 0, 2, A);
  assert_round(B, 0, 1, 2, 1, 2, A);
  ck_assert_int_eq(rdzv_state_job_count(R), 2);
  ck_assert_int_eq(rdzv_state_node_count(R), 2);
}
END_TEST

/* ---- barriers and leaving ---- */

START_TEST(barrier_completes_with_last)
{
  cJSON *st;

  running_pair();
  ck_assert_int_eq(barrier(A, "exit", 0, 1), 0);
  ck_assert_int_eq(barrier(A, "exit", 0, 1), 0);     /* a repeat */
  ck_assert_int_eq(total(RDZV_PROTO_BARRIER_DONE), 0);
  st = status_of(X, 1);
  ck_assert_int_eq((int)num(cJSON_GetObjectItem(job0(st), "barriers"),
                            "exit"), 1);
  cJSON_Delete(st);
  ck_assert_int_eq(barrier(B, "exit", 0, 2), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_BARRIER_DONE), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_BARRIER_DONE), 1);
  ck_assert(logged("barrier exit passed by 2 nodes"));
}
END_TEST

START_TEST(restart_cancels_barrier)
{
  CF = conf_of(2, 3);
  CF.last_call_timeout = 5;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  rdzv_state_tick(R, 5);
  ck_assert_int_eq(barrier(A, "exit", 0, 6), 0);
  ck_assert_int_eq(join(C, 1, 7), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_str_eq(last(A, RDZV_PROTO_RESTART)->u.text.message,
                   "node h2 (10.0.0.3, pid 1002) joined "
                   "(cancels barrier exit)");
  ck_assert_int_eq(total(RDZV_PROTO_BARRIER_DONE), 0);
  ck_assert_int_eq(join(A, 1, 8), 0);
  ck_assert_int_eq(join(B, 1, 8), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 1);
  /* The barrier of round 0 is stale now. */
  ck_assert_int_lt(barrier(B, "exit", 0, 9), 0);
  assert_error(B, RDZV_PROTO_ERR_BAD_REQUEST);
  ck_assert_int_eq(barrier(B, "exit", 1, 9), 0);
  ck_assert_int_eq(total(RDZV_PROTO_BARRIER_DONE), 0);
}
END_TEST

START_TEST(leave_after_exit_finishes)
{
  cJSON *st;

  running_pair();
  ck_assert_int_eq(barrier(A, "exit", 0, 1), 0);
  ck_assert_int_eq(barrier(B, "exit", 0, 1), 0);
  ck_assert_int_eq(op(A, RDZV_PROTO_LEAVE, 2), 0);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(rdzv_state_node_count(R), 1);
  ck_assert_int_eq(op(B, RDZV_PROTO_LEAVE, 3), 0);
  ck_assert_int_eq(rdzv_state_node_count(R), 0);
  ck_assert(logged("job job1: finished"));
  st = status_of(X, 3);
  ck_assert_str_eq(str(job0(st), "phase"), "finished");
  cJSON_Delete(st);
  ck_assert_int_lt(join(C, 1, 10), 0);
  assert_error(C, RDZV_PROTO_ERR_CLOSED);
  ck_assert(dropped(C));
  rdzv_state_tick(R, 32.9);
  ck_assert_int_eq(rdzv_state_job_count(R), 1);
  rdzv_state_tick(R, 33);
  ck_assert_int_eq(rdzv_state_job_count(R), 0);
  ck_assert(logged("job job1: forgotten"));
  /* The id is free again. */
  CF = conf_of(1, 1);
  ck_assert_int_eq(join(D, 1, 34), 0);
  assert_round(D, 0, 0, 1, 0, 1, D);
}
END_TEST

START_TEST(leave_before_exit_is_lost)
{
  running_pair();
  ck_assert_int_eq(op(A, RDZV_PROTO_LEAVE, 2), 0);
  ck_assert_int_eq(count(B, RDZV_PROTO_RESTART), 1);
  ck_assert_str_eq(last(B, RDZV_PROTO_RESTART)->u.text.message,
                   "node h0 (10.0.0.1, pid 1000) lost: left before the "
                   "exit barrier");
  ck_assert(logged("lost: left before the exit barrier"));
  /* Gone: A's next message needs a JOIN. */
  ck_assert_int_eq(op(A, RDZV_PROTO_KEEPALIVE, 3), -ENOTCONN);
  assert_error(A, RDZV_PROTO_ERR_NOT_JOINED);
}
END_TEST

/* ---- KV ---- */

START_TEST(kv_set_get_add)
{
  const struct rdzv_proto_kv *v;
  cJSON *st;

  ck_assert_int_eq(join(A, 1, 0), 0);
  clear();
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_SET, "k", "hello", 0, 0, 1), 0);
  ck_assert_int_eq((int)rec.n, 0);     /* SET is not answered */
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "k", NULL, 0, 0, 1), 0);
  v = &last(A, RDZV_PROTO_KV_VALUE)->u.kv;
  ck_assert(v->found);
  ck_assert_str_eq(v->key, "k");
  ck_assert_str_eq(v->value, "hello");
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_SET, "k", "bye", 0, 0, 1), 0);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "k", NULL, 0, 0, 1), 0);
  ck_assert_str_eq(last(A, RDZV_PROTO_KV_VALUE)->u.kv.value, "bye");
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "nope", NULL, 0, 0, 1), 0);
  ck_assert(!last(A, RDZV_PROTO_KV_VALUE)->u.kv.found);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_ADD, "n", NULL, 5, 0, 1), 0);
  ck_assert_str_eq(last(A, RDZV_PROTO_KV_VALUE)->u.kv.value, "5");
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_ADD, "n", NULL, -7, 0, 1), 0);
  ck_assert_str_eq(last(A, RDZV_PROTO_KV_VALUE)->u.kv.value, "-2");
  /* A counter is any decimal int64 as text, leading zeros included. */
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_SET, "n",
                      "-0000000000000000000000000000000000000041", 0, 0, 1),
                   0);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_ADD, "n", NULL, 1, 0, 1), 0);
  ck_assert_str_eq(last(A, RDZV_PROTO_KV_VALUE)->u.kv.value, "-40");
  ck_assert_int_lt(kv(A, RDZV_PROTO_KV_ADD, "k", NULL, 1, 0, 1), 0);
  assert_error(A, RDZV_PROTO_ERR_BAD_REQUEST);
  st = status_of(A, 1);
  ck_assert_int_eq((int)num(job0(st), "kv_keys"), 2);
  cJSON_Delete(st);
}
END_TEST

START_TEST(kv_wait_answered_or_times_out)
{
  running_pair();
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "x", NULL, 0, 10, 1), 0);
  ck_assert_int_eq(total(RDZV_PROTO_KV_VALUE), 0);
  ck_assert_int_eq(kv(B, RDZV_PROTO_KV_SET, "x", "42", 0, 0, 2), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_KV_VALUE), 1);
  ck_assert_str_eq(last(A, RDZV_PROTO_KV_VALUE)->u.kv.value, "42");
  ck_assert_int_eq(count(B, RDZV_PROTO_KV_VALUE), 0);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "y", NULL, 0, 5, 3), 0);
  ck_assert_int_eq(kv(B, RDZV_PROTO_KV_GET, "y", NULL, 0, 5, 3), 0);
  ck_assert_double_eq(rdzv_state_tick(R, 7.9), 8);
  ck_assert_int_eq(total(RDZV_PROTO_ERROR), 0);
  rdzv_state_tick(R, 8);
  assert_error(A, RDZV_PROTO_ERR_TIMEOUT);
  assert_error(B, RDZV_PROTO_ERR_TIMEOUT);
  ck_assert_str_eq(last(A, RDZV_PROTO_ERROR)->u.text.message,
                   "key y not set within 5 s");
  /* A pending wait dies with its node. */
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "z", NULL, 0, 5, 9), 0);
  rdzv_state_conn_closed(R, CONN(A), 9);
  clear();
  rdzv_state_tick(R, 20);
  ck_assert_int_eq(total(RDZV_PROTO_ERROR), 0);
}
END_TEST

/* A SET answers every GET waiting for its key (three here, two from one
 * node), each once, and forgets their waits. */
START_TEST(kv_set_answers_every_waiter)
{
  running_pair();
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "w", NULL, 0, 5, 1), 0);
  ck_assert_int_eq(kv(B, RDZV_PROTO_KV_GET, "w", NULL, 0, 5, 1), 0);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "w", NULL, 0, 5, 1), 0);
  ck_assert_int_eq(kv(B, RDZV_PROTO_KV_SET, "w", "7", 0, 0, 2), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_KV_VALUE), 2);
  ck_assert_int_eq(count(B, RDZV_PROTO_KV_VALUE), 1);
  ck_assert_str_eq(last(B, RDZV_PROTO_KV_VALUE)->u.kv.value, "7");
  clear();
  rdzv_state_tick(R, 20);
  ck_assert_int_eq(total(RDZV_PROTO_ERROR), 0);
}
END_TEST

/* Issue 32, item 4 (Note [tenant share]): one client (10,050
 * connections, each holding a waiting node of a job of its own) filled
 * the job table and every other tenant's new job was refused.  Now one
 * peer address holds at most max_jobs_per_peer jobs with nodes: the next
 * gets `error limit` naming the limit, and another address is not
 * affected. */
START_TEST(tenant_jobs_share)
{
  struct rdzv_state_limits lim = { .max_jobs = 10, .max_jobs_per_peer = 3,
                                   .max_keepalive = 1e6 };
  char id[16];
  int i;

  rdzv_state_destroy(R);
  R = rdzv_state_create(&SINK, &lim);
  ck_assert_ptr_nonnull(R);
  CF = conf_of(2, 2);             /* one node each: they wait for ever */
  for (i = 0; i < 4; i++) {
    rdzv_state_set_peer_addr(R, CONN(MANY0 + i), "6.6.6.6");
    snprintf(id, sizeof id, "squat%d", i);
    if (i < 3) {
      ck_assert_int_eq(join_job(MANY0 + i, id, NULL, 1, 0), 0);
    } else {
      ck_assert_int_lt(join_job(MANY0 + i, id, NULL, 1, 0), 0);
      assert_error(MANY0 + i, RDZV_PROTO_ERR_LIMIT);
      ck_assert_msg(strstr(last(MANY0 + i, RDZV_PROTO_ERROR)->u.text.message,
                           "too many jobs from 6.6.6.6 (3: rdzvd "
                           "--max-jobs-per-peer)"), "%s",
                    last(MANY0 + i, RDZV_PROTO_ERROR)->u.text.message);
    }
  }
  ck_assert_int_eq(rdzv_state_job_count(R), 3);
  /* Another tenant's job is unaffected. */
  rdzv_state_set_peer_addr(R, CONN(A), "10.0.0.1");
  rdzv_state_set_peer_addr(R, CONN(B), "10.0.0.2");
  ck_assert_int_eq(join(A, 1, 1), 0);
  ck_assert_int_eq(join(B, 1, 1), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 1);
  /* A squatter's job that loses its node no longer counts. */
  rdzv_state_conn_closed(R, CONN(MANY0), 2);
  rdzv_state_set_peer_addr(R, CONN(MANY0 + 5), "6.6.6.6");
  ck_assert_int_eq(join_job(MANY0 + 5, "squat5", NULL, 1, 2), 0);
  ck_assert(!dropped(MANY0 + 5));
}
END_TEST

/* Under pressure from many addresses (the table full, no empty job), a
 * job that never ran and only holds waiting nodes is reclaimed, of the
 * tenant holding the most; a running job never is. */
START_TEST(tenant_reclaims_never_ran)
{
  struct rdzv_state_limits lim = { .max_jobs = 4, .max_jobs_per_peer = 3,
                                   .max_keepalive = 1e6 };
  char id[16];
  int i;

  rdzv_state_destroy(R);
  R = rdzv_state_create(&SINK, &lim);
  ck_assert_ptr_nonnull(R);
  CF = conf_of(1, 1);
  rdzv_state_set_peer_addr(R, CONN(A), "10.0.0.1");
  ck_assert_int_eq(join(A, 1, 0), 0);       /* runs */
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 1);
  CF = conf_of(2, 2);
  for (i = 0; i < 3; i++) {
    rdzv_state_set_peer_addr(R, CONN(MANY0 + i), i < 2 ? "6.6.6.6"
                                                       : "7.7.7.7");
    snprintf(id, sizeof id, "squat%d", i);
    ck_assert_int_eq(join_job(MANY0 + i, id, NULL, 1, 1 + i), 0);
  }
  ck_assert_int_eq(rdzv_state_job_count(R), 4);
  /* A new tenant's job: 6.6.6.6's oldest never-ran job goes. */
  rdzv_state_set_peer_addr(R, CONN(B), "10.0.0.2");
  ck_assert_int_eq(join_job(B, "real", NULL, 1, 5), 0);
  ck_assert(!dropped(B));
  ck_assert_int_eq(count(MANY0, RDZV_PROTO_CLOSED), 1);
  ck_assert(dropped(MANY0));
  ck_assert(strstr(last(MANY0, RDZV_PROTO_CLOSED)->u.text.message,
                   "never ran"));
  ck_assert(!dropped(MANY0 + 1) && !dropped(MANY0 + 2));
  ck_assert(!dropped(A));
  ck_assert(logged("job squat0: reclaimed"));
}
END_TEST

/* A tenant's nodes on waiting lists: at its share, `error limit`. */
START_TEST(tenant_waiting_share)
{
  struct rdzv_state_limits lim = { .max_waiting_per_peer = 2,
                                   .max_keepalive = 1e6 };
  int i;

  rdzv_state_destroy(R);
  R = rdzv_state_create(&SINK, &lim);
  ck_assert_ptr_nonnull(R);
  CF = conf_of(1, 1);
  rdzv_state_set_peer_addr(R, CONN(A), "10.0.0.1");
  ck_assert_int_eq(join(A, 1, 0), 0);       /* runs, full */
  for (i = 0; i < 3; i++) {
    rdzv_state_set_peer_addr(R, CONN(MANY0 + i), "6.6.6.6");
    if (i < 2) {
      ck_assert_int_eq(join_job(MANY0 + i, "job1", NULL, 1, 1), 0);
    } else {
      ck_assert_int_lt(join_job(MANY0 + i, "job1", NULL, 1, 1), 0);
      assert_error(MANY0 + i, RDZV_PROTO_ERR_LIMIT);
      ck_assert(strstr(last(MANY0 + i, RDZV_PROTO_ERROR)->u.text.message,
                       "--max-waiting-per-peer"));
    }
  }
  rdzv_state_set_peer_addr(R, CONN(B), "10.0.0.2");
  ck_assert_int_eq(join(B, 1, 2), 0);       /* another tenant's spare */
  ck_assert(!dropped(B));
}
END_TEST

START_TEST(kv_limits)
{
  struct rdzv_state_limits lim = { .max_jobs = 1, .max_keys_per_job = 2,
                           .max_kv_bytes = 100 };

  rdzv_state_destroy(R);
  R = rdzv_state_create(&SINK, &lim);
  ck_assert_ptr_nonnull(R);
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_SET, "k1", "v", 0, 0, 1), 0);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_SET, "k2", "v", 0, 0, 1), 0);
  ck_assert_int_lt(kv(A, RDZV_PROTO_KV_SET, "k3", "v", 0, 0, 1), 0);
  assert_error(A, RDZV_PROTO_ERR_LIMIT);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_SET, "k1", "replaced", 0, 0, 1), 0);
  clear();
  ck_assert_int_lt(kv(A, RDZV_PROTO_KV_SET, "k2",
                      "0123456789012345678901234567890"
                      "1234567890123456789012345678901234567890123456789"
                      "0123456789",
                      0, 0, 1),
                   0);
  assert_error(A, RDZV_PROTO_ERR_LIMIT);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "k2", NULL, 0, 0, 1), 0);
  ck_assert_str_eq(last(A, RDZV_PROTO_KV_VALUE)->u.kv.value, "v");
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "k4", NULL, 0, 5, 1), 0);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_GET, "k4", NULL, 0, 5, 1), 0);
  ck_assert_int_lt(kv(A, RDZV_PROTO_KV_GET, "k4", NULL, 0, 5, 1), 0);
  assert_error(A, RDZV_PROTO_ERR_LIMIT);
  /* One job at most. */
  ck_assert_int_lt(join_job(B, "other", NULL, 1, 2), 0);
  assert_error(B, RDZV_PROTO_ERR_LIMIT);
  ck_assert(dropped(B));
  ck_assert_int_eq(rdzv_state_job_count(R), 1);
}
END_TEST

/* A full job table forgets the job that has had no node for longest; it
 * refuses only when every job has nodes. */
START_TEST(empty_job_evicted_when_full)
{
  struct rdzv_state_limits lim = { .max_jobs = 2 };

  rdzv_state_destroy(R);
  R = rdzv_state_create(&SINK, &lim);
  ck_assert_ptr_nonnull(R);
  CF.close_timeout = 1e7;               /* asks to be kept for months */
  ck_assert_int_eq(join_job(A, "j1", NULL, 1, 0), 0);
  ck_assert_int_eq(join_job(B, "j2", NULL, 1, 0), 0);
  rdzv_state_conn_closed(R, CONN(A), 1);        /* j1 empty first */
  rdzv_state_conn_closed(R, CONN(B), 2);        /* then j2 */
  ck_assert_int_eq(rdzv_state_job_count(R), 2);
  ck_assert_int_eq(join_job(C, "j3", NULL, 1, 3), 0);
  ck_assert(logged("job j1: forgotten early"));
  ck_assert_int_eq(join_job(D, "j4", NULL, 1, 4), 0);
  ck_assert(logged("job j2: forgotten early"));
  ck_assert_int_eq(rdzv_state_job_count(R), 2);
  /* j3 and j4 have nodes: now a new job is refused. */
  clear();
  ck_assert_int_eq(join_job(E, "j5", NULL, 1, 5), -ENOSPC);
  assert_error(E, RDZV_PROTO_ERR_LIMIT);
}
END_TEST

/* Durations a client chooses are lowered to the server's ceilings; a
 * keepalive interval above the ceiling is refused. */
START_TEST(durations_capped)
{
  struct rdzv_state_limits lim = { .max_join_timeout = 100,
                                   .max_last_call = 10,
                                   .max_close_timeout = 20,
                                   .max_keepalive = 30 };
  cJSON *st, *conf;

  rdzv_state_destroy(R);
  R = rdzv_state_create(&SINK, &lim);
  ck_assert_ptr_nonnull(R);
  CF = conf_of(2, 2);
  CF.join_timeout = 1e7;
  CF.last_call_timeout = 1e7;
  CF.close_timeout = 1e7;
  CF.keepalive_interval = 10;
  CF.keepalive_misses = 1000;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert(logged("close_timeout 1e+07 s lowered"));
  st = rdzv_state_status(R, 0);
  conf = cJSON_GetObjectItem(cJSON_GetArrayItem(
      cJSON_GetObjectItem(st, "jobs"), 0), "conf");
  ck_assert_double_eq(cJSON_GetObjectItem(conf, "join_timeout")->valuedouble,
                      100);
  ck_assert_double_eq(
      cJSON_GetObjectItem(conf, "last_call_timeout")->valuedouble, 10);
  ck_assert_double_eq(
      cJSON_GetObjectItem(conf, "close_timeout")->valuedouble, 20);
  ck_assert_int_eq(cJSON_GetObjectItem(conf, "keepalive_misses")->valueint,
                   3);
  cJSON_Delete(st);
  /* The join timeout that runs is the lowered one. */
  clear();
  rdzv_state_tick(R, 101);
  assert_error(A, RDZV_PROTO_ERR_JOIN_TIMEOUT);
  CF.keepalive_interval = 31;
  clear();
  ck_assert_int_eq(join(B, 1, 102), -EINVAL);
  assert_error(B, RDZV_PROTO_ERR_BAD_REQUEST);
}
END_TEST

/* Every job's store together is bounded too. */
START_TEST(kv_total_budget)
{
  struct rdzv_state_limits lim = { .max_kv_total = 100 };
  char v[61];

  rdzv_state_destroy(R);
  R = rdzv_state_create(&SINK, &lim);
  ck_assert_ptr_nonnull(R);
  memset(v, 'x', 60);
  v[60] = '\0';
  ck_assert_int_eq(join_job(A, "j1", NULL, 1, 0), 0);
  ck_assert_int_eq(join_job(B, "j2", NULL, 1, 0), 0);
  ck_assert_int_eq(kv(A, RDZV_PROTO_KV_SET, "k", v, 0, 0, 1), 0);
  clear();
  ck_assert_int_eq(kv(B, RDZV_PROTO_KV_SET, "k", v, 0, 0, 1), -ENOSPC);
  assert_error(B, RDZV_PROTO_ERR_LIMIT);
  /* A job that goes gives its bytes back. */
  rdzv_state_conn_closed(R, CONN(A), 2);
  rdzv_state_tick(R, 40);                       /* j1 forgotten (close 30 s) */
  ck_assert_int_eq(rdzv_state_job_count(R), 1);
  ck_assert_int_eq(kv(B, RDZV_PROTO_KV_SET, "k", v, 0, 0, 40), 0);
}
END_TEST

/* ---- other requests ---- */

START_TEST(not_joined_errors)
{
  static const enum rdzv_proto_op ops[] = {
      RDZV_PROTO_KEEPALIVE, RDZV_PROTO_FAILURE, RDZV_PROTO_BARRIER,
      RDZV_PROTO_LEAVE,     RDZV_PROTO_KV_SET,  RDZV_PROTO_KV_GET,
      RDZV_PROTO_KV_ADD,
  };
  size_t i;

  ck_assert_double_lt(rdzv_state_tick(R, 0), 0);     /* nothing pending */
  for (i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    clear();
    if (ops[i] == RDZV_PROTO_KV_SET || ops[i] == RDZV_PROTO_KV_GET ||
        ops[i] == RDZV_PROTO_KV_ADD)
      ck_assert_int_eq(kv(X, ops[i], "k", "v", 1, 0, 0), -ENOTCONN);
    else
      ck_assert_int_eq(op(X, ops[i], 0), -ENOTCONN);
    ck_assert_int_eq(count(X, RDZV_PROTO_ERROR), 1);
    assert_error(X, RDZV_PROTO_ERR_NOT_JOINED);
    ck_assert(!dropped(X));
  }
  ck_assert_int_lt(op(X, RDZV_PROTO_ROUND, 0), 0);
  assert_error(X, RDZV_PROTO_ERR_BAD_REQUEST);
  ck_assert_int_eq(rdzv_state_job_count(R), 0);
}
END_TEST

START_TEST(status_reply_content)
{
  const cJSON *job, *conf, *nodes, *n;
  cJSON *st;

  CF = conf_of(2, 4);
  ck_assert_int_eq(join(A, 2, 0), 0);
  st = status_of(X, 1);
  ck_assert_int_eq((int)num(st, "nodes"), 1);
  job = job0(st);
  ck_assert_str_eq(str(job, "id"), "job1");
  ck_assert_str_eq(str(job, "phase"), "gathering");
  ck_assert_int_eq((int)num(job, "round"), 0);
  ck_assert_int_eq((int)num(job, "restart_count"), 0);
  ck_assert_int_eq((int)num(job, "kv_keys"), 0);
  conf = cJSON_GetObjectItem(job, "conf");
  ck_assert_int_eq((int)num(conf, "min_nodes"), 2);
  ck_assert_int_eq((int)num(conf, "max_nodes"), 4);
  ck_assert_double_eq(num(conf, "join_timeout"), 600);
  ck_assert_ptr_null(cJSON_GetObjectItem(job, "barriers")->child);
  nodes = cJSON_GetObjectItem(job, "nodes");
  ck_assert_int_eq(cJSON_GetArraySize(nodes), 1);
  n = nodes->child;
  ck_assert_str_eq(str(n, "host"), "h0");
  ck_assert_str_eq(str(n, "addr"), "10.0.0.1");
  ck_assert_int_eq((int)num(n, "pid"), 1000);
  ck_assert_int_eq((int)num(n, "nproc"), 2);
  ck_assert_int_eq((int)num(n, "rank"), -1);
  ck_assert_str_eq(str(n, "state"), "participant");
  cJSON_Delete(st);
  ck_assert_int_eq(join(B, 3, 1), 0);
  st = status_of(X, 2);
  ck_assert_str_eq(str(job0(st), "phase"), "last_call");
  cJSON_Delete(st);
  rdzv_state_tick(R, 31);
  st = status_of(A, 31);
  job = job0(st);
  ck_assert_str_eq(str(job, "phase"), "running");
  ck_assert_int_eq((int)num(job, "world_size"), 5);
  n = cJSON_GetObjectItem(job, "nodes")->child->next;
  ck_assert_str_eq(str(n, "host"), "h1");
  ck_assert_int_eq((int)num(n, "rank"), 1);
  cJSON_Delete(st);
}
END_TEST

/* 10,000 nodes in one job: one ROUND each, every rank once, offsets
 * summing up.  Quadratic work would show as a timeout here. */
/* The status report stays within one frame, in work proportional to what
 * it shows: a summary of the first jobs with a truncation notice, one job
 * on request, as many nodes of a huge job as fit. */
START_TEST(status_bounded)
{
  enum { JOBS = 10000, NODES = 12000 };
  struct rdzv_proto_status_req q;
  char *base = malloc(JOBS + NODES), *text;
  const cJSON *jobs;
  struct rdzv_proto_msg m;
  cJSON *st;
  int i, err;

  ck_assert_ptr_nonnull(base);
  rec.encode = false;
  CF = conf_of(1, RDZV_PROTO_MAX_NODES);
  CF.last_call_timeout = 1e6;
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  m.u.join.conf = CF;
  m.u.join.master_port = 29400;
  m.u.join.nproc = 1;
  for (i = 0; i < JOBS; i++) {
    snprintf(m.u.join.id, sizeof m.u.join.id, "job%05d", i);
    snprintf(m.u.join.host, sizeof m.u.join.host, "h%d", i);
    ck_assert_int_eq(rdzv_state_handle(R, base + i, &m, 0), 0);
  }
  /* One job of many nodes with long host names. */
  snprintf(m.u.join.id, sizeof m.u.join.id, "job00007");
  memset(m.u.join.host, 'x', RDZV_PROTO_MAX_ADDR);
  for (i = 0; i < NODES; i++)
    ck_assert_int_eq(rdzv_state_handle(R, base + JOBS + i, &m, 0), 0);
  clear();
  st = status_of(X, 1);
  ck_assert_int_eq((int)num(st, "jobs_total"), JOBS);
  ck_assert_int_eq((int)num(st, "jobs_shown"), 100);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(st, "truncated")));
  jobs = cJSON_GetObjectItem(st, "jobs");
  ck_assert_int_eq(cJSON_GetArraySize(jobs), 100);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(jobs, 7),
                                             "nodes_omitted")));
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(
      cJSON_GetArrayItem(jobs, 8), "nodes")), 1);
  cJSON_Delete(st);
  /* More jobs on request, within the frame whatever the request. */
  memset(&q, 0, sizeof q);
  q.limit = RDZV_PROTO_MAX_STATUS_JOBS;
  st = rdzv_state_status_query(R, &q, 1, &err);
  ck_assert_ptr_nonnull(st);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(st, "truncated")));
  text = cJSON_PrintUnformatted(st);
  ck_assert_uint_lt(strlen(text), RDZV_PROTO_MAX_FRAME - 4096);
  cJSON_free(text);
  cJSON_Delete(st);
  /* One job: as many nodes as fit, and a notice. */
  snprintf(q.job, sizeof q.job, "job00007");
  st = rdzv_state_status_query(R, &q, 1, &err);
  ck_assert_ptr_nonnull(st);
  jobs = cJSON_GetObjectItem(st, "jobs");
  ck_assert_int_eq(cJSON_GetArraySize(jobs), 1);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(jobs, 0),
                                             "nodes_truncated")));
  ck_assert_int_eq((int)num(cJSON_GetArrayItem(jobs, 0), "node_count"),
                   NODES + 1);
  text = cJSON_PrintUnformatted(st);
  ck_assert_uint_lt(strlen(text), RDZV_PROTO_MAX_FRAME - 4096);
  cJSON_free(text);
  cJSON_Delete(st);
  /* An unknown job is an error, not an empty report. */
  snprintf(q.job, sizeof q.job, "nosuch");
  ck_assert_ptr_null(rdzv_state_status_query(R, &q, 1, &err));
  ck_assert_int_eq(err, -ENOENT);
  for (i = 0; i < JOBS + NODES; i++)
    rdzv_state_conn_closed(R, base + i, 2);
  free(base);
}
END_TEST

START_TEST(ten_thousand_nodes)
{
  enum { N = 10000 };
  static int rank_of[N], offset_of[N], seen[N];
  char *base = malloc(N);
  struct rdzv_proto_msg m;
  size_t k;
  int i, world = 0, sum = 0;

  ck_assert_ptr_nonnull(base);
  rec.encode = false;
  CF = conf_of(N, N);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  snprintf(m.u.join.id, sizeof m.u.join.id, "big");
  m.u.join.conf = CF;
  m.u.join.master_port = 29400;
  for (i = 0; i < N; i++) {
    snprintf(m.u.join.host, sizeof m.u.join.host, "n%d", i);
    snprintf(m.u.join.addr, sizeof m.u.join.addr, "10.%d.%d.%d",
             i >> 16, (i >> 8) & 255, i & 255);
    m.u.join.pid = i;
    m.u.join.nproc = 1 + i % 3;
    world += m.u.join.nproc;
    if (i == N - 1)
      ck_assert_int_eq(total(RDZV_PROTO_ROUND), 0);
    ck_assert_int_eq(rdzv_state_handle(R, base + i, &m, i * 1e-4), 0);
  }
  ck_assert_int_eq(total(RDZV_PROTO_ROUND), N);
  for (k = 0; k < rec.n; k++) {
    const struct rdzv_proto_round *rd = &rec.msgs[k].m.u.round;

    if (rec.msgs[k].m.op != RDZV_PROTO_ROUND)
      continue;
    i = (int)((char *)rec.msgs[k].conn - base);
    ck_assert(i >= 0 && i < N);
    ck_assert_int_eq(seen[i]++, 0);
    ck_assert_int_eq(rd->group_world_size, N);
    ck_assert_int_eq(rd->world_size, world);
    ck_assert_str_eq(rd->master_addr, "10.0.0.0");
    rank_of[i] = rd->group_rank;
    offset_of[i] = rd->rank_offset;
  }
  /* Ranks in join order; offsets are the prefix sums of nproc. */
  for (i = 0; i < N; i++) {
    ck_assert_int_eq(rank_of[i], i);
    ck_assert_int_eq(offset_of[i], sum);
    sum += 1 + i % 3;
  }
  ck_assert_int_eq(rdzv_state_node_count(R), N);
  free(base);
}
END_TEST

/* Only a participant may report a failure: a spare on the waiting list
 * can neither restart nor close the job. */
START_TEST(failure_from_spare_refused)
{
  CF = conf_of(1, 2);
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 1), 0);
  ck_assert_int_eq(join(C, 1, 2), 0);     /* the round is full: a spare */
  clear();
  ck_assert_int_eq(failure(C, true, "hostile", 3), -EPERM);
  ck_assert_int_eq(last(C, RDZV_PROTO_ERROR)->u.text.code,
                   RDZV_PROTO_ERR_BAD_REQUEST);
  ck_assert_int_eq(failure(C, false, "hostile", 3), -EPERM);
  ck_assert_int_eq(total(RDZV_PROTO_CLOSED), 0);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert(!dropped(C));
  ck_assert(logged("refused a failure report"));
  /* A participant still can. */
  ck_assert_int_eq(failure(A, true, "real", 4), 0);
  ck_assert_int_eq(failure(B, true, "real too", 4), 0);
  ck_assert_int_eq(count(B, RDZV_PROTO_CLOSED), 1);
}
END_TEST

/* A node the last round went on without (not expected back) has no
 * workers either. */
START_TEST(failure_from_left_node_refused)
{
  CF = conf_of(1, 3);
  CF.last_call_timeout = 0;
  CF.max_restarts = 3;
  CF.keepalive_interval = 10;             /* a window of 100 s */
  ck_assert_int_eq(join(A, 1, 0), 0);     /* round 0: A alone */
  ck_assert_int_eq(join(B, 1, 1), 0);     /* restart; A is waited for */
  ck_assert_int_eq(op(A, RDZV_PROTO_KEEPALIVE, 90), 0);
  ck_assert_int_eq(op(B, RDZV_PROTO_KEEPALIVE, 90), 0);
  rdzv_state_tick(R,
                  1 + 100);                    /* then round 1 is B's alone */
  ck_assert_int_eq(last(B, RDZV_PROTO_ROUND)->u.round.round, 1);
  clear();
  ck_assert_int_eq(failure(A, true, "stale", 102), -EPERM);
  ck_assert_int_eq(total(RDZV_PROTO_CLOSED), 0);
  /* A participant's report that crossed its RESTART still counts. */
  ck_assert_int_eq(failure(B, false, "x", 103), 0);     /* round 2 */
  ck_assert_int_eq(failure(B, false, "again", 103), 0);
  ck_assert_int_eq(count(B, RDZV_PROTO_ERROR), 0);
}
END_TEST


/* ---- soft state: RESUME (Note [soft state]) ---- */

/* Node i re-asserts round `round` of job1 (every node nproc 2), on the
 * connection of node `from`. */
/* What an impostor puts in its RESUME instead of node i's own. */
static const unsigned char *forged_token;
static const char *forged_master;

static int resume_from(int from, int i, enum rdzv_proto_resume_phase phase,
                       int round, int rc, int rank, int gws, double now)
{
  struct rdzv_proto_msg m;
  struct rdzv_proto_join *j = &m.u.resume.join;
  struct rdzv_proto_round *a = &m.u.resume.round;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_RESUME;
  snprintf(j->id, sizeof j->id, "job1");
  snprintf(j->addr, sizeof j->addr, "10.0.0.%d", i + 1);
  snprintf(j->host, sizeof j->host, "h%d", i);
  j->pid = 1000 + i;
  j->nproc = 2;
  j->master_port = 29500 + i;
  j->reason = RDZV_PROTO_REASON_FIRST;
  j->conf = CF;
  m.u.resume.phase = phase;
  a->round = round;
  a->restart_count = rc;
  /* It presents the last token node i's connection was given, or the
   * one a test forges. */
  memcpy(a->token, forged_token ? forged_token : rec.tok[i],
         RDZV_PROTO_TOKEN_BYTES);
  if (phase != RDZV_PROTO_PHASE_GATHERING) {
    a->group_rank = rank;
    a->group_world_size = gws;
    a->rank_offset = 2 * rank;
    a->world_size = 2 * gws;
    snprintf(a->master_addr, sizeof a->master_addr, "%s",
             forged_master ? forged_master : "10.0.0.1");
    a->master_port = 29500;
  }
  return rdzv_state_handle(R, CONN(from), &m, now);
}

static int resume(int i, enum rdzv_proto_resume_phase phase, int round, int rc,
                  int rank, int gws, double now)
{
  return resume_from(i, i, phase, round, rc, rank, gws, now);
}

START_TEST(resume_rebuilds_running_job)
{
  struct rdzvd_metrics met;

  metrics_init(&met);
  rdzv_state_set_metrics(R, &met);
  CF = conf_of(3, 3);
  CF.max_restarts = 5;
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_RUNNING, 2, 1, 0, 3, 0), 0);
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_EXIT, 2, 1, 1, 3, 0.5), 0);
  ck_assert_int_eq(barrier(B, "exit", 2, 0.6), 0);
  ck_assert_int_eq(barrier(A, "exit", 2, 0.7), 0);
  /* Nothing reaches the running workers; the barrier waits for C. */
  ck_assert_int_eq((int)rec.n, 0);
  ck_assert(logged("rebuilding running round 2"));
  ck_assert_int_eq(resume(C, RDZV_PROTO_PHASE_RUNNING, 2, 1, 2, 3, 1), 0);
  ck_assert(logged("round 2 rebuilt: all 3 nodes"));
  ck_assert_int_eq((int)rec.n, 0);
  ck_assert_int_eq(barrier(C, "exit", 2, 1.1), 0);
  ck_assert_int_eq(total(RDZV_PROTO_BARRIER_DONE), 3);
  ck_assert_int_eq((int)met.reconnects, 3);
  /* The rebuilt round fails like any other: restart 2, ranks kept. */
  clear();
  ck_assert_int_eq(failure(B, false, "exitcode 1", 2), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(C, RDZV_PROTO_RESTART), 1);
  ck_assert(logged("restart_count 2 of 5"));
  ck_assert_int_eq(join(C, 2, 3), 0);
  ck_assert_int_eq(join(B, 2, 3), 0);
  ck_assert_int_eq(join(A, 2, 3), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 3);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.restart_count, 2);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.group_rank, 0);
  ck_assert_int_eq(last(B, RDZV_PROTO_ROUND)->u.round.group_rank, 1);
  ck_assert_int_eq(last(C, RDZV_PROTO_ROUND)->u.round.group_rank, 2);
}
END_TEST

START_TEST(resume_grace_expires)
{
  double next;

  CF = conf_of(1, 3);
  CF.keepalive_interval = 1;
  CF.keepalive_misses = 5;
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_RUNNING, 2, 1, 0, 3, 100), 0);
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_RUNNING, 2, 1, 1, 3, 101), 0);
  ck_assert_int_eq(op(A, RDZV_PROTO_KEEPALIVE, 108), 0);
  ck_assert_int_eq(op(B, RDZV_PROTO_KEEPALIVE, 108), 0);
  next = rdzv_state_tick(R, 109.9);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert(next > 109.9 && next <= 110);
  rdzv_state_tick(R, 110);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_RESTART), 1);
  ck_assert(strstr(last(A, RDZV_PROTO_RESTART)->u.text.message,
                   "1 of 3 nodes did not come back within 10 s"));
  ck_assert_int_eq(join(A, 2, 111), 0);
  ck_assert_int_eq(join(B, 2, 111), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 3);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.restart_count, 1);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.group_world_size, 2);
  /* C comes back late: the job went on without it. */
  clear();
  ck_assert_int_eq(resume(C, RDZV_PROTO_PHASE_RUNNING, 2, 1, 2, 3, 112), 0);
  ck_assert_int_eq(count(C, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 0);
  ck_assert(strstr(last(C, RDZV_PROTO_RESTART)->u.text.message,
                   "went on without this node"));
  /* It joins like a newcomer: a new round for everyone. */
  ck_assert_int_eq(join(C, 2, 113), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
}
END_TEST

START_TEST(resume_rank_conflict)
{
  CF = conf_of(1, 3);
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_RUNNING, 4, 2, 0, 2, 0), 0);
  ck_assert_int_eq(resume(X, RDZV_PROTO_PHASE_RUNNING, 4, 2, 0, 2, 1), 0);
  ck_assert(logged("conflicting re-assertions: node h5"));
  ck_assert(logged("rank held by node h0"));
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(X, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(join(X, 2, 2), 0);
  ck_assert_int_eq(join(A, 2, 2), 0);
  /* The earlier one keeps rank 0; the round moved on; no restart. */
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 5);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.group_rank, 0);
  ck_assert_int_eq(last(X, RDZV_PROTO_ROUND)->u.round.group_rank, 1);
  ck_assert_int_eq(last(X, RDZV_PROTO_ROUND)->u.round.restart_count, 2);
}
END_TEST

/* A rebuilding job that is closing (a final failure waits for the other
 * reports) starts no round, so a conflicting claim must not make its
 * sender a participant: it would hold no rank in a running round.  It
 * hears that the job went on without it, and CLOSED when the job ends. */
START_TEST(resume_conflict_while_closing)
{
  CF = conf_of(1, 3);
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_RUNNING, 4, 0, 0, 3, 0), 0);
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_RUNNING, 4, 0, 1, 3, 0), 0);
  ck_assert_int_eq(failure_at(A, true, "rank 0: boom", 1, 1.0, 0, 3), 0);
  clear();
  ck_assert_int_eq(resume(X, RDZV_PROTO_PHASE_RUNNING, 6, 0, 0, 2, 2), 0);
  ck_assert(!logged("conflicting re-assertions"));
  ck_assert_int_eq(count(X, RDZV_PROTO_RESTART), 1);
  ck_assert(strstr(last(X, RDZV_PROTO_RESTART)->u.text.message,
                   "went on without this node"));
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 0);
  rdzv_state_tick(R, 100);
  ck_assert_int_eq(count(A, RDZV_PROTO_CLOSED), 1);
  ck_assert_int_eq(count(X, RDZV_PROTO_CLOSED), 1);
}
END_TEST

START_TEST(resume_highest_round_wins)
{
  CF = conf_of(1, 3);
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_RUNNING, 4, 2, 0, 2, 0), 0);
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_RUNNING, 6, 3, 1, 2, 1), 0);
  ck_assert(logged("conflicting re-assertions"));
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(join(A, 2, 2), 0);
  ck_assert_int_eq(join(B, 2, 2), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 7);
  ck_assert_int_eq(last(B, RDZV_PROTO_ROUND)->u.round.restart_count, 3);
}
END_TEST

START_TEST(resume_gathering_keeps_counts)
{
  CF = conf_of(2, 2);
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_GATHERING, 5, 2, 0, 0, 0), 0);
  settle(0);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 1);
  ck_assert_int_eq(last(A, RDZV_PROTO_WAITING)->u.waiting.round, 5);
  /* A node that knows less just joins the same round. */
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_GATHERING, 4, 1, 0, 0, 1), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 5);
  ck_assert_int_eq(last(B, RDZV_PROTO_ROUND)->u.round.restart_count, 2);
}
END_TEST

START_TEST(resume_after_reset_on_live_server)
{
  running_pair();
  rdzv_state_conn_closed(R, CONN(B), 1);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  clear();
  /* B reconnects (a new connection) and re-asserts round 0: too late. */
  ck_assert_int_eq(resume(X, RDZV_PROTO_PHASE_RUNNING, 0, 0, 1, 2, 2), 0);
  ck_assert_int_eq(count(X, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(join(A, 1, 3), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 0);   /* waits for X, expected */
  ck_assert_int_eq(join(X, 1, 3), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 1);
  ck_assert_int_eq(last(X, RDZV_PROTO_ROUND)->u.round.group_world_size, 2);
}
END_TEST

START_TEST(reset_then_resume_within_window)
{
  running_pair();
  rdzv_state_conn_reset(R, CONN(B), 1);
  ck_assert(logged("connection reset: still a member"));
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(rdzv_state_node_count(R), 2);
  {
    cJSON *st = status_of(A, 1.5);
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(job0(st), "nodes");

    ck_assert_str_eq(str(cJSON_GetArrayItem(nodes, 1), "state"), "detached");
    cJSON_Delete(st);
  }
  /* B's agent is back on a new connection: the job goes on. */
  ck_assert_int_eq(resume_from(X, B, RDZV_PROTO_PHASE_RUNNING, 0, 0, 1, 2, 2),
                   0);
  ck_assert(logged("reconnected and re-asserted rank 1 of round 0"));
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(barrier(A, "exit", 0, 3), 0);
  ck_assert_int_eq(barrier(X, "exit", 0, 3), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_BARRIER_DONE), 1);
  ck_assert_int_eq(count(X, RDZV_PROTO_BARRIER_DONE), 1);
  /* A detached node goes with its job. */
  rdzv_state_conn_reset(R, CONN(A), 4);
  ck_assert_int_eq(failure(X, true, "boom", 5), 0);
  ck_assert_int_eq(rdzv_state_node_count(R), 0);
}
END_TEST

START_TEST(reset_then_window_ends)
{
  running_pair();
  rdzv_state_conn_reset(R, CONN(B), 1);
  ck_assert_int_eq(op(A, RDZV_PROTO_KEEPALIVE, 999), 0);
  rdzv_state_tick(R, 1001);             /* B's window: 100 s x 10, from 0 */
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(rdzv_state_node_count(R), 1);
  /* Too late: it restarts and joins again. */
  ck_assert_int_eq(
      resume_from(X, B, RDZV_PROTO_PHASE_RUNNING, 0, 0, 1, 2, 1002), 0);
  ck_assert_int_eq(count(X, RDZV_PROTO_RESTART), 1);
  /* A reset node of a job that ends is freed with it. */
  rdzv_state_conn_reset(R, CONN(X), 1003);
  ck_assert_int_eq(failure(A, true, "boom", 1004), 0);
  ck_assert_int_eq(rdzv_state_node_count(R), 0);
}
END_TEST

START_TEST(resume_supersedes_old_connection)
{
  running_pair();
  /* B's agent gave up on a connection the server still thinks alive. */
  ck_assert_int_eq(resume_from(X, B, RDZV_PROTO_PHASE_RUNNING, 0, 0, 1, 2, 2),
                   0);
  ck_assert(logged("reconnected and re-asserted rank 1 of round 0"));
  ck_assert(dropped(B));
  rdzv_state_conn_closed(R, CONN(B), 3);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(rdzv_state_node_count(R), 2);
  /* While gathering, the old self makes way for the new one. */
  ck_assert_int_eq(failure(A, false, "exitcode 1", 4), 0);
  ck_assert_int_eq(count(X, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(resume_from(E, B, RDZV_PROTO_PHASE_GATHERING, 1, 1, 0, 0, 5),
                   0);
  ck_assert(logged("its old connection is superseded"));
  ck_assert(dropped(X));
  ck_assert_int_eq(rdzv_state_node_count(R), 2);
  ck_assert_int_eq(join(A, 1, 6), 0);
  ck_assert_int_eq(last(E, RDZV_PROTO_ROUND)->u.round.round, 1);
  ck_assert_int_eq(last(E, RDZV_PROTO_ROUND)->u.round.group_world_size, 2);
}
END_TEST


/* A node joining a running elastic job with last_call_timeout 0: the new
 * round waits for the node told to restart instead of completing without
 * it (which sent it in as a newcomer, restarting the other: two agents
 * restarted each other forever, 900 rounds in 6 s). */
START_TEST(zero_last_call_waits_for_restarting_nodes)
{
  CF = conf_of(1, 2);
  CF.last_call_timeout = 0;
  CF.max_restarts = 3;
  CF.keepalive_interval = 10;             /* a window of 100 s */
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 1);
  ck_assert_int_eq(join(B, 1, 1), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_ROUND), 0);      /* waits for A */
  ck_assert_int_eq(join(A, 1, 1.1), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 2);
  ck_assert_int_eq(last(B, RDZV_PROTO_ROUND)->u.round.group_world_size, 2);
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 1);
  /* A node that does not come back is waited for one keepalive window. */
  clear();
  ck_assert_int_eq(failure(B, false, "exitcode 1", 2), 0);
  ck_assert_int_eq(join(B, 1, 2), 0);
  ck_assert_int_eq(count(B, RDZV_PROTO_ROUND), 0);
  ck_assert_int_eq(op(A, RDZV_PROTO_KEEPALIVE, 90), 0);
  rdzv_state_tick(R, 2 + 100 - 0.01);
  ck_assert_int_eq(count(B, RDZV_PROTO_ROUND), 0);
  rdzv_state_tick(R, 2 + 100);
  ck_assert_int_eq(count(B, RDZV_PROTO_ROUND), 1);
}
END_TEST

/* The round's job token (rdzv_token_job): one for every participant of
 * a round, another for the next round, none all zero. */
START_TEST(job_token_per_round)
{
  unsigned char t0[RDZV_PROTO_TOKEN_BYTES];

  running_pair();
  ck_assert_int_eq(failure(A, false, "exitcode 1", 1), 0);
  ck_assert_int_eq(join(A, 1, 1), 0);
  ck_assert_int_eq(join(B, 1, 1), 0);
  ck_assert(
      !rdzv_proto_token_none(last(A, RDZV_PROTO_ROUND)->u.round.job_token));
  ck_assert(!memcmp(last(A, RDZV_PROTO_ROUND)->u.round.job_token,
                    last(B, RDZV_PROTO_ROUND)->u.round.job_token,
                    RDZV_PROTO_TOKEN_BYTES));
  memcpy(t0, last(A, RDZV_PROTO_ROUND)->u.round.job_token,
         RDZV_PROTO_TOKEN_BYTES);
  ck_assert_int_eq(failure(B, false, "exitcode 1", 2), 0);
  ck_assert_int_eq(join(A, 1, 2), 0);
  ck_assert_int_eq(join(B, 1, 2), 0);
  ck_assert(memcmp(last(A, RDZV_PROTO_ROUND)->u.round.job_token, t0,
                   RDZV_PROTO_TOKEN_BYTES) != 0);
}
END_TEST

/* Note [job token] (launcher/jobtoken.h): live recovery's workers go on
 * through membership rounds, and a newcomer's workers join them: the job
 * token stays while the master endpoint and the restart count do (a node
 * joins, a node other than the master's is lost), and changes when the
 * master's node is lost.  A round started by a loss completes as soon as
 * every survivor is back, without waiting for its last call. */
START_TEST(job_token_kept_across_membership)
{
  unsigned char t0[RDZV_PROTO_TOKEN_BYTES];
  const struct rdzv_proto_round *rd;

  CF = conf_of(1, 3);
  CF.last_call_timeout = 30;
  ck_assert_int_eq(join(A, 1, 0), 0);
  rdzv_state_tick(R, 30);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 1);
  memcpy(t0, last(A, RDZV_PROTO_ROUND)->u.round.job_token, sizeof t0);
  ck_assert(!rdzv_proto_token_none(t0));
  /* B and C join: A re-joins, every round has A's token. */
  ck_assert_int_eq(join(B, 1, 31), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(join(A, 1, 31), 0);
  ck_assert_int_eq(count(B, RDZV_PROTO_ROUND), 1);
  ck_assert_int_eq(join(C, 1, 32), 0);
  ck_assert_int_eq(join(A, 1, 32), 0);
  ck_assert_int_eq(join(B, 1, 32), 0);
  rd = &last(C, RDZV_PROTO_ROUND)->u.round;
  ck_assert_int_eq(rd->group_world_size, 3);
  ck_assert(!memcmp(rd->job_token, t0, sizeof t0));
  ck_assert(!memcmp(last(B, RDZV_PROTO_ROUND)->u.round.job_token, t0,
                    sizeof t0));
  /* C lost: A and B are back, the round completes at once, same token. */
  clear();
  rdzv_state_conn_closed(R, CONN(C), 33);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(join(A, 1, 33), 0);
  ck_assert_int_eq(join(B, 1, 33), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 1);
  rd = &last(A, RDZV_PROTO_ROUND)->u.round;
  ck_assert_int_eq(rd->group_world_size, 2);
  ck_assert(!memcmp(rd->job_token, t0, sizeof t0));
  /* A, the master, lost: B's round has another master, another token. */
  clear();
  rdzv_state_conn_closed(R, CONN(A), 34);
  ck_assert_int_eq(join(B, 1, 34), 0);
  ck_assert_int_eq(count(B, RDZV_PROTO_ROUND), 1);
  rd = &last(B, RDZV_PROTO_ROUND)->u.round;
  ck_assert_int_eq(rd->master_port, 29500 + B);
  ck_assert(!rdzv_proto_token_none(rd->job_token));
  ck_assert(memcmp(rd->job_token, t0, sizeof t0) != 0);
}
END_TEST

/* Note [live store in rdzvd]: the daemon's calls, recorded. */
static struct {
  int served, dropped, port;
  char token[2 * RDZV_PROTO_TOKEN_BYTES + 1];
} live_rec;

static int live_serve(void *ctx, const char *job, const char *token,
                      int *port)
{
  (void)ctx;
  ck_assert_str_eq(job, "job1");
  if (strcmp(live_rec.token, token) != 0)
    live_rec.port++;            /* a new token: a new store */
  snprintf(live_rec.token, sizeof live_rec.token, "%s", token);
  live_rec.served++;
  *port = live_rec.port;
  return 0;
}

static void live_drop(void *ctx, const char *job)
{
  (void)ctx;
  (void)job;
  live_rec.dropped++;
}

/* A live job (conf.live) on a server that hosts live stores: every round
 * names the job's store, and the job token leaves the master endpoint
 * out, so node 0's loss keeps both (the survivors' workers go on); a
 * restart gives a new token and a new store; the job's end stops it.  A
 * job that is not live gets none. */
START_TEST(live_store_kept_when_master_lost)
{
  const struct rdzv_live_host h = { NULL, live_serve, live_drop };
  unsigned char t0[RDZV_PROTO_TOKEN_BYTES];
  const struct rdzv_proto_round *rd;

  memset(&live_rec, 0, sizeof live_rec);
  live_rec.port = 40000;
  rdzv_state_set_live_host(R, &h);
  CF = conf_of(1, 3);
  CF.last_call_timeout = 30;
  CF.max_restarts = 1;
  CF.live = true;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  ck_assert_int_eq(join(C, 1, 0), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_ROUND), 1);
  rd = &last(A, RDZV_PROTO_ROUND)->u.round;
  ck_assert_int_eq(rd->group_rank, 0);
  ck_assert_int_eq(rd->live_store_port, 40001);
  memcpy(t0, rd->job_token, sizeof t0);
  ck_assert(!rdzv_proto_token_none(t0));
  /* A, the master, lost: the same token and store, another master. */
  clear();
  rdzv_state_conn_closed(R, CONN(A), 1);
  ck_assert_int_eq(join(B, 1, 1), 0);
  ck_assert_int_eq(join(C, 1, 1), 0);
  ck_assert_int_eq(count(B, RDZV_PROTO_ROUND), 1);
  rd = &last(B, RDZV_PROTO_ROUND)->u.round;
  ck_assert_int_eq(rd->group_rank, 0);
  ck_assert_int_eq(rd->master_port, 29500 + B);
  ck_assert(!memcmp(rd->job_token, t0, sizeof t0));
  ck_assert_int_eq(rd->live_store_port, 40001);
  ck_assert_int_eq(last(C, RDZV_PROTO_ROUND)->u.round.live_store_port, 40001);
  ck_assert_int_eq(live_rec.dropped, 0);
  /* A failure: a restart, another token, another store. */
  clear();
  ck_assert_int_eq(failure(B, false, "x", 2), 0);
  ck_assert_int_eq(join(B, 1, 2), 0);
  ck_assert_int_eq(join(C, 1, 2), 0);
  rd = &last(C, RDZV_PROTO_ROUND)->u.round;
  ck_assert_int_eq(rd->restart_count, 1);
  ck_assert(memcmp(rd->job_token, t0, sizeof t0) != 0);
  ck_assert_int_eq(rd->live_store_port, 40002);
  /* A job that is not live: no store. */
  CF.live = false;
  CF.max_nodes = 1;
  CF.min_nodes = 1;
  ck_assert_int_eq(join_job(D, "other", NULL, 1, 3), 0);
  ck_assert_int_eq(last(D, RDZV_PROTO_ROUND)->u.round.live_store_port, 0);
  rdzv_state_destroy(R);
  R = NULL;
  ck_assert_int_eq(live_rec.dropped, 1);
}
END_TEST

/* ---- who may speak for a node (Note [node tokens]) ---- */

/* Item 1 of "identities a stranger cannot forge": a RESUME naming a live
 * node's host and pid (both shown by --status) took the node over, and
 * the impostor's final failure then closed the job. */
START_TEST(impostor_cannot_displace)
{
  static const unsigned char garbage[RDZV_PROTO_TOKEN_BYTES] = { 1, 2, 3 };

  running_pair();
  ck_assert(!rdzv_proto_token_none(rec.tok[B]));
  forged_token = garbage;
  ck_assert_int_eq(resume_from(E, B, RDZV_PROTO_PHASE_RUNNING, 0, 0, 1, 2, 1),
                   0);
  forged_token = NULL;
  ck_assert(logged("does not hold its token: the node is left alone"));
  ck_assert(!dropped(B));
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(count(B, RDZV_PROTO_RESTART), 0);
  /* It is a stranger the job went on without; its report is refused. */
  ck_assert_int_eq(count(E, RDZV_PROTO_RESTART), 1);
  ck_assert_int_lt(failure(E, true, "forged", 2), 0);
  assert_error(E, RDZV_PROTO_ERR_BAD_REQUEST);
  /* Without any token at all, the same. */
  forged_token = (const unsigned char[RDZV_PROTO_TOKEN_BYTES]){ 0 };
  ck_assert_int_eq(resume_from(D, A, RDZV_PROTO_PHASE_GATHERING, 1, 0, 0, 0, 3),
                   0);
  forged_token = NULL;
  ck_assert(!dropped(A));
  ck_assert_int_eq(barrier(A, "exit", 0, 4), 0);
  ck_assert_int_eq(barrier(B, "exit", 0, 4), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_BARRIER_DONE), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_BARRIER_DONE), 1);
  /* The true holder still takes its node back after a reset. */
  rdzv_state_conn_reset(R, CONN(B), 5);
  ck_assert_int_eq(resume_from(X, B, RDZV_PROTO_PHASE_EXIT, 0, 0, 1, 2, 6), 0);
  ck_assert(logged("reconnected and re-asserted rank 1 of round 0"));
}
END_TEST

/* Tokens are unique per node: one who joins under a node's name is
 * given a token of its own, which does not take the node over. */
START_TEST(name_twin_cannot_displace)
{
  struct rdzv_proto_msg m;

  CF = conf_of(3, 3);
  ck_assert_int_eq(join(A, 1, 0), 0);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  snprintf(m.u.join.id, sizeof m.u.join.id, "job1");
  snprintf(m.u.join.host, sizeof m.u.join.host, "h0");      /* A's */
  m.u.join.pid = 1000;                                      /* A's */
  m.u.join.nproc = 1;
  m.u.join.master_port = 1;
  m.u.join.conf = CF;
  ck_assert_int_eq(rdzv_state_handle(R, CONN(E), &m, 1), 0);
  settle(1);
  ck_assert(!rdzv_proto_token_none(rec.tok[E]));
  ck_assert(memcmp(rec.tok[E], rec.tok[A], RDZV_PROTO_TOKEN_BYTES) != 0);
  rdzv_state_conn_closed(R, CONN(E), 2);
  /* E's agent comes back presenting the token it was given, in A's name. */
  forged_token = rec.tok[E];
  ck_assert_int_eq(resume_from(X, A, RDZV_PROTO_PHASE_GATHERING, 0, 0, 0, 0, 3),
                   0);
  forged_token = NULL;
  ck_assert(!dropped(A));
  ck_assert_int_eq(rdzv_state_node_count(R), 2);
}
END_TEST

/* The daemon's ledger beside its key file (Note [job ledger]), in memory:
 * it outlives the state machine, as the files outlive a daemon. */
static struct {
  char id[RDZV_PROTO_MAX_ID + 1];
  struct rdzv_ledger_rec rec;
} ledger_tab[8];
static int ledger_puts;

static int ledger_find(const char *job)
{
  int i;

  for (i = 0; i < 8; i++)
    if (ledger_tab[i].id[0] && strcmp(ledger_tab[i].id, job) == 0)
      return i;
  return -1;
}

static int ledger_get(void *ctx, const char *job, struct rdzv_ledger_rec *out)
{
  int i = ledger_find(job);

  if (i < 0)
    return -ENOENT;
  *out = ledger_tab[i].rec;
  return 0;
}

static void ledger_put(void *ctx, const char *job,
                       const struct rdzv_ledger_rec *r)
{
  int i = ledger_find(job);

  for (int k = 0; i < 0 && k < 8; k++)
    if (!ledger_tab[k].id[0])
      i = k;
  ck_assert_int_ge(i, 0);
  snprintf(ledger_tab[i].id, sizeof ledger_tab[i].id, "%s", job);
  ledger_tab[i].rec = *r;
  ledger_puts++;
}

static void ledger_drop(void *ctx, const char *job)
{
  int i = ledger_find(job);

  if (i >= 0)
    ledger_tab[i].id[0] = '\0';
}

/* A daemon (re)started with a token key file (rdzvd --token-key-file). */
static void with_token_key(void)
{
  static const struct rdzv_ledger l = { NULL, ledger_get, ledger_put,
                                        ledger_drop };
  struct rdzv_auth_secret k = { .len = 32 };

  memset(k.key, 7, k.len);
  rdzv_state_destroy(R);
  R = rdzv_state_create(&SINK,
                        &(struct rdzv_state_limits){ .max_keepalive = 1e6 });
  ck_assert_ptr_nonnull(R);
  ck_assert_int_eq(rdzv_state_set_token_key(R, &k), 0);
  rdzv_state_set_ledger(R, &l);
}

/* Issue 32, item 2: after a restart of a daemon with a token key file, a
 * node's running token of an earlier round (round 0, the job at round 1)
 * presented first was accepted: the replayer rebuilt the job as rank 0
 * with its own master address, the real node was logged as the impostor,
 * and a new round started.  Now the ledger names the latest round, and
 * an older token gets `error auth` saying it is stale. */
START_TEST(restart_refuses_stale_token)
{
  unsigned char old_a[RDZV_PROTO_TOKEN_BYTES];
  const struct rdzv_proto_msg *e;

  with_token_key();
  CF = conf_of(2, 2);
  CF.max_restarts = 3;
  ck_assert_int_eq(join(A, 2, 0), 0);
  ck_assert_int_eq(join(B, 2, 0), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 0);
  memcpy(old_a, rec.tok[A], sizeof old_a);
  ck_assert_int_eq(failure(B, false, "exitcode 1", 1), 0);
  ck_assert_int_eq(join(A, 2, 1), 0);
  ck_assert_int_eq(join(B, 2, 1), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 1);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.restart_count, 1);
  with_token_key();             /* rdzvd restarts with the same key file */
  clear();
  /* A's round-0 token, replayed first, with another master address. */
  forged_token = old_a;
  forged_master = "6.6.6.6";
  ck_assert_int_lt(resume_from(E, A, RDZV_PROTO_PHASE_RUNNING, 0, 0, 0, 2, 2),
                   0);
  /* The same round-0 token with the round it proves: stale too. */
  forged_master = NULL;
  ck_assert_int_lt(resume_from(D, A, RDZV_PROTO_PHASE_RUNNING, 0, 0, 0, 2, 2),
                   0);
  forged_token = NULL;
  assert_error(E, RDZV_PROTO_ERR_AUTH);
  assert_error(D, RDZV_PROTO_ERR_AUTH);
  e = last(D, RDZV_PROTO_ERROR);
  ck_assert_msg(strstr(e->u.text.message, "stale token"), "%s",
                e->u.text.message);
  ck_assert_int_eq(rdzv_state_job_count(R), 0);
  /* The real nodes come back: rebuilt, nothing restarts, A is rank 0. */
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_RUNNING, 1, 1, 0, 2, 3), 0);
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_RUNNING, 1, 1, 1, 2, 3), 0);
  ck_assert(logged("round 1 rebuilt: all 2 nodes"));
  ck_assert(!logged("impostor"));
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
}
END_TEST

/* A rerun after a daemon restart that came before the last run was
 * forgotten (the ledger still names it): a JOIN creates the job as a new
 * run, with a new job token, and the last run's token proves nothing in
 * it (found by fuzz_rdzv_state's stale replay). */
START_TEST(rerun_after_restart_is_new)
{
  unsigned char t0[RDZV_PROTO_TOKEN_BYTES], old_a[RDZV_PROTO_TOKEN_BYTES];

  with_token_key();
  CF = conf_of(2, 2);
  ck_assert_int_eq(join(A, 2, 0), 0);
  ck_assert_int_eq(join(B, 2, 0), 0);
  memcpy(t0, last(A, RDZV_PROTO_ROUND)->u.round.job_token, sizeof t0);
  memcpy(old_a, rec.tok[A], sizeof old_a);
  with_token_key();             /* restarts; nobody resumes: a rerun */
  clear();
  ck_assert_int_eq(join(A, 2, 1), 0);
  ck_assert_int_eq(join(B, 2, 1), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 0);
  ck_assert(memcmp(last(A, RDZV_PROTO_ROUND)->u.round.job_token, t0,
                   sizeof t0) != 0);
  /* The last run's rank-0 token, from another connection: refused. */
  forged_token = old_a;
  ck_assert_int_lt(resume_from(E, A, RDZV_PROTO_PHASE_RUNNING, 0, 0, 0, 2, 2),
                   0);
  forged_token = NULL;
  assert_error(E, RDZV_PROTO_ERR_AUTH);
  ck_assert(!dropped(A));
}
END_TEST

/* A gathering claim the token does not prove is a plain join: the job it
 * creates after a restart is a new run too, not the ledger's (found by
 * fuzz_rdzv_state: the last run's tokens then proved the new run's). */
START_TEST(unproven_claim_is_new_run)
{
  unsigned char t0[RDZV_PROTO_TOKEN_BYTES];

  with_token_key();
  CF = conf_of(1, 1);
  ck_assert_int_eq(join(A, 1, 0), 0);
  memcpy(t0, last(A, RDZV_PROTO_ROUND)->u.round.job_token, sizeof t0);
  with_token_key();
  clear();
  /* A's name, endpoint and its (running) token as a gathering claim. */
  ck_assert_int_eq(resume_from(E, A, RDZV_PROTO_PHASE_GATHERING, 0, 0, 0, 0,
                               1), 0);
  settle(1);
  ck_assert(logged("is a plain join"));
  ck_assert_str_eq(last(E, RDZV_PROTO_ROUND)->u.round.master_addr,
                   "10.0.0.1");
  ck_assert(memcmp(last(E, RDZV_PROTO_ROUND)->u.round.job_token, t0,
                   sizeof t0) != 0);
}
END_TEST

/* Issue 32, item 5: the job token repeated across runs (the same job id
 * and master endpoint gave the same CDRUN_JOB_TOKEN, on a rerun and in
 * the next daemon life with the same key file): anyone who saw the
 * earlier run's environment could authenticate to the rerun's store.  A
 * job's incarnation is in it now; a daemon restart keeps a running job's
 * (its workers go on with their token). */
START_TEST(job_token_new_per_run)
{
  unsigned char t0[RDZV_PROTO_TOKEN_BYTES], t1[RDZV_PROTO_TOKEN_BYTES];

  with_token_key();
  CF = conf_of(2, 2);
  CF.max_restarts = 1;           /* Note [a lost node]: it may wait */
  ck_assert_int_eq(join(A, 2, 0), 0);
  ck_assert_int_eq(join(B, 2, 0), 0);
  memcpy(t0, last(A, RDZV_PROTO_ROUND)->u.round.job_token, sizeof t0);
  /* The daemon restarts; the running job is rebuilt; a node is lost (not
   * the master's): the next round keeps the job token. */
  with_token_key();
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_RUNNING, 0, 0, 0, 2, 1), 0);
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_RUNNING, 0, 0, 1, 2, 1), 0);
  ck_assert(logged("round 0 rebuilt"));
  rdzv_state_conn_closed(R, CONN(B), 2);
  ck_assert_int_eq(join(A, 2, 2), 0);
  ck_assert_int_eq(join(B, 2, 2), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 1);
  ck_assert(!memcmp(last(A, RDZV_PROTO_ROUND)->u.round.job_token, t0,
                    sizeof t0));
  /* The run ends; the job is forgotten; a rerun of the same id, same
   * master endpoint, in the next daemon life: another job token. */
  rdzv_state_conn_closed(R, CONN(A), 3);
  rdzv_state_conn_closed(R, CONN(B), 3);
  rdzv_state_tick(R, 1e6);
  ck_assert_int_eq(rdzv_state_job_count(R), 0);
  with_token_key();
  clear();
  ck_assert_int_eq(join(A, 2, 1e6 + 1), 0);
  ck_assert_int_eq(join(B, 2, 1e6 + 1), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.restart_count, 0);
  ck_assert_str_eq(last(A, RDZV_PROTO_ROUND)->u.round.master_addr,
                   "10.0.0.1");
  memcpy(t1, last(A, RDZV_PROTO_ROUND)->u.round.job_token, sizeof t1);
  ck_assert(memcmp(t1, t0, sizeof t0) != 0);
  /* A rerun in the same life too. */
  rdzv_state_conn_closed(R, CONN(A), 1e6 + 2);
  rdzv_state_conn_closed(R, CONN(B), 1e6 + 2);
  rdzv_state_tick(R, 2e6);
  ck_assert_int_eq(join(A, 2, 2e6 + 1), 0);
  ck_assert_int_eq(join(B, 2, 2e6 + 1), 0);
  ck_assert(memcmp(last(A, RDZV_PROTO_ROUND)->u.round.job_token, t1,
                   sizeof t1) != 0);
}
END_TEST

/* Item 2: after a restart, the first to re-assert a rank kept it, so a
 * client holding the secret could take rank 0 with its own address.  With
 * a token key file (a key only the daemon has: the secret is every
 * client's), a running claim needs the token that proves it. */
START_TEST(restarted_server_checks_claims)
{
  with_token_key();
  CF = conf_of(2, 2);
  CF.max_restarts = 3;
  ck_assert_int_eq(join(A, 2, 0), 0);
  ck_assert_int_eq(join(B, 2, 0), 0);
  ck_assert_str_eq(last(A, RDZV_PROTO_ROUND)->u.round.master_addr, "10.0.0.1");
  with_token_key();             /* rdzvd restarts with the same key file */
  clear();
  /* A stranger claims rank 0 with its own MASTER_ADDR: refused. */
  forged_master = "6.6.6.6";
  ck_assert_int_lt(resume_from(E, A, RDZV_PROTO_PHASE_RUNNING, 0, 0, 0, 2, 1),
                   0);
  forged_master = NULL;
  assert_error(E, RDZV_PROTO_ERR_AUTH);
  ck_assert(dropped(E));
  /* B's own token does not prove rank 0 either. */
  forged_token = rec.tok[B];
  ck_assert_int_lt(resume_from(D, A, RDZV_PROTO_PHASE_RUNNING, 0, 0, 0, 2, 1),
                   0);
  forged_token = NULL;
  assert_error(D, RDZV_PROTO_ERR_AUTH);
  ck_assert_int_eq(rdzv_state_job_count(R), 0);
  /* The real nodes come back: rebuilt, nothing restarts. */
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_RUNNING, 0, 0, 1, 2, 2), 0);
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_RUNNING, 0, 0, 0, 2, 2), 0);
  ck_assert(logged("round 0 rebuilt: all 2 nodes"));
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  /* A gathering claim proved by its WAITING token keeps its counts. */
  ck_assert_int_eq(failure(A, false, "exitcode 1", 3), 0);
  ck_assert_int_eq(join(A, 2, 3), 0);
  settle(3);
  ck_assert_int_eq(last(A, RDZV_PROTO_WAITING)->u.waiting.round, 1);
  ck_assert_int_eq(last(A, RDZV_PROTO_WAITING)->u.waiting.restart_count, 1);
  with_token_key();
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_GATHERING, 1, 1, 0, 0, 4), 0);
  settle(4);
  ck_assert_int_eq(last(A, RDZV_PROTO_WAITING)->u.waiting.round, 1);
  /* One that is not proved joins, but changes no count. */
  forged_token = rec.tok[B];
  ck_assert_int_eq(
      resume_from(E, E, RDZV_PROTO_PHASE_GATHERING, 900, 7, 0, 0, 5), 0);
  forged_token = NULL;
  ck_assert_int_eq(last(E, RDZV_PROTO_ROUND)->u.round.round, 1);
  ck_assert_int_eq(last(E, RDZV_PROTO_ROUND)->u.round.restart_count, 1);
}
END_TEST

/* Issue 32, item 3: without a token key file, a job rebuilt from claims
 * took every later unproven gathering claim as vouched, even after all
 * its real nodes had re-asserted: a stranger's resume of round 2^30 with
 * restart count 10^6 gave the job those numbers (its next failure then
 * closed it, "no restarts left").  Once the rebuilt round is whole, an
 * unproven claim is a plain join. */
START_TEST(rebuilt_whole_then_claim_is_join)
{
  CF = conf_of(2, 3);
  CF.max_restarts = 3;
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_RUNNING, 2, 1, 0, 2, 0), 0);
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_RUNNING, 2, 1, 1, 2, 0.5), 0);
  ck_assert(logged("round 2 rebuilt: all 2 nodes"));
  clear();
  ck_assert_int_eq(resume_from(E, E, RDZV_PROTO_PHASE_GATHERING,
                               RDZV_PROTO_MAX_ROUND, RDZV_PROTO_MAX_RESTARTS,
                               0, 0, 1), 0);
  ck_assert(!logged("adopts restart count 1000000"));
  ck_assert(!logged("highest round wins"));
  /* A newcomer to an elastic job with room: a new round, counts kept. */
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(join(A, 2, 2), 0);
  ck_assert_int_eq(join(B, 2, 2), 0);
  settle(2);
  ck_assert_int_eq(last(E, RDZV_PROTO_ROUND)->u.round.round, 3);
  ck_assert_int_eq(last(E, RDZV_PROTO_ROUND)->u.round.restart_count, 1);
}
END_TEST

/* Note [live store in rdzvd]: a restarted server has no live store for a
 * live job it rebuilds, and its workers could not recover without one:
 * once the round is whole, a new round (no restart counted) with a new
 * store, in which the agents restart their workers; none when a node is
 * at the exit barrier (the workers are done).  Without it the workers'
 * next recovery failed on the store that is gone, and each replacement
 * waited PG_TIMEOUT. */
START_TEST(live_rebuilt_job_gets_new_store)
{
  const struct rdzv_live_host h = { NULL, live_serve, live_drop };

  memset(&live_rec, 0, sizeof live_rec);
  live_rec.port = 41000;
  rdzv_state_set_live_host(R, &h);
  CF = conf_of(2, 3);
  CF.max_restarts = 3;
  CF.live = true;
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_RUNNING, 2, 1, 0, 2, 0), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_RUNNING, 2, 1, 1, 2, 0.5), 0);
  ck_assert(logged("round 2 rebuilt: all 2 nodes"));
  ck_assert_int_eq(count(A, RDZV_PROTO_RESTART), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_RESTART), 1);
  ck_assert(strstr(last(A, RDZV_PROTO_RESTART)->u.text.message,
                   "live store is gone"));
  ck_assert_int_eq(join(A, 2, 1), 0);
  ck_assert_int_eq(join(B, 2, 1), 0);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.round, 3);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.restart_count, 1);
  ck_assert_int_eq(last(A, RDZV_PROTO_ROUND)->u.round.live_store_port, 41001);
  ck_assert_int_eq(last(B, RDZV_PROTO_ROUND)->u.round.live_store_port, 41001);
}
END_TEST

START_TEST(live_rebuilt_at_exit_keeps_going)
{
  const struct rdzv_live_host h = { NULL, live_serve, live_drop };

  memset(&live_rec, 0, sizeof live_rec);
  rdzv_state_set_live_host(R, &h);
  CF = conf_of(2, 3);
  CF.live = true;
  ck_assert_int_eq(resume(A, RDZV_PROTO_PHASE_EXIT, 2, 0, 0, 2, 0), 0);
  ck_assert_int_eq(resume(B, RDZV_PROTO_PHASE_RUNNING, 2, 0, 1, 2, 0.5), 0);
  ck_assert(logged("round 2 rebuilt: all 2 nodes"));
  ck_assert_int_eq(total(RDZV_PROTO_RESTART), 0);
  ck_assert_int_eq(live_rec.served, 0);
}
END_TEST

/* Item 3: a resumed round near 2^31 overflowed at the next round.  Round
 * numbers now stop at RDZV_PROTO_MAX_ROUND, where the job is closed cleanly. */
START_TEST(round_numbers_bounded)
{
  CF = conf_of(1, 1);
  CF.max_restarts = 5;
  ck_assert_int_eq(
      resume(A, RDZV_PROTO_PHASE_RUNNING, RDZV_PROTO_MAX_ROUND, 0, 0, 1, 0), 0);
  ck_assert_int_eq(failure(A, false, "exitcode 1", 1), 0);
  ck_assert_int_eq(count(A, RDZV_PROTO_CLOSED), 0);
  rdzv_state_tick(R, 1);
  ck_assert_int_eq(count(A, RDZV_PROTO_CLOSED), 1);
  ck_assert(strstr(last(A, RDZV_PROTO_CLOSED)->u.text.message,
                   "round numbers are spent"));
  ck_assert(dropped(A));
}
END_TEST

/* Item 4: a RESUME claiming a huge round allocated a table of that size
 * per job (800 KB for 100,000 nodes), out of every budget.  What a claim
 * costs now is what arrived: one node. */
START_TEST(huge_claims_cost_what_arrived)
{
  struct mallinfo2 before, after;
  char id[32];
  size_t grew;
  int i;

  CF = conf_of(1, RDZV_PROTO_MAX_NODES);
  before = mallinfo2();
  for (i = 0; i < 200; i++) {
    struct rdzv_proto_msg m;

    memset(&m, 0, sizeof m);
    m.op = RDZV_PROTO_RESUME;
    snprintf(id, sizeof id, "job%d", i);
    snprintf(m.u.resume.join.id, sizeof m.u.resume.join.id, "%s", id);
    m.u.resume.join.nproc = 1;
    m.u.resume.join.master_port = 1;
    m.u.resume.join.conf = CF;
    m.u.resume.phase = RDZV_PROTO_PHASE_RUNNING;
    m.u.resume.round.group_rank = RDZV_PROTO_MAX_NODES - 1;
    m.u.resume.round.group_world_size = RDZV_PROTO_MAX_NODES;
    m.u.resume.round.rank_offset = RDZV_PROTO_MAX_NODES - 1;
    m.u.resume.round.world_size = RDZV_PROTO_MAX_NODES;
    snprintf(m.u.resume.round.master_addr,
             sizeof m.u.resume.round.master_addr, "m");
    m.u.resume.round.master_port = 1;
    ck_assert_int_eq(rdzv_state_handle(R, &conn_mem[0] + 0x1000 + i, &m, 0),
                     0);
  }
  after = mallinfo2();
  grew = (after.uordblks + after.hblkhd) - (before.uordblks + before.hblkhd);
  /* 200 x 800 KB before; a few KB per job now. */
  ck_assert_msg(grew < 200 * 16384, "200 claims took %zu bytes", grew);
  ck_assert_int_eq(rdzv_state_job_count(R), 200);
  for (i = 0; i < 200; i++)
    rdzv_state_conn_closed(R, &conn_mem[0] + 0x1000 + i, 1);
}
END_TEST

/* Item 8: the first joiner fixed the keepalive window and join timeout of
 * everyone.  A node is now judged by its own, and the wire has floors. */
START_TEST(own_windows_not_the_squatters)
{
  CF = conf_of(2, 3);
  CF.keepalive_interval = RDZV_PROTO_MIN_KEEPALIVE;
  CF.keepalive_misses = 10;
  CF.join_timeout = RDZV_PROTO_MIN_JOIN_TIMEOUT;
  ck_assert_int_eq(join(E, 1, 0), 0);       /* the squatter creates it */
  CF = conf_of(2, 3);
  CF.keepalive_interval = 1;
  CF.keepalive_misses = 5;
  CF.join_timeout = 600;
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0), 0);
  /* E goes silent and is expelled; A and B, silent as long, stay. */
  rdzv_state_tick(R, 1.5);
  ck_assert(dropped(E));
  ck_assert(!dropped(A) && !dropped(B));
  ck_assert_int_eq(op(A, RDZV_PROTO_KEEPALIVE, 4), 0);
  ck_assert_int_eq(op(B, RDZV_PROTO_KEEPALIVE, 4), 0);
  rdzv_state_tick(R, 4.5);
  ck_assert(!dropped(A) && !dropped(B));
  ck_assert_int_eq(rdzv_state_node_count(R), 2);
}
END_TEST

START_TEST(resume_refusals)
{
  CF = conf_of(2, 2);
  ck_assert_int_eq(join(A, 1, 0), 0);
  /* A config that differs from the job's. */
  CF = conf_of(1, 3);
  ck_assert_int_lt(resume(B, RDZV_PROTO_PHASE_RUNNING, 0, 0, 1, 2, 1), 0);
  assert_error(B, RDZV_PROTO_ERR_CONFIG_MISMATCH);
  ck_assert(dropped(B));
  /* Already a node. */
  CF = conf_of(2, 2);
  ck_assert_int_lt(resume(A, RDZV_PROTO_PHASE_RUNNING, 0, 0, 0, 2, 1), 0);
  assert_error(A, RDZV_PROTO_ERR_BAD_REQUEST);
  /* A round larger than its own max_nodes (found by fuzz_rdzv_state: the
   * rebuilt job held 2 participants with max_nodes 1): refused, no job. */
  CF = conf_of(1, 1);
  ck_assert_int_lt(resume_from(C, C, RDZV_PROTO_PHASE_RUNNING, 3, 0, 1, 3, 2),
                   0);
  assert_error(C, RDZV_PROTO_ERR_BAD_REQUEST);
  ck_assert(strstr(last(C, RDZV_PROTO_ERROR)->u.text.message,
                   "bad resume: a round of 3 nodes, but max_nodes is 1"));
  ck_assert_int_eq(rdzv_state_node_count(R), 1);
}
END_TEST

/* Note [settled waiting]: a burst of JOINs hears WAITING once the JOINs
 * pause, each node once; a JOIN that completes the round hears only its
 * ROUND, and the round's ROUND answers every JOIN still owed. */
START_TEST(waiting_settles_after_a_burst)
{
  CF = conf_of(4, 4);
  ck_assert_int_eq(join(A, 1, 0), 0);
  rdzv_state_tick(R, 0.004);
  ck_assert_int_eq(join(B, 1, 0.004), 0);
  rdzv_state_tick(R, 0.008);
  ck_assert_int_eq(join(C, 1, 0.008), 0);
  rdzv_state_tick(R, 0.0179);
  ck_assert_int_eq(total(RDZV_PROTO_WAITING), 0);
  rdzv_state_tick(R, 0.0181);
  ck_assert_int_eq(count(A, RDZV_PROTO_WAITING), 1);
  ck_assert_int_eq(count(B, RDZV_PROTO_WAITING), 1);
  ck_assert_int_eq(count(C, RDZV_PROTO_WAITING), 1);
  ck_assert_int_eq(last(A, RDZV_PROTO_WAITING)->u.waiting.present, 3);
  ck_assert_int_eq(join(D, 1, 0.1), 0);
  assert_round(D, 0, 3, 4, 3, 4, A);
  rdzv_state_tick(R, 5);
  ck_assert_int_eq(count(D, RDZV_PROTO_WAITING), 0);
  ck_assert_int_eq(total(RDZV_PROTO_WAITING), 3);
}
END_TEST

START_TEST(waiting_not_sent_when_round_comes_first)
{
  CF = conf_of(3, 3);
  ck_assert_int_eq(join(A, 1, 0), 0);
  ck_assert_int_eq(join(B, 1, 0.001), 0);
  ck_assert_int_eq(join(C, 1, 0.002), 0);
  assert_round(A, 0, 0, 3, 0, 3, A);
  assert_round(C, 0, 2, 3, 2, 3, A);
  rdzv_state_tick(R, 10);
  ck_assert_int_eq(total(RDZV_PROTO_WAITING), 0);
  /* An owed node that leaves is forgotten (ASan: nothing dangles). */
  CF = conf_of(3, 3);
  ck_assert_int_eq(join_job(D, "job2", NULL, 1, 11), 0);
  rdzv_state_conn_closed(R, CONN(D), 11.001);
  rdzv_state_tick(R, 12);
  ck_assert_int_eq(count(D, RDZV_PROTO_WAITING), 0);
}
END_TEST

/* JOINs that never pause: the first hears WAITING 0.25 s after its
 * JOIN all the same. */
START_TEST(waiting_deferred_at_most_a_quarter_second)
{
  int i;

  CF = conf_of(NCONN, NCONN);
  for (i = 0; i < 60; i++) {
    double now = 0.005 * i;

    rdzv_state_tick(R, now);
    if (i == 49)        /* 0.245 s */
      ck_assert_int_eq(count(MANY0, RDZV_PROTO_WAITING), 0);
    ck_assert_int_eq(join(MANY0 + i, 1, now), 0);
  }
  ck_assert_int_eq(count(MANY0, RDZV_PROTO_WAITING), 1);
  ck_assert_int_eq(count(MANY0 + 49, RDZV_PROTO_WAITING), 1);
  ck_assert_int_eq(count(MANY0 + 50, RDZV_PROTO_WAITING), 0);
}
END_TEST

static Suite *rdzv_state_suite(void)
{
  Suite *s = suite_create("rdzv_state");
  TCase *tc = tcase_create("rdzv_state");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, single_node_round);
  tcase_add_test(tc, last_call_completes_at_deadline);
  tcase_add_test(tc, max_completes_at_once);
  tcase_add_test(tc, config_mismatch_refused);
  tcase_add_test(tc, max_restarts_mismatch_refused);
  tcase_add_test(tc, join_sends_progress_once_per_second);
  tcase_add_test(tc, waiting_settles_after_a_burst);
  tcase_add_test(tc, waiting_not_sent_when_round_comes_first);
  tcase_add_test(tc, waiting_deferred_at_most_a_quarter_second);
  tcase_add_test(tc, death_while_gathering_cancels_last_call);
  tcase_add_test(tc, scale_up_from_waiting_list);
  tcase_add_test(tc, full_round_keeps_spare);
  tcase_add_test(tc, worker_failure_restarts);
  tcase_add_test(tc, restarts_exhausted_close);
  tcase_add_test(tc, final_failure_closes);
  tcase_add_test(tc, failure_from_spare_refused);
  tcase_add_test(tc, failure_from_left_node_refused);
  tcase_add_test(tc, root_cause_earliest_exit_wins);
  tcase_add_test(tc, root_cause_restart_and_late_reports);
  tcase_add_test(tc, root_cause_closing_survives_loss);
  tcase_add_test(tc, lost_connection_restarts_survivors);
  tcase_add_test(tc, keepalive_silence_kills);
  tcase_add_test(tc, join_timeout_below_min);
  tcase_add_test(tc, lost_node_ends_fixed_job);
  tcase_add_test(tc, lost_node_elastic_goes_on);
  tcase_add_test(tc, expected_nodes_all_gone);
  tcase_add_test(tc, spare_times_out);
  tcase_add_test(tc, ranks_stable_across_rounds);
  tcase_add_test(tc, rejoin_rules);
  tcase_add_test(tc, peer_address_fallback);
  tcase_add_test(tc, two_jobs_independent);
  tcase_add_test(tc, barrier_completes_with_last);
  tcase_add_test(tc, restart_cancels_barrier);
  tcase_add_test(tc, leave_after_exit_finishes);
  tcase_add_test(tc, leave_before_exit_is_lost);
  tcase_add_test(tc, kv_set_get_add);
  tcase_add_test(tc, kv_wait_answered_or_times_out);
  tcase_add_test(tc, kv_set_answers_every_waiter);
  tcase_add_test(tc, kv_limits);
  tcase_add_test(tc, empty_job_evicted_when_full);
  tcase_add_test(tc, durations_capped);
  tcase_add_test(tc, kv_total_budget);
  tcase_add_test(tc, not_joined_errors);
  tcase_add_test(tc, status_reply_content);
  tcase_add_test(tc, ten_thousand_nodes);
  tcase_add_test(tc, status_bounded);
  tcase_add_test(tc, resume_rebuilds_running_job);
  tcase_add_test(tc, resume_grace_expires);
  tcase_add_test(tc, resume_rank_conflict);
  tcase_add_test(tc, resume_conflict_while_closing);
  tcase_add_test(tc, resume_highest_round_wins);
  tcase_add_test(tc, resume_gathering_keeps_counts);
  tcase_add_test(tc, resume_after_reset_on_live_server);
  tcase_add_test(tc, resume_refusals);
  tcase_add_test(tc, reset_then_resume_within_window);
  tcase_add_test(tc, reset_then_window_ends);
  tcase_add_test(tc, resume_supersedes_old_connection);
  tcase_add_test(tc, zero_last_call_waits_for_restarting_nodes);
  tcase_add_test(tc, job_token_per_round);
  tcase_add_test(tc, job_token_kept_across_membership);
  tcase_add_test(tc, live_store_kept_when_master_lost);
  tcase_add_test(tc, live_rebuilt_job_gets_new_store);
  tcase_add_test(tc, live_rebuilt_at_exit_keeps_going);
  tcase_add_test(tc, impostor_cannot_displace);
  tcase_add_test(tc, name_twin_cannot_displace);
  tcase_add_test(tc, restarted_server_checks_claims);
  tcase_add_test(tc, rebuilt_whole_then_claim_is_join);
  tcase_add_test(tc, restart_refuses_stale_token);
  tcase_add_test(tc, job_token_new_per_run);
  tcase_add_test(tc, rerun_after_restart_is_new);
  tcase_add_test(tc, unproven_claim_is_new_run);
  tcase_add_test(tc, tenant_jobs_share);
  tcase_add_test(tc, tenant_reclaims_never_ran);
  tcase_add_test(tc, tenant_waiting_share);
  tcase_add_test(tc, round_numbers_bounded);
  tcase_add_test(tc, huge_claims_cost_what_arrived);
  tcase_add_test(tc, own_windows_not_the_squatters);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(rdzv_state_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
