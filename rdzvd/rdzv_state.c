/* rdzv_state.c -- the rendezvous state machine (see rdzv_state.h). */
#include "rdzv_state_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "rdzv_reply.h"
#include "rdzv_rules.h"

#define container_of(p, type, member) \
  ((type *)(void *)((char *)(p) - offsetof(type, member)))

#define DEF_MAX_JOBS 10000
#define DEF_MAX_KEYS 4096
#define DEF_MAX_KV_BYTES ((size_t)16 << 20)
#define DEF_MAX_KV_TOTAL ((size_t)256 << 20)
#define DEF_MAX_JOIN_TIMEOUT 86400.0
#define DEF_MAX_LAST_CALL 3600.0
#define DEF_MAX_CLOSE_TIMEOUT 3600.0
#define DEF_MAX_KEEPALIVE 300.0
#define DEF_RESUME_GRACE 10.0
#define DEF_MAX_JOBS_PER_PEER 1000
#define DEF_MAX_WAITING_PER_PEER 1000
#define MAX_BARRIERS 64               /* distinct barrier names per round */
#define CLOSE_WAIT_MAX 5.0            /* closing_start: at most, seconds */
#define ROUND_LIMIT_TEXT "1073741824" /* RDZV_PROTO_MAX_ROUND */
_Static_assert(RDZV_PROTO_MAX_ROUND == 1073741824, "ROUND_LIMIT_TEXT");

/* ---- small helpers ---- */

/* The sink must not call back into the machine (rdzv_state.h): a close
 * from inside send() would free the list being walked.  Breaking that is
 * a bug in the caller, caught here at once rather than as a corrupted
 * heap later. */
static void enter(struct rdzv_state *r, const char *what)
{
  if (r->busy) {
    fprintf(stderr, "rdzv_state: %s called from inside the state machine "
            "(a sink callback re-entered it)\n", what);
    abort();
  }
  r->busy = true;
}

static void leave(struct rdzv_state *r)
{
  r->busy = false;
}

static void copy_str(char *dst, size_t size, const char *src)
{
  size_t n = strnlen(src, size - 1);

  memcpy(dst, src, n);
  dst[n] = '\0';
}

__attribute__((format(printf, 3, 4)))
static void fmt(char *buf, size_t size, const char *f, ...)
{
  va_list ap;

  va_start(ap, f);
  vsnprintf(buf, size, f, ap);
  va_end(ap);
}

void rdzv_state__log(const struct rdzv_state *r, const char *f, ...)
{
  char line[2 * RDZV_PROTO_MAX_TEXT + DESC_MAX];
  va_list ap;

  if (!r->sink.log)
    return;
  va_start(ap, f);
  vsnprintf(line, sizeof line, f, ap);
  va_end(ap);
  r->sink.log(r->sink.ctx, line);
}


static bool conn_eq(const void *item, const void *key)
{
  return ((const struct conn *)item)->conn == key;
}

void rdzv_state__describe(const struct node *n, char *buf, size_t size)
{
  fmt(buf, size, "node %s (%s, pid %" PRId64 ")", n->host[0] ? n->host : "?",
      rdzv_state__node_addr(n), n->pid);
}

bool rdzv_state__gathering(const struct job *job)
{
  return job->phase == PH_GATHERING || job->phase == PH_LAST_CALL;
}

/* The job as the rules (rdzv_rules.h) see it. */
static struct rdzv_rules_job rules_view(const struct job *job)
{
  struct rdzv_rules_job v = {
    .min_nodes = job->conf.min_nodes,
    .max_nodes = job->conf.max_nodes,
    .last_call_timeout = job->conf.last_call_timeout,
    .gathering = rdzv_state__gathering(job),
    .in_last_call = job->phase == PH_LAST_CALL,
    .closing = job->closing,
    .exit_passed = job->exit_passed,
    .restarting = job->restarting,
    .n_part = job->n_part,
    .n_outstanding = job->n_outstanding,
  };

  return v;
}

/* May the first spare take a place in the round: now (gathering), or as
 * it completes? */
static bool spare_fits(const struct job *job, bool completing)
{
  struct rdzv_rules_job v = rules_view(job);

  return completing ? rdzv_rules_spare_fits_at_completion(&v)
                    : rdzv_rules_spare_fits(&v);
}

/* How long a node of the job may stay silent: the window in which nodes
 * told to restart may still come back. */
static double keepalive_window(const struct job *job)
{
  return job->conf.keepalive_interval * job->conf.keepalive_misses;
}

/* ---- a rebuilding job's ranks: a table sized by the nodes that came
 * back, never by the group size a RESUME claims ---- */

uint64_t rdzv_state__rank_hash(const struct rdzv_state *r, int rank)
{
  return hashtab_mix64(r->seed ^ (uint64_t)(unsigned)rank);
}

/* The job is no longer rebuilding: the table goes. */
void rdzv_state__ranks_clear(struct job *job)
{
  job->rebuilding = false;
  free(job->ranks.s);
  memset(&job->ranks, 0, sizeof job->ranks);
}

/* ---- sending (rdzv_reply.h) ---- */

/* cause: the job's root cause (RESTART, CLOSED), or NULL; job: a
 * RESTART's job, for the participant it lost (or NULL). */
static void send_text_cause(const struct rdzv_state *r, void *conn,
                            enum rdzv_proto_op op,
                            enum rdzv_proto_error_code code, bool success,
                            const char *text,
                            const struct rdzv_proto_cause *cause,
                            const struct job *job)
{
  bool lost = job && job->lost_host;

  rdzv_reply_text(&r->sink, conn, op, code, success, text, cause,
                  lost ? job->lost_host : NULL, lost ? job->lost_why : NULL);
}

void rdzv_state__send_text(const struct rdzv_state *r, void *conn,
                           enum rdzv_proto_op op,
                           enum rdzv_proto_error_code code, bool success,
                           const char *text)
{
  send_text_cause(r, conn, op, code, success, text, NULL, NULL);
}

/* The job's root cause for a RESTART or CLOSED: NULL when no failure of
 * the round was reported, or only untimed ones (an older agent's). */
static const struct rdzv_proto_cause *job_cause(const struct job *job)
{
  const struct job_cause *jc = job->cause;

  return jc && jc->held && jc->cause.exited_at > 0 ? &jc->cause : NULL;
}

/* The text of the round's root cause, for RESTART and CLOSED. */
static const char *cause_text(const struct job *job)
{
  return job->cause && job->cause->held ? job->cause->text
                                         : "workers failed";
}


struct conn *rdzv_state__conn_get(struct rdzv_state *r, void *conn,
                                  bool create)
{
  uint64_t h = hashtab_hash_ptr(r->seed, conn);
  struct conn *c = hashtab_find(&r->conns, h, conn, conn_eq);

  if (c || !create)
    return c;
  c = calloc(1, sizeof(*c));
  if (!c)
    return NULL;
  c->conn = conn;
  c->h = h;
  if (hashtab_insert(&r->conns, h, c)) {
    free(c);
    return NULL;
  }
  return c;
}

/* Closes conn after what was sent; later messages from it are ignored
 * until rdzv_state_conn_closed. */
void rdzv_state__conn_drop(struct rdzv_state *r, void *conn)
{
  struct conn *c;

  if (!conn)                    /* a detached node has none to drop */
    return;
  c = rdzv_state__conn_get(r, conn, true);

  if (c)
    c->dropped = true;
  r->sink.drop(r->sink.ctx, conn);
}

/* ---- node tokens (Note [node tokens], proto/rdzv_token.h) ---- */


/* ---- nodes ---- */

/* Moves n to another state, keeping the job's counts and spare list. */
void rdzv_state__node_set_state(struct job *job, struct node *n,
                                enum nstate st, bool expected)
{
  if (n->state == NS_PART) {
    job->n_part--;
  } else if (n->state == NS_SPARE) {
    list_remove(&n->in_spares);
    job->n_spares--;
    rdzv_tenant_spare(n, false);
  } else if (n->expected) {
    job->n_outstanding--;
  }
  n->state = st;
  n->expected = st == NS_IDLE && expected;
  if (st == NS_PART) {
    job->n_part++;
  } else if (st == NS_SPARE) {
    list_insert_tail(&job->spares, &n->in_spares);
    job->n_spares++;
    rdzv_tenant_spare(n, true);
  } else if (n->expected) {
    job->n_outstanding++;
  }
}

/* The empty list: jobs without a node, in the order they emptied, so
 * that a full job table forgets the longest-empty one (rdzv_state_limits). */
static void empty_add(struct rdzv_state *r, struct job *job)
{
  rdzv_tenant_job_held(job, false);
  if (job->empty_listed)
    return;
  job->empty_listed = true;
  list_insert_tail(&r->empty, &job->in_empty);
}

