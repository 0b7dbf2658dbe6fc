/* fuzz_rdzv_state.c -- libFuzzer target: the rendezvous state machine
 * driven by several fake connections.
 *
 * The input is a program: each step is an opcode byte and its operands,
 * sending one decoded message from one of NCONN connections (JOIN with a
 * fuzzed configuration, KEEPALIVE, FAILURE, BARRIER, LEAVE, KV ops,
 * STATUS, RESUME of a fuzzed phase and assignment), closing or resetting a connection, or advancing the clock and ticking.
 * Drops are honoured the way rdzvd does, after the entry point returns.
 * After every step the invariants are checked:
 * - every message the machine sends encodes (the codec's validation);
 * - the ROUND messages of one round of one job: group ranks 0..k-1 once
 *   each, one group_world_size k, world_size the sum of the nodes' nproc,
 *   rank offsets the prefix sums, one master;
 * - the registry's own bookkeeping: counts of nodes, participants and
 *   spares, lists, ranks unique within a running round, timers;
 * and ASan/LSan see every allocation freed when the registry is
 * destroyed. */
#include "rdzv_state_int.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NCONN 6
#define MAX_STEPS 400

struct fconn {
  char id[8];               /* the job it last joined, "" if none */
  int nproc;
  bool drop;                /* the machine asked to drop it */
  int gen;                  /* a closed conn comes back as a new one */
};

static struct {
  char mem[NCONN][4];       /* distinct addresses per generation */
  struct fconn c[NCONN];
  struct rs_registry *r;
  /* ROUND messages of the current step */
  struct { int conn; struct rp_round rd; } rounds[NCONN];
  int n_rounds;
} F;

static int conn_index(void *conn)
{
  int i;

  for (i = 0; i < NCONN; i++)
    if (conn == (void *)&F.mem[i][F.c[i].gen & 3])
      return i;
  abort();                  /* the machine named a conn we never gave it */
}

static void *conn_ptr(int i)
{
  return &F.mem[i][F.c[i].gen & 3];
}

static void f_send(void *ctx, void *conn, const struct rp_msg *m)
{
  char *out;
  size_t len;
  int i = conn_index(conn);

  (void)ctx;
  if (rp_encode(m, &out, &len) != 0)
    abort();                /* the machine sent something invalid */
  free(out);
  if (m->op == RP_ROUND) {
    if (F.n_rounds >= NCONN)
      abort();              /* more ROUNDs in a step than nodes */
    F.rounds[F.n_rounds].conn = i;
    F.rounds[F.n_rounds].rd = m->u.round;
    F.n_rounds++;
  }
}

static void f_drop(void *ctx, void *conn)
{
  (void)ctx;
  F.c[conn_index(conn)].drop = true;
}

static const struct rs_sink SINK = { NULL, f_send, f_drop, NULL };

/* ---- invariants ---- */

static bool conn_eq(const void *item, const void *key)
{
  return ((const struct conn *)item)->conn == key;
}

/* What the registry says of each connection's node (kept when the node
 * went away in the same step as its ROUND). */
static void refresh(void)
{
  int i;

  for (i = 0; i < NCONN; i++) {
    void *p = conn_ptr(i);
    const struct conn *c = ht_find(&F.r->conns,
                                   ht_hash_ptr(F.r->seed, p), p, conn_eq);

    if (c && c->node) {
      snprintf(F.c[i].id, sizeof F.c[i].id, "%s", c->node->job->id);
      F.c[i].nproc = c->node->nproc;
    }
  }
}

