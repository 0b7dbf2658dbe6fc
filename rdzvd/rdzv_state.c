/* rdzv_state.c -- the rendezvous state machine (see rdzv_state.h): its
 * registry (jobs, nodes, connections), the entry points, which dispatch
 * each message to its file (rdzv_join.c, rdzv_round.c, rdzv_failure.c,
 * rdzv_resume.c, kv_store.c), and the timers. */
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
#define ROUND_LIMIT_TEXT "1073741824" /* RDZV_PROTO_MAX_ROUND */
_Static_assert(RDZV_PROTO_MAX_ROUND == 1073741824, "ROUND_LIMIT_TEXT");


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

void rdzv_state__copy_str(char *dst, size_t size, const char *src)
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
struct rdzv_rules_job rdzv_state__rules_view(const struct job *job)
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


/* cause: the job's root cause (RESTART, CLOSED), or NULL; job: a
 * RESTART's job, for the participant it lost (or NULL). */
void rdzv_state__send_text_cause(const struct rdzv_state *r, void *conn,
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
  rdzv_state__send_text_cause(r, conn, op, code, success, text, NULL, NULL);
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
void rdzv_state__empty_add(struct rdzv_state *r, struct job *job)
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
void rdzv_state__empty_remove(struct rdzv_state *r, struct job *job)
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
    rdzv_state__empty_add(r, job);
}




void rdzv_state__barriers_free(struct job *job)
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
void rdzv_state__job_forget(struct rdzv_state *r, struct job *job)
{
  if (r->ledger.drop)
    r->ledger.drop(r->ledger.ctx, job->id);
}


void rdzv_state__job_free(struct rdzv_state *r, struct job *job)
{
  if (job->live_served && r->live.drop)
    r->live.drop(r->live.ctx, job->id);
  while (!list_empty(&job->nodes))
    rdzv_state__node_free(r, list_first(&job->nodes, struct node, in_job));
  rdzv_state__barriers_free(job);
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
  return hashtab_find(&r->jobs, hashtab_hash_str(r->seed, id), id,
                      rdzv_state__job_eq);
}

































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
    rdzv_state__job_free(r, list_first(&r->jobs_in_order, struct job,
                                       in_registry));
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
    return rdzv_join_handle(r, c, conn, &m->u.join, now);
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
    return rdzv_failure_handle(r, n, &m->u.failure, now);
  case RDZV_PROTO_BARRIER:
    return rdzv_round_barrier(r, n, &m->u.barrier);
  case RDZV_PROTO_LEAVE:
    return rdzv_round_leave(r, n, now);
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
    rdzv_state__copy_str(c->peer, sizeof c->peer, addr);
  leave(r);
}

void rdzv_state_conn_closed(struct rdzv_state *r, void *conn, double now)
{
  struct conn *c;

  enter(r, "rdzv_state_conn_closed");
  c = rdzv_state__conn_get(r, conn, false);
  if (c) {
    if (c->node)
      rdzv_round_node_lost(r, c->node, now, "lost: connection closed");
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
    rdzv_state__copy_str(ph->peer, sizeof ph->peer, c->peer);
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
      rdzv_round_node_lost(r, c->node, now, "lost: connection reset");
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
  rdzv_round_node_lost(r, n, now, why);
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
  rdzv_round_node_remove(r, n, now, "join timeout");
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
                           !rdzv_failure_closing_pending(job)))
        rdzv_failure_closing_end(r, job, now);
      else if (job->closing)
        timer_heap_set(&r->heap, &job->t_last_call, job->closing_deadline);
      else if (job->rounds_spent && job->phase != PH_CLOSED &&
          job->phase != PH_FINISHED)
        rdzv_round_end_job(r, job, now, false,
                           "the job's round numbers are spent "
                           "(no round after " ROUND_LIMIT_TEXT ")");
      else if (job->phase == PH_LAST_CALL)
        rdzv_round_complete(r, job, now);
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
        rdzv_state__job_forget(r, job);
        rdzv_state__job_free(r, job);
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
  rdzv_state__copy_str(r->embedded_host, sizeof r->embedded_host,
                       host ? host : "");
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
