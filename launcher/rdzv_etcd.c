/* rdzv_etcd.c -- the agent's etcd back end (proto/ETCD.md).
 *
 * Keys, under <prefix><rdzv_id>/:
 *   state          the job document (etcd_rdzv_state.h), under the job's
 *                  lease (Note [the job's lease])
 *   alive/<lease>  one per agent, attached to the agent's lease
 *
 * The agent keeps what it wants (join, report a failure, enter the exit
 * barrier, complete a round whose last call ran out, remove dead nodes,
 * leave) as intents.  step() (rdzv_etcd_step.c; rdzv_etcd_internal.h
 * says what crosses) applies every intent to the newest state it
 * knows and, when that changes the state, writes it with one transaction
 * that compares the state's mod_revision (and that this agent's alive key
 * still exists); on a conflict the transaction's failure branch returns the
 * current state and step() runs again.  What the state says (a completed
 * round, a new round, the exit barrier passed, the job closed) reaches the
 * agent's callbacks from observe() (rdzv_etcd_observe.c), fed by the
 * watch. */
#include "rdzv_etcd.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "etcd_client.h"
#include "etcd_rdzv_state.h"
#include "etcd_session.h"
#include "rdzv_etcd_internal.h"
#include "monotime.h"
#include "say.h"

#define LEAVE_GUARD_MS 5000



/* The rendezvous cannot go on: this back end gives up for good (its
 * timers stop) and reports why, once (on_error; err 0: the job finished
 * without this node), as rdzv_client.c's give_up does. */
void rdzv_etcd_give_up(struct rdzv_etcd *e, int err, const char *fmt, ...)
{
  char msg[RDZV_PROTO_MAX_TEXT + 256];
  va_list ap;

  if (e->failed || e->destroyed)
    return;
  e->failed = true;
  etcd_session_stop(&e->session);
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  uv_timer_stop(&e->join_deadline);
  uv_timer_stop(&e->last_call);
  uv_timer_stop(&e->close_wait);
  e->base.cb.on_error(e->base.cb.ctx, err, msg);
}

/* This agent's lease is gone: the others count it as lost. */
void rdzv_etcd_lease_lost(void *ctx)
{
  struct rdzv_etcd *e = ctx;

  rdzv_etcd_give_up(e, UV_ECONNRESET, "rendezvous '%s': this agent's etcd "
                    "lease expired (no keepalive reached etcd for %d s): the "
                    "other nodes count it as lost", e->id, e->session.ttl);
}

/* ---- what etcd says ------------------------------------------------------- */

/* A newer version of the state (mod 0 with value NULL: deleted). */
static void take_state(struct rdzv_etcd *e, const char *value, size_t len,
                       int64_t mod)
{
  struct etcd_rdzv_state s;

  if (mod && mod <= e->st_mod)
    return;
  etcd_rdzv_state_init(&s);
  if (value && etcd_rdzv_state_parse(value, len, &s) != 0) {
    say("rendezvous '%s': ignoring a malformed state in etcd at %s", e->id,
        e->state_key);
    etcd_rdzv_state_free(&s);
    return;
  }
  etcd_rdzv_state_free(&e->st);
  e->st = s;
  e->st_mod = mod;
}

/* One key-value from a range or an event: the state, or an alive key. */
void rdzv_etcd_take_kv(struct rdzv_etcd *e, const cJSON *kv, bool deleted)
{
  size_t klen = 0, vlen = 0, plen = strlen(e->alive_prefix);
  char *key = etcd_get_b64(kv, "key", &klen), *val;
  int64_t mod = etcd_i64(kv, "mod_revision");

  if (!key)
    return;
  if (strcmp(key, e->state_key) == 0) {
    if (deleted) {
      if (mod > e->st_mod) {
        etcd_rdzv_state_free(&e->st);
        e->st_mod = mod;
      }
    } else {
      val = etcd_get_b64(kv, "value", &vlen);
      if (val)
        take_state(e, val, vlen, mod);
      free(val);
    }
  } else if (klen > plen && strncmp(key, e->alive_prefix, plen) == 0) {
    const char *id = key + plen;

    if (deleted) {
      etcd_alive_del(&e->alive, id);
      if (strcmp(id, e->session.id) == 0 && !e->destroyed)
        rdzv_etcd_lease_lost(e);
    } else {
      val = etcd_get_b64(kv, "value", &vlen);
      etcd_alive_put(&e->alive, id, etcd_i64(kv, "create_revision"), val,
                     vlen);
      free(val);
    }
  }
  free(key);
}

