/* etcd_rdzv_state.c -- the etcd back end's job document and transitions
 * (see etcd_rdzv_state.h; the rules are rdzvd/rdzv_rules.h's). */
#include "etcd_rdzv_state.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "rdzv_rules.h"

static const char *const phase_names[] = {
  "gathering", "running", "closed", "finished",
};
static const char *const nstate_names[] = { "idle", "part", "spare" };

void etcd_rdzv_state_init(struct etcd_rdzv_state *s)
{
  memset(s, 0, sizeof *s);
}

void etcd_rdzv_state_free(struct etcd_rdzv_state *s)
{
  free(s->nodes);
  etcd_rdzv_state_init(s);
}

static int reserve(struct etcd_rdzv_state *s, int n)
{
  struct etcd_rdzv_node *g;
  int cap;

  if (n <= s->cap)
    return 0;
  cap = s->cap ? s->cap : 8;
  while (cap < n)
    cap *= 2;
  g = realloc(s->nodes, (size_t)cap * sizeof *g);
  if (!g)
    return -ENOMEM;
  s->nodes = g;
  s->cap = cap;
  return 0;
}

int etcd_rdzv_state_copy(struct etcd_rdzv_state *dst, const struct etcd_rdzv_state *src)
{
  struct etcd_rdzv_node *keep = dst->nodes;
  int cap = dst->cap;

  *dst = *src;
  dst->nodes = keep;
  dst->cap = cap;
  if (reserve(dst, src->n))
    return -ENOMEM;
  if (src->n)
    memcpy(dst->nodes, src->nodes, (size_t)src->n * sizeof *src->nodes);
  return 0;
}

/* ---- JSON ---- */

static double jnum(const cJSON *o, const char *k, double dflt)
{
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, k);

  return cJSON_IsNumber(f) ? f->valuedouble : dflt;
}

static bool jbool(const cJSON *o, const char *k)
{
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static void jstr(const cJSON *o, const char *k, char *out, size_t size)
{
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, k);

  snprintf(out, size, "%s", cJSON_IsString(f) ? f->valuestring : "");
}

static int name_index(const char *const *names, int n, const cJSON *f)
{
  int i;

  if (!cJSON_IsString(f))
    return -1;
  for (i = 0; i < n; i++)
    if (strcmp(names[i], f->valuestring) == 0)
      return i;
  return -1;
}

