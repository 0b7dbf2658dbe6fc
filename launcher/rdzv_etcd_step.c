/* rdzv_etcd_step.c -- the etcd back end's sync step (rdzv_etcd.c's
 * header says how the back end works): step() applies every intent of
 * this agent, and the other agents' requests, to the newest state it
 * knows and writes the result with one compare-and-swap transaction;
 * the job's lease, the ended job's marker, the job token, and which
 * agent helps are decided here. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "monotime.h"
#include "rdzv_etcd_internal.h"
#include "say.h"

#define CATCHUP_MS 1000
#define DEFER_MS 300

/* ---- step: intents to a transaction -------------------------------------- */

static void txn_done(void *ctx, int err, const cJSON *r, const char *msg);

/* The other agents' requests (Note [requests in alive keys] in
 * etcd_session.h), in the order their alive keys were created.  A request
 * the state cannot take (a config mismatch, a closed job) is left for its
 * agent to find. */
static int apply_requests(struct rdzv_etcd *e, struct etcd_rdzv_state *s)
{
  char err[RDZV_PROTO_MAX_TEXT + 1];
  int changed = 0, i, k;

  /* Note [what an agent watches]: only a view of every alive key, at
   * least as new as the state. */
  if (!e->full_view || e->view_rev < e->st_mod)
    return 0;     /* requests seen may be older than the state */
  for (i = 0; i < e->alive.n; i++) {
    const struct etcd_peer *p = &e->alive.peer[i];

    if (strcmp(p->id, e->session.id) == 0)
      continue;
    if (p->leave) {
      changed |= etcd_rdzv_state_remove(s, p->id, "left");
      continue;
    }
    if (p->exit >= 0)
      changed |= etcd_rdzv_state_barrier(s, p->id, p->exit);
    if (p->join >= 0 && p->join >= (s->exists ? s->round : 0)) {
      k = etcd_rdzv_state_find(s, p->id);
      if (k < 0 || s->nodes[k].st == ETCD_RDZV_IDLE)
        changed |= etcd_rdzv_state_join(s, &p->node, &p->conf, err, sizeof err) > 0;
    }
  }
  return changed;
}

/* Applies every intent to a copy of the state.  Returns 1 to write it, 0
 * when nothing changes, < 0 when a join was refused (err says why). */
static int transform(struct rdzv_etcd *e, struct etcd_rdzv_state *s, char *err,
                     size_t errlen, bool *clear_failure, bool *clear_barrier)
{
  int changed = 0, rc, i;

  *clear_failure = *clear_barrier = false;
  if (etcd_rdzv_state_copy(s, &e->st))
    return -ENOMEM;
  /* Dead nodes: their alive key is gone in a view at least as new as
   * the state (a node's alive key is written before it joins) that has
   * every alive key (Note [what an agent watches]). */
  if (s->exists && e->full_view && e->view_rev >= e->st_mod) {
    for (i = 0; i < s->n;) {
      if (strcmp(s->nodes[i].id, e->session.id) != 0 &&
          etcd_alive_find(&e->alive, s->nodes[i].id) < 0 &&
          etcd_rdzv_state_remove(s, s->nodes[i].id, "lost")) {
        changed = 1;
        continue;
      }
      i++;
    }
  }
  if (e->want_failure) {
    rc = etcd_rdzv_state_failure(s, e->session.id, e->failure_round, e->failure_final,
                    e->failure_msg, &e->failure_cause);
    changed |= rc;
    *clear_failure = true;
  }
  if (e->barrier_round >= 0 && !e->barrier_written) {
    changed |= etcd_rdzv_state_barrier(s, e->session.id, e->barrier_round);
    *clear_barrier = true;
  }
  if (e->want_leave) {
    changed |= etcd_rdzv_state_remove(s, e->session.id, "left");
  } else if (e->want_join) {
    struct etcd_rdzv_node me;
    struct etcd_rdzv_conf conf;

    memset(&me, 0, sizeof me);
    snprintf(me.id, sizeof me.id, "%s", e->session.id);
    snprintf(me.host, sizeof me.host, "%s", e->myhost);
    snprintf(me.addr, sizeof me.addr, "%s", e->local_addr);
    me.pid = getpid();
    me.nproc = e->o.nproc;
    me.port = e->o.master_port;
    conf.min_nodes = e->o.conf.min_nodes;
    conf.max_nodes = e->o.conf.max_nodes;
    conf.max_restarts = e->o.conf.max_restarts;
    conf.last_call_timeout = e->o.conf.last_call_timeout;
    rc = etcd_rdzv_state_join(s, &me, &conf, err, errlen);
    if (rc < 0)
      return rc;
    changed |= rc;
  }
  if (e->last_call_round >= 0) {
    changed |= etcd_rdzv_state_last_call(s, e->last_call_round);
    e->last_call_round = -1;
  }
  if (e->close_wait_round >= 0)     /* kept until the round is closed */
    changed |= etcd_rdzv_state_close_wait_over(s, e->close_wait_round);
  changed |= apply_requests(e, s);
  return changed;
}