/* Note [what an agent watches]: every agent that watched the job's
 * prefix got every alive key's put and delete, N agents' joins, exit
 * barriers and leaves each sent down N watches (N^2 watch messages a
 * job, most of etcd's CPU at 32 agents: scripts/bench/etcd_requests).
 * But only the helper (Note [one helper]) applies the others' requests
 * and removes the dead; the others need the state, and the alive keys'
 * deletes, to know when the helper is gone and which agent helps then
 * (the oldest alive key: any key they have not seen was created after
 * their snapshot, so it is younger than theirs).  So an agent that is not
 * the helper when it reads the job watches the state key (all events)
 * and the alive keys with etcd's NOPUT filter (two streams): a request
 * costs etcd one watch message, to the helper, not N.  Its view_rev is
 * the state watch's; it applies only its own intents (a compare-and-swap
 * like any other), never another agent's request or a verdict on a dead
 * node, which need every alive key as of the state.  Once the deletes
 * make it the oldest, it reads the job again (rdzv_etcd_resync: a range
 * of the prefix, as at the start) and watches the whole prefix from
 * there, as the helper. */
static bool event_is_delete(const cJSON *ev)
{
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(ev, "type");

  return cJSON_IsString(t) && strcmp(t->valuestring, "DELETE") == 0;
}

static void on_watch(void *ctx, const cJSON *result)
{
  struct rdzv_etcd *e = ctx;
  const cJSON *events = cJSON_GetObjectItemCaseSensitive(result, "events");
  const cJSON *ev;
  int64_t rev = etcd_i64(cJSON_GetObjectItemCaseSensitive(result, "header"),
                         "revision");

  cJSON_ArrayForEach(ev, events)
    rdzv_etcd_take_kv(e, cJSON_GetObjectItemCaseSensitive(ev, "kv"),
                      event_is_delete(ev));
  if (rev > e->view_rev)
    e->view_rev = rev;
  rdzv_etcd_kick(e);
}

/* Note [what an agent watches]: the alive keys' deletes of an agent that
 * was not the helper. */
static void on_alive_watch(void *ctx, const cJSON *result)
{
  struct rdzv_etcd *e = ctx;
  const cJSON *events = cJSON_GetObjectItemCaseSensitive(result, "events");
  const cJSON *ev;

  cJSON_ArrayForEach(ev, events)
    if (event_is_delete(ev))
      rdzv_etcd_take_kv(e, cJSON_GetObjectItemCaseSensitive(ev, "kv"), true);
  if (!e->full_view && !e->failed && rdzv_etcd_is_helper(e))
    e->want_resync = true;
  rdzv_etcd_kick(e);
}

static void stop_watches(struct rdzv_etcd *e)
{
  if (e->watch)
    etcd_watch_stop(e->watch);
  if (e->alive_watch)
    etcd_watch_stop(e->alive_watch);
  e->watch = e->alive_watch = NULL;
}

static void on_watch_error(void *ctx, int err, const char *msg)
{
  struct rdzv_etcd *e = ctx;

  (void)err;
  /* Compacted past what we saw: read everything again, watch anew. */
  say("rendezvous '%s': %s; reading the job again", e->id, msg);
  stop_watches(e);
  e->want_resync = true;
  rdzv_etcd_kick(e);
}

/* rdzv_etcd_internal.h.  From step(), with no call in flight. */
void rdzv_etcd_resync(struct rdzv_etcd *e)
{
  e->want_resync = false;
  stop_watches(e);
  e->boot = B_SYNC;
  rdzv_etcd_boot_next(e);
}

static void start_leave(struct rdzv_etcd *e);

/* ---- boot: lease, alive key, snapshot, watch --------------------------- */