int etcd_rdzv_state_parse(const char *json, size_t len, struct etcd_rdzv_state *s)
{
  cJSON *j = cJSON_ParseWithLength(json, len);
  const cJSON *nodes, *e;
  int ph, k;

  etcd_rdzv_state_free(s);
  if (!cJSON_IsObject(j))
    goto bad;
  s->exists = true;
  s->conf.min_nodes = (int)jnum(j, "min_nodes", 1);
  s->conf.max_nodes = (int)jnum(j, "max_nodes", 1);
  s->conf.max_restarts = (int)jnum(j, "max_restarts", 0);
  s->conf.last_call_timeout = jnum(j, "last_call_timeout", 0);
  ph = name_index(phase_names, 4, cJSON_GetObjectItemCaseSensitive(j,
                                                                   "phase"));
  if (ph < 0)
    goto bad;
  s->phase = (enum etcd_rdzv_phase)ph;
  s->round = (int)jnum(j, "round", 0);
  s->restart_count = (int)jnum(j, "restart_count", 0);
  s->restarting = jbool(j, "restarting");
  s->exit_passed = jbool(j, "exit_passed");
  s->seq = (int64_t)jnum(j, "seq", 0);
  jstr(j, "why", s->why, sizeof s->why);
  s->closing = jbool(j, "closing");
  s->closing_exhausted = jbool(j, "closing_exhausted");
  s->ended_lost = jbool(j, "ended_lost");
  s->cause_held = jbool(j, "cause_held");
  jstr(j, "cause_why", s->cause_why, sizeof s->cause_why);
  jstr(j, "lease", s->lease, sizeof s->lease);
  jstr(j, "token", s->token, sizeof s->token);
  s->token_restart = (int)jnum(j, "token_restart", -1);
  jstr(j, "token_master", s->token_master, sizeof s->token_master);
  {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "cause");
    double t = jnum(c, "exited_at", 0);

    /* Read with rdzvd's bounds (PROTOCOL.md §4.7): a value out of them is
     * none. */
    if (cJSON_IsObject(c) && t > 0 && t <= 1e11) {
      s->cause.exited_at = t;
      s->cause.rank = (int)fmin(fmax(jnum(c, "rank", 0), 0), INT_MAX);
      s->cause.local_rank = (int)fmin(fmax(jnum(c, "local_rank", 0), 0),
                                      65535);
      s->cause.exitcode = (int)fmin(fmax(jnum(c, "exitcode", 0), -255), 255);
      s->cause.pid = (int64_t)fmin(fmax(jnum(c, "pid", 0), 0), 9e15);
      jstr(c, "host", s->cause.host, sizeof s->cause.host);
    }
  }
  nodes = cJSON_GetObjectItemCaseSensitive(j, "nodes");
  if (!cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes) > ETCD_RDZV_MAX_NODES ||
      reserve(s, cJSON_GetArraySize(nodes)))
    goto bad;
  cJSON_ArrayForEach(e, nodes) {
    struct etcd_rdzv_node *n = &s->nodes[s->n];

    memset(n, 0, sizeof *n);
    jstr(e, "id", n->id, sizeof n->id);
    jstr(e, "host", n->host, sizeof n->host);
    jstr(e, "addr", n->addr, sizeof n->addr);
    n->pid = (int64_t)jnum(e, "pid", 0);
    n->nproc = (int)jnum(e, "nproc", 1);
    n->port = (int)jnum(e, "port", 0);
    n->seq = (int64_t)jnum(e, "seq", 0);
    k = name_index(nstate_names, 3, cJSON_GetObjectItemCaseSensitive(e,
                                                                    "st"));
    if (k < 0 || !n->id[0] || n->nproc < 1)
      goto bad;
    n->st = (enum etcd_rdzv_node_state)k;
    n->expected = jbool(e, "expected");
    n->rank = (int)jnum(e, "rank", -1);
    n->prev_rank = (int)jnum(e, "prev_rank", -1);
    n->in_exit = jbool(e, "in_exit");
    n->reported = jbool(e, "reported");
    s->n++;
  }
  cJSON_Delete(j);
  return 0;
bad:
  cJSON_Delete(j);
  etcd_rdzv_state_free(s);
  return -EINVAL;
}