static cJSON *range_op(const char *key)
{
  cJSON *op = cJSON_CreateObject();
  cJSON *rr = cJSON_AddObjectToObject(op, "request_range");

  etcd_add_b64(rr, "key", key, strlen(key));
  return op;
}

/* Note [the ended job's marker]: as rdzvd keeps an ended job
 * close_timeout seconds so that a late joiner is told it ended (instead of
 * starting a new job of the same id), the last agent to leave a closed or
 * finished job leaves its state, without nodes, on a lease of its own
 * whose TTL is close_timeout: etcd deletes it then.  The lease is granted
 * just before that write; if it cannot be had, the state is deleted. */
static bool keeps_marker(const struct rdzv_etcd *e, const struct etcd_rdzv_state *s)
{
  return s->exists && s->n == 0 && e->o.conf.close_timeout > 0 &&
         (s->phase == ETCD_RDZV_CLOSED || s->phase == ETCD_RDZV_FINISHED) &&
         e->end_lease[0] && strcmp(e->end_lease, "0") != 0;
}

static void end_grant_done(void *ctx, int err, const cJSON *r,
                           const char *msg)
{
  struct rdzv_etcd *e = ctx;
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "ID");

  (void)msg;
  e->call_inflight = false;
  snprintf(e->end_lease, sizeof e->end_lease, "%s",
           !err && cJSON_IsString(id) ? id->valuestring : "0");
  rdzv_etcd_kick(e);
}

/* Asks for the marker's lease when s is an ended job nobody is in.
 * Returns true when the request went out (step() runs again on its
 * answer). */
static bool grant_end_lease(struct rdzv_etcd *e, const struct etcd_rdzv_state *s,
                            bool early)
{
  cJSON *b;
  char ttl[32];
  int rc;

  if (e->end_lease[0] || !s->exists || !(e->o.conf.close_timeout > 0))
    return false;
  /* early: the helper of a finished job (Note [leaving a finished
   * job]), before the others have gone. */
  if (!early && (s->n != 0 || (s->phase != ETCD_RDZV_CLOSED &&
                               s->phase != ETCD_RDZV_FINISHED)))
    return false;
  b = cJSON_CreateObject();
  snprintf(ttl, sizeof ttl, "%.0f",
           fmin(1e7, fmax(ETCD_SESSION_MIN_TTL,
                          ceil(e->o.conf.close_timeout))));
  cJSON_AddStringToObject(b, "TTL", ttl);
  rc = etcd_call(e->ec, "/v3/lease/grant", b, end_grant_done, e);
  cJSON_Delete(b);
  if (rc) {
    snprintf(e->end_lease, sizeof e->end_lease, "0");
    return false;
  }
  e->call_inflight = true;
  return true;
}

/* Note [the job's lease]: the job document is stored under a lease of
 * its own, granted by the agent that first writes it (one round trip,
 * once per job) and renewed by every agent listed in it, in the same
 * request as its own lease (etcd_session_also).  So when every agent of
 * the job is SIGKILLed, nobody renews it, and one TTL later etcd deletes
 * the state: nothing of the job is left behind (the alive keys go with
 * their agents' leases).  A job lease that etcd no longer has (the
 * cluster lost it, or every agent was silent for a TTL) is replaced at
 * the next write. */