static void boot_failed(struct rdzv_etcd *e, int err, const char *msg)
{
  e->call_inflight = false;
  snprintf(e->last_error, sizeof e->last_error, "%s", msg);
  if (e->destroyed) {
    rdzv_etcd_leave_finish(e);
    return;
  }
  if (!e->synced &&
      monotime_now() - e->join_started > e->o.conf.join_timeout) {
    rdzv_etcd_give_up(e, err == -EACCES || err == -EPERM ? UV_EACCES
                                                         : UV_ECONNREFUSED,
                      "rendezvous '%s': cannot use etcd within the join "
                      "timeout (%.0f s): %s", e->id, e->o.conf.join_timeout,
                      msg);
    return;
  }
  if (err == -EACCES || err == -EPERM || err == -EINVAL) {
    rdzv_etcd_give_up(e, UV_EACCES, "rendezvous '%s': etcd refused: %s",
                      e->id, msg);
    return;
  }
  uv_timer_start(&e->retry, rdzv_etcd_retry_cb, RETRY_MS, 0);
}


static void grant_done(void *ctx, int err, const char *msg)
{
  struct rdzv_etcd *e = ctx;

  if (err) {
    boot_failed(e, err, msg);
    return;
  }
  e->call_inflight = false;
  if (e->destroyed) {
    rdzv_etcd_leave_finish(e);
    return;
  }
  if (!e->local_addr[0])
    snprintf(e->local_addr, sizeof e->local_addr, "%s",
             etcd_client_local_ip(e->ec));
  e->boot = B_ALIVE;
  rdzv_etcd_boot_next(e);
}

static void alive_done(void *ctx, int err, const cJSON *r, const char *msg)
{
  struct rdzv_etcd *e = ctx;

  (void)r;
  if (err == -ENOENT) {     /* the lease expired meanwhile */
    e->boot = B_GRANT;
    etcd_session_forget(&e->session);
  }
  if (err) {
    free(e->published);
    e->published = NULL;
    boot_failed(e, err, msg);
    return;
  }
  e->call_inflight = false;
  if (e->destroyed) {
    rdzv_etcd_leave_finish(e);
    return;
  }
  e->boot = B_SYNC;
  rdzv_etcd_boot_next(e);
}

static void sync_done(void *ctx, int err, const cJSON *r, const char *msg)
{
  struct rdzv_etcd *e = ctx;
  const cJSON *kv, *kvs = cJSON_GetObjectItemCaseSensitive(r, "kvs");
  char end[sizeof e->prefix];

  if (err) {
    boot_failed(e, err, msg);
    return;
  }
  e->call_inflight = false;
  if (e->destroyed && !e->synced) {
    rdzv_etcd_leave_finish(e);
    return;
  }
  etcd_rdzv_state_free(&e->st);
  e->st_mod = 0;
  etcd_alive_clear(&e->alive);
  cJSON_ArrayForEach(kv, kvs)
    rdzv_etcd_take_kv(e, kv, false);
  e->view_rev = etcd_i64(cJSON_GetObjectItemCaseSensitive(r, "header"),
                         "revision");
  /* Note [what an agent watches]. */
  stop_watches(e);
  e->full_view = rdzv_etcd_is_helper(e);
  if (e->full_view) {
    etcd_prefix_end(e->prefix, end);
    e->watch = etcd_watch_start(e->ec, e->prefix, end, e->view_rev + 1,
                                on_watch, on_watch_error, e);
  } else {
    e->watch = etcd_watch_start(e->ec, e->state_key, NULL, e->view_rev + 1,
                                on_watch, on_watch_error, e);
    etcd_prefix_end(e->alive_prefix, end);
    e->alive_watch = etcd_watch_start_flags(e->ec, e->alive_prefix, end,
                                            e->view_rev + 1, ETCD_WATCH_NOPUT,
                                            on_alive_watch, on_watch_error,
                                            e);
  }
  if (!e->watch || (!e->full_view && !e->alive_watch)) {
    rdzv_etcd_give_up(e, UV_ENOMEM, "rendezvous '%s': out of memory", e->id);
    return;
  }
  e->boot = B_READY;
  /* The round our join asks for, now that we know the job. */
  if (e->want_join && !e->synced)
    e->join_round = e->st.exists ? e->st.round : 0;
  e->synced = true;
  e->publish_dirty = true;
  if (e->destroyed) {       /* while it read the job again */
    start_leave(e);
    return;
  }
  rdzv_etcd_kick(e);
}