static void empty_unlist(struct job *job)
{
  if (!job->empty_listed)
    return;
  job->empty_listed = false;
  list_remove(&job->in_empty);
}

/* A node arrived: the job leaves the empty list and counts in its
 * tenant's share (Note [tenant share]). */
static void empty_remove(struct rdzv_state *r, struct job *job)
{
  rdzv_tenant_job_held(job, true);
  if (!job->empty_listed)
    return;
  job->empty_listed = false;
  list_remove(&job->in_empty);
}

/* Forgets n: counts, lists, timers, waits.  Sends nothing. */
void rdzv_state__node_free(struct rdzv_state *r, struct node *n)
{
  struct job *job = n->job;

  if (job->rebuilding && n->rank >= 0)
    hashtab_remove(&job->ranks, rdzv_state__rank_hash(r, n->rank), n);
  rdzv_state__node_set_state(job, n, NS_IDLE, false);
  if (n->barrier)
    n->barrier->count--;
  while (!list_empty(&n->waiters))
    kv_store_waiter_free(r, job,
                         list_first(&n->waiters, struct waiter, by_node));
  timer_heap_clear(&r->heap, &n->t_join);
  timer_heap_clear(&r->heap, &n->t_alive);
  timer_heap_unreserve(&r->heap, 2);
  rdzv_waiting_forget(n);
  list_remove(&n->in_job);
  job->n_nodes--;
  job->sum_nproc -= n->nproc;
  r->n_nodes--;
  if (!n->c->conn)
    free(n->c);                 /* a detached node's placeholder */
  else
    n->c->node = NULL;
  rdzv_tenant_unref(r, n->tenant);
  free(n);
  if (!job->n_nodes)
    empty_add(r, job);
}

/* A node's own durations: its JOIN's, within the server's ceilings (as
 * ceilings() applies them to the job's configuration). */
static void node_fill(const struct rdzv_state *r, struct node *n,
                      const struct rdzv_proto_join *j)
{
  const struct rdzv_proto_conf *cf = &j->conf;
  double misses = fmax(1, floor(r->lim.max_keepalive /
                                cf->keepalive_interval));

  copy_str(n->host, sizeof n->host, j->host);
  copy_str(n->addr, sizeof n->addr, j->addr);
  n->pid = j->pid;
  n->nproc = j->nproc;
  n->master_port = j->master_port;
  n->join_timeout = fmin(cf->join_timeout, r->lim.max_join_timeout);
  n->alive_window = cf->keepalive_interval *
                    fmin(cf->keepalive_misses, misses);
}

static struct node *node_create(struct rdzv_state *r, struct job *job,
                                struct conn *c, const struct rdzv_proto_join *j,
                                double now)
{
  struct node *n;

  if ((size_t)job->n_nodes + 1 > job->order_cap) {
    size_t cap = job->order_cap ? job->order_cap * 2 : 8;
    struct node **o = realloc(job->order, cap * sizeof(*o));

    if (!o)
      return NULL;
    job->order = o;
    job->order_cap = cap;
  }
  n = calloc(1, sizeof(*n));
  if (!n)
    return NULL;
  if (timer_heap_reserve(&r->heap, 2)) {
    free(n);
    return NULL;
  }
  n->job = job;
  n->c = c;
  list_init(&n->waiters);
  list_init(&n->in_spares);
  c->node = n;
  n->tenant = rdzv_tenant_ref(r, c->peer);
  node_fill(r, n, j);
  n->state = NS_IDLE;
  n->rank = n->prev_rank = -1;
  n->incarnation = rdzv_token_incarnation(r->tokens);
  n->last_seen = now;
  timer_heap_node_init(&n->t_join, T_JOIN);
  timer_heap_node_init(&n->t_alive, T_ALIVE);
  timer_heap_set(&r->heap, &n->t_alive, now + n->alive_window);
  list_insert_tail(&job->nodes, &n->in_job);
  job->n_nodes++;
  job->sum_nproc += n->nproc;
  r->n_nodes++;
  empty_remove(r, job);
  timer_heap_clear(&r->heap, &job->t_forget);
  return n;
}

/* ---- jobs ---- */

static void barriers_free(struct job *job)
{
  while (job->barriers) {
    struct barrier *b = job->barriers;

    job->barriers = b->next;
    free(b);
  }
  job->n_barriers = 0;
}

/* A job forgotten for good (not a server stopping): its ledger record
 * goes too (Note [job ledger]), so a rerun of its id is a new
 * incarnation. */
static void job_forget(struct rdzv_state *r, struct job *job)
{
  if (r->ledger.drop)
    r->ledger.drop(r->ledger.ctx, job->id);
}

/* Note [live store in rdzvd]: the round's live store, served with its
 * job token; a failure leaves the round without one (serve said why). */
static void serve_live_store(struct rdzv_state *r, struct job *job,
                             struct rdzv_proto_round *rd)
{
  static const char digits[] = "0123456789abcdef";
  char token[2 * RDZV_PROTO_TOKEN_BYTES + 1];
  int port = 0;
  size_t i;

  for (i = 0; i < RDZV_PROTO_TOKEN_BYTES; i++) {
    token[2 * i] = digits[rd->job_token[i] >> 4];
    token[2 * i + 1] = digits[rd->job_token[i] & 15];
  }
  token[2 * i] = '\0';
  if (r->live.serve(r->live.ctx, job->id, token, &port) == 0 &&
      port > 0 && port <= 65535) {
    rd->live_store_port = port;
    job->live_served = true;
  }
}

static void job_free(struct rdzv_state *r, struct job *job)
{
  if (job->live_served && r->live.drop)
    r->live.drop(r->live.ctx, job->id);
  while (!list_empty(&job->nodes))
    rdzv_state__node_free(r, list_first(&job->nodes, struct node, in_job));
  barriers_free(job);
  kv_store_job_free(r, job);
  empty_unlist(job);
  rdzv_tenant_job_held(job, false);
  rdzv_tenant_unref(r, job->tenant);
  free(job->order);
  free(job->ranks.s);
  free(job->cause);
  timer_heap_clear(&r->heap, &job->t_last_call);
  timer_heap_clear(&r->heap, &job->t_progress);
  timer_heap_clear(&r->heap, &job->t_owed);
  timer_heap_clear(&r->heap, &job->t_forget);
  timer_heap_unreserve(&r->heap, JOB_TIMERS);
  hashtab_remove(&r->jobs, job->h, job);
  list_remove(&job->in_registry);
  r->n_jobs--;
  free(job);
}

struct job *rdzv_state__job_find(const struct rdzv_state *r, const char *id)
{
  return hashtab_find(&r->jobs, hashtab_hash_str(r->seed, id), id, rdzv_state__job_eq);
}

static void lower(const struct rdzv_state *r, const struct job *job,
                  const char *what, double *v, double ceiling)
{
  if (*v <= ceiling)
    return;
  rdzv_state__log(r, "job %s: %s %g s lowered to the server's ceiling %g s",
                  job->id, what, *v, ceiling);
  *v = ceiling;
}

/* The durations a client chose, within the server's ceilings
 * (rdzv_state_limits); keepalive_interval itself was checked at the JOIN. */
static void ceilings(const struct rdzv_state *r, struct job *job)
{
  struct rdzv_proto_conf *cf = &job->conf;
  double max_misses;

  lower(r, job, "join_timeout", &cf->join_timeout, r->lim.max_join_timeout);
  lower(r, job, "last_call_timeout", &cf->last_call_timeout,
        r->lim.max_last_call);
  lower(r, job, "close_timeout", &cf->close_timeout,
        r->lim.max_close_timeout);
  max_misses = floor(r->lim.max_keepalive / cf->keepalive_interval);
  if (max_misses < 1)
    max_misses = 1;
  if (cf->keepalive_misses > max_misses) {
    rdzv_state__log(r, "job %s: keepalive_misses %d lowered to %d (the "
                    "server's keepalive window is at most %g s)", job->id,
                    cf->keepalive_misses, (int)max_misses,
                    r->lim.max_keepalive);
    cf->keepalive_misses = (int)max_misses;
  }
}

/* The job's incarnation: the ledger's, where an earlier server life
 * recorded it and a RESUME rebuilds the job (the same run, going on),
 * else a new one, recorded: a JOIN that creates the job starts a new run
 * (a rerun after the daemon died before it forgot the last one), so the
 * last run's tokens prove nothing in it (Note [job ledger]). */
static void job_incarnate(struct rdzv_state *r, struct job *job)
{
  struct rdzv_ledger_rec rec;

  if (r->resuming && r->ledger.get &&
      r->ledger.get(r->ledger.ctx, job->id, &rec) == 0) {
    job->incarnation = rec.incarnation;
    job->issued_round = rec.round;
    job->issued_restarts = rec.restart_count;
    return;
  }
  job->incarnation = rdzv_token_incarnation(r->tokens);
  job->issued_round = -1;
  job->issued_restarts = 0;
  if (r->ledger.put) {
    rec.incarnation = job->incarnation;
    rec.round = -1;
    rec.restart_count = 0;
    r->ledger.put(r->ledger.ctx, job->id, &rec);
  }
}

