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
 *   spares, lists (the owed WAITINGs' too), ranks unique within a
 *   running round, timers;
 * and ASan/LSan see every allocation freed when the registry is
 * destroyed.
 *
 * The adversary (proto/SECURITY.md): one step in the program is a
 * stranger's message, any op with any field values the codec lets
 * through (extremes included: rounds at RDZV_PROTO_MAX_ROUND, worlds of
 * RDZV_PROTO_MAX_NODES, another node's host and pid, no token or a wrong one),
 * sent from any connection, a node of another job or none.  The agents
 * keep the tokens they were given across reconnections, and the daemon
 * itself may restart (a new registry, every connection gone), with or
 * without a lasting token key (the input's first byte).  After every step:
 * - no live node is displaced: a step drops another live connection's
 *   node only if its sender was a participant of that node's job, or if
 *   the job table was full and the node's job never ran (reclaimed);
 *   an agent whose connection was reset is still its node while the
 *   node waits detached (it holds the node's token: Note [node tokens]),
 *   and a stranger's RESUME with the token a node holds is that node's
 *   party (a replay without a key file got it there);
 * - only a participant of a job ends it (outside rdzv_state_tick);
 * - round and restart numbers never go back, never below 0 or above the
 *   wire's bounds;
 * - memory stays within the budgets: a job's tables are sized by the
 *   nodes that arrived, never by a claimed world;
 * - with a lasting key, a running participant holds the rank it was given in
 *   a ROUND of that round, in this daemon life or an earlier one; the
 *   adversary also replays another node's stale token (the assignment of
 *   its previous ROUND: Note [fresh tokens]), and the daemon keeps its job
 *   ledger across restarts as rdzvd does beside its key file;
 * - once a job rebuilt from claims is whole again, a stranger's gathering
 *   claim changes no restart count and moves the round by one at most (a
 *   newcomer's round), with or without a lasting key. */
#include "rdzv_state_int.h"
#include "rdzv_auth.h"

#include <cjson/cJSON.h>
#include <limits.h>
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
  /* What its agent keeps across reconnections: the last token it was
   * given, and the last ROUND (its assignment) with its job. */
  unsigned char token[RDZV_PROTO_TOKEN_BYTES];
  bool have_round;
  struct rdzv_proto_round last;
  char last_id[8];
  /* The ROUND before that: what a stale replay presents, once the daemon
   * restarted since the last ROUND (within a life the server still takes
   * a node's token before its latest: the latest may have been in
   * flight; a captured one of those is the node, SECURITY.md). */
  bool have_old, restarted;
  struct rdzv_proto_round old;
  char old_id[8];
  /* The node its connection had when it was last reset: while the
   * registry holds it detached, it is this agent's (the agent keeps its
   * token whatever its later connections do). */
  const void *detached;
};

#define MAX_ISSUED 64

static struct {
  char mem[NCONN][4];       /* distinct addresses per generation */
  struct fconn c[NCONN];
  struct rdzv_state *r;
  struct rdzv_state_limits lim;
  bool secret;              /* tokens from a lasting key (a key file) */
  /* ROUND messages of the current step */
  struct { int conn; struct rdzv_proto_round rd; } rounds[NCONN];
  int n_rounds;
  /* Every (job, round, rank) a ROUND gave, and to which connection
   * index, across daemon lives. */
  struct { char id[8]; int round, rank, conn; } issued[MAX_ISSUED];
  int n_issued;
  /* Before the step: which connections were live nodes, and of what;
   * and whether the agent (on its live node or its detached one) was a
   * participant of `job`. */
  struct { const void *node; const void *job; bool part, never_ran;
           unsigned char token[RDZV_PROTO_TOKEN_BYTES],
               prev_token[RDZV_PROTO_TOKEN_BYTES]; }
      before[NCONN];
  /* This step's RESUME token, if any: a node holding it is the sender's
   * (a token two senders share makes them one party). */
  bool sent_token;
  unsigned char token[RDZV_PROTO_TOKEN_BYTES];
  bool table_full;          /* before the step: max_jobs jobs */
  struct { const void *job; int round, restart; enum phase phase;
           uint64_t seq; bool whole; } jobs[8];
  int n_jobs;
  bool gathering_claim;     /* this step: a stranger's gathering RESUME */
  /* The ledger beside the key file (Note [job ledger]): it outlives the
   * daemon. */
  struct { char id[RDZV_PROTO_MAX_ID + 1]; struct rdzv_ledger_rec rec; }
      ledger[8];
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

static void f_send(void *ctx, void *conn, const struct rdzv_proto_msg *m)
{
  char *out;
  size_t len;
  int i = conn_index(conn);

  (void)ctx;
  if (rdzv_proto_encode(m, &out, &len) != 0)
    abort();                /* the machine sent something invalid */
  free(out);
  if (m->op == RDZV_PROTO_ROUND) {
    if (F.n_rounds >= NCONN)
      abort();              /* more ROUNDs in a step than nodes */
    F.rounds[F.n_rounds].conn = i;
    F.rounds[F.n_rounds].rd = m->u.round;
    F.n_rounds++;
    if (F.c[i].have_round) {
      F.c[i].have_old = true;
      F.c[i].old = F.c[i].last;
      memcpy(F.c[i].old_id, F.c[i].last_id, sizeof F.c[i].old_id);
    }
    memcpy(F.c[i].token, m->u.round.token, RDZV_PROTO_TOKEN_BYTES);
    F.c[i].restarted = false;
    F.c[i].have_round = true;
    F.c[i].last = m->u.round;
  } else if (m->op == RDZV_PROTO_WAITING &&
             !rdzv_proto_token_none(m->u.waiting.token)) {
    memcpy(F.c[i].token, m->u.waiting.token, RDZV_PROTO_TOKEN_BYTES);
  }
}

static void f_drop(void *ctx, void *conn)
{
  (void)ctx;
  F.c[conn_index(conn)].drop = true;
}

static const struct rdzv_state_sink SINK = { NULL, f_send, f_drop, NULL };

static int ledger_find(const char *job)
{
  for (int i = 0; i < 8; i++)
    if (F.ledger[i].id[0] && strcmp(F.ledger[i].id, job) == 0)
      return i;
  return -1;
}

static int l_get(void *ctx, const char *job, struct rdzv_ledger_rec *out)
{
  int i = ledger_find(job);

  (void)ctx;
  if (i < 0)
    return -2;              /* -ENOENT */
  *out = F.ledger[i].rec;
  return 0;
}

static void l_put(void *ctx, const char *job,
                  const struct rdzv_ledger_rec *rec)
{
  int i = ledger_find(job);

  (void)ctx;
  for (int k = 0; i < 0 && k < 8; k++)
    if (!F.ledger[k].id[0])
      i = k;
  if (i < 0)
    return;                 /* full: as a failed write, the job unprovable */
  snprintf(F.ledger[i].id, sizeof F.ledger[i].id, "%s", job);
  F.ledger[i].rec = *rec;
}

static void l_drop(void *ctx, const char *job)
{
  int i = ledger_find(job);

  (void)ctx;
  if (i >= 0)
    F.ledger[i].id[0] = '\0';
}

static const struct rdzv_ledger LEDGER = { NULL, l_get, l_put, l_drop };

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
    const struct conn *c = hashtab_find(&F.r->conns,
                                   hashtab_hash_ptr(F.r->seed, p), p, conn_eq);

    if (c && c->node) {
      snprintf(F.c[i].id, sizeof F.c[i].id, "%s", c->node->job->id);
      F.c[i].nproc = c->node->nproc;
    }
  }
}

/* Remembers who was given which rank (check_ranks_owned). */
static void note_issued(int conn, const struct rdzv_proto_round *rd)
{
  int k = F.n_issued < MAX_ISSUED ? F.n_issued++ : MAX_ISSUED - 1;

  snprintf(F.issued[k].id, sizeof F.issued[k].id, "%s", F.c[conn].id);
  snprintf(F.c[conn].last_id, sizeof F.c[conn].last_id, "%s", F.c[conn].id);
  F.issued[k].round = rd->round;
  F.issued[k].rank = rd->group_rank;
  F.issued[k].conn = conn;
}

/* The ROUNDs sent in one step, per (job, round): a consistent world. */
static void check_rounds(void)
{
  int a, b;

  for (a = 0; a < F.n_rounds; a++)
    note_issued(F.rounds[a].conn, &F.rounds[a].rd);

  for (a = 0; a < F.n_rounds; a++) {
    const struct rdzv_proto_round *x = &F.rounds[a].rd;
    const char *job = F.c[F.rounds[a].conn].id;
    bool seen[NCONN] = { false };
    int k = 0, world = 0, offs[NCONN], nproc[NCONN];

    for (b = 0; b < F.n_rounds; b++) {
      const struct rdzv_proto_round *y = &F.rounds[b].rd;

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

static void check_registry(const struct rdzv_state *r)
{
  struct list_node *jpos, *jnext, *pos, *next;
  const struct job *job;
  const struct node *n;
  int jobs = 0, nodes = 0, empty = 0;

  list_for_each_safe(jpos, jnext, &r->jobs_in_order) {
    int cnt = 0, part = 0, spares = 0, listed = 0, outstanding = 0;
    int ranks[NCONN], n_ranks = 0;
    int64_t sum = 0;

    job = list_entry(jpos, struct job, in_registry);
    jobs++;
    if (jpos->next->prev != jpos)
      abort();
    list_for_each_safe(pos, next, &job->nodes) {
      n = list_entry(pos, struct node, in_job);
      cnt++;
      sum += n->nproc;
      if (n->job != job || n->c->node != n)
        abort();
      part += n->state == NS_PART;
      spares += n->state == NS_SPARE;
      outstanding += n->state == NS_IDLE && n->expected;
      if (job->phase == PH_RUNNING && n->state == NS_PART) {
        int q;

        /* Ranks unique within the running round (a rebuilt one may hold
         * any rank below its claimed size). */
        if (n->rank < 0 || n->rank >= RDZV_PROTO_MAX_NODES || n_ranks >= NCONN)
          abort();
        for (q = 0; q < n_ranks; q++)
          if (ranks[q] == n->rank)
            abort();
        ranks[n_ranks++] = n->rank;
      }
    }
    list_for_each_safe(pos, next, &job->spares) {
      n = list_entry(pos, struct node, in_spares);
      if (n->state != NS_SPARE || n->job != job || ++listed > cnt)
        abort();
    }
    if (listed != spares)
      abort();
    /* Note [settled waiting]: the owed are the job's own, each flagged,
     * and their timer is armed while any is owed. */
    listed = 0;
    list_for_each_safe(pos, next, &job->owed) {
      n = list_entry(pos, struct node, in_owed);
      if (!n->owed || n->job != job || ++listed > cnt)
        abort();
    }
    if (listed && !timer_heap_armed(&job->t_owed))
      abort();
    list_for_each_safe(pos, next, &job->nodes) {
      n = list_entry(pos, struct node, in_job);
      listed -= n->owed;
    }
    if (listed != 0)
      abort();
    if (cnt != job->n_nodes || part != job->n_part ||
        spares != job->n_spares || outstanding != job->n_outstanding ||
        sum != job->sum_nproc || job->n_part > job->conf.max_nodes)
      abort();
    if (job->empty_listed != (job->n_nodes == 0))
      abort();
    /* Tables sized by arrivals (at most NCONN nodes), never by a claim. */
    if (job->order_cap > 4 * NCONN || job->ranks.cap > 8 * NCONN)
      abort();
    if (job->round < 0 || job->round > RDZV_PROTO_MAX_ROUND ||
        job->restart_count < 0 || job->restart_count > RDZV_PROTO_MAX_RESTARTS)
      abort();
    empty += job->empty_listed;
    nodes += cnt;
  }
  /* The empty list holds exactly the jobs marked empty_listed. */
  list_for_each_safe(pos, next, &r->empty) {
    job = list_entry(pos, struct job, in_empty);
    if (!job->empty_listed || --empty < 0)
      abort();
  }
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
  struct rdzv_proto_msg m;
  struct rdzv_proto_join *j = &m.u.join;
  unsigned b = take(in), t = take(in);

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  snprintf(j->id, sizeof j->id, "%s", ids[b % 3]);
  snprintf(j->host, sizeof j->host, "h%d", i);
  if (b & 0x80)
    snprintf(j->addr, sizeof j->addr, "10.0.0.%d", i + 1);
  j->pid = 100 + i;
  j->nproc = 1 + (b >> 2) % 4;
  j->master_port = 29500 + i;
  j->reason = (enum rdzv_proto_join_reason)(t % 3);
  rdzv_proto_conf_default(&j->conf);
  j->conf.min_nodes = 1 + (t >> 2) % 3;
  j->conf.max_nodes = j->conf.min_nodes + (t >> 4) % 3;
  j->conf.max_restarts = (b >> 4) % 3;
  j->conf.join_timeout = 1 + take(in) % 60;
  j->conf.last_call_timeout = take(in) % 4;
  j->conf.close_timeout = take(in) % 8;
  j->conf.keepalive_interval = 1 + take(in) % 4;
  j->conf.keepalive_misses = 1 + take(in) % 3;
  rdzv_state_handle(F.r, conn_ptr(i), &m, now);
}

/* RESUME: a running, exiting or gathering node re-asserting a fuzzed
 * (always well-formed) assignment; ranks stay below NCONN. */
static void do_resume(int i, struct in *in, double now)
{
  static const char *const ids[] = { "a", "b", "c" };
  struct rdzv_proto_msg m;
  struct rdzv_proto_resume *a = &m.u.resume;
  unsigned b = take(in), t = take(in), k = take(in);

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_RESUME;
  snprintf(a->join.id, sizeof a->join.id, "%s", ids[b % 3]);
  snprintf(a->join.host, sizeof a->join.host, "h%d", i);
  a->join.pid = 100 + i;
  a->join.nproc = 1 + (b >> 2) % 4;
  a->join.master_port = 29500 + i;
  rdzv_proto_conf_default(&a->join.conf);
  a->join.conf.min_nodes = 1 + (t >> 2) % 3;
  a->join.conf.max_nodes = a->join.conf.min_nodes + (t >> 4) % 3;
  a->join.conf.max_restarts = (b >> 4) % 3;
  a->join.conf.join_timeout = 1 + k % 60;
  a->join.conf.last_call_timeout = (k >> 6) % 4;
  a->join.conf.keepalive_interval = 1 + (t >> 6) % 4;
  a->phase = (enum rdzv_proto_resume_phase)(t % 3);
  a->round.round = (int)(k % 5);
  a->round.restart_count = (int)((k >> 3) % 3);
  /* The agent presents the token it kept, and half the time re-asserts
   * exactly the assignment it was given. */
  memcpy(a->round.token, F.c[i].token, RDZV_PROTO_TOKEN_BYTES);
  if ((k & 1) && F.c[i].have_round && a->phase != RDZV_PROTO_PHASE_GATHERING) {
    snprintf(a->join.id, sizeof a->join.id, "%s", F.c[i].last_id);
    a->round = F.c[i].last;
    a->round.embedded = false;
    a->round.host_rank = 0;
    a->join.nproc = 1;
    a->join.conf.max_nodes = 1 + 2 + 2;
    a->join.conf.min_nodes = 1;
    rdzv_state_handle(F.r, conn_ptr(i), &m, now);
    return;
  }
  if (a->phase != RDZV_PROTO_PHASE_GATHERING) {
    a->round.group_world_size = 1 + (int)((b >> 6) % 3);
    a->round.group_rank = (int)((k >> 5) % (unsigned)a->round.group_world_size);
    a->round.world_size = 4 * a->round.group_world_size;
    a->round.rank_offset = a->round.group_rank;
    snprintf(a->round.master_addr, sizeof a->round.master_addr, "10.0.0.1");
    a->round.master_port = 29500;
  }
  rdzv_state_handle(F.r, conn_ptr(i), &m, now);
}

static void do_op(int i, unsigned op, struct in *in, double now)
{
  static const char *const keys[] = { "k0", "k1", "k2" };
  static char value[300];
  struct rdzv_proto_msg m;
  unsigned b = take(in);

  memset(&m, 0, sizeof m);
  switch (op) {
  case 1:
    m.op = RDZV_PROTO_KEEPALIVE;
    break;
  case 2:
    m.op = RDZV_PROTO_FAILURE;
    m.u.failure.final = b & 1;
    snprintf(m.u.failure.message, sizeof m.u.failure.message, "f%u", b);
    break;
  case 3:
    m.op = RDZV_PROTO_BARRIER;
    snprintf(m.u.barrier.name, sizeof m.u.barrier.name, "%s",
             b & 1 ? "exit" : "b");
    m.u.barrier.round = (int)(b >> 1) % 4;
    break;
  case 4:
    m.op = RDZV_PROTO_LEAVE;
    break;
  case 5:
    m.op = RDZV_PROTO_KV_SET;
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
    m.op = RDZV_PROTO_KV_GET;
    snprintf(m.u.kv.key, sizeof m.u.kv.key, "%s", keys[b % 3]);
    m.u.kv.wait = (b >> 2) % 8;
    break;
  case 7:
    m.op = RDZV_PROTO_KV_ADD;
    snprintf(m.u.kv.key, sizeof m.u.kv.key, "%s", keys[b % 3]);
    m.u.kv.delta = (int64_t)(b >> 2) - 30;
    break;
  default:
    m.op = RDZV_PROTO_STATUS;
    if (b & 1)
      snprintf(m.u.status.job, sizeof m.u.status.job, "%c",
               "abcx"[(b >> 1) % 4]);
    m.u.status.limit = (int)(b >> 3) % 4;
    break;
  }
  rdzv_state_handle(F.r, conn_ptr(i), &m, now);
}

/* ---- the adversary ---- */

/* Encodes and decodes m as rdzvd's reader would, and hands the decoded
 * message to the machine: what the codec refuses never reaches it. */
static void send_wire(int i, struct rdzv_proto_msg *m, double now)
{
  struct rdzv_proto_msg d;
  char *frame, err[256];
  size_t len;

  if (m->op == RDZV_PROTO_RESUME) {
    F.sent_token = true;
    memcpy(F.token, m->u.resume.round.token, sizeof F.token);
  }
  if (rdzv_proto_encode(m, &frame, &len) != 0)
    return;
  if (rdzv_proto_decode(frame + RDZV_PROTO_FRAME_HEADER,
                        len - RDZV_PROTO_FRAME_HEADER, &d, err,
                        sizeof err) == 0) {
    rdzv_state_handle(F.r, conn_ptr(i), &d, now);
    rdzv_proto_msg_free(&d);
  }
  free(frame);
}

static int pick_int(unsigned b, int hi)
{
  switch (b % 6) {
  case 0: return 0;
  case 1: return 1;
  case 2: return hi;
  case 3: return hi - 1;
  case 4: return hi / 2;
  default: return (int)(b >> 3);
  }
}

/* A stranger's message: any op, extreme values, another node's name. */
static void do_adversary(int i, struct in *in, double now)
{
  static const char *const ids[] = { "a", "b", "c" };
  struct rdzv_proto_msg m;
  struct rdzv_proto_resume *a = &m.u.resume;
  unsigned kind = take(in), b = take(in), t = take(in), k = take(in);
  int victim = (int)(t % NCONN), j;

  memset(&m, 0, sizeof m);
  switch (kind % 5) {
  case 0:
  case 1:                           /* RESUME (and JOIN: its join part) */
    m.op = kind % 5 ? RDZV_PROTO_RESUME : RDZV_PROTO_JOIN;
    snprintf(a->join.id, sizeof a->join.id, "%s", ids[b % 3]);
    /* Another node's host and pid, as --status shows them. */
    snprintf(a->join.host, sizeof a->join.host, "h%d", victim);
    a->join.pid = 100 + victim;
    a->join.nproc = 1 + pick_int(k, 65535);
    a->join.master_port = 1 + (int)(b % 65535);
    rdzv_proto_conf_default(&a->join.conf);
    a->join.conf.max_nodes = 1 + pick_int(t >> 3, RDZV_PROTO_MAX_NODES - 1);
    a->join.conf.min_nodes = 1 + pick_int(b >> 2, a->join.conf.max_nodes - 1);
    a->join.conf.max_restarts = pick_int(k >> 2, RDZV_PROTO_MAX_RESTARTS);
    a->join.conf.join_timeout = k & 1 ? RDZV_PROTO_MIN_JOIN_TIMEOUT : 1e7;
    a->join.conf.keepalive_interval = k & 2 ? RDZV_PROTO_MIN_KEEPALIVE : 3600;
    a->join.conf.keepalive_misses = k & 2 ? 10 : 1000;
    if (kind & 0x80) {              /* a configuration the honest use */
      a->join.conf.min_nodes = 1 + (t >> 2) % 3;
      a->join.conf.max_nodes = a->join.conf.min_nodes + (t >> 4) % 3;
      a->join.conf.max_restarts = (b >> 4) % 3;
      a->join.nproc = 1 + (k >> 2) % 4;
    }
    a->phase = (enum rdzv_proto_resume_phase)(kind / 5 % 3);
    a->round.round = pick_int(take(in), RDZV_PROTO_MAX_ROUND);
    a->round.restart_count = pick_int(take(in), RDZV_PROTO_MAX_RESTARTS);
    a->round.group_world_size =
        1 + pick_int(take(in), RDZV_PROTO_MAX_NODES - 1);
    a->round.group_rank = pick_int(take(in), a->round.group_world_size - 1);
    a->round.world_size = a->round.group_world_size +
                          pick_int(take(in), INT_MAX / 2);
    a->round.rank_offset = pick_int(take(in), a->round.world_size - 1);
    snprintf(a->round.master_addr, sizeof a->round.master_addr, "6.6.6.6");
    a->round.master_port = 6666;
    /* Another node's stale token: the assignment of its ROUND before
     * the last, of the same job (a capture, replayed; a node's latest
     * assignment in a job, stolen, is the node: out of scope). */
    if ((b & 0x20) && m.op == RDZV_PROTO_RESUME && F.c[victim].have_old &&
        victim != i && F.c[victim].restarted &&
        strcmp(F.c[victim].old_id, F.c[victim].last_id) == 0) {
      snprintf(a->join.id, sizeof a->join.id, "%s", F.c[victim].old_id);
      a->round = F.c[victim].old;
      a->round.embedded = false;
      a->round.host_rank = 0;
      a->phase = RDZV_PROTO_PHASE_RUNNING;
      a->join.nproc = 1;
      rdzv_proto_conf_default(&a->join.conf);  /* within every ceiling */
      a->join.conf.keepalive_interval = 1;
      a->join.conf.max_nodes = 1 + 2 + 2;
      a->join.conf.min_nodes = 1;
      break;
    }
    /* No token, a made-up one, or its own (from an earlier life). */
    if (b & 0x80)
      memcpy(a->round.token, F.c[i].token, RDZV_PROTO_TOKEN_BYTES);
    else if (b & 0x40) {
      /* Made up; never the same as another connection's (a token two
       * senders share makes them one party: a stolen token is the
       * node). */
      for (j = 0; j < RDZV_PROTO_TOKEN_BYTES; j++)
        a->round.token[j] = (unsigned char)(k + j);
      a->round.token[0] = (unsigned char)(0xa0 + i);
    }
    /* Unproven: no token, or a made-up one (its own may be the node's). */
    F.gathering_claim = m.op == RDZV_PROTO_RESUME && !(b & 0x80) &&
                        a->phase == RDZV_PROTO_PHASE_GATHERING;
    break;
  case 2:
    m.op = RDZV_PROTO_FAILURE;
    m.u.failure.final = true;
    break;
  case 3:
    m.op = RDZV_PROTO_BARRIER;
    snprintf(m.u.barrier.name, sizeof m.u.barrier.name, "exit");
    m.u.barrier.round = pick_int(b, RDZV_PROTO_MAX_ROUND);
    break;
  default:
    m.op = RDZV_PROTO_KV_ADD;
    snprintf(m.u.kv.key, sizeof m.u.kv.key, "k0");
    m.u.kv.delta = b & 1 ? 9007199254740991LL : -9007199254740991LL;
    break;
  }
  send_wire(i, &m, now);
}

/* The daemon restarts: every connection is gone; the agents keep what
 * they knew. */
static void restart_daemon(void)
{
  struct rdzv_auth_secret k = { .len = 32 };
  int i;

  rdzv_state_destroy(F.r);
  memset(k.key, 0x5a, k.len);
  F.r = rdzv_state_create(&SINK, &F.lim);
  if (!F.r || (F.secret && rdzv_state_set_token_key(F.r, &k)))
    abort();
  if (F.secret)
    rdzv_state_set_ledger(F.r, &LEDGER);
  for (i = 0; i < NCONN; i++) {
    F.c[i].id[0] = '\0';
    F.c[i].drop = false;
    F.c[i].gen++;
    F.c[i].restarted = true;
    F.c[i].detached = NULL;
  }
  F.n_jobs = 0;
}

/* ---- invariants across a step ---- */

static const struct conn *conn_of(int i)
{
  void *p = conn_ptr(i);

  return hashtab_find(&F.r->conns, hashtab_hash_ptr(F.r->seed, p), p, conn_eq);
}

static bool may_end(const struct node *n)
{
  return n->state == NS_PART || (n->state == NS_IDLE && n->expected);
}

/* Agent i's node, detached since its connection was reset, if the
 * registry still holds it (host and pid say it is i's, not a node
 * allocated at the same address since). */
static const struct node *detached_self(int i)
{
  struct list_node *jpos, *jnext, *pos, *next;
  const struct job *job;
  const struct node *n;
  char host[8];

  if (!F.c[i].detached)
    return NULL;
  snprintf(host, sizeof host, "h%d", i);
  list_for_each_safe(jpos, jnext, &F.r->jobs_in_order) {
    job = list_entry(jpos, struct job, in_registry);
    list_for_each_safe(pos, next, &job->nodes) {
      n = list_entry(pos, struct node, in_job);
      if (n == F.c[i].detached && !n->c->conn && n->pid == 100 + i &&
          strcmp(n->host, host) == 0)
        return n;
    }
  }
  return NULL;
}

static void note_before(void)
{
  struct list_node *pos, *next;
  const struct job *job;
  int i;

  for (i = 0; i < NCONN; i++) {
    const struct conn *c = conn_of(i);

    F.before[i].node = c && !c->dropped ? c->node : NULL;
    F.before[i].job = F.before[i].node ? c->node->job : NULL;
    F.before[i].part = F.before[i].node && may_end(c->node);
    F.before[i].never_ran = F.before[i].node &&
                            c->node->job->issued_round < 0 &&
                            !c->node->job->rebuild_size;
    if (F.before[i].node) {
      memcpy(F.before[i].token, c->node->token, RDZV_PROTO_TOKEN_BYTES);
      memcpy(F.before[i].prev_token, c->node->prev_token,
             RDZV_PROTO_TOKEN_BYTES);
    }
    if (!F.before[i].node) {
      const struct node *self = detached_self(i);

      F.before[i].job = self ? self->job : NULL;
      F.before[i].part = self && may_end(self);
    }
  }
  F.n_jobs = 0;
  F.table_full = F.r->n_jobs >= F.lim.max_jobs;
  list_for_each_safe(pos, next, &F.r->jobs_in_order) {
    job = list_entry(pos, struct job, in_registry);
    if (F.n_jobs == 8)
      break;
    F.jobs[F.n_jobs].job = job;
    F.jobs[F.n_jobs].round = job->round;
    F.jobs[F.n_jobs].restart = job->restart_count;
    F.jobs[F.n_jobs].phase = job->phase;
    F.jobs[F.n_jobs].seq = job->seq;
    F.jobs[F.n_jobs].whole = job->rebuild_size > 0 && !job->rebuilding &&
                             job->phase == PH_RUNNING;
    F.n_jobs++;
  }
}

/* After a step by connection `by` (-1: the clock): nobody displaced,
 * nobody but a participant ended a job, numbers never went back. */
static void check_step(int by)
{
  struct list_node *pos, *next;
  const struct job *job;
  int i, k;

  for (i = 0; by >= 0 && i < NCONN; i++) {
    if (i == by || !F.before[i].node || !F.c[i].drop)
      continue;
    /* i was a live node and was dropped by by's message: only a node of
     * its job may, or a newcomer reclaiming a job that never ran from a
     * full table (Note [tenant share]). */
    if (!(F.before[by].part && F.before[by].job == F.before[i].job) &&
        !(F.table_full && F.before[i].never_ran) &&
        !(F.sent_token && !rdzv_proto_token_none(F.token) &&
          (!memcmp(F.token, F.before[i].token, sizeof F.token) ||
           !memcmp(F.token, F.before[i].prev_token, sizeof F.token))))
      abort();              /* a live node displaced by a stranger */
  }
  list_for_each_safe(pos, next, &F.r->jobs_in_order) {
    job = list_entry(pos, struct job, in_registry);
    for (k = 0; k < F.n_jobs; k++) {
      if (F.jobs[k].job != job || job->seq < F.jobs[k].seq)
        continue;           /* another job at the same address */
      if (job->round < F.jobs[k].round ||
          job->restart_count < F.jobs[k].restart)
        abort();            /* a round or restart count went back */
      if (by >= 0 && job->phase == PH_CLOSED &&
          F.jobs[k].phase != PH_CLOSED &&
          !(F.before[by].part && F.before[by].job == job))
        abort();            /* ended by someone not in it */
      if (by >= 0 && F.gathering_claim && F.jobs[k].whole &&
          F.before[by].job != job &&
          (job->restart_count != F.jobs[k].restart ||
           job->round > F.jobs[k].round + 1))
        abort();            /* a late claim moved a rebuilt job's counts */
    }
  }
}

/* With a lasting key, a rebuilt running round's ranks belong to the nodes a
 * ROUND gave them to. */
static void check_ranks_owned(void)
{
  struct list_node *jpos, *jnext, *pos, *next;
  const struct job *job;
  const struct node *n;
  int k;

  if (!F.secret)
    return;
  list_for_each_safe(jpos, jnext, &F.r->jobs_in_order) {
    job = list_entry(jpos, struct job, in_registry);
    if (job->phase != PH_RUNNING || !job->rebuild_size)
      continue;
    list_for_each_safe(pos, next, &job->nodes) {
      bool owned = false;

      n = list_entry(pos, struct node, in_job);

      if (n->state != NS_PART || n->rank < 0 || !n->c->conn)
        continue;
      for (k = 0; k < F.n_issued && !owned; k++)
        owned = F.issued[k].round == job->round &&
                F.issued[k].rank == n->rank &&
                strcmp(F.issued[k].id, job->id) == 0 &&
                F.issued[k].conn == conn_index(n->c->conn);
      if (!owned && F.n_issued < MAX_ISSUED)
        abort();            /* a rank claimed by one it was not given to */
    }
  }
}

/* What rdzvd does with a dropped connection once the machine returned. */
static void honour_drops(double now)
{
  int i;

  for (i = 0; i < NCONN; i++) {
    if (!F.c[i].drop)
      continue;
    rdzv_state_conn_closed(F.r, conn_ptr(i), now);
    F.c[i].drop = false;
    F.c[i].id[0] = '\0';
    F.c[i].gen++;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct in in = { data, size };
  double now = 0;
  int steps, i, by;

  memset(&F, 0, sizeof F);
  F.lim.max_jobs = 2;               /* eviction and "too many jobs" too */
  F.lim.max_keys_per_job = 4;
  F.lim.max_kv_bytes = 1000;
  F.lim.max_kv_total = 1500;
  F.lim.max_keepalive = 8;
  F.secret = take(&in) & 1;
  F.r = NULL;
  restart_daemon();
  for (steps = 0; in.n && steps < MAX_STEPS; steps++) {
    unsigned op = take(&in), who = take(&in) % NCONN;

    note_before();
    F.gathering_claim = false;
    F.sent_token = false;
    by = (int)who;
    switch (op % 15) {
    case 0:
      do_join((int)who, &in, now);
      break;
    case 13:
      do_adversary((int)who, &in, now);
      break;
    case 14:
      restart_daemon();
      by = -1;
      break;
    case 9:
      if ((op / 15) & 1) {        /* a reset: a running node detaches */
        if (F.before[who].node)   /* (an earlier one stays the agent's) */
          F.c[who].detached = F.before[who].node;
        rdzv_state_conn_reset(F.r, conn_ptr((int)who), now);
      } else {
        rdzv_state_conn_closed(F.r, conn_ptr((int)who), now);
      }
      F.c[who].id[0] = '\0';
      F.c[who].drop = false;
      F.c[who].gen++;
      break;
    case 10:
      now += take(&in) / 4.0;
      rdzv_state_tick(F.r, now);
      by = -1;
      break;
    case 12:
      do_resume((int)who, &in, now);
      break;
    case 11:
      rdzv_state_set_peer_addr(F.r, conn_ptr((int)who),
                               who & 1 ? "10.9.9.9" : "");
      break;
    default:
      do_op((int)who, op % 15, &in, now);
      break;
    }
    refresh();
    check_rounds();
    if (op % 15 != 9 && op % 15 != 14)
      check_step(by);
    check_ranks_owned();
    honour_drops(now);
    refresh();
    check_rounds();
    check_registry(F.r);
  }
  /* Let every deadline run out: whatever is left must be sound. */
  now += 1e4;
  rdzv_state_tick(F.r, now);
  refresh();
  check_rounds();
  honour_drops(now);
  check_registry(F.r);
  for (i = 0; i < NCONN; i++)
    rdzv_state_conn_closed(F.r, conn_ptr(i), now);
  check_registry(F.r);
  rdzv_state_destroy(F.r);
  return 0;
}