static void start_sync(struct rdzv_etcd *e)
{
  char end[sizeof e->prefix];
  cJSON *b = cJSON_CreateObject();
  int rc;

  etcd_prefix_end(e->prefix, end);
  etcd_add_b64(b, "key", e->prefix, strlen(e->prefix));
  etcd_add_b64(b, "range_end", end, strlen(end));
  rc = etcd_call(e->ec, "/v3/kv/range", b, sync_done, e);
  cJSON_Delete(b);
  if (rc)
    boot_failed(e, rc, "cannot start a request");
  else
    e->call_inflight = true;
}

/* Our alive key's value: who we are and what we ask for (Note [requests
 * in alive keys]). */
static char *alive_value(const struct rdzv_etcd *e)
{
  struct etcd_peer me;

  memset(&me, 0, sizeof me);
  snprintf(me.node.host, sizeof me.node.host, "%s", e->myhost);
  snprintf(me.node.addr, sizeof me.node.addr, "%s", e->local_addr);
  me.node.pid = getpid();
  me.node.nproc = e->o.nproc;
  me.node.port = e->o.master_port;
  me.conf.min_nodes = e->o.conf.min_nodes;
  me.conf.max_nodes = e->o.conf.max_nodes;
  me.conf.max_restarts = e->o.conf.max_restarts;
  me.conf.last_call_timeout = e->o.conf.last_call_timeout;
  /* A join of the round this agent was given stays: it asks for
   * nothing more (a join is applied only for its round or a later one,
   * to a node not in it), and clearing it would be one more write, on
   * the path of the exit request that follows. */
  me.join = !e->want_leave && (e->want_join ||
                               e->delivered_round == e->join_round)
                ? e->join_round : -1;
  me.exit = e->want_leave ? -1 : e->barrier_round;
  /* Not before our failure report is in the state: another agent that
   * applied the leave first would start a round for a node that "left"
   * and the report, then a no-op, would be lost (a final failure would
   * not close the job; the others would wait for this node). */
  me.leave = e->want_leave && !e->want_failure;
  return etcd_alive_value(&me);
}

static void publish_done(void *ctx, int err, const cJSON *r, const char *msg)
{
  struct rdzv_etcd *e = ctx;

  (void)r;
  (void)msg;
  e->publish_inflight = false;
  if (err) {
    e->publish_dirty = true;    /* step() tries again */
    free(e->published);
    e->published = NULL;
  }
  if (e->publish_dirty)
    rdzv_etcd_kick(e);
}

/* Rewrites our alive key with what we ask for now (one put at a time);
 * only an optimisation for the others, never needed for progress. */
void rdzv_etcd_publish(struct rdzv_etcd *e)
{
  char *val;

  if (e->boot != B_READY || !e->session.lease[0] || e->closing) {
    e->publish_dirty = e->boot != B_READY;
    return;
  }
  if (e->publish_inflight) {
    e->publish_dirty = true;
    return;
  }
  e->publish_dirty = false;
  val = alive_value(e);
  if (!val)
    return;
  /* Unchanged: no write (each is a raft entry etcd must commit). */
  if (e->published && strcmp(val, e->published) == 0) {
    free(val);
    return;
  }
  if (etcd_session_put_alive(&e->session, val, publish_done, e) == 0) {
    e->publish_inflight = true;
    free(e->published);
    e->published = val;
    return;
  }
  free(val);
}

void rdzv_etcd_boot_next(struct rdzv_etcd *e)
{
  char *val;
  int rc = 0;

  if (e->call_inflight || e->destroyed || e->failed)
    return;
  switch (e->boot) {
  case B_IDLE:
  case B_READY:
    return;
  case B_GRANT:
    rc = etcd_session_grant(&e->session, grant_done, e);
    break;
  case B_ALIVE:
    val = alive_value(e);
    if (!val) {
      rc = -ENOMEM;
      break;
    }
    rc = etcd_session_put_alive(&e->session, val, alive_done, e);
    free(e->published);
    e->published = rc ? NULL : val;
    if (rc)
      free(val);
    break;
  case B_SYNC:
    start_sync(e);
    return;
  }
  if (rc)
    boot_failed(e, rc, "cannot start a request");
  else
    e->call_inflight = true;
}