static struct job *job_create(struct rdzv_state *r,
                              const struct rdzv_proto_join *j, double now)
{
  const struct rdzv_proto_conf *cf = &j->conf;
  struct job *job = calloc(1, sizeof(*job));

  if (!job)
    return NULL;
  copy_str(job->id, sizeof job->id, j->id);
  job->h = hashtab_hash_str(r->seed, job->id);
  list_init(&job->nodes);
  list_init(&job->spares);
  list_init(&job->owed);
  list_init(&job->in_empty);
  if (timer_heap_reserve(&r->heap, JOB_TIMERS)) {
    free(job);
    return NULL;
  }
  if (hashtab_insert(&r->jobs, job->h, job)) {
    timer_heap_unreserve(&r->heap, JOB_TIMERS);
    free(job);
    return NULL;
  }
  job->conf = *cf;
  job->phase = PH_GATHERING;
  if (r->resume_hint) {
    job->round = r->resume_hint->round.round;
    job->restart_count = r->resume_hint->round.restart_count;
  }
  job_incarnate(r, job);
  job->progress_last = now;
  job->round_started = now;
  timer_heap_node_init(&job->t_last_call, T_LAST_CALL);
  timer_heap_node_init(&job->t_progress, T_PROGRESS);
  timer_heap_node_init(&job->t_owed, T_OWED);
  timer_heap_node_init(&job->t_forget, T_FORGET);
  list_insert_tail(&r->jobs_in_order, &job->in_registry);
  r->n_jobs++;
  empty_add(r, job);
  ceilings(r, job);
  /* Forgotten unless a node arrives (node_create cancels this). */
  cf = &job->conf;
  timer_heap_set(&r->heap, &job->t_forget, now + cf->close_timeout);
  rdzv_state__log(r, "job %s: created (nodes %d..%d, max_restarts %d, "
                  "join_timeout %g s, last_call %g s, close_timeout %g s, "
                  "keepalive %g s x %d)", job->id, cf->min_nodes,
                  cf->max_nodes, cf->max_restarts, cf->join_timeout,
                  cf->last_call_timeout, cf->close_timeout,
                  cf->keepalive_interval, cf->keepalive_misses);
  return job;
}


/* Ranks (rdzv_rules_rank_cmp): previous participants keep their order,
 * newcomers follow in join order. */
static int rank_cmp(const void *a, const void *b)
{
  const struct node *x = *(struct node *const *)a;
  const struct node *y = *(struct node *const *)b;

  return rdzv_rules_rank_cmp(x->prev_rank, x->seq, y->prev_rank, y->seq);
}

/* Ranks the participants and sends each its ROUND: O(N log N), the only
 * place that sorts.  The round then runs. */
static void complete_round(struct rdzv_state *r, struct job *job,
                           double now)
{
  struct list_node *pos, *next;
  struct rdzv_proto_msg m;
  struct rdzv_proto_round *rd = &m.u.round;
  struct node *n, *master;
  size_t k = 0, i;
  int offset = 0;
  bool live;

  /* Places that nobody came back for go to the waiting list. */
  while (!list_empty(&job->spares) &&
         spare_fits(job, true))
    rdzv_state__node_set_state(job,
                               list_first(&job->spares, struct node, in_spares),
                               NS_PART, false);
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    if (n->state == NS_PART) {
      job->order[k++] = n;
    } else if (n->state == NS_IDLE) {
      rdzv_state__node_set_state(job, n, NS_IDLE, false);
      n->prev_rank = -1;
    }
  }
  if (!k)
    return;
  qsort(job->order, k, sizeof(*job->order), rank_cmp);
  job->world_size = 0;
  for (i = 0; i < k; i++)
    job->world_size += job->order[i]->nproc;  /* <= sum_nproc <= INT_MAX */
  master = job->order[0];
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_ROUND;
  rd->round = job->round;
  rd->restart_count = job->restart_count;
  rd->group_world_size = (int)k;
  rd->world_size = job->world_size;
  copy_str(rd->master_addr, sizeof rd->master_addr,
           rdzv_state__node_addr(master));
  rd->master_port = master->master_port;
  live = job->conf.live && r->live.serve;
  /* Note [live store in rdzvd]: a live job's token leaves the master
   * endpoint out, so that it stays when node 0 is lost (the workers keep
   * theirs); a restart still changes it. */
  if (rdzv_token_job(r->tokens, job->id, job->incarnation,
                     live ? "" : rd->master_addr, live ? 0 : rd->master_port,
                     job->restart_count, rd->job_token))
    memset(rd->job_token, 0, sizeof rd->job_token);
  if (live && !rdzv_proto_token_none(rd->job_token))
    serve_live_store(r, job, rd);
  /* Recorded before any ROUND goes out: from now on only this round's
   * tokens prove a running claim (Note [fresh tokens]). */
  job->issued_round = job->round;
  job->issued_restarts = job->restart_count;
  if (r->ledger.put) {
    struct rdzv_ledger_rec rec = { job->incarnation, job->round,
                                   job->restart_count };

    r->ledger.put(r->ledger.ctx, job->id, &rec);
  }
  for (i = 0; r->embedded_pid && i < k; i++) {
    if (job->order[i]->pid == r->embedded_pid &&
        strcmp(job->order[i]->host, r->embedded_host) == 0) {
      rd->embedded = true;
      rd->host_rank = (int)i;
      break;
    }
  }
  for (i = 0; i < k; i++) {
    n = job->order[i];
    n->rank = (int)i;
    timer_heap_clear(&r->heap, &n->t_join);
    rd->group_rank = (int)i;
    rd->rank_offset = offset;
    offset += n->nproc;
    if (rdzv_token_running(r->tokens, job->id, job->incarnation, n->host,
                           n->pid, rd, rd->token))
      memset(rd->token, 0, sizeof rd->token);
    rdzv_state__token_store(n, rd->token);
    n->token_gathering = false;
    rdzv_reply_send(&r->sink, n->c->conn, &m);
  }
  job->phase = PH_RUNNING;
  job->restarting = false;
  job->exit_passed = false;
  job->progress_dirty = false;
  rdzv_waiting_cancel(r, job, now);   /* ROUND answered their JOINs */
  if (job->cause)
    job->cause->held = false;
  timer_heap_clear(&r->heap, &job->t_last_call);
  timer_heap_clear(&r->heap, &job->t_progress);
  metrics_round_completed(r->metrics, now - job->round_started);
  rdzv_state__log(r, "job %s: round %d complete: %zu node%s, world size %d, "
                  "master %s:%d", job->id, job->round, k, k == 1 ? "" : "s",
                  job->world_size, rd->master_addr, rd->master_port);
}

/* Completes the gathering round, or starts or cancels its last call. */
static void decide(struct rdzv_state *r, struct job *job, double now)
{
  struct rdzv_rules_job v = rules_view(job);

  if (job->rounds_spent)        /* closing: see start_round */
    return;
  switch (rdzv_rules_gather(&v, keepalive_window(job))) {
  case RDZV_GATHER_COMPLETE:
    complete_round(r, job, now);
    return;
  case RDZV_GATHER_LAST_CALL:
    if (job->phase == PH_LAST_CALL)
      return;
    job->phase = PH_LAST_CALL;
    job->deadline = now + rdzv_rules_last_call_wait(&v,
                                                    keepalive_window(job));
    timer_heap_set(&r->heap, &job->t_last_call, job->deadline);
    return;
  case RDZV_GATHER_WAIT:
    if (job->phase == PH_LAST_CALL) {
      job->phase = PH_GATHERING;
      timer_heap_clear(&r->heap, &job->t_last_call);
    }
    return;
  }
}

/* After any change to a gathering round: promote spares into free places,
 * then complete, start or cancel the last call.  Promoted nodes hear
 * WAITING, or ROUND if the round completes. */
static void recheck(struct rdzv_state *r, struct job *job, double now)
{
  size_t k = 0, i;
  struct node *n;

  if (!rdzv_state__gathering(job))
    return;
  while (!list_empty(&job->spares) &&
         spare_fits(job, false)) {
    job->order[k++] = n = list_first(&job->spares, struct node, in_spares);
    rdzv_state__node_set_state(job, n, NS_PART, false);
  }
  if (k)
    rdzv_waiting_progress(r, job, now);
  decide(r, job, now);
  for (i = 0; i < k && rdzv_state__gathering(job); i++)
    rdzv_waiting_send(r, job, job->order[i], now);
}

