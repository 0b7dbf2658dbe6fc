/* rdzv_tenant.c -- one peer address's share of the registry.
 *
 * Note [tenant share]: the budgets of rdzv_state_limits bound what all
 * clients together make the daemon hold, so one client could take all of
 * it: 10,050 connections, each holding one waiting node of a job of its
 * own, filled the job table, and every other tenant's new job got `error
 * limit: too many jobs` for as long as the squatter's join_timeout.  So
 * each peer address (a tenant) has its own share:
 *   - jobs it created that hold a node (an empty job costs nothing: the
 *     full table forgets the longest-empty one) at most max_jobs_per_peer;
 *   - its nodes on waiting lists at most max_waiting_per_peer (checked
 *     for a JOIN that would wait: its joins that make or join a round
 *     go on);
 * and a JOIN past either gets `error limit` naming the limit, from that
 * tenant only.  When the table is full all the same (a flood from many
 * addresses) and no empty job is left to forget, a job that never ran
 * (no round issued, not rebuilt) and holds only gathering nodes is
 * reclaimed, the oldest of the tenant with the most jobs: its nodes get
 * CLOSED.  A running job is never reclaimed, so a tenant's running work
 * outlasts any flood; only a new job can be refused.  The peer address
 * is the connection's (rdzv_state_set_peer_addr); an unknown one ("",
 * embedded and tests) is nobody's share.  The server bounds connections
 * per peer itself (server.c, server_conn.c). */
#include "rdzv_state_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool tenant_eq(const void *item, const void *key)
{
  return strcmp(((const struct tenant *)item)->addr, key) == 0;
}

struct tenant *rdzv_tenant_ref(struct rdzv_state *r, const char *addr)
{
  uint64_t h;
  struct tenant *t;

  if (!addr || !*addr)
    return NULL;
  h = hashtab_hash_str(r->seed, addr);
  t = hashtab_find(&r->tenants, h, addr, tenant_eq);
  if (!t) {
    t = calloc(1, sizeof *t);
    if (!t)
      return NULL;
    t->h = h;
    snprintf(t->addr, sizeof t->addr, "%s", addr);
    if (hashtab_insert(&r->tenants, h, t)) {
      free(t);
      return NULL;
    }
    r->n_tenants++;
  }
  t->refs++;
  return t;
}

void rdzv_tenant_unref(struct rdzv_state *r, struct tenant *t)
{
  if (!t || --t->refs > 0)
    return;
  hashtab_remove(&r->tenants, t->h, t);
  r->n_tenants--;
  free(t);
}

void rdzv_tenant_job_held(struct job *job, bool held)
{
  if (job->tenant_counted == held)
    return;
  job->tenant_counted = held;
  if (job->tenant)
    job->tenant->jobs += held ? 1 : -1;
}

void rdzv_tenant_spare(struct node *n, bool spare)
{
  if (n->tenant)
    n->tenant->spares += spare ? 1 : -1;
}

int rdzv_tenant_check(struct rdzv_state *r, const struct conn *c,
                      bool creating, bool would_wait, char *text, size_t len)
{
  const struct tenant *t;

  if (!c || !c->peer[0])
    return 0;
  t = hashtab_find(&r->tenants, hashtab_hash_str(r->seed, c->peer), c->peer,
                   tenant_eq);
  if (!t)
    return 0;
  if (creating && t->jobs >= r->lim.max_jobs_per_peer) {
    r->peer_refusals[TENANT_JOBS]++;
    snprintf(text, len, "too many jobs from %s (%d: rdzvd "
             "--max-jobs-per-peer)", c->peer, r->lim.max_jobs_per_peer);
    return -1;
  }
  if (would_wait && t->spares >= r->lim.max_waiting_per_peer) {
    r->peer_refusals[TENANT_WAITING]++;
    snprintf(text, len, "too many waiting nodes from %s (%d: rdzvd "
             "--max-waiting-per-peer)", c->peer, r->lim.max_waiting_per_peer);
    return -1;
  }
  return 0;
}

/* A job that never ran: no round issued in any life, not rebuilt from
 * claims, gathering, every node gathering with it (none running). */
static bool never_ran(const struct job *job)
{
  return job->issued_round < 0 && !job->rebuild_size && !job->resumed &&
         rdzv_state__gathering(job) && job->n_nodes > 0;
}

struct job *rdzv_tenant_reclaimable(struct rdzv_state *r)
{
  struct list_node *pos, *next;
  struct job *best = NULL;

  /* Only under pressure, and each reclaim frees a place: O(jobs). */
  list_for_each_safe(pos, next, &r->jobs_in_order) {
    struct job *job = list_entry(pos, struct job, in_registry);
    int mine = job->tenant ? job->tenant->jobs : 0;

    if (!never_ran(job))
      continue;
    if (!best || mine > (best->tenant ? best->tenant->jobs : 0))
      best = job;
  }
  return best;
}