/* ---- the back-end operations --------------------------------------------- */

static void join_timeout_fire(uv_timer_t *t)
{
  struct rdzv_etcd *e = t->data;
  int part = 0;

  if (!e->want_join)
    return;
  if (e->boot != B_READY) {
    rdzv_etcd_give_up(e, UV_ETIMEDOUT, "rendezvous '%s': cannot use etcd at "
                      "%s within the join timeout (%.0f s): %s", e->id,
                      e->endpoints, e->o.conf.join_timeout,
                      e->last_error[0] ? e->last_error : "no answer");
    return;
  }
  etcd_rdzv_state_counts(&e->st, &part, NULL, NULL);
  rdzv_etcd_give_up(e, UV_ETIMEDOUT, "rendezvous '%s' refused: waited %.0f "
                    "s: %d of at least %d nodes present (join_timeout)",
                    e->id, e->o.conf.join_timeout, part,
                    e->o.conf.min_nodes);
}

static int etcd_join(struct rdzv *r, enum rdzv_join_reason why)
{
  struct rdzv_etcd *e = (struct rdzv_etcd *)r;
  struct etcd_client_opts co;
  char err[512];
  int rc;

  if (e->failed)
    return UV_ECANCELED;
  e->want_join = true;
  e->join_round = e->st.exists ? e->st.round : 0;
  e->last_present = -1;
  e->join_started = monotime_now();
  rdzv_etcd_publish(e);
  uv_timer_start(&e->join_deadline, join_timeout_fire,
                 (uint64_t)(e->o.conf.join_timeout * 1000), 0);
  if (why == RDZV_JOIN_FIRST && e->boot == B_IDLE) {
    memset(&co, 0, sizeof co);
    co.endpoints = e->endpoints;
    co.https = e->o.https;
    co.cacert = e->cacert;
    co.cert = e->cert;
    co.key = e->key;
    co.user = e->user;
    co.password = e->password;
    co.timeout = 10;
    rc = etcd_client_create(r->loop, &co, &e->ec, err, sizeof err);
    if (rc) {
      say("rendezvous '%s': %s", e->id, err);
      return UV_EINVAL;
    }
    e->boot = B_GRANT;
    etcd_session_start(&e->session, e->ec);
  }
  rdzv_etcd_kick(e);
  return 0;
}

static int etcd_report_failure(struct rdzv *r, bool final,
                               const char *message)
{
  struct rdzv_etcd *e = (struct rdzv_etcd *)r;

  if (e->delivered_round < 0)
    return UV_EINVAL;
  e->want_failure = true;
  e->failure_round = e->delivered_round;
  e->failure_final = final;
  snprintf(e->failure_msg, sizeof e->failure_msg, "%s",
           message ? message : "");
  memset(&e->failure_cause, 0, sizeof e->failure_cause);
  if (r->local_cause.exited_at > 0) {
    const struct rdzv_cause *lc = &r->local_cause;

    e->failure_cause.exited_at = lc->exited_at;
    e->failure_cause.rank = lc->rank;
    e->failure_cause.local_rank = lc->local_rank;
    e->failure_cause.exitcode = lc->exitcode;
    e->failure_cause.pid = lc->pid;
    snprintf(e->failure_cause.host, sizeof e->failure_cause.host, "%s",
             lc->host);
  }
  rdzv_etcd_kick(e);
  return 0;
}

static int etcd_exit_barrier(struct rdzv *r)
{
  struct rdzv_etcd *e = (struct rdzv_etcd *)r;

  if (e->delivered_round < 0)
    return UV_EINVAL;
  e->barrier_round = e->delivered_round;
  e->barrier_written = false;
  rdzv_etcd_publish(e);
  rdzv_etcd_kick(e);
  return 0;
}

/* ---- leaving ------------------------------------------------------------ */