/* A new round: every participant of the ending one but `except` (who
 * knows already) gets RESTART with why; all of them are expected back. */
void rdzv_state__start_round(struct rdzv_state *r, struct job *job, double now,
                             const char *why, const struct node *except)
{
  struct list_node *pos, *next;
  char text[RDZV_PROTO_MAX_TEXT + 1], cancelled[RDZV_PROTO_MAX_TEXT + 1] = "";
  size_t len = 0;
  struct barrier *b;
  struct node *n;

  /* A closing job starts no round: what changed may end its wait for
   * reports (rdzv_state_tick, outside the caller's walk). */
  if (job->closing) {
    timer_heap_set(&r->heap, &job->t_last_call, now);
    return;
  }
  for (b = job->barriers; b; b = b->next)
    if (!b->done && len < sizeof cancelled)
      len += (size_t)snprintf(cancelled + len, sizeof cancelled - len,
                              "%s%s", len ? ", " : "", b->name);
  if (len)
    fmt(text, sizeof text, "%s (cancels barrier %s)", why, cancelled);
  else
    copy_str(text, sizeof text, why);
  /* Round numbers are spent (a job driven through 2^30 rounds, or
   * resumed near that): the restart goes on as any other, no round
   * completes (decide), and rdzv_state_tick closes the job, outside the
   * caller's walk, rather than send a round no peer may accept. */
  if (job->round < RDZV_PROTO_MAX_ROUND)
    job->round++;
  else
    job->rounds_spent = true;
  job->phase = PH_GATHERING;
  rdzv_state__ranks_clear(job);
  job->exit_passed = false;
  job->progress_dirty = false;
  job->progress_last = now;
  job->round_started = now;
  timer_heap_clear(&r->heap, &job->t_last_call);
  timer_heap_clear(&r->heap, &job->t_progress);
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    n->barrier = NULL;
    if (n->state != NS_PART)
      continue;
    n->prev_rank = n->rank;
    n->rank = -1;
    rdzv_state__node_set_state(job, n, NS_IDLE, true);
    if (n != except)
      send_text_cause(r, n->c->conn, RDZV_PROTO_RESTART, 0, false, text,
                      job_cause(job), job);
  }
  barriers_free(job);
  job->restarting = job->n_outstanding + job->n_spares > 0;
  rdzv_state__log(r, "job %s: restart, new round %d (restart_count %d of %d): "
                  "%s", job->id, job->round, job->restart_count,
                  job->conf.max_restarts, text);
  recheck(r, job, now);
  if (job->rounds_spent)
    timer_heap_set(&r->heap, &job->t_last_call, now);
}

/* Sends CLOSED to every node of the job and drops them; the job stays
 * close_timeout seconds so that late joiners learn it ended. */
static void end_job(struct rdzv_state *r, struct job *job, double now,
                    bool success, const char *text)
{
  job->phase = success ? PH_FINISHED : PH_CLOSED;
  job->closing = false;
  timer_heap_clear(&r->heap, &job->t_last_call);
  timer_heap_clear(&r->heap, &job->t_progress);
  timer_heap_clear(&r->heap, &job->t_owed);   /* CLOSED answers them */
  rdzv_state__log(r, "job %s: %s: %s", job->id,
                  success ? "finished" : "closed", text);
  while (!list_empty(&job->nodes)) {
    struct node *n = list_first(&job->nodes, struct node, in_job);
    void *conn = n->c->conn;

    send_text_cause(r, conn, RDZV_PROTO_CLOSED, 0, success, text,
                    success ? NULL : job_cause(job), job);
    rdzv_state__node_free(r, n);
    rdzv_state__conn_drop(r, conn);
  }
  barriers_free(job);
  timer_heap_set(&r->heap, &job->t_forget, now + job->conf.close_timeout);
}

void rdzv_state__barrier_check(struct rdzv_state *r, struct job *job,
                               struct barrier *b)
{
  struct list_node *pos, *next;
  struct rdzv_proto_msg m;
  struct node *n;

  if (b->done || b->count < job->n_part || job->rebuilding)
    return;
  b->done = true;
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_BARRIER_DONE;
  copy_str(m.u.barrier.name, sizeof m.u.barrier.name, b->name);
  m.u.barrier.round = job->round;
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    if (n->barrier == b) {
      n->barrier = NULL;
      rdzv_reply_send(&r->sink, n->c->conn, &m);
    }
  }
  if (strcmp(b->name, "exit") == 0)
    job->exit_passed = true;
  rdzv_state__log(r, "job %s: round %d: barrier %s passed by %d nodes",
                  job->id, job->round, b->name, b->count);
}

/* Repairs the job after a node that needs no new round went away. */
static void job_settle(struct rdzv_state *r, struct job *job, double now,
                       bool was_part)
{
  struct barrier *b;

  if (rdzv_state__gathering(job)) {
    if (was_part)
      rdzv_waiting_progress(r, job, now);
    /* Nobody of the previous round is left to wait for: a fresh round
     * that waits for its last call again. */
    if (!job->n_part && !job->n_outstanding)
      job->restarting = false;
    recheck(r, job, now);
  } else if (job->phase == PH_RUNNING && job->exit_passed) {
    if (!job->n_part) {
      end_job(r, job, now, true,
              "every node left after the exit barrier");
      return;
    }
    for (b = job->barriers; b; b = b->next)
      rdzv_state__barrier_check(r, job, b);
  }
  if (!job->n_nodes && !timer_heap_armed(&job->t_forget))
    timer_heap_set(&r->heap, &job->t_forget, now + job->conf.close_timeout);
}

/* Note [a lost node] (rdzv_rules.h): the job ends on its lost
 * participant (text: "<node> <why>") when the rules say so: CLOSED, with
 * the lost node's host and how it left, to every other node.  The caller
 * set job->lost_host and lost_why; they are cleared when it ends. */
static bool lost_ends(struct rdzv_state *r, struct job *job, const char *why,
                      const char *text, double now)
{
  char because[160], end[RDZV_PROTO_MAX_TEXT + 1];
  struct rdzv_rules_loss l = {
    .n_left = job->n_nodes,
    .min_nodes = job->conf.min_nodes,
    .restart_count = job->restart_count,
    .max_restarts = job->conf.max_restarts,
  };

  if (strcmp(why, "lost: connection closed") == 0)
    l.how = RDZV_LEFT_DIED;
  else if (strcmp(why, "lost: left before the exit barrier") == 0)
    l.how = RDZV_LEFT_GOODBYE;
  else if (strncmp(why, "lost: ", 6) == 0)
    l.how = RDZV_LEFT_SILENT;
  else
    return false;               /* not lost: superseded, refused */
  if (job->closing || !rdzv_rules_lost_ends(&l))
    return false;
  rdzv_rules_lost_why(&l, because, sizeof because);
  fmt(end, sizeof end, "%s (%s): %s", text, rdzv_rules_leave_name(l.how),
      because);
  end_job(r, job, now, false, end);
  job->lost_host = job->lost_why = NULL;
  return true;
}

/* Removes n (the caller logged why).  A participant of a running round
 * before its exit barrier is a lost node: the survivors start a new round
 * ("<node> <why>"); otherwise the job just settles. */
void rdzv_state__node_remove(struct rdzv_state *r, struct node *n, double now,
                             const char *why)
{
  struct job *job = n->job;
  bool was_part = n->state == NS_PART;
  char d[DESC_MAX], text[RDZV_PROTO_MAX_TEXT + 1];

  if (job->phase == PH_RUNNING && was_part && !job->exit_passed) {
    char host[RDZV_PROTO_MAX_ADDR + 1], how[RDZV_PROTO_MAX_ID + 1];

    rdzv_state__describe(n, d, sizeof d);
    fmt(text, sizeof text, "%s %s", d, why);
    /* What the RESTART tells of the loss (a launcher that cannot bring
     * the node back ends the job on it: cdrun(1)). */
    copy_str(host, sizeof host,
             n->host[0] ? n->host : rdzv_state__node_addr(n));
    if (strcmp(why, "lost: connection closed") == 0)
      copy_str(how, sizeof how, "its agent exited");
    else
      copy_str(how, sizeof how,
               strncmp(why, "lost: ", 6) == 0 ? why + 6 : why);
    rdzv_state__node_free(r, n);
    job->lost_host = host;
    job->lost_why = how;
    if (lost_ends(r, job, why, text, now))
      return;
    rdzv_state__start_round(r, job, now, text, NULL);
    job->lost_host = job->lost_why = NULL;
    if (!job->n_nodes)
      timer_heap_set(&r->heap, &job->t_forget, now + job->conf.close_timeout);
    return;
  }
  rdzv_state__node_free(r, n);
  job_settle(r, job, now, was_part);
}