char *etcd_rdzv_state_serialize(const struct etcd_rdzv_state *s)
{
  cJSON *j = cJSON_CreateObject(), *nodes, *e;
  char *out = NULL;
  int i;

  if (!j)
    return NULL;
  cJSON_AddNumberToObject(j, "min_nodes", s->conf.min_nodes);
  cJSON_AddNumberToObject(j, "max_nodes", s->conf.max_nodes);
  cJSON_AddNumberToObject(j, "max_restarts", s->conf.max_restarts);
  cJSON_AddNumberToObject(j, "last_call_timeout", s->conf.last_call_timeout);
  cJSON_AddStringToObject(j, "phase", phase_names[s->phase]);
  cJSON_AddNumberToObject(j, "round", s->round);
  cJSON_AddNumberToObject(j, "restart_count", s->restart_count);
  cJSON_AddBoolToObject(j, "restarting", s->restarting);
  cJSON_AddBoolToObject(j, "exit_passed", s->exit_passed);
  cJSON_AddNumberToObject(j, "seq", (double)s->seq);
  cJSON_AddStringToObject(j, "why", s->why);
  if (s->ended_lost)
    cJSON_AddTrueToObject(j, "ended_lost");
  if (s->closing) {
    cJSON_AddTrueToObject(j, "closing");
    cJSON_AddBoolToObject(j, "closing_exhausted", s->closing_exhausted);
  }
  if (s->cause_held) {
    cJSON_AddTrueToObject(j, "cause_held");
    cJSON_AddStringToObject(j, "cause_why", s->cause_why);
  }
  if (s->lease[0])
    cJSON_AddStringToObject(j, "lease", s->lease);
  if (s->token[0]) {
    cJSON_AddStringToObject(j, "token", s->token);
    cJSON_AddNumberToObject(j, "token_restart", s->token_restart);
    cJSON_AddStringToObject(j, "token_master", s->token_master);
  }
  if (s->cause_held && s->cause.exited_at > 0) {
    cJSON *c = cJSON_AddObjectToObject(j, "cause");

    if (!c)
      goto out;
    cJSON_AddNumberToObject(c, "exited_at", s->cause.exited_at);
    cJSON_AddNumberToObject(c, "rank", s->cause.rank);
    cJSON_AddNumberToObject(c, "local_rank", s->cause.local_rank);
    cJSON_AddNumberToObject(c, "exitcode", s->cause.exitcode);
    cJSON_AddNumberToObject(c, "pid", (double)s->cause.pid);
    cJSON_AddStringToObject(c, "host", s->cause.host);
  }
  nodes = cJSON_AddArrayToObject(j, "nodes");
  for (i = 0; nodes && i < s->n; i++) {
    const struct etcd_rdzv_node *n = &s->nodes[i];

    e = cJSON_CreateObject();
    if (!e || !cJSON_AddItemToArray(nodes, e))
      goto out;
    cJSON_AddStringToObject(e, "id", n->id);
    cJSON_AddStringToObject(e, "host", n->host);
    cJSON_AddStringToObject(e, "addr", n->addr);
    cJSON_AddNumberToObject(e, "pid", (double)n->pid);
    cJSON_AddNumberToObject(e, "nproc", n->nproc);
    cJSON_AddNumberToObject(e, "port", n->port);
    cJSON_AddNumberToObject(e, "seq", (double)n->seq);
    cJSON_AddStringToObject(e, "st", nstate_names[n->st]);
    cJSON_AddBoolToObject(e, "expected", n->expected);
    cJSON_AddNumberToObject(e, "rank", n->rank);
    cJSON_AddNumberToObject(e, "prev_rank", n->prev_rank);
    cJSON_AddBoolToObject(e, "in_exit", n->in_exit);
    if (n->reported)
      cJSON_AddTrueToObject(e, "reported");
  }
  if (nodes)
    out = cJSON_PrintUnformatted(j);
out:
  cJSON_Delete(j);
  return out;
}

/* ---- helpers ---- */

int etcd_rdzv_state_find(const struct etcd_rdzv_state *s, const char *id)
{
  int i;

  for (i = 0; i < s->n; i++)
    if (strcmp(s->nodes[i].id, id) == 0)
      return i;
  return -1;
}

void etcd_rdzv_state_counts(const struct etcd_rdzv_state *s, int *part, int *outstanding,
               int *spares)
{
  int i, p = 0, o = 0, sp = 0;

  for (i = 0; i < s->n; i++) {
    p += s->nodes[i].st == ETCD_RDZV_PART;
    o += s->nodes[i].st == ETCD_RDZV_IDLE && s->nodes[i].expected;
    sp += s->nodes[i].st == ETCD_RDZV_SPARE;
  }
  if (part)
    *part = p;
  if (outstanding)
    *outstanding = o;
  if (spares)
    *spares = sp;
}

void etcd_rdzv_state_describe(const struct etcd_rdzv_node *n, char *buf, size_t size)
{
  snprintf(buf, size, "node %s (%s, pid %" PRId64 ")",
           n->host[0] ? n->host : "?", n->addr[0] ? n->addr : "?", n->pid);
}

static void set_why(struct etcd_rdzv_state *s, const char *f, ...)
  __attribute__((format(printf, 2, 3)));

static void set_why(struct etcd_rdzv_state *s, const char *f, ...)
{
  va_list ap;

  va_start(ap, f);
  vsnprintf(s->why, sizeof s->why, f, ap);
  va_end(ap);
}

/* The oldest spare (lowest seq), or -1. */
static int first_spare(const struct etcd_rdzv_state *s)
{
  int i, best = -1;

  for (i = 0; i < s->n; i++)
    if (s->nodes[i].st == ETCD_RDZV_SPARE &&
        (best < 0 || s->nodes[i].seq < s->nodes[best].seq))
      best = i;
  return best;
}