/* One of e's handles is closed; the last frees e. */
static void one_closed(void *ctx)
{
  struct rdzv_etcd *e = ctx;

  if (--e->open_handles > 0)
    return;
  etcd_rdzv_state_free(&e->st);
  etcd_rdzv_state_free(&e->txn_state);
  etcd_alive_clear(&e->alive);
  etcd_alive_free(&e->alive);
  free(e->published);
  free(e->user);
  if (e->password) {
    memset(e->password, 0, strlen(e->password));
    free(e->password);
  }
  free(e->cacert);
  free(e->cert);
  free(e->key);
  free(e);
}

static void handle_closed(uv_handle_t *h)
{
  one_closed(h->data);
}

static void close_all(struct rdzv_etcd *e)
{
  if (e->closing)
    return;
  e->closing = true;
  if (e->ec)
    etcd_client_close(e->ec);   /* stops the watch too */
  e->ec = NULL;
  e->watch = e->alive_watch = NULL;
  uv_close((uv_handle_t *)&e->kick, handle_closed);
  uv_close((uv_handle_t *)&e->retry, handle_closed);
  etcd_session_close(&e->session);
  uv_close((uv_handle_t *)&e->last_call, handle_closed);
  uv_close((uv_handle_t *)&e->close_wait, handle_closed);
  uv_close((uv_handle_t *)&e->join_deadline, handle_closed);
  uv_close((uv_handle_t *)&e->leave_guard, handle_closed);
  uv_close((uv_handle_t *)&e->catchup, handle_closed);
  uv_close((uv_handle_t *)&e->defer, handle_closed);
}

static void revoke_done(void *ctx, int err, const cJSON *r, const char *msg)
{
  struct rdzv_etcd *e = ctx;

  (void)err;
  (void)r;
  (void)msg;
  if (--e->revokes == 0)
    close_all(e);
}

static void revoke_lease(struct rdzv_etcd *e, const char *lease)
{
  cJSON *b;

  if (!lease[0] || strcmp(lease, "0") == 0)
    return;
  b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "ID", lease);
  if (etcd_call(e->ec, "/v3/lease/revoke", b, revoke_done, e) == 0)
    e->revokes++;
  cJSON_Delete(b);
}

/* Out of the state (or giving up on it): revoke the lease, which deletes
 * the alive key, then close.  Nothing is left to expire later: the
 * marker's lease when our marker was not the one written, the job's
 * lease when our write emptied the job or when it was granted here and
 * never used (Note [the job's lease]). */
void rdzv_etcd_leave_finish(struct rdzv_etcd *e)
{
  e->want_leave = false;
  if (!e->ec) {
    close_all(e);
    return;
  }
  e->revokes = 1;     /* ours, below: the others join it */
  if (e->end_lease[0] && !e->end_lease_used)
    revoke_lease(e, e->end_lease);
  if (e->job_lease[0] && (e->emptied || strcmp(e->job_lease, e->st.lease)))
    revoke_lease(e, e->job_lease);
  if (e->emptied && strcmp(e->emptied_lease, e->job_lease) != 0)
    revoke_lease(e, e->emptied_lease);
  if (etcd_session_revoke(&e->session, revoke_done, e) != 0)
    revoke_done(e, 0, NULL, NULL);
}

static void leave_guard_fire(uv_timer_t *t)
{
  close_all(t->data);
}

static void etcd_destroy(struct rdzv *r)
{
  struct rdzv_etcd *e = (struct rdzv_etcd *)r;

  e->destroyed = true;
  etcd_session_stop(&e->session);
  uv_timer_stop(&e->last_call);
  uv_timer_stop(&e->close_wait);
  uv_timer_stop(&e->join_deadline);
  uv_timer_stop(&e->retry);
  if (!e->ec) {
    close_all(e);
    return;
  }
  /* Bounded: etcd may be unreachable. */
  uv_timer_start(&e->leave_guard, leave_guard_fire, LEAVE_GUARD_MS, 0);
  if (e->synced && e->boot == B_SYNC && e->session.lease[0] &&
      e->call_inflight) {
    e->want_join = false;   /* sync_done leaves (start_leave) */
    return;
  }
  if (e->boot != B_READY || !e->session.lease[0]) {
    if (!e->call_inflight)
      rdzv_etcd_leave_finish(e);
    else
      e->want_leave = true;   /* after the boot call, see boot_failed */
    return;
  }
  start_leave(e);
}