static void node_lost(struct rdzv_state *r, struct node *n, double now,
                      const char *why)
{
  char d[DESC_MAX];

  rdzv_state__describe(n, d, sizeof d);
  rdzv_state__log(r, "job %s: %s %s", n->job->id, d, why);
  rdzv_state__node_remove(r, n, now, why);
}

/* ---- JOIN ---- */

static struct rdzv_rules_conf rules_conf(const struct rdzv_proto_conf *cf)
{
  struct rdzv_rules_conf rc = {
    .min_nodes = cf->min_nodes,
    .max_nodes = cf->max_nodes,
    .max_restarts = cf->max_restarts,
    .last_call_timeout = cf->last_call_timeout,
  };

  return rc;
}

/* The JOIN's configuration checked: the rules' part (rdzv_rules_conf_check),
 * then the durations only a server keeps (join, close, keepalive).
 * NULL: none; else the problem, in buf or a constant. */
static const char *conf_problem(const struct rdzv_proto_conf *cf, char *buf,
                                size_t size)
{
  struct rdzv_rules_conf rc = rules_conf(cf);

  if (rdzv_rules_conf_check(&rc, NULL, RDZV_PROTO_MAX_NODES, NULL, buf, size) !=
      RDZV_CONF_OK)
    return buf;
  if (!(cf->join_timeout > 0) || !(cf->keepalive_interval > 0) ||
      !(cf->close_timeout >= 0) || !isfinite(cf->join_timeout) ||
      !isfinite(cf->keepalive_interval) || !isfinite(cf->close_timeout))
    return "bad timeout";
  if (cf->keepalive_misses < 1)
    return "keepalive_misses < 1";
  return NULL;
}

/* A node that sent JOIN and is in no round yet (new, or back after a
 * restart) enters the gathering round or the waiting list. */
static void admit(struct rdzv_state *r, struct job *job, struct node *n,
                  double now)
{
  struct rdzv_rules_job v = rules_view(job);
  enum rdzv_rules_admission admission;
  char d[DESC_MAX], why[RDZV_PROTO_MAX_TEXT + 1];

  n->seq = ++job->seq;
  n->join_at = now;
  timer_heap_set(&r->heap, &n->t_join, now + n->join_timeout);
  /* For the log, and a new round's reason: not formatted per JOIN for
   * nothing (a round's N joins). */
  admission = rdzv_rules_admit(&v, n->expected);
  d[0] = '\0';
  if (r->sink.log || admission == RDZV_ADMIT_NEW_ROUND)
    rdzv_state__describe(n, d, sizeof d);
  switch (admission) {
  case RDZV_ADMIT_ROUND:
    rdzv_state__node_set_state(job, n, NS_PART, false);
    rdzv_state__log(r, "job %s: %s joined round %d (%d present, nodes %d..%d)",
                    job->id, d, job->round, job->n_part, job->conf.min_nodes,
                    job->conf.max_nodes);
    rdzv_waiting_progress(r, job, now);
    recheck(r, job, now);
    /* Else it got ROUND already.  Note [settled waiting] (rdzv_waiting.c). */
    if (rdzv_state__gathering(job))
      rdzv_waiting_owe(r, job, n, now);
    return;
  case RDZV_ADMIT_NEW_ROUND:
    rdzv_state__node_set_state(job, n, NS_SPARE, false);
    rdzv_state__log(r, "job %s: %s joined running round %d", job->id, d,
                    job->round);
    fmt(why, sizeof why, "%s joined", d);
    rdzv_state__start_round(r, job, now, why, NULL);
    if (n->state == NS_SPARE)   /* not promoted: still gets its answer */
      rdzv_waiting_send(r, job, n, now);
    return;
  case RDZV_ADMIT_WAIT:
    break;
  }
  rdzv_state__node_set_state(job, n, NS_SPARE, false);
  rdzv_state__log(r, "job %s: %s waiting: round %d is %s", job->id, d,
                  job->round, job->closing       ? "closing"
                              : job->exit_passed ? "finishing"
                                                 : "full");
  rdzv_waiting_send(r, job, n, now);
}

/* A newcomer's JOIN to job would put it on the waiting list. */
static bool would_wait(const struct job *job)
{
  struct rdzv_rules_job v = rules_view(job);

  return rdzv_rules_admit(&v, false) == RDZV_ADMIT_WAIT;
}

static int rejoin(struct rdzv_state *r, struct node *n,
                  const struct rdzv_proto_join *j, double now)
{
  struct job *job = n->job;

  if (n->state == NS_SPARE ||
      (n->state == NS_PART && rdzv_state__gathering(job))) {
    rdzv_waiting_send(r, job, n, now);
    return 0;
  }
  if (n->state == NS_PART)
    return rdzv_reply_refuse(
        &r->sink, n->c->conn, RDZV_PROTO_ERR_BAD_REQUEST, -EINVAL,
        "already a participant of running round %d", job->round);
  if (job->sum_nproc - n->nproc + j->nproc > INT_MAX)
    return rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_LIMIT,
                             -ENOSPC, "the job's world size would exceed %d",
                             INT_MAX);
  job->sum_nproc += j->nproc - n->nproc;
  node_fill(r, n, j);
  admit(r, job, n, now);
  return 0;
}

/* A refused JOIN: ERROR, then the connection closes; a node of the job
 * that sent it is removed first (why says how, for the others).  Returns
 * err for rdzv_state_handle. */
__attribute__((format(printf, 8, 9))) int rdzv_state__refuse_join(
    struct rdzv_state *r, void *conn, struct node *n, double now,
    const char *why, enum rdzv_proto_error_code code, int err, const char *f,
    ...)
{
  char text[RDZV_PROTO_MAX_TEXT + 1];
  va_list ap;

  va_start(ap, f);
  vsnprintf(text, sizeof text, f, ap);
  va_end(ap);
  rdzv_reply_text(&r->sink, conn, RDZV_PROTO_ERROR, code, false, text, NULL,
                  NULL, NULL);
  if (n)
    rdzv_state__node_remove(r, n, now, why);
  rdzv_state__conn_drop(r, conn);
  return err;
}

/* JOIN: refusals first (they drop the connection unless it already is
 * a node), then a re-join, or a new node (and maybe a new job).  O(1)
 * amortized unless it completes or restarts a round. */
int rdzv_state__join_node(struct rdzv_state *r, struct conn *c, void *conn,
                          const struct rdzv_proto_join *j, double now,
                          struct node **created)
{
  struct node *n = c ? c->node : NULL;
  char text[RDZV_PROTO_MAX_TEXT + 1], job_name[RDZV_PROTO_MAX_ID + 8];
  struct rdzv_rules_conf joiner, held;
  const char *problem;
  struct job *job;