/* The job as the rules (rdzvd/rdzv_rules.h) see it. */
static struct rdzv_rules_job rules_view(const struct etcd_rdzv_state *s)
{
  struct rdzv_rules_job v = {
    .min_nodes = s->conf.min_nodes,
    .max_nodes = s->conf.max_nodes,
    .last_call_timeout = s->conf.last_call_timeout,
    .gathering = s->phase == ETCD_RDZV_GATHERING,
    .closing = s->closing,
    .exit_passed = s->exit_passed,
    .restarting = s->restarting,
  };

  etcd_rdzv_state_counts(s, &v.n_part, &v.n_outstanding, NULL);
  return v;
}

static struct rdzv_rules_conf rules_conf(const struct etcd_rdzv_conf *c)
{
  struct rdzv_rules_conf rc = {
    .min_nodes = c->min_nodes,
    .max_nodes = c->max_nodes,
    .max_restarts = c->max_restarts,
    .last_call_timeout = c->last_call_timeout,
  };

  return rc;
}

static int rank_cmp(const void *a, const void *b)
{
  const struct etcd_rdzv_node *x = *(struct etcd_rdzv_node *const *)a;
  const struct etcd_rdzv_node *y = *(struct etcd_rdzv_node *const *)b;

  /* seq counts up from 1 (admit): it fits the rules' unsigned order. */
  return rdzv_rules_rank_cmp(x->prev_rank, (uint64_t)x->seq, y->prev_rank,
                             (uint64_t)y->seq);
}

/* Ranks the participants: previous ranks first, newcomers in join order. */
static void complete_round(struct etcd_rdzv_state *s)
{
  struct etcd_rdzv_node *order[ETCD_RDZV_MAX_NODES];
  struct rdzv_rules_job v = rules_view(s);
  int i, k = 0, sp;

  while (rdzv_rules_spare_fits_at_completion(&v) &&
         (sp = first_spare(s)) >= 0) {
    s->nodes[sp].st = ETCD_RDZV_PART;
    v.n_part++;
  }
  for (i = 0; i < s->n; i++) {
    struct etcd_rdzv_node *n = &s->nodes[i];

    n->in_exit = false;
    if (n->st == ETCD_RDZV_PART) {
      order[k++] = n;
    } else if (n->st == ETCD_RDZV_IDLE) {
      n->expected = false;
      n->prev_rank = -1;
    }
  }
  if (!k)
    return;
  qsort(order, (size_t)k, sizeof *order, rank_cmp);
  for (i = 0; i < k; i++)
    order[i]->rank = i;
  s->phase = ETCD_RDZV_RUNNING;
  s->restarting = false;
  s->exit_passed = false;
  s->cause_held = false;
  memset(&s->cause, 0, sizeof s->cause);
  s->cause_why[0] = '\0';
}

double etcd_rdzv_state_last_call_wait(const struct etcd_rdzv_state *s, double rejoin_window)
{
  struct rdzv_rules_job v = rules_view(s);

  return rdzv_rules_last_call_wait(&v, rejoin_window);
}

/* Promotes spares into free places, then completes the round when it can
 * without a last call (the agents' timers run the last call:
 * etcd_rdzv_state_last_call).  Whether one is due only depends on the rejoin window
 * being positive, as every agent's keepalive window is. */
static void recheck(struct etcd_rdzv_state *s)
{
  struct rdzv_rules_job v;
  int sp;

  if (s->phase != ETCD_RDZV_GATHERING)
    return;
  v = rules_view(s);
  while (rdzv_rules_spare_fits(&v) && (sp = first_spare(s)) >= 0) {
    s->nodes[sp].st = ETCD_RDZV_PART;
    v.n_part++;
  }
  if (rdzv_rules_gather(&v, INFINITY) == RDZV_GATHER_COMPLETE)
    complete_round(s);
}

