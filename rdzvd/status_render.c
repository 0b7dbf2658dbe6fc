/* status_render.c -- the status report of the rendezvous state machine
 * (rdzv_state_status_query in rdzv_state.h): what `rdzvd --status` prints.
 *
 * Note [status size]: the daemon may hold 10,000 jobs of 100,000 nodes;
 * the report holds what one frame can carry, and costs only what it
 * shows.  Each job and node is charged a conservative estimate of its
 * printed size (JSON escapes a byte in at most 6), and nothing is added
 * past STATUS_BUDGET, half a frame. */
#include "rdzv_state_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

#define STATUS_BUDGET (RDZV_PROTO_MAX_FRAME / 2)
#define STATUS_DEF_JOBS 100
#define STATUS_SUMMARY_NODES 64     /* node lists in a summary, at most */
#define JOB_COST 768                /* a job's fixed fields, printed */
#define NODE_COST 128

static bool jnum(cJSON *o, const char *k, double v)
{
  return cJSON_AddNumberToObject(o, k, v) != NULL;
}

static bool jstr(cJSON *o, const char *k, const char *v)
{
  return cJSON_AddStringToObject(o, k, v) != NULL;
}

const char *status_render_phase_name(enum phase p)
{
  static const char *const names[] = {
    [PH_GATHERING] = "gathering", [PH_LAST_CALL] = "last_call",
    [PH_RUNNING] = "running", [PH_CLOSED] = "closed",
    [PH_FINISHED] = "finished",
  };

  return names[p];
}

static size_t job_cost(const struct job *job)
{
  const struct barrier *b;
  size_t cost = JOB_COST + 6 * strlen(job->id);

  for (b = job->barriers; b; b = b->next)
    cost += 32 + 6 * strlen(b->name);
  return cost;
}

static size_t node_cost(const struct node *n)
{
  return NODE_COST + 6 * (strlen(n->host) + strlen(rdzv_state__node_addr(n)));
}

static bool add_node(cJSON *nodes, const struct job *job,
                     const struct node *n)
{
  static const char *const states[] = {
    [NS_IDLE] = "left", [NS_PART] = "participant", [NS_SPARE] = "waiting",
  };
  cJSON *no = cJSON_CreateObject();

  if (!no || !cJSON_AddItemToArray(nodes, no)) {
    cJSON_Delete(no);
    return false;
  }
  return jstr(no, "host", n->host) &&
         jstr(no, "addr", rdzv_state__node_addr(n)) &&
         jnum(no, "pid", (double)n->pid) && jnum(no, "nproc", n->nproc) &&
         jnum(no, "rank", job->phase == PH_RUNNING && n->state == NS_PART
                            ? n->rank : -1) &&
         jstr(no, "state", n->state == NS_PART && !n->c->conn
                             ? "detached"  /* reset, may come back */
                             : states[n->state]);
}

/* One job into o; its nodes while *budget lasts (all of them or none in
 * a summary).  Charges *budget. */