  if (n && strcmp(n->job->id, j->id) != 0)
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EINVAL, "already a node of job %s", n->job->id);
  problem = !j->id[0] || strnlen(j->id, sizeof j->id) == sizeof j->id
            ? "bad id" : j->nproc < 1 ? "nproc < 1"
            : j->master_port < 1 || j->master_port > 65535 ? "bad port"
            : conf_problem(&j->conf, text, sizeof text);
  if (!problem && j->conf.keepalive_interval > r->lim.max_keepalive)
    problem = "keepalive_interval above the server's ceiling";
  if (problem && n)             /* a node stays; only this JOIN is bad */
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EINVAL, "bad join: %s", problem);
  if (problem)
    return rdzv_state__refuse_join(r, conn, NULL, now, NULL,
                                   RDZV_PROTO_ERR_BAD_REQUEST, -EINVAL,
                                   "bad join: %s", problem);
  job = n ? n->job : rdzv_state__job_find(r, j->id);
  if (job && (job->phase == PH_CLOSED || job->phase == PH_FINISHED))
    return rdzv_state__refuse_join(
        r, conn, NULL, now, NULL, RDZV_PROTO_ERR_CLOSED, -ESHUTDOWN,
        "job %s %s", job->id,
        job->phase == PH_CLOSED ? "is closed" : "has finished");
  joiner = rules_conf(&j->conf);
  held = job ? rules_conf(&job->conf) : joiner;
  fmt(job_name, sizeof job_name, "job %s", job ? job->id : "");
  switch (rdzv_rules_conf_check(&joiner, &held, RDZV_PROTO_MAX_NODES, job_name,
                                text, sizeof text)) {
  case RDZV_CONF_NODES_DIFFER:
    rdzv_state__log(r,
                    "job %s: refused a join (%.*s, pid %" PRId64 "): "
                    "config mismatch: nodes %d..%d, the job has %d..%d",
                    job->id, RDZV_PROTO_MAX_ADDR, j->host, j->pid,
                    j->conf.min_nodes, j->conf.max_nodes, job->conf.min_nodes,
                    job->conf.max_nodes);
    return rdzv_state__refuse_join(r, conn, n, now, "lost: config mismatch",
                                   RDZV_PROTO_ERR_CONFIG_MISMATCH, -EINVAL,
                                   "%s", text);
  case RDZV_CONF_RESTARTS_DIFFER:
    rdzv_state__log(r, "job %s: refused a join (%.*s, pid %" PRId64 "): "
                    "config mismatch: max_restarts %d, the job has %d",
                    job->id, RDZV_PROTO_MAX_ADDR, j->host, j->pid,
                    j->conf.max_restarts, job->conf.max_restarts);
    return rdzv_state__refuse_join(r, conn, n, now, "lost: config mismatch",
                                   RDZV_PROTO_ERR_CONFIG_MISMATCH, -EINVAL,
                                   "%s", text);
  case RDZV_CONF_OK:
  case RDZV_CONF_BAD:           /* refused above */
    break;
  }
  if (n)
    return rejoin(r, n, j, now);
  if (rdzv_tenant_check(r, c ? c : rdzv_state__conn_get(r, conn, false),
                        !job, job && would_wait(job), text, sizeof text)) {
    rdzv_state__log(r, "job %s: refused a join (%.*s, pid %" PRId64 "): %s",
                    j->id, RDZV_PROTO_MAX_ADDR, j->host, j->pid, text);
    return rdzv_state__refuse_join(r, conn, NULL, now, NULL,
                                   RDZV_PROTO_ERR_LIMIT, -ENOSPC, "%s",
                                   text);
  }
  if (!job && r->n_jobs >= r->lim.max_jobs && !list_empty(&r->empty)) {
    struct job *oldest = list_first(&r->empty, struct job, in_empty);

    rdzv_state__log(r, "job %s: forgotten early: the job table is full (%d "
                    "jobs) and it has had no node for longest",
                    oldest->id, r->lim.max_jobs);
    job_forget(r, oldest);
    job_free(r, oldest);
  }
  if (!job && r->n_jobs >= r->lim.max_jobs) {
    struct job *victim = rdzv_tenant_reclaimable(r);

    if (victim) {
      rdzv_state__log(r, "job %s: reclaimed: the job table is full (%d "
                      "jobs) and it never ran", victim->id, r->lim.max_jobs);
      end_job(r, victim, now, false, "reclaimed: the rendezvous's job "
              "table is full and this job never ran");
      job_forget(r, victim);
      job_free(r, victim);
    }
  }
  if (!job && r->n_jobs >= r->lim.max_jobs)
    return rdzv_state__refuse_join(r, conn, NULL, now, NULL,
                                   RDZV_PROTO_ERR_LIMIT, -ENOSPC,
                                   "too many jobs (%d)", r->lim.max_jobs);
  if (job && (job->n_nodes >= RDZV_PROTO_MAX_NODES ||
              job->sum_nproc + j->nproc > INT_MAX))
    return rdzv_state__refuse_join(r, conn, NULL, now, NULL,
                                   RDZV_PROTO_ERR_LIMIT, -ENOSPC,
                                   "job %s is too large", job->id);
  c = c ? c : rdzv_state__conn_get(r, conn, true);
  if (!job) {
    job = job_create(r, j, now);
    if (job && c)
      job->tenant = rdzv_tenant_ref(r, c->peer);
  }
  n = job && c ? node_create(r, job, c, j, now) : NULL;
  if (!n)
    return rdzv_state__refuse_join(r, conn, NULL, now, NULL,
                                   RDZV_PROTO_ERR_LIMIT, -ENOMEM,
                                   "out of memory");
  if (created) {                /* RESUME: the caller places it */
    *created = n;
    return 0;
  }
  admit(r, job, n, now);
  return 0;
}

static int on_join(struct rdzv_state *r, struct conn *c, void *conn,
                   const struct rdzv_proto_join *j, double now)
{
  return rdzv_state__join_node(r, c, conn, j, now, NULL);
}

/* ---- FAILURE, BARRIER, LEAVE ---- */

/* Note [root cause] (rdzv_state.h): offers n's report as the round's
 * root cause: it wins when it is the first, or when it exited before the
 * timed one held.  An untimed report (an older agent's) holds its place
 * against later ones, as every report did before the times came. */
static void cause_offer(struct job *job, const struct node *n,
                        const struct rdzv_proto_failure *f)
{
  struct job_cause *jc = job->cause;
  char d[DESC_MAX];

  if (!jc && !(jc = job->cause = calloc(1, sizeof(*jc))))
    return;                     /* out of memory: the texts say less */
  if (jc->held && (jc->cause.exited_at <= 0 ||
                   f->cause.exited_at <= 0 ||
                   f->cause.exited_at >= jc->cause.exited_at))
    return;
  rdzv_state__describe(n, d, sizeof d);
  jc->held = true;
  jc->cause = f->cause;
  if (f->cause.exited_at > 0 && !jc->cause.host[0])
    copy_str(jc->cause.host, sizeof jc->cause.host, n->host);
  fmt(jc->text, sizeof jc->text, "%s workers failed: %.*s", d,
      RDZV_PROTO_MAX_TEXT, f->message);
}

/* The participants of a closing job whose report has not come. */
static int closing_pending(const struct job *job)
{
  struct list_node *pos, *next;
  const struct node *n;
  int pending = 0;

  /* A detached node (rdzv_state_conn_reset) cannot report now: not
   * waited for. */
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    pending += n->state == NS_PART && !n->reported && n->c->conn;
  }
  return pending;
}

static void closing_end(struct rdzv_state *r, struct job *job, double now)
{
  char text[RDZV_PROTO_MAX_TEXT + 1];
  int pending = closing_pending(job);

  if (job->closing_exhausted)
    fmt(text, sizeof text, "%.*s; no restarts left (%d of %d used)",
        RDZV_PROTO_MAX_TEXT, cause_text(job), job->restart_count,
        job->conf.max_restarts);
  else
    copy_str(text, sizeof text, cause_text(job));
  if (pending)
    rdzv_state__log(r, "job %s: %d node%s did not report within the wait; "
                    "closing", job->id, pending, pending == 1 ? "" : "s");
  end_job(r, job, now, false, text);
}

/* A failure ends the job: the CLOSED waits until every participant of
 * the round reported its own (the earliest of them is the root cause),
 * or one keepalive window (how long a silent node may still be alive) but
 * never more than CLOSE_WAIT_MAX (a job with a long keepalive window would
 * otherwise hold its nodes for minutes), whichever comes first.
 * Participants that are healthy hear CLOSED when the wait ends. */
static void closing_start(struct rdzv_state *r, struct job *job,
                          struct node *reporter, bool exhausted, double now)
{
  struct list_node *pos, *next;
  struct node *n;

  job->closing = true;
  job->closing_exhausted = exhausted;
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    n->reported = n == reporter;
  }
  job->closing_deadline = now + fmin(CLOSE_WAIT_MAX,
                                     job->conf.keepalive_interval *
                                     job->conf.keepalive_misses);
  if (!closing_pending(job)) {
    closing_end(r, job, now);
    return;
  }
  rdzv_state__log(r, "job %s: closing: waiting up to %g s for %d more failure "
                  "report%s", job->id, job->closing_deadline - now,
                  closing_pending(job), closing_pending(job) == 1 ? "" : "s");
  timer_heap_set(&r->heap, &job->t_last_call, job->closing_deadline);
}

/* FAILURE: a restart, counted once per round, or the end of the job. */
static int on_failure(struct rdzv_state *r, struct node *n,
                      const struct rdzv_proto_failure *f, double now)
{
  enum rdzv_rules_failure verdict;
  struct job *job = n->job;
  char d[DESC_MAX];

  rdzv_state__describe(n, d, sizeof d);
  /* Only a node with workers in this job may end or restart it: a
   * participant of the current round, or one of the round that just
   * ended whose report crossed our RESTART (expected back).  A node on
   * the waiting list, or one the last round went on without, has no
   * workers to report on. */
  if (n->state != NS_PART && !(n->state == NS_IDLE && n->expected)) {
    rdzv_state__log(r, "job %s: refused a failure report from %s: not a "
                    "participant of round %d", job->id, d, job->round);
    return rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EPERM,
                             "failure report refused: not a participant of "
                             "round %d of job %s",
                             job->round, job->id);
  }
  cause_offer(job, n, f);
  if (job->closing) {
    n->reported = true;
    rdzv_state__log(r, "job %s: %s workers failed too%s: %.*s", job->id, d,
                    f->final ? " (final)" : "", RDZV_PROTO_MAX_TEXT,
                    f->message);
    if (!closing_pending(job))
      closing_end(r, job, now);
    return 0;
  }
  verdict = rdzv_rules_failure(f->final, job->restart_count,
                               job->conf.max_restarts);
  if (job->phase == PH_RUNNING && n->state == NS_PART &&
      verdict != RDZV_FAILURE_RESTART) {
    rdzv_state__log(r, "job %s: %s workers failed%s: %.*s", job->id, d,
                    f->final ? " (final)" : "", RDZV_PROTO_MAX_TEXT,
                    f->message);
    closing_start(r, job, n, verdict == RDZV_FAILURE_CLOSE_EXHAUSTED, now);
  } else if (f->final) {
    end_job(r, job, now, false, cause_text(job));
  } else if (job->phase != PH_RUNNING || n->state != NS_PART) {
    /* The round already ended: this failure is part of that restart. */
    rdzv_state__log(r,
                    "job %s: %s workers failed in round %d (already "
                    "restarting): %.*s",
                    job->id, d, job->round, RDZV_PROTO_MAX_TEXT, f->message);
  } else {
    job->restart_count++;
    metrics_restart(r->metrics);
    rdzv_state__start_round(r, job, now, cause_text(job), n);
  }
  return 0;
}