/* The ROUNDs sent in one step, per (job, round): a consistent world. */
static void check_rounds(void)
{
  int a, b;

  for (a = 0; a < F.n_rounds; a++) {
    const struct rp_round *x = &F.rounds[a].rd;
    const char *job = F.c[F.rounds[a].conn].id;
    bool seen[NCONN] = { false };
    int k = 0, world = 0, offs[NCONN], nproc[NCONN];

    for (b = 0; b < F.n_rounds; b++) {
      const struct rp_round *y = &F.rounds[b].rd;

      if (strcmp(F.c[F.rounds[b].conn].id, job) != 0 || y->round != x->round)
        continue;
      if (y->group_rank < 0 || y->group_rank >= NCONN ||
          seen[y->group_rank])
        abort();            /* a rank twice, or out of range */
      seen[y->group_rank] = true;
      offs[y->group_rank] = y->rank_offset;
      nproc[y->group_rank] = F.c[F.rounds[b].conn].nproc;
      world += F.c[F.rounds[b].conn].nproc;
      k++;
      if (y->group_world_size != x->group_world_size ||
          y->world_size != x->world_size ||
          y->restart_count != x->restart_count ||
          y->master_port != x->master_port ||
          strcmp(y->master_addr, x->master_addr) != 0)
        abort();            /* members disagree on the world */
    }
    if (k != x->group_world_size || world != x->world_size)
      abort();
    for (b = 0, world = 0; b < k; b++) {
      if (!seen[b] || offs[b] != world)
        abort();            /* ranks not 0..k-1, or offsets wrong */
      world += nproc[b];
    }
  }
  F.n_rounds = 0;
}

static void check_registry(const struct rs_registry *r)
{
  const struct job *job;
  const struct node *n;
  int jobs = 0, nodes = 0, empty = 0;

  TAILQ_FOREACH(job, &r->jobs_in_order, in_registry) {
    int cnt = 0, part = 0, spares = 0, listed = 0, outstanding = 0;
    bool rank_seen[NCONN] = { false };
    int64_t sum = 0;

    jobs++;
    if (TAILQ_NEXT(job, in_registry) &&
        TAILQ_NEXT(job, in_registry)->in_registry.tqe_prev !=
        &job->in_registry.tqe_next)
      abort();
    TAILQ_FOREACH(n, &job->nodes, in_job) {
      cnt++;
      sum += n->nproc;
      if (n->job != job || n->c->node != n)
        abort();
      part += n->state == NS_PART;
      spares += n->state == NS_SPARE;
      outstanding += n->state == NS_IDLE && n->expected;
      if (job->phase == PH_RUNNING && n->state == NS_PART) {
        if (n->rank < 0 || n->rank >= NCONN || rank_seen[n->rank])
          abort();          /* ranks unique within the running round */
        rank_seen[n->rank] = true;
      }
    }
    TAILQ_FOREACH(n, &job->spares, in_spares)
      if (n->state != NS_SPARE || n->job != job || ++listed > cnt)
        abort();
    if (listed != spares)
      abort();
    if (cnt != job->n_nodes || part != job->n_part ||
        spares != job->n_spares || outstanding != job->n_outstanding ||
        sum != job->sum_nproc || job->n_part > job->conf.max_nodes)
      abort();
    if (job->empty_listed != (job->n_nodes == 0))
      abort();
    empty += job->empty_listed;
    nodes += cnt;
  }
  /* The empty list holds exactly the jobs marked empty_listed. */
  TAILQ_FOREACH(job, &r->empty, in_empty)
    if (!job->empty_listed || --empty < 0)
      abort();
  if (empty != 0)
    abort();
  if (jobs != r->n_jobs || nodes != r->n_nodes ||
      r->heap.n > r->heap.cap || r->heap.reserved > r->heap.cap)
    abort();
}

/* ---- the program ---- */

struct in {
  const uint8_t *p;
  size_t n;
};

static unsigned take(struct in *in)
{
  if (!in->n)
    return 0;
  in->n--;
  return *in->p++;
}