/* A new round: every participant is expected back. */
static void start_round(struct etcd_rdzv_state *s)
{
  int i, outstanding, spares;

  s->round++;
  s->phase = ETCD_RDZV_GATHERING;
  s->exit_passed = false;
  for (i = 0; i < s->n; i++) {
    struct etcd_rdzv_node *n = &s->nodes[i];

    n->in_exit = false;
    if (n->st != ETCD_RDZV_PART)
      continue;
    n->prev_rank = n->rank;
    n->rank = -1;
    n->st = ETCD_RDZV_IDLE;
    n->expected = true;
  }
  etcd_rdzv_state_counts(s, NULL, &outstanding, &spares);
  s->restarting = outstanding + spares > 0;
  recheck(s);
}

static void admit(struct etcd_rdzv_state *s, int i)
{
  struct etcd_rdzv_node *n = &s->nodes[i];
  struct rdzv_rules_job v = rules_view(s);
  char d[2 * RDZV_PROTO_MAX_ADDR + 64];

  n->seq = ++s->seq;
  switch (rdzv_rules_admit(&v, n->expected)) {
  case RDZV_ADMIT_ROUND:
    n->st = ETCD_RDZV_PART;
    n->expected = false;
    recheck(s);
    return;
  case RDZV_ADMIT_NEW_ROUND:
    n->st = ETCD_RDZV_SPARE;
    n->expected = false;
    etcd_rdzv_state_describe(n, d, sizeof d);
    set_why(s, "%s joined", d);
    start_round(s);
    return;
  case RDZV_ADMIT_WAIT:
    break;
  }
  n->st = ETCD_RDZV_SPARE;
  n->expected = false;
}

/* ---- transitions ---- */

int etcd_rdzv_state_join(struct etcd_rdzv_state *s, const struct etcd_rdzv_node *me,
            const struct etcd_rdzv_conf *conf, char *err, size_t errlen)
{
  struct rdzv_rules_conf joiner = rules_conf(conf), held;
  int i;

  if (s->exists && (s->phase == ETCD_RDZV_CLOSED || s->phase == ETCD_RDZV_FINISHED)) {
    snprintf(err, errlen, "the job %s: %s", s->phase == ETCD_RDZV_CLOSED
             ? "is closed" : "has finished", s->why);
    return -ESHUTDOWN;
  }
  if (!s->exists || s->n == 0) {
    /* A new job (or one every node has left): this join configures it. */
    etcd_rdzv_state_free(s);
    s->exists = true;
    s->conf = *conf;
    s->phase = ETCD_RDZV_GATHERING;
  }
  held = rules_conf(&s->conf);
  switch (rdzv_rules_conf_check(&joiner, &held, RDZV_PROTO_MAX_NODES, "the job",
                                err, errlen)) {
  case RDZV_CONF_OK:
    break;
  case RDZV_CONF_BAD:
    return -EINVAL;
  case RDZV_CONF_NODES_DIFFER:
  case RDZV_CONF_RESTARTS_DIFFER:
    if (errlen > strlen(err) + 1)
      snprintf(err + strlen(err), errlen - strlen(err),
               " (config_mismatch)");
    return -EINVAL;
  }
  i = etcd_rdzv_state_find(s, me->id);
  if (i >= 0) {
    struct etcd_rdzv_node *n = &s->nodes[i];

    if (n->st == ETCD_RDZV_SPARE || n->st == ETCD_RDZV_PART)
      return 0;     /* waiting already, or in the round */
    snprintf(n->host, sizeof n->host, "%s", me->host);
    snprintf(n->addr, sizeof n->addr, "%s", me->addr);
    n->pid = me->pid;
    n->nproc = me->nproc;
    n->port = me->port;
  } else {
    if (s->n >= ETCD_RDZV_MAX_NODES) {
      snprintf(err, errlen, "the job has %d nodes already (the most the "
               "etcd back end holds)", s->n);
      return -ENOSPC;
    }
    if (reserve(s, s->n + 1)) {
      snprintf(err, errlen, "out of memory");
      return -ENOMEM;
    }
    i = s->n++;
    s->nodes[i] = *me;
    s->nodes[i].st = ETCD_RDZV_IDLE;
    s->nodes[i].expected = false;
    s->nodes[i].rank = s->nodes[i].prev_rank = -1;
    s->nodes[i].in_exit = false;
  }
  admit(s, i);
  return 1;
}