/* BARRIER: a node waits in at most one barrier; a repeat is harmless, and
 * one for a barrier that already completed is answered at once. */
static int on_barrier(struct rdzv_state *r, struct node *n,
                      const struct rdzv_proto_barrier *m)
{
  struct job *job = n->job;
  void *conn = n->c->conn;
  struct barrier *b;
  struct rdzv_proto_msg done;

  if (job->phase != PH_RUNNING || n->state != NS_PART ||
      m->round != job->round)
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EINVAL,
                             "barrier %.*s for round %d: not a participant of "
                             "a running round %d",
                             RDZV_PROTO_MAX_ID, m->name, m->round, job->round);
  for (b = job->barriers; b; b = b->next)
    if (strncmp(b->name, m->name, sizeof b->name) == 0)
      break;
  if (!b) {
    if (job->n_barriers >= MAX_BARRIERS)
      return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_LIMIT, -ENOSPC,
                               "too "
                               "many barriers in round %d",
                               job->round);
    b = calloc(1, sizeof(*b));
    if (!b)
      return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_LIMIT, -ENOMEM,
                               "out of "
                               "memory");
    copy_str(b->name, sizeof b->name, m->name);
    b->next = job->barriers;
    job->barriers = b;
    job->n_barriers++;
  }
  if (b->done) {                /* a repeat after it completed */
    memset(&done, 0, sizeof done);
    done.op = RDZV_PROTO_BARRIER_DONE;
    done.u.barrier = *m;
    rdzv_reply_send(&r->sink, conn, &done);
    return 0;
  }
  if (n->barrier == b)
    return 0;
  if (n->barrier)
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EINVAL, "already waiting in barrier %s",
                             n->barrier->name);
  n->barrier = b;
  b->count++;
  rdzv_state__barrier_check(r, job, b);
  return 0;
}

/* LEAVE: quiet after the exit barrier, a lost node before it. */
static int on_leave(struct rdzv_state *r, struct node *n, double now)
{
  struct job *job = n->job;
  char d[DESC_MAX];

  if (job->phase == PH_RUNNING && n->state == NS_PART && !job->exit_passed) {
    node_lost(r, n, now, "lost: left before the exit barrier");
    return 0;
  }
  rdzv_state__describe(n, d, sizeof d);
  rdzv_state__log(r, "job %s: %s left", job->id, d);
  rdzv_state__node_remove(r, n, now, "left");
  return 0;
}

/* ---- STATUS (the report itself: status_render.c) ---- */

static int on_status(struct rdzv_state *r, void *conn,
                     const struct rdzv_proto_status_req *q, double now)
{
  struct rdzv_proto_msg m;
  cJSON *st;
  char *s;
  int err;

  st = rdzv_state_status_query(r, q, now, &err);
  if (!st && err == -ENOENT)
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST, err,
                             "no job "
                             "%.*s",
                             RDZV_PROTO_MAX_ID, q->job);
  s = st ? cJSON_PrintUnformatted(st) : NULL;
  cJSON_Delete(st);
  if (!s)
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_LIMIT, -ENOMEM,
                             "out of "
                             "memory");
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_STATUS_REPLY;
  m.u.status_json = s;
  rdzv_reply_send(&r->sink, conn, &m);
  cJSON_free(s);
  return 0;
}

/* ---- entry points ---- */

void rdzv_state_limits_default(struct rdzv_state_limits *l)
{
  if (l->max_jobs <= 0)
    l->max_jobs = DEF_MAX_JOBS;
  if (l->max_jobs_per_peer <= 0)
    l->max_jobs_per_peer = DEF_MAX_JOBS_PER_PEER;
  if (l->max_waiting_per_peer <= 0)
    l->max_waiting_per_peer = DEF_MAX_WAITING_PER_PEER;
  if (l->max_keys_per_job <= 0)
    l->max_keys_per_job = DEF_MAX_KEYS;
  if (!l->max_kv_bytes)
    l->max_kv_bytes = DEF_MAX_KV_BYTES;
  if (!l->max_kv_total)
    l->max_kv_total = DEF_MAX_KV_TOTAL;
  if (!(l->max_join_timeout > 0))
    l->max_join_timeout = DEF_MAX_JOIN_TIMEOUT;
  if (!(l->max_last_call > 0))
    l->max_last_call = DEF_MAX_LAST_CALL;
  if (!(l->max_close_timeout > 0))
    l->max_close_timeout = DEF_MAX_CLOSE_TIMEOUT;
  if (!(l->max_keepalive > 0))
    l->max_keepalive = DEF_MAX_KEEPALIVE;
  if (!(l->resume_grace > 0))
    l->resume_grace = DEF_RESUME_GRACE;
}

struct rdzv_state *rdzv_state_create(const struct rdzv_state_sink *sink,
                                     const struct rdzv_state_limits *limits)
{
  struct rdzv_state *r = calloc(1, sizeof(*r));

  if (!r)
    return NULL;
  r->sink = *sink;
  if (limits)
    r->lim = *limits;
  rdzv_state_limits_default(&r->lim);
  r->seed = hashtab_mix64((uint64_t)(uintptr_t)r);
  r->tokens = rdzv_token_key_new(NULL);
  if (!r->tokens) {
    free(r);
    return NULL;
  }
  list_init(&r->jobs_in_order);
  list_init(&r->empty);
  return r;
}

void rdzv_state_destroy(struct rdzv_state *r)
{
  size_t i;

  if (!r)
    return;
  enter(r, "rdzv_state_destroy");
  while (!list_empty(&r->jobs_in_order))
    job_free(r, list_first(&r->jobs_in_order, struct job, in_registry));
  for (i = 0; i < r->conns.cap; i++)
    free(r->conns.s[i].item);
  free(r->conns.s);
  free(r->jobs.s);
  free(r->tenants.s);
  timer_heap_free(&r->heap);
  rdzv_token_key_free(r->tokens);
  free(r);
}

void rdzv_state_set_ledger(struct rdzv_state *r, const struct rdzv_ledger *l)
{
  if (l)
    r->ledger = *l;
  else
    memset(&r->ledger, 0, sizeof r->ledger);
}

void rdzv_state_set_live_host(struct rdzv_state *r,
                              const struct rdzv_live_host *h)
{
  if (h)
    r->live = *h;
  else
    memset(&r->live, 0, sizeof r->live);
}

int rdzv_state_set_token_key(struct rdzv_state *r,
                             const struct rdzv_auth_secret *file)
{
  struct rdzv_token_key *k = rdzv_token_key_new(file);

  if (!k)
    return -ENOMEM;
  rdzv_token_key_free(r->tokens);
  r->tokens = k;
  return 0;
}

static int handle(struct rdzv_state *r, void *conn,
                  const struct rdzv_proto_msg *m, double now)
{
  struct conn *c = rdzv_state__conn_get(r, conn, false);
  struct node *n = c ? c->node : NULL;

  if (!isfinite(now))
    return -EINVAL;
  if (c && c->dropped)
    return -ENOTCONN;
  if (n)
    n->last_seen = now;         /* any message is a sign of life */
  switch (m->op) {
  case RDZV_PROTO_JOIN:
    return on_join(r, c, conn, &m->u.join, now);
  case RDZV_PROTO_RESUME:
    return rdzv_resume_handle(r, c, conn, &m->u.resume, now);
  case RDZV_PROTO_STATUS:
    return on_status(r, conn, &m->u.status, now);
  case RDZV_PROTO_KEEPALIVE:
  case RDZV_PROTO_FAILURE:
  case RDZV_PROTO_BARRIER:
  case RDZV_PROTO_LEAVE:
  case RDZV_PROTO_KV_SET:
  case RDZV_PROTO_KV_GET:
  case RDZV_PROTO_KV_ADD:
    break;
  default:
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EINVAL, "unexpected message (op %d)", (int)m->op);
  }
  if (!n)
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_NOT_JOINED,
                             -ENOTCONN, "not joined: send JOIN first");
  switch (m->op) {
  case RDZV_PROTO_KEEPALIVE:
    {
      struct rdzv_proto_msg pong;

      memset(&pong, 0, sizeof pong);
      pong.op = RDZV_PROTO_PONG;
      rdzv_reply_send(&r->sink, conn, &pong);
      return 0;
    }
  case RDZV_PROTO_FAILURE:
    return on_failure(r, n, &m->u.failure, now);
  case RDZV_PROTO_BARRIER:
    return on_barrier(r, n, &m->u.barrier);
  case RDZV_PROTO_LEAVE:
    return on_leave(r, n, now);
  default:
    return kv_store_handle(r, n, m, now);
  }
}