static bool add_job(const struct job *job, double now, bool summary,
                    size_t *budget, cJSON *o)
{
  const struct rdzv_proto_conf *cf = &job->conf;
  const struct barrier *b;
  struct list_node *pos, *next;
  const struct node *n;
  cJSON *conf, *nodes, *bars = NULL;
  size_t cost = 0;
  bool ok;

  *budget -= job_cost(job);
  ok = jstr(o, "id", job->id) &&
       jstr(o, "phase", status_render_phase_name(job->phase)) &&
       jnum(o, "round", job->round) &&
       jnum(o, "restart_count", job->restart_count) &&
       (conf = cJSON_AddObjectToObject(o, "conf")) &&
       jnum(conf, "min_nodes", cf->min_nodes) &&
       jnum(conf, "max_nodes", cf->max_nodes) &&
       jnum(conf, "max_restarts", cf->max_restarts) &&
       jnum(conf, "join_timeout", cf->join_timeout) &&
       jnum(conf, "last_call_timeout", cf->last_call_timeout) &&
       jnum(conf, "close_timeout", cf->close_timeout) &&
       jnum(conf, "keepalive_interval", cf->keepalive_interval) &&
       jnum(conf, "keepalive_misses", cf->keepalive_misses) &&
       jnum(o, "world_size", job->world_size) &&
       jnum(o, "participants", job->n_part) &&
       jnum(o, "waiting", job->n_spares) &&
       jnum(o, "node_count", job->n_nodes) &&
       (job->phase != PH_LAST_CALL ||
        jnum(o, "last_call", rdzv_state__clamp_secs(job->deadline - now))) &&
       (bars = cJSON_AddObjectToObject(o, "barriers")) &&
       jnum(o, "kv_keys", (double)job->kv.n);
  for (b = job->barriers; ok && b; b = b->next)
    ok = jnum(bars, b->name, b->count);
  if (!ok)
    return false;
  if (summary) {
    if (job->n_nodes > STATUS_SUMMARY_NODES)
      return cJSON_AddTrueToObject(o, "nodes_omitted") != NULL;
    list_for_each_safe(pos, next, &job->nodes)
      cost += node_cost(list_entry(pos, struct node, in_job));
    if (cost > *budget)
      return cJSON_AddTrueToObject(o, "nodes_omitted") != NULL;
  }
  if (!(nodes = cJSON_AddArrayToObject(o, "nodes")))
    return false;
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    cost = node_cost(n);
    if (cost > *budget)
      return cJSON_AddTrueToObject(o, "nodes_truncated") != NULL;
    *budget -= cost;
    if (!add_node(nodes, job, n))
      return false;
  }
  return true;
}

cJSON *rdzv_state_status_query(const struct rdzv_state *r,
                               const struct rdzv_proto_status_req *q,
                               double now, int *err)
{
  const char *id = q && q->job[0] ? q->job : NULL;
  int limit = q && q->limit > 0 ? q->limit : STATUS_DEF_JOBS;
  size_t budget = STATUS_BUDGET;
  cJSON *root = cJSON_CreateObject(), *jobs = NULL, *o;
  const struct list_node *pos;
  const struct job *job;
  int shown = 0;
  bool ok, truncated = false;

  *err = -ENOMEM;
  ok = root && (jobs = cJSON_AddArrayToObject(root, "jobs")) &&
       jnum(root, "nodes", r->n_nodes) &&
       jnum(root, "jobs_total", r->n_jobs) &&
       jnum(root, "peers", r->n_tenants) &&
       jnum(root, "peer_refusals_jobs",
            (double)r->peer_refusals[TENANT_JOBS]) &&
       jnum(root, "peer_refusals_waiting",
            (double)r->peer_refusals[TENANT_WAITING]);
  if (ok && id) {
    job = hashtab_find(&r->jobs, hashtab_hash_str(r->seed, id), id, rdzv_state__job_eq);
    if (!job) {
      cJSON_Delete(root);
      *err = -ENOENT;
      return NULL;
    }
    ok = (o = cJSON_CreateObject()) && cJSON_AddItemToArray(jobs, o);
    if (!ok)
      cJSON_Delete(o);
    else
      ok = add_job(job, now, false, &budget, o);
    shown = 1;
  }
  /* Every job in creation order, unless one was asked for. */
  for (pos = id ? &r->jobs_in_order : r->jobs_in_order.next;
       ok && pos != &r->jobs_in_order; pos = pos->next) {
    job = list_entry(pos, const struct job, in_registry);
    if (shown >= limit || job_cost(job) > budget) {
      truncated = true;
      break;
    }
    ok = (o = cJSON_CreateObject()) && cJSON_AddItemToArray(jobs, o);
    if (!ok)
      cJSON_Delete(o);
    else
      ok = add_job(job, now, true, &budget, o);
    shown++;
  }
  ok = ok && jnum(root, "jobs_shown", shown) &&
       cJSON_AddBoolToObject(root, "truncated", truncated);
  if (!ok) {
    cJSON_Delete(root);
    return NULL;
  }
  *err = 0;
  return root;
}

cJSON *rdzv_state_status(const struct rdzv_state *r, double now)
{
  int err;

  return rdzv_state_status_query(r, NULL, now, &err);
}