static void job_grant_done(void *ctx, int err, const cJSON *r,
                           const char *msg)
{
  struct rdzv_etcd *e = ctx;
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "ID");

  e->call_inflight = false;
  if (err || !cJSON_IsString(id)) {
    snprintf(e->last_error, sizeof e->last_error, "%s",
             err ? msg : "lease grant: no ID in the answer");
    uv_timer_start(&e->retry, rdzv_etcd_retry_cb, RETRY_MS, 0);
    return;
  }
  snprintf(e->job_lease, sizeof e->job_lease, "%s", id->valuestring);
  rdzv_etcd_kick(e);
}

/* Puts the job's lease into s when it has none that etcd still has.
 * Returns true when a grant went out first (step() runs again on its
 * answer). */
static bool need_job_lease(struct rdzv_etcd *e, struct etcd_rdzv_state *s)
{
  cJSON *b;
  char ttl[16];

  if (s->n == 0)
    return false;
  if (s->lease[0] && strcmp(s->lease, e->dead_lease) != 0)
    return false;
  if (e->job_lease[0] && strcmp(e->job_lease, e->dead_lease) != 0) {
    snprintf(s->lease, sizeof s->lease, "%s", e->job_lease);
    return false;
  }
  b = cJSON_CreateObject();
  snprintf(ttl, sizeof ttl, "%d", e->session.ttl);
  cJSON_AddStringToObject(b, "TTL", ttl);
  if (etcd_call(e->ec, "/v3/lease/grant", b, job_grant_done, e) == 0)
    e->call_inflight = true;
  else
    uv_timer_start(&e->retry, rdzv_etcd_retry_cb, RETRY_MS, 0);
  cJSON_Delete(b);
  return true;
}

/* Note [the job token on etcd]: the workers' CDRUN_JOB_TOKEN is 32 random
 * bytes drawn by the agent whose write completes a round with a restart
 * count or a master (rank 0's address and port) other than the ones the
 * job's token was drawn for, and stored in the job document, which is
 * under the job's lease and readable by the job's etcd role only (the
 * per-job role recipe, proto/ETCD.md §6).  So, as with rdzvd's, it is the
 * same on every node of a round, it survives a membership round (live
 * recovery's workers keep theirs), a restart or a new master makes a new
 * one, and it cannot be computed from what others know: only read by
 * whoever may read the job's keys. */
static void refresh_token(struct etcd_rdzv_state *s)
{
  char master[sizeof s->token_master];
  unsigned char rnd[32];
  int i;

  if (s->phase != ETCD_RDZV_RUNNING)
    return;
  for (i = 0; i < s->n; i++)
    if (s->nodes[i].st == ETCD_RDZV_PART && s->nodes[i].rank == 0)
      break;
  if (i == s->n)
    return;
  /* As deliver_round names it. */
  snprintf(master, sizeof master, "%s:%d",
           s->nodes[i].addr[0] ? s->nodes[i].addr : "127.0.0.1",
           s->nodes[i].port);
  if (strlen(s->token) == 64 && s->token_restart == s->restart_count &&
      strcmp(s->token_master, master) == 0)
    return;
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
    s->token[0] = '\0';      /* jobtoken.h falls back to its own */
    return;
  }
  for (i = 0; i < 32; i++)
    snprintf(s->token + 2 * i, 3, "%02x", rnd[i]);
  s->token_restart = s->restart_count;
  snprintf(s->token_master, sizeof s->token_master, "%s", master);
}