int rdzv_state_handle(struct rdzv_state *r, void *conn,
                      const struct rdzv_proto_msg *m, double now)
{
  int rc;

  enter(r, "rdzv_state_handle");
  rc = handle(r, conn, m, now);
  leave(r);
  return rc;
}

void rdzv_state_set_peer_addr(struct rdzv_state *r, void *conn,
                              const char *addr)
{
  struct conn *c;

  enter(r, "rdzv_state_set_peer_addr");
  c = rdzv_state__conn_get(r, conn, true);
  if (c && addr)
    copy_str(c->peer, sizeof c->peer, addr);
  leave(r);
}

void rdzv_state_conn_closed(struct rdzv_state *r, void *conn, double now)
{
  struct conn *c;

  enter(r, "rdzv_state_conn_closed");
  c = rdzv_state__conn_get(r, conn, false);
  if (c) {
    if (c->node)
      node_lost(r, c->node, now, "lost: connection closed");
    hashtab_remove(&r->conns, c->h, c);
    free(c);
  }
  leave(r);
}

/* Note [soft state]: a running participant whose connection was reset
 * stays a member, detached (a placeholder connection with conn NULL: it
 * is sent nothing), until its keepalive window ends; a RESUME from the
 * same agent within it takes it back (reattach). */
void rdzv_state_conn_reset(struct rdzv_state *r, void *conn, double now)
{
  struct conn *c, *ph;
  struct node *n;
  char d[DESC_MAX];

  enter(r, "rdzv_state_conn_reset");
  c = rdzv_state__conn_get(r, conn, false);
  n = c ? c->node : NULL;
  if (n && !c->dropped && n->job->phase == PH_RUNNING &&
      n->state == NS_PART && (ph = calloc(1, sizeof(*ph)))) {
    copy_str(ph->peer, sizeof ph->peer, c->peer);
    ph->node = n;
    n->c = ph;
    c->node = NULL;
    rdzv_state__describe(n, d, sizeof d);
    rdzv_state__log(r, "job %s: %s connection reset: still a member until its "
                    "keepalive window ends (%g s after it was last heard)",
                    n->job->id, d, n->alive_window);
  }
  if (c) {
    if (c->node)
      node_lost(r, c->node, now, "lost: connection reset");
    hashtab_remove(&r->conns, c->h, c);
    free(c);
  }
  leave(r);
}

/* Note [timers]: dead only if silent for the whole period; else the
 * timer moves to the end of the node's current period. */
static void on_alive_timer(struct rdzv_state *r, struct node *n, double now)
{
  double period = n->alive_window;
  char why[64];

  if (now < n->last_seen + period) {
    timer_heap_set(&r->heap, &n->t_alive, n->last_seen + period);
    return;
  }
  void *conn = n->c->conn;

  fmt(why, sizeof why, "lost: no keepalive for %.1f s", now - n->last_seen);
  node_lost(r, n, now, why);
  /* The node is out of the job: say so and close, so that an agent that
   * was only suspended learns it at once instead of hanging on. */
  rdzv_state__send_text(r, conn, RDZV_PROTO_ERROR, RDZV_PROTO_ERR_JOIN_TIMEOUT,
                        false,
                        "expelled: no keepalive within the keepalive window");
  rdzv_state__conn_drop(r, conn);
}

static void on_join_timer(struct rdzv_state *r, struct node *n, double now)
{
  struct job *job = n->job;
  void *conn = n->c->conn;
  char d[DESC_MAX], text[RDZV_PROTO_MAX_TEXT + 1];

  if (n->state == NS_SPARE && !rdzv_state__gathering(job))
    fmt(text, sizeof text, "waited %g s: round %d is full (%d of at most "
        "%d nodes)", n->join_timeout, job->round, job->n_part,
        job->conf.max_nodes);
  else
    fmt(text, sizeof text, "waited %g s: %d of at least %d nodes present",
        n->join_timeout, job->n_part, job->conf.min_nodes);
  rdzv_state__describe(n, d, sizeof d);
  rdzv_state__log(r, "job %s: %s: join timeout: %s", job->id, d, text);
  rdzv_state__send_text(r, conn, RDZV_PROTO_ERROR, RDZV_PROTO_ERR_JOIN_TIMEOUT,
                        false, text);
  rdzv_state__node_remove(r, n, now, "join timeout");
  rdzv_state__conn_drop(r, conn);
}


static double tick(struct rdzv_state *r, double now)
{
  struct job *job;

  struct timer_heap_node *t;

  while ((t = timer_heap_top(&r->heap)) && t->at <= now) {
    timer_heap_clear(&r->heap, t);
    switch (t->kind) {
    case T_LAST_CALL:
      job = container_of(t, struct job, t_last_call);
      if (job->closing && (now >= job->closing_deadline ||
                           !closing_pending(job)))
        closing_end(r, job, now);
      else if (job->closing)
        timer_heap_set(&r->heap, &job->t_last_call, job->closing_deadline);
      else if (job->rounds_spent && job->phase != PH_CLOSED &&
          job->phase != PH_FINISHED)
        end_job(r, job, now, false, "the job's round numbers are spent "
                "(no round after " ROUND_LIMIT_TEXT ")");
      else if (job->phase == PH_LAST_CALL)
        complete_round(r, job, now);
      else if (job->phase == PH_RUNNING && job->rebuilding)
        rdzv_resume_expired(r, job, now);
      break;
    case T_PROGRESS:
      rdzv_waiting_progress_timer(r, container_of(t, struct job, t_progress),
                                  now);
      break;
    case T_OWED:
      rdzv_waiting_settled(r, container_of(t, struct job, t_owed), now);
      break;
    case T_FORGET:
      job = container_of(t, struct job, t_forget);
      if (!job->n_nodes) {
        rdzv_state__log(r, "job %s: forgotten", job->id);
        job_forget(r, job);
        job_free(r, job);
      }
      break;
    case T_JOIN:
      on_join_timer(r, container_of(t, struct node, t_join), now);
      break;
    case T_ALIVE:
      on_alive_timer(r, container_of(t, struct node, t_alive), now);
      break;
    case T_KV_WAIT:
      kv_store_timeout(r, container_of(t, struct waiter, t));
      break;
    }
  }
  t = timer_heap_top(&r->heap);
  return t ? t->at : -1;
}

double rdzv_state_tick(struct rdzv_state *r, double now)
{
  double next;

  if (!isfinite(now))
    return -1;
  enter(r, "rdzv_state_tick");
  next = tick(r, now);
  leave(r);
  return next;
}

void rdzv_state_peer_counts(const struct rdzv_state *r, int *peers,
                            uint64_t *refused_jobs, uint64_t *refused_waiting)
{
  *peers = r->n_tenants;
  *refused_jobs = r->peer_refusals[TENANT_JOBS];
  *refused_waiting = r->peer_refusals[TENANT_WAITING];
}

int rdzv_state_job_count(const struct rdzv_state *r)
{
  return r->n_jobs;
}

int rdzv_state_node_count(const struct rdzv_state *r)
{
  return r->n_nodes;
}

void rdzv_state_set_embedded(struct rdzv_state *r, int64_t pid,
                             const char *host)
{
  r->embedded_pid = pid;
  copy_str(r->embedded_host, sizeof r->embedded_host, host ? host : "");
}

void rdzv_state_set_metrics(struct rdzv_state *r, struct rdzvd_metrics *m)
{
  r->metrics = m;
}

void rdzv_state_jobs_by_phase(const struct rdzv_state *r,
                              int counts[RDZV_STATE_PHASES],
                              const char *names[RDZV_STATE_PHASES])
{
  struct list_node *pos, *next;
  const struct job *job;
  int i;

  _Static_assert(PH_FINISHED + 1 == RDZV_STATE_PHASES,
                 "RDZV_STATE_PHASES: every phase");
  for (i = 0; i < RDZV_STATE_PHASES; i++) {
    counts[i] = 0;
    names[i] = status_render_phase_name((enum phase)i);
  }
  list_for_each_safe(pos, next, &r->jobs_in_order) {
    job = list_entry(pos, struct job, in_registry);
    counts[job->phase]++;
  }
}