/* Note [root cause]: n's report is the round's root cause when it is the
 * first, or exited before the timed one held; an untimed one holds. */
static void cause_offer(struct etcd_rdzv_state *s,
                        const struct etcd_rdzv_node *n, const char *message,
                        const struct rdzv_proto_cause *cause)
{
  char d[2 * RDZV_PROTO_MAX_ADDR + 64];
  double t = cause ? cause->exited_at : 0;

  if (s->cause_held && (s->cause.exited_at <= 0 || t <= 0 ||
                        t >= s->cause.exited_at))
    return;
  etcd_rdzv_state_describe(n, d, sizeof d);
  s->cause_held = true;
  memset(&s->cause, 0, sizeof s->cause);
  if (t > 0) {
    s->cause = *cause;
    if (!s->cause.host[0])
      snprintf(s->cause.host, sizeof s->cause.host, "%s", n->host);
  }
  snprintf(s->cause_why, sizeof s->cause_why, "%s workers failed: %s", d,
           message);
}

static int closing_pending(const struct etcd_rdzv_state *s)
{
  int i, pending = 0;

  for (i = 0; i < s->n; i++)
    pending += s->nodes[i].st == ETCD_RDZV_PART && !s->nodes[i].reported;
  return pending;
}

static void close_job(struct etcd_rdzv_state *s)
{
  if (s->closing_exhausted)
    set_why(s, "%s; no restarts left (%d of %d used)", s->cause_why,
            s->restart_count, s->conf.max_restarts);
  else
    set_why(s, "%s", s->cause_why);
  s->phase = ETCD_RDZV_CLOSED;
  s->closing = false;
}

int etcd_rdzv_state_failure(struct etcd_rdzv_state *s, const char *id, int round, bool final,
               const char *message, const struct rdzv_proto_cause *cause)
{
  enum rdzv_rules_failure verdict;
  int i = etcd_rdzv_state_find(s, id), k;
  struct etcd_rdzv_node *n;

  if (!s->exists || i < 0 || s->phase == ETCD_RDZV_CLOSED ||
      s->phase == ETCD_RDZV_FINISHED)
    return 0;
  n = &s->nodes[i];
  if (s->closing) {
    if (s->round != round || n->reported)
      return 0;
    cause_offer(s, n, message, cause);
    n->reported = true;
    if (!closing_pending(s))
      close_job(s);
    return 1;
  }
  verdict = rdzv_rules_failure(final, s->restart_count,
                               s->conf.max_restarts);
  if (s->phase == ETCD_RDZV_RUNNING && s->round == round && n->st == ETCD_RDZV_PART &&
      verdict != RDZV_FAILURE_RESTART) {
    cause_offer(s, n, message, cause);
    s->closing = true;
    s->closing_exhausted = verdict == RDZV_FAILURE_CLOSE_EXHAUSTED;
    for (k = 0; k < s->n; k++)
      s->nodes[k].reported = k == i;
    if (!closing_pending(s))
      close_job(s);
    return 1;
  }
  /* A report that crossed the restart of its round: part of it. */
  if (s->phase == ETCD_RDZV_GATHERING && s->round == round + 1) {
    struct rdzv_proto_cause held = s->cause;
    bool was_held = s->cause_held;

    cause_offer(s, n, message, cause);
    if (final) {
      close_job(s);
      return 1;
    }
    return was_held != s->cause_held ||
           memcmp(&held, &s->cause, sizeof held) != 0;
  }
  if (final) {
    cause_offer(s, n, message, cause);
    close_job(s);
    return 1;
  }
  /* Once per round: a later report is part of the same restart. */
  if (s->phase != ETCD_RDZV_RUNNING || s->round != round || n->st != ETCD_RDZV_PART)
    return 0;
  cause_offer(s, n, message, cause);
  s->restart_count++;
  set_why(s, "%s", s->cause_why);
  start_round(s);
  return 1;
}