static void do_join(int i, struct in *in, double now)
{
  static const char *const ids[] = { "a", "b", "c" };
  struct rp_msg m;
  struct rp_join *j = &m.u.join;
  unsigned b = take(in), t = take(in);

  memset(&m, 0, sizeof m);
  m.op = RP_JOIN;
  snprintf(j->id, sizeof j->id, "%s", ids[b % 3]);
  snprintf(j->host, sizeof j->host, "h%d", i);
  if (b & 0x80)
    snprintf(j->addr, sizeof j->addr, "10.0.0.%d", i + 1);
  j->pid = 100 + i;
  j->nproc = 1 + (b >> 2) % 4;
  j->master_port = 29500 + i;
  j->reason = (enum rp_join_reason)(t % 3);
  rp_conf_default(&j->conf);
  j->conf.min_nodes = 1 + (t >> 2) % 3;
  j->conf.max_nodes = j->conf.min_nodes + (t >> 4) % 3;
  j->conf.max_restarts = (b >> 4) % 3;
  j->conf.join_timeout = 1 + take(in) % 60;
  j->conf.last_call_timeout = take(in) % 4;
  j->conf.close_timeout = take(in) % 8;
  j->conf.keepalive_interval = 1 + take(in) % 4;
  j->conf.keepalive_misses = 1 + take(in) % 3;
  rs_handle(F.r, conn_ptr(i), &m, now);
}

/* RESUME: a running, exiting or gathering node re-asserting a fuzzed
 * (always well-formed) assignment; ranks stay below NCONN. */
static void do_resume(int i, struct in *in, double now)
{
  static const char *const ids[] = { "a", "b", "c" };
  struct rp_msg m;
  struct rp_resume *a = &m.u.resume;
  unsigned b = take(in), t = take(in), k = take(in);

  memset(&m, 0, sizeof m);
  m.op = RP_RESUME;
  snprintf(a->join.id, sizeof a->join.id, "%s", ids[b % 3]);
  snprintf(a->join.host, sizeof a->join.host, "h%d", i);
  a->join.pid = 100 + i;
  a->join.nproc = 1 + (b >> 2) % 4;
  a->join.master_port = 29500 + i;
  rp_conf_default(&a->join.conf);
  a->join.conf.min_nodes = 1 + (t >> 2) % 3;
  a->join.conf.max_nodes = a->join.conf.min_nodes + (t >> 4) % 3;
  a->join.conf.max_restarts = (b >> 4) % 3;
  a->join.conf.join_timeout = 1 + k % 60;
  a->join.conf.last_call_timeout = (k >> 6) % 4;
  a->join.conf.keepalive_interval = 1 + (t >> 6) % 4;
  a->phase = (enum rp_resume_phase)(t % 3);
  a->round.round = (int)(k % 5);
  a->round.restart_count = (int)((k >> 3) % 3);
  if (a->phase != RP_PHASE_GATHERING) {
    a->round.group_world_size = 1 + (int)((b >> 6) % 3);
    a->round.group_rank = (int)((k >> 5) % (unsigned)a->round.group_world_size);
    a->round.world_size = 4 * a->round.group_world_size;
    a->round.rank_offset = a->round.group_rank;
    snprintf(a->round.master_addr, sizeof a->round.master_addr, "10.0.0.1");
    a->round.master_port = 29500;
  }
  rs_handle(F.r, conn_ptr(i), &m, now);
}

