/* rdzv_join.c -- JOIN: a job created by its first joiner, its
 * configuration checked against every later one, a node admitted to the
 * round, the waiting list or refused.  Part of the state machine
 * (rdzv_state.h); its private types are in rdzv_state_int.h. */
#include "rdzv_state_int.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "rdzv_reply.h"
#include "rdzv_rules.h"

/* A node's own durations: its JOIN's, within the server's ceilings (as
 * ceilings() applies them to the job's configuration). */
static void node_fill(const struct rdzv_state *r, struct node *n,
                      const struct rdzv_proto_join *j)
{
  const struct rdzv_proto_conf *cf = &j->conf;
  double misses = fmax(1, floor(r->lim.max_keepalive /
                                cf->keepalive_interval));

  rdzv_state__copy_str(n->host, sizeof n->host, j->host);
  rdzv_state__copy_str(n->addr, sizeof n->addr, j->addr);
  n->pid = j->pid;
  n->nproc = j->nproc;
  n->master_port = j->master_port;
  n->join_timeout = fmin(cf->join_timeout, r->lim.max_join_timeout);
  n->alive_window = rdzv_rules_keepalive_window(
      cf->keepalive_interval, (int)fmin(cf->keepalive_misses, misses));
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
  rdzv_state__empty_remove(r, job);
  timer_heap_clear(&r->heap, &job->t_forget);
  return n;
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
  rdzv_state__copy_str(job->id, sizeof job->id, j->id);
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
  rdzv_state__empty_add(r, job);
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
  struct rdzv_rules_job v = rdzv_state__rules_view(job);
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
    rdzv_round_recheck(r, job, now);
    /* Else it got ROUND already.  Note [settled waiting] (rdzv_waiting.c). */
    if (rdzv_state__gathering(job))
      rdzv_waiting_owe(r, job, n, now);
    return;
  case RDZV_ADMIT_NEW_ROUND:
    rdzv_state__node_set_state(job, n, NS_SPARE, false);
    rdzv_state__log(r, "job %s: %s joined running round %d", job->id, d,
                    job->round);
    snprintf(why, sizeof why, "%s joined", d);
    rdzv_round_start(r, job, now, why, NULL);
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
  struct rdzv_rules_job v = rdzv_state__rules_view(job);

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
__attribute__((format(printf, 8, 9))) int rdzv_join_refuse(
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
    rdzv_round_node_remove(r, n, now, why);
  rdzv_state__conn_drop(r, conn);
  return err;
}
/* JOIN: refusals first (they drop the connection unless it already is
 * a node), then a re-join, or a new node (and maybe a new job).  O(1)
 * amortized unless it completes or restarts a round. */
int rdzv_join_node(struct rdzv_state *r, struct conn *c, void *conn,
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
    return rdzv_join_refuse(r, conn, NULL, now, NULL,
                            RDZV_PROTO_ERR_BAD_REQUEST, -EINVAL,
                            "bad join: %s", problem);
  job = n ? n->job : rdzv_state__job_find(r, j->id);
  if (job && (job->phase == PH_CLOSED || job->phase == PH_FINISHED))
    return rdzv_join_refuse(
        r, conn, NULL, now, NULL, RDZV_PROTO_ERR_CLOSED, -ESHUTDOWN,
        "job %s %s", job->id,
        job->phase == PH_CLOSED ? "is closed" : "has finished");
  joiner = rules_conf(&j->conf);
  held = job ? rules_conf(&job->conf) : joiner;
  snprintf(job_name, sizeof job_name, "job %s", job ? job->id : "");
  switch (rdzv_rules_conf_check(&joiner, &held, RDZV_PROTO_MAX_NODES, job_name,
                                text, sizeof text)) {
  case RDZV_CONF_NODES_DIFFER:
    rdzv_state__log(r,
                    "job %s: refused a join (%.*s, pid %" PRId64 "): "
                    "config mismatch: nodes %d..%d, the job has %d..%d",
                    job->id, RDZV_PROTO_MAX_ADDR, j->host, j->pid,
                    j->conf.min_nodes, j->conf.max_nodes, job->conf.min_nodes,
                    job->conf.max_nodes);
    return rdzv_join_refuse(r, conn, n, now, "lost: config mismatch",
                            RDZV_PROTO_ERR_CONFIG_MISMATCH, -EINVAL,
                            "%s", text);
  case RDZV_CONF_RESTARTS_DIFFER:
    rdzv_state__log(r, "job %s: refused a join (%.*s, pid %" PRId64 "): "
                    "config mismatch: max_restarts %d, the job has %d",
                    job->id, RDZV_PROTO_MAX_ADDR, j->host, j->pid,
                    j->conf.max_restarts, job->conf.max_restarts);
    return rdzv_join_refuse(r, conn, n, now, "lost: config mismatch",
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
    return rdzv_join_refuse(r, conn, NULL, now, NULL,
                            RDZV_PROTO_ERR_LIMIT, -ENOSPC, "%s",
                            text);
  }
  if (!job && r->n_jobs >= r->lim.max_jobs && !list_empty(&r->empty)) {
    struct job *oldest = list_first(&r->empty, struct job, in_empty);

    rdzv_state__log(r, "job %s: forgotten early: the job table is full (%d "
                    "jobs) and it has had no node for longest",
                    oldest->id, r->lim.max_jobs);
    rdzv_state__job_forget(r, oldest);
    rdzv_state__job_free(r, oldest);
  }
  if (!job && r->n_jobs >= r->lim.max_jobs) {
    struct job *victim = rdzv_tenant_reclaimable(r);

    if (victim) {
      rdzv_state__log(r, "job %s: reclaimed: the job table is full (%d "
                      "jobs) and it never ran", victim->id, r->lim.max_jobs);
      rdzv_round_end_job(r, victim, now, false,
                         "reclaimed: the rendezvous's job "
                         "table is full and this job never ran");
      rdzv_state__job_forget(r, victim);
      rdzv_state__job_free(r, victim);
    }
  }
  if (!job && r->n_jobs >= r->lim.max_jobs)
    return rdzv_join_refuse(r, conn, NULL, now, NULL,
                            RDZV_PROTO_ERR_LIMIT, -ENOSPC,
                            "too many jobs (%d)", r->lim.max_jobs);
  if (job && (job->n_nodes >= RDZV_PROTO_MAX_NODES ||
              job->sum_nproc + j->nproc > INT_MAX))
    return rdzv_join_refuse(r, conn, NULL, now, NULL,
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
    return rdzv_join_refuse(r, conn, NULL, now, NULL,
                            RDZV_PROTO_ERR_LIMIT, -ENOMEM,
                            "out of memory");
  if (created) {                /* RESUME: the caller places it */
    *created = n;
    return 0;
  }
  admit(r, job, n, now);
  return 0;
}
int rdzv_join_handle(struct rdzv_state *r, struct conn *c, void *conn,
                     const struct rdzv_proto_join *j, double now)
{
  return rdzv_join_node(r, c, conn, j, now, NULL);
}