bool etcd_rdzv_state_failure_final(const struct etcd_rdzv_state *s)
{
  return rdzv_rules_failure_final(s->restart_count, s->conf.max_restarts);
}

int etcd_rdzv_state_close_wait_over(struct etcd_rdzv_state *s, int round)
{
  if (!s->exists || !s->closing || s->round != round)
    return 0;
  close_job(s);
  return 1;
}

int etcd_rdzv_state_barrier(struct etcd_rdzv_state *s, const char *id, int round)
{
  int i = etcd_rdzv_state_find(s, id), k;

  if (i < 0 || s->phase != ETCD_RDZV_RUNNING || s->round != round ||
      s->nodes[i].st != ETCD_RDZV_PART || s->nodes[i].in_exit)
    return 0;
  s->nodes[i].in_exit = true;
  for (k = 0; k < s->n; k++)
    if (s->nodes[k].st == ETCD_RDZV_PART && !s->nodes[k].in_exit)
      return 1;
  s->exit_passed = true;
  return 1;
}

int etcd_rdzv_state_remove(struct etcd_rdzv_state *s, const char *id, const char *why)
{
  int i = etcd_rdzv_state_find(s, id), part, outstanding;
  bool was_part;
  char d[2 * RDZV_PROTO_MAX_ADDR + 64];

  if (i < 0)
    return 0;
  was_part = s->nodes[i].st == ETCD_RDZV_PART;
  etcd_rdzv_state_describe(&s->nodes[i], d, sizeof d);
  s->nodes[i] = s->nodes[--s->n];
  if (s->phase == ETCD_RDZV_CLOSED || s->phase == ETCD_RDZV_FINISHED)
    return 1;
  if (s->closing) {             /* no round: one report fewer to wait for */
    if (!closing_pending(s))
      close_job(s);
    return 1;
  }
  if (s->phase == ETCD_RDZV_RUNNING && was_part && !s->exit_passed) {
    /* Note [a lost node] (rdzvd/rdzv_rules.h) */
    struct rdzv_rules_loss l = {
      .how = strcmp(why, "left") == 0 ? RDZV_LEFT_GOODBYE : RDZV_LEFT_SILENT,
      .n_left = s->n, .min_nodes = s->conf.min_nodes,
      .restart_count = s->restart_count, .max_restarts = s->conf.max_restarts,
    };

    if (rdzv_rules_lost_ends(&l)) {
      char because[160];

      rdzv_rules_lost_why(&l, because, sizeof because);
      set_why(s, "%s %s (%s): %s", d, why, rdzv_rules_leave_name(l.how),
              because);
      s->phase = ETCD_RDZV_CLOSED;
      s->ended_lost = true;
      return 1;
    }
    set_why(s, "%s %s", d, why);
    start_round(s);
    return 1;
  }
  if (s->phase == ETCD_RDZV_GATHERING) {
    etcd_rdzv_state_counts(s, &part, &outstanding, NULL);
    if (!part && !outstanding)
      s->restarting = false;
    recheck(s);
  } else if (s->phase == ETCD_RDZV_RUNNING && s->exit_passed) {
    etcd_rdzv_state_counts(s, &part, NULL, NULL);
    if (!part) {
      s->phase = ETCD_RDZV_FINISHED;
      set_why(s, "every node left after the exit barrier");
    }
  }
  return 1;
}

bool etcd_rdzv_state_last_call_due(const struct etcd_rdzv_state *s)
{
  struct rdzv_rules_job v;

  if (!s->exists || s->phase != ETCD_RDZV_GATHERING)
    return false;
  v = rules_view(s);
  /* As one whose last call runs: the rules' threshold, not whether a
   * last call of 0 s would complete the round at once (recheck). */
  v.in_last_call = true;
  return rdzv_rules_gather(&v, INFINITY) != RDZV_GATHER_WAIT;
}

int etcd_rdzv_state_last_call(struct etcd_rdzv_state *s, int round)
{
  if (s->round != round || !etcd_rdzv_state_last_call_due(s))
    return 0;
  complete_round(s);
  return 1;
}