static void do_op(int i, unsigned op, struct in *in, double now)
{
  static const char *const keys[] = { "k0", "k1", "k2" };
  static char value[300];
  struct rp_msg m;
  unsigned b = take(in);

  memset(&m, 0, sizeof m);
  switch (op) {
  case 1:
    m.op = RP_KEEPALIVE;
    break;
  case 2:
    m.op = RP_FAILURE;
    m.u.failure.final = b & 1;
    snprintf(m.u.failure.message, sizeof m.u.failure.message, "f%u", b);
    break;
  case 3:
    m.op = RP_BARRIER;
    snprintf(m.u.barrier.name, sizeof m.u.barrier.name, "%s",
             b & 1 ? "exit" : "b");
    m.u.barrier.round = (int)(b >> 1) % 4;
    break;
  case 4:
    m.op = RP_LEAVE;
    break;
  case 5:
    m.op = RP_KV_SET;
    snprintf(m.u.kv.key, sizeof m.u.kv.key, "%s", keys[b % 3]);
    memset(value, 'v', sizeof value);
    m.u.kv.value = value;
    m.u.kv.value_len = (b >> 2) * 4;
    if (b & 2) {                    /* sometimes a number */
      snprintf(value, sizeof value, "%d", (int)b - 100);
      m.u.kv.value_len = strlen(value);
    }
    break;
  case 6:
    m.op = RP_KV_GET;
    snprintf(m.u.kv.key, sizeof m.u.kv.key, "%s", keys[b % 3]);
    m.u.kv.wait = (b >> 2) % 8;
    break;
  case 7:
    m.op = RP_KV_ADD;
    snprintf(m.u.kv.key, sizeof m.u.kv.key, "%s", keys[b % 3]);
    m.u.kv.delta = (int64_t)(b >> 2) - 30;
    break;
  default:
    m.op = RP_STATUS;
    if (b & 1)
      snprintf(m.u.status.job, sizeof m.u.status.job, "%c",
               "abcx"[(b >> 1) % 4]);
    m.u.status.limit = (int)(b >> 3) % 4;
    break;
  }
  rs_handle(F.r, conn_ptr(i), &m, now);
}

/* What rdzvd does with a dropped connection once the machine returned. */
static void honour_drops(double now)
{
  int i;

  for (i = 0; i < NCONN; i++) {
    if (!F.c[i].drop)
      continue;
    rs_conn_closed(F.r, conn_ptr(i), now);
    F.c[i].drop = false;
    F.c[i].id[0] = '\0';
    F.c[i].gen++;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct in in = { data, size };
  struct rs_limits lim;
  double now = 0;
  int steps, i;

  memset(&F, 0, sizeof F);
  memset(&lim, 0, sizeof lim);
  lim.max_jobs = 2;                 /* eviction and "too many jobs" too */
  lim.max_keys_per_job = 4;
  lim.max_kv_bytes = 1000;
  lim.max_kv_total = 1500;
  lim.max_keepalive = 8;
  F.r = rs_create(&SINK, &lim);
  if (!F.r)
    return 0;
  for (steps = 0; in.n && steps < MAX_STEPS; steps++) {
    unsigned op = take(&in), who = take(&in) % NCONN;

    switch (op % 13) {
    case 0:
      do_join((int)who, &in, now);
      break;
    case 9:
      if ((op / 13) & 1)          /* a reset: a running node detaches */
        rs_conn_reset(F.r, conn_ptr((int)who), now);
      else
        rs_conn_closed(F.r, conn_ptr((int)who), now);
      F.c[who].id[0] = '\0';
      F.c[who].drop = false;
      F.c[who].gen++;
      break;
    case 10:
      now += take(&in) / 4.0;
      rs_tick(F.r, now);
      break;
    case 12:
      do_resume((int)who, &in, now);
      break;
    case 11:
      rs_set_peer_addr(F.r, conn_ptr((int)who), who & 1 ? "10.9.9.9" : "");
      break;
    default:
      do_op((int)who, op % 13, &in, now);
      break;
    }
    refresh();
    check_rounds();
    honour_drops(now);
    refresh();
    check_rounds();
    check_registry(F.r);
  }
  /* Let every deadline run out: whatever is left must be sound. */
  now += 1e4;
  rs_tick(F.r, now);
  refresh();
  check_rounds();
  honour_drops(now);
  check_registry(F.r);
  for (i = 0; i < NCONN; i++)
    rs_conn_closed(F.r, conn_ptr(i), now);
  check_registry(F.r);
  rs_destroy(F.r);
  return 0;
}