/* Writes s if the state is still at st_mod and this agent is alive. */
static int write_state(struct rdzv_etcd *e, const struct etcd_rdzv_state *s)
{
  cJSON *b = cJSON_CreateObject(), *cmp, *c, *ok, *op, *in;
  char rev[32], *val = NULL;
  int rc;

  cmp = cJSON_AddArrayToObject(b, "compare");
  c = cJSON_CreateObject();
  etcd_add_b64(c, "key", e->state_key, strlen(e->state_key));
  cJSON_AddItemToArray(cmp, c);
  if (e->st_mod > 0 && e->st.exists) {
    snprintf(rev, sizeof rev, "%" PRId64, e->st_mod);
    cJSON_AddStringToObject(c, "target", "MOD");
    cJSON_AddStringToObject(c, "result", "EQUAL");
    cJSON_AddStringToObject(c, "mod_revision", rev);
  } else {
    cJSON_AddStringToObject(c, "target", "CREATE");
    cJSON_AddStringToObject(c, "result", "EQUAL");
    cJSON_AddStringToObject(c, "create_revision", "0");
  }
  c = cJSON_CreateObject();
  etcd_add_b64(c, "key", e->session.alive_key,
               strlen(e->session.alive_key));
  cJSON_AddStringToObject(c, "target", "VERSION");
  cJSON_AddStringToObject(c, "result", "GREATER");
  cJSON_AddStringToObject(c, "version", "0");
  cJSON_AddItemToArray(cmp, c);

  ok = cJSON_AddArrayToObject(b, "success");
  op = cJSON_CreateObject();
  if (s->n == 0 && !keeps_marker(e, s)) {
    /* Nobody left: the job is forgotten. */
    in = cJSON_AddObjectToObject(op, "request_delete_range");
    etcd_add_b64(in, "key", e->state_key, strlen(e->state_key));
  } else {
    val = etcd_rdzv_state_serialize(s);
    if (!val) {
      cJSON_Delete(op);
      cJSON_Delete(b);
      return -ENOMEM;
    }
    in = cJSON_AddObjectToObject(op, "request_put");
    etcd_add_b64(in, "key", e->state_key, strlen(e->state_key));
    etcd_add_b64(in, "value", val, strlen(val));
    free(val);
    if (s->n == 0)
      cJSON_AddStringToObject(in, "lease", e->end_lease);
    else if (s->lease[0])
      cJSON_AddStringToObject(in, "lease", s->lease);
  }
  cJSON_AddItemToArray(ok, op);
  op = cJSON_AddArrayToObject(b, "failure");
  cJSON_AddItemToArray(op, range_op(e->state_key));
  cJSON_AddItemToArray(op, range_op(e->session.alive_key));
  rc = etcd_call(e->ec, "/v3/kv/txn", b, txn_done, e);
  cJSON_Delete(b);
  return rc;
}

static void step(struct rdzv_etcd *e);

static void kick_cb(uv_timer_t *t)
{
  step(t->data);
}

void rdzv_etcd_retry_cb(uv_timer_t *t)
{
  struct rdzv_etcd *e = t->data;

  if (e->boot != B_READY)
    rdzv_etcd_boot_next(e);
  else
    step(e);
}

static void txn_done(void *ctx, int err, const cJSON *r, const char *msg)
{
  struct rdzv_etcd *e = ctx;
  const cJSON *resp, *kvs, *kv;
  const cJSON *rr0 = NULL, *rr1 = NULL;
  double took = monotime_now() - e->txn_sent;
  int64_t rev;

  e->call_inflight = false;
  e->txn_rtt = e->txn_rtt > 0 ? 0.8 * e->txn_rtt + 0.2 * took : took;
  if (err == -ENOENT) {
    /* "requested lease not found": the lease we wrote under is gone
     * (Note [the job's lease]; the marker's: no marker then). */
    if (e->txn_state.n == 0)
      snprintf(e->end_lease, sizeof e->end_lease, "0");
    else
      snprintf(e->dead_lease, sizeof e->dead_lease, "%s",
               e->txn_state.lease);
    rdzv_etcd_kick(e);
    return;
  }
  if (err) {
    /* Outcome unknown (a timeout may commit later): the next attempt
     * compares again and re-applies the intents, which are idempotent. */
    snprintf(e->last_error, sizeof e->last_error, "%s", msg);
    uv_timer_start(&e->retry, rdzv_etcd_retry_cb, RETRY_MS, 0);
    return;
  }
  rev = etcd_i64(cJSON_GetObjectItemCaseSensitive(r, "header"), "revision");
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "succeeded"))) {
    struct etcd_rdzv_state tmp = e->st;

    e->st = e->txn_state;
    e->txn_state = tmp;
    e->st_mod = rev;
    if (!e->st.n) {
      e->emptied = true;
      snprintf(e->emptied_lease, sizeof e->emptied_lease, "%s", e->st.lease);
      e->end_lease_used |= keeps_marker(e, &e->st);
      etcd_rdzv_state_free(&e->st);
    }
    if (e->txn_clear_failure) {
      e->want_failure = false;
      e->publish_dirty |= e->want_leave;    /* now the leave */
    }
    if (e->txn_clear_barrier)
      e->barrier_written = true;
    rdzv_etcd_kick(e);
    return;
  }
  resp = cJSON_GetObjectItemCaseSensitive(r, "responses");
  rr0 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(resp, 0),
                                         "response_range");
  rr1 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(resp, 1),
                                         "response_range");
  if (etcd_i64(rr1, "count") == 0) {
    if (e->want_leave) {
      rdzv_etcd_leave_finish(e);
      return;
    }
    rdzv_etcd_lease_lost(e);
    return;
  }
  kvs = cJSON_GetObjectItemCaseSensitive(rr0, "kvs");
  kv = cJSON_GetArrayItem(kvs, 0);
  if (kv) {
    rdzv_etcd_take_kv(e, kv, false);
  } else if (e->st_mod < rev) {
    etcd_rdzv_state_free(&e->st);    /* deleted meanwhile */
    e->st_mod = rev;
  }
  rdzv_etcd_kick(e);
}