/* etcd_destroy of an agent that has read the job: out of the state. */
static void start_leave(struct rdzv_etcd *e)
{
  if (rdzv_etcd_leave_by_revoke(e)) {
    /* Note [leaving a finished job]: nothing the watch says matters to
     * this agent any more; closed before the revoke, so the others'
     * revokes (all at about the same time) are not sent down it. */
    stop_watches(e);
    rdzv_etcd_leave_finish(e);
    return;
  }
  /* A failure report still pending goes with the leave (the transition
   * applies it first): dropped, the others would see only "left" and wait
   * for a node that will not come instead of restarting or closing. */
  e->want_leave = true;
  e->want_join = false;
  e->barrier_round = -1;
  /* The helper of a finished job writes its own leave: asking for it
   * would be one more write. */
  if (!(e->st.exists && e->st.exit_passed && rdzv_etcd_is_helper(e)))
    rdzv_etcd_publish(e);
  rdzv_etcd_kick(e);
}

static const struct rdzv_ops etcd_ops = {
  "etcd", etcd_join, etcd_report_failure, etcd_exit_barrier, etcd_destroy,
  false,
};

static char *dup_opt(const char *s)
{
  return s && s[0] ? strdup(s) : NULL;
}

int rdzv_etcd_create(uv_loop_t *loop, const struct rdzv_etcd_opts *o,
                     const struct rdzv_callbacks *cb, struct rdzv **out)
{
  struct rdzv_etcd *e = calloc(1, sizeof *e);

  if (!e)
    return UV_ENOMEM;
  e->base.ops = &etcd_ops;
  e->base.cb = *cb;
  e->base.loop = loop;
  e->o = *o;
  snprintf(e->endpoints, sizeof e->endpoints, "%s", o->endpoints);
  snprintf(e->id, sizeof e->id, "%s", o->id);
  snprintf(e->local_addr, sizeof e->local_addr, "%s",
           o->local_addr ? o->local_addr : "");
  if (gethostname(e->myhost, sizeof e->myhost - 1) < 0)
    snprintf(e->myhost, sizeof e->myhost, "unknown");
  e->user = dup_opt(o->user);
  e->password = o->password ? strdup(o->password) : NULL;
  e->cacert = dup_opt(o->cacert);
  e->cert = dup_opt(o->cert);
  e->key = dup_opt(o->key);
  e->o.endpoints = e->endpoints;
  e->o.id = e->id;
  e->o.local_addr = e->local_addr;
  snprintf(e->prefix, sizeof e->prefix, "%s%s/",
           o->prefix && o->prefix[0] ? o->prefix : "/cdrun/rdzv/", o->id);
  snprintf(e->state_key, sizeof e->state_key, "%sstate", e->prefix);
  snprintf(e->alive_prefix, sizeof e->alive_prefix, "%salive/", e->prefix);
  etcd_session_init(&e->session, loop, e->id, e->alive_prefix,
                    o->conf.keepalive_interval, o->conf.keepalive_misses,
                    rdzv_etcd_lease_lost, one_closed, e);
  e->delivered_round = -1;
  e->restart_told_round = -1;
  e->barrier_round = -1;
  e->last_call_round = -1;
  e->lc_armed_round = -1;
  e->close_wait_round = -1;
  e->cw_armed_round = -1;
  e->last_present = -1;
  etcd_rdzv_state_init(&e->st);
  etcd_rdzv_state_init(&e->txn_state);
  uv_timer_init(loop, &e->kick);
  uv_timer_init(loop, &e->retry);
  uv_timer_init(loop, &e->last_call);
  uv_timer_init(loop, &e->close_wait);
  uv_timer_init(loop, &e->join_deadline);
  uv_timer_init(loop, &e->leave_guard);
  uv_timer_init(loop, &e->catchup);
  e->kick.data = e->retry.data = e;
  e->last_call.data = e->join_deadline.data = e->leave_guard.data = e;
  e->catchup.data = e->close_wait.data = e;
  uv_timer_init(loop, &e->defer);
  e->defer.data = e;
  e->open_handles = 9;
  /* Note [root cause]: a closing round waits one TTL, then the CAS. */
  e->base.cause_wait = e->session.ttl + 10.0;
  *out = &e->base;
  return 0;
}