static void catchup_fire(uv_timer_t *t)
{
  struct rdzv_etcd *e = t->data;

  e->catchup_expired = true;
  rdzv_etcd_kick(e);
}

static void defer_fire(uv_timer_t *t)
{
  struct rdzv_etcd *e = t->data;

  e->defer_expired = true;
  rdzv_etcd_kick(e);
}

/* Note [one helper]: when every agent applies every request it sees
 * (Note [requests in alive keys]), N agents that see the same new request
 * all write, one wins and N-1 compare-and-swaps fail, each of them a
 * raft entry etcd must commit: 32 agents made ~9 transactions each.  So
 * one agent helps: the one whose alive key is the oldest (every agent
 * knows the alive set from the watch, so they agree but for a moment).
 * Another agent leaves what its alive key asks (join, exit barrier,
 * leave) to it for DEFER_MS, then writes it itself (its own intents
 * only: it does not see the others' requests, Note [what an agent
 * watches] in rdzv_etcd.c): a helper that is slow or leaving costs that
 * much, never progress.  The dead nodes' removal is the helper's alone;
 * a dead helper's key goes one TTL later and the next oldest agent takes
 * over.  What only this agent can write (a failure report, a last call,
 * a close) goes at once. */
bool rdzv_etcd_is_helper(const struct rdzv_etcd *e)
{
  return e->alive.n == 0 || strcmp(e->alive.peer[0].id, e->session.id) == 0;
}

/* At least DEFER_MS, or four of this agent's transaction round trips
 * when etcd is slower (the helper needs one, after its watch saw the
 * request), spread over three times that: agents whose requests the
 * helper did not apply in time must not all write at the same moment. */
static uint64_t defer_ms(const struct rdzv_etcd *e)
{
  uint64_t base = (uint64_t)fmax(DEFER_MS, 4000 * e->txn_rtt);
  unsigned short r = 0;

  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
    r = (unsigned short)getpid();
  return base + (uint64_t)r % (2 * base);
}

static bool urgent(const struct rdzv_etcd *e)
{
  return e->want_failure || e->last_call_round >= 0 ||
         e->close_wait_round >= 0 || e->failed || !e->st.exists;
}

/* Note [leaving a finished job]: once the exit barrier has passed, a
 * node that goes is no loss (no round starts for it), so an agent other
 * than the helper just revokes its lease: one write instead of three
 * (its alive key's "leave", a transaction, the revoke).  The helper
 * waits until the others' alive keys are gone, then removes them and
 * itself in one transaction, which leaves the ended job's marker; if it
 * cannot (the leave guard ends its wait), the job's lease takes the
 * state away one TTL later. */
bool rdzv_etcd_leave_by_revoke(const struct rdzv_etcd *e)
{
  return e->st.exists && e->st.phase == ETCD_RDZV_RUNNING &&
         e->st.exit_passed && e->view_rev >= e->st_mod && !e->want_failure &&
         !rdzv_etcd_is_helper(e) &&
         etcd_rdzv_state_find(&e->st, e->session.id) >= 0;
}

/* The helper leaving a finished job: another node of it is still alive. */
static bool others_still_alive(const struct rdzv_etcd *e)
{
  int i;

  if (!e->want_leave || !rdzv_etcd_is_helper(e) || !e->st.exists ||
      e->st.phase != ETCD_RDZV_RUNNING || !e->st.exit_passed)
    return false;
  for (i = 0; i < e->st.n; i++)
    if (strcmp(e->st.nodes[i].id, e->session.id) != 0 &&
        etcd_alive_find(&e->alive, e->st.nodes[i].id) >= 0)
      return true;
  return false;
}

static void step(struct rdzv_etcd *e)
{
  char err[RDZV_PROTO_MAX_TEXT + 1];
  bool cf, cb, defer;
  int rc;

  if (e->closing)
    return;
  if (e->boot != B_READY) {
    rdzv_etcd_boot_next(e);
    return;
  }
  /* Note [what an agent watches]: the helper now, or a watch that cannot
   * resume. */
  if (e->want_resync && !e->destroyed && !e->failed) {
    if (!e->call_inflight)
      rdzv_etcd_resync(e);
    return;
  }
  rdzv_etcd_observe(e);
  if (e->publish_dirty && !e->closing)
    rdzv_etcd_publish(e);
  if (e->closing || e->call_inflight || (e->failed && !e->want_leave))
    return;
  /* Note [writing from the watch's view]: a transaction's reply can be
   * ahead of the watch.  The helper, writing from such a state, would
   * apply only its own requests (the others' are known from the watch),
   * and lose to the agents that write next; so it waits for the watch to
   * catch up, which it does within a round trip.  A bounded wait: a watch
   * that is reconnecting must not stop the rendezvous.  Another agent
   * writes only its own intents (Note [what an agent watches]), which a
   * reply's state takes as well as the watch's: it does not wait. */
  if (e->full_view && e->view_rev < e->st_mod && !e->catchup_expired) {
    if (!uv_is_active((uv_handle_t *)&e->catchup))
      uv_timer_start(&e->catchup, catchup_fire, CATCHUP_MS, 0);
    return;
  }
  uv_timer_stop(&e->catchup);
  e->catchup_expired = false;
  /* The helper of a finished job gets the marker's lease as the exit
   * barrier passes, so the last write does not wait for it. */
  if (e->st.exists && e->st.phase == ETCD_RDZV_RUNNING &&
      e->st.exit_passed && rdzv_etcd_is_helper(e) &&
      grant_end_lease(e, &e->st, true))
    return;
  if (others_still_alive(e))
    return;     /* their revokes come as watch events */
  defer = !e->defer_expired && !urgent(e) && !rdzv_etcd_is_helper(e);
  rc = transform(e, &e->txn_state, err, sizeof err, &cf, &cb);
  if (rc < 0) {
    if (e->destroyed) {
      rdzv_etcd_leave_finish(e);
      return;
    }
    rdzv_etcd_give_up(e, rc == -ESHUTDOWN ? UV_ECANCELED : UV_EINVAL,
                      "rendezvous '%s' in etcd refused the join: %s", e->id,
                      err);
    return;
  }
  if (cf && !rc) {
    e->want_failure = false;
    if (e->want_leave) {
      e->publish_dirty = true;
      rdzv_etcd_kick(e);
    }
  }
  if (cb && !rc) {
    /* Our barrier request is in the state already (another agent applied
     * it from our alive key): observe() ran before this and must look
     * again, or an exit barrier passed meanwhile is never reported when
     * no further event comes (the other nodes have left). */
    e->barrier_written = true;
    rdzv_etcd_kick(e);
  }
  if (rc == 0) {
    uv_timer_stop(&e->defer);
    e->defer_expired = false;
    if (e->want_leave)
      rdzv_etcd_leave_finish(e);
    return;
  }
  if (defer) {
    if (!uv_is_active((uv_handle_t *)&e->defer))
      uv_timer_start(&e->defer, defer_fire, defer_ms(e), 0);
    return;
  }
  if (grant_end_lease(e, &e->txn_state, false) ||
      need_job_lease(e, &e->txn_state))
    return;
  refresh_token(&e->txn_state);
  e->txn_clear_failure = cf;
  e->txn_clear_barrier = cb;
  e->txn_sent = monotime_now();
  rc = write_state(e, &e->txn_state);
  if (rc) {
    uv_timer_start(&e->retry, rdzv_etcd_retry_cb, RETRY_MS, 0);
    return;
  }
  e->call_inflight = true;
}

/* step() soon, from the loop: never from inside the call that caused it. */
void rdzv_etcd_kick(struct rdzv_etcd *e)
{
  if (!e->closing)
    uv_timer_start(&e->kick, kick_cb, 0, 0);
}
