/* etcd_session.c -- an agent's lease, keepalives and alive key in etcd,
 * and the alive set: every agent's alive key (etcd_session.h). */
#include "etcd_session.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_last_word.h"
#include "monotime.h"
#include "rdzv_rules.h"
#include "say.h"

int etcd_session_ttl(double interval, double misses)
{
  double ttl = ceil(rdzv_rules_keepalive_window(interval, (int)misses));

  return ttl < ETCD_SESSION_MIN_TTL ? ETCD_SESSION_MIN_TTL
         : ttl > 1e6 ? 1000000 : (int)ttl;
}

/* Note [an agent's last word]: the revoke a dying agent sends, kept up
 * to date with the member in use and the auth token. */
static void last_word_arm(struct etcd_session *s)
{
  const char *ip, *token;
  int port;

  if (s->ec && s->lease[0] && !s->stopped &&
      etcd_client_plain_peer(s->ec, &ip, &port, &token))
    etcd_last_word_arm(ip, port, s->lease, token);
}

static void closed_cb(uv_handle_t *h)
{
  struct etcd_session *s = h->data;

  s->closed(s->ctx);
}

void etcd_session_init(struct etcd_session *s, uv_loop_t *loop,
                       const char *job, const char *alive_prefix,
                       double interval, double misses,
                       void (*lost)(void *ctx), void (*closed)(void *ctx),
                       void *ctx)
{
  memset(s, 0, sizeof *s);
  s->job = job;
  snprintf(s->alive_prefix, sizeof s->alive_prefix, "%s", alive_prefix);
  s->interval = interval;
  s->ttl = etcd_session_ttl(interval, misses);
  s->lost = lost;
  s->closed = closed;
  s->ctx = ctx;
  uv_timer_init(loop, &s->keepalive);
  s->keepalive.data = s;
}

/* ---- the lease ---------------------------------------------------------- */

static void grant_done(void *ctx, int err, const cJSON *r, const char *msg)
{
  struct etcd_session *s = ctx;
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "ID");

  if (!err && !cJSON_IsString(id)) {
    err = -EPROTO;
    msg = "lease grant: no ID in the answer";
  }
  if (!err) {
    snprintf(s->lease, sizeof s->lease, "%s", id->valuestring);
    /* The lease ID is etcd's int64 as a decimal string (as etcd_i64);
     * not num.h: it is etcd's output, no user input.  The alive key
     * names it in hex. */
    snprintf(s->id, sizeof s->id, "%" PRIx64,
             (uint64_t)strtoull(s->lease, NULL, 10));
    snprintf(s->alive_key, sizeof s->alive_key, "%s%s", s->alive_prefix,
             s->id);
    s->keepalive_ok = monotime_now();
    last_word_arm(s);
  }
  s->grant_cb(s->grant_ctx, err, msg);
}

int etcd_session_grant(struct etcd_session *s, etcd_session_cb cb,
                       void *ctx)
{
  cJSON *b = cJSON_CreateObject();
  char ttl[16];
  int rc;

  s->grant_cb = cb;
  s->grant_ctx = ctx;
  snprintf(ttl, sizeof ttl, "%d", s->ttl);
  cJSON_AddStringToObject(b, "TTL", ttl);   /* exactly "TTL" */
  rc = etcd_call(s->ec, "/v3/lease/grant", b, grant_done, s);
  cJSON_Delete(b);
  return rc;
}

void etcd_session_forget(struct etcd_session *s)
{
  s->lease[0] = '\0';
  etcd_last_word_disarm();
}

int etcd_session_put_alive(struct etcd_session *s, const char *value,
                           etcd_reply_cb cb, void *ctx)
{
  cJSON *b = cJSON_CreateObject();
  int rc;

  if (!b)
    return -ENOMEM;
  etcd_add_b64(b, "key", s->alive_key, strlen(s->alive_key));
  etcd_add_b64(b, "value", value, strlen(value));
  cJSON_AddStringToObject(b, "lease", s->lease);
  rc = etcd_call(s->ec, "/v3/kv/put", b, cb, ctx);
  cJSON_Delete(b);
  return rc;
}

int etcd_session_revoke(struct etcd_session *s, etcd_reply_cb cb,
                        void *ctx)
{
  cJSON *b;
  int rc;

  if (!s->ec || !s->lease[0])
    return -ENOENT;
  etcd_last_word_disarm();
  b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "ID", s->lease);
  rc = etcd_call(s->ec, "/v3/lease/revoke", b, cb, ctx);
  cJSON_Delete(b);
  return rc;
}

/* ---- keepalive ---------------------------------------------------------- */

/* Note [etcd outage]: once no keepalive has reached etcd for half the
 * lease, say so (once), with how long the lease has left; a keepalive
 * that gets through later says that it did.  Checked at every tick, not
 * only on an error: a request into a stalled etcd fails only at its own
 * timeout. */
static void keepalive_check(struct etcd_session *s, const char *why)
{
  double silent = monotime_now() - s->keepalive_ok;

  if (s->keepalive_warned || silent <= s->ttl / 2.0)
    return;
  s->keepalive_warned = true;
  /* While etcd has no leader no lease expires (a new leader restarts
   * them): the TTL left is a bound only while it has one. */
  say("rendezvous '%s': no lease keepalive has reached etcd for %.1f s%s%s%s; "
      "if etcd has a leader the lease expires in %.1f s unless one does "
      "(the other nodes then count this one as lost); while it has none, "
      "no lease expires", s->job, silent, why ? " (" : "", why ? why : "",
      why ? ")" : "", fmax(0, s->ttl - silent));
}

static void keepalive_done(void *ctx, int err, const cJSON *r,
                           const char *msg)
{
  struct etcd_session *s = ctx;
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(r, "result");

  s->keepalive_inflight = false;
  if (!err && !cJSON_IsObject(res)) {
    err = -EPROTO;
    msg = "lease keepalive: no result in the answer";
  }
  if (err) {
    keepalive_check(s, msg);
    return;
  }
  if (etcd_i64(res, "TTL") <= 0) {
    s->lost(s->ctx);
    return;
  }
  /* Note [etcd outage]: the line that said it was in trouble gets its
   * answer. */
  if (s->keepalive_warned)
    say("rendezvous '%s': etcd answers again: the lease was renewed after "
        "%.1f s without a keepalive", s->job, monotime_now() - s->keepalive_ok);
  s->keepalive_ok = monotime_now();
  s->keepalive_warned = false;
  last_word_arm(s);
}

/* Seconds between keepalives: the configured interval, but at least
 * three per TTL (keepalive_misses 1 would otherwise renew only as the
 * lease ends). */
static double keepalive_period(const struct etcd_session *s)
{
  return fmin(s->interval, s->ttl / 3.0);
}

/* How long one member may take to renew before the next is asked.  With
 * one member there is no other to ask: a slow answer still renews, so it
 * gets the whole TTL. */
static double keepalive_timeout(const struct etcd_session *s)
{
  if (etcd_client_n_members(s->ec) < 2)
    return s->ttl;
  return fmax(0.5, s->ttl / 3.0);
}

static void keepalive_tick(uv_timer_t *t)
{
  struct etcd_session *s = t->data;
  char body[128];

  /* Note [keepalive across a member's loss]: one at a time, each member
   * given a third of the TTL before the next one is asked, so a member
   * that is gone or has no leader (a follower holds a renewal up to ~7 s
   * waiting for one) never keeps the renewal from the members that can
   * serve it within the TTL. */
  if (!s->lease[0] || s->stopped)
    return;
  keepalive_check(s, NULL);
  if (s->keepalive_inflight)
    return;
  /* One request renews ours and the job's (a stream of requests, one a
   * line; the answer's first line is ours). */
  snprintf(body, sizeof body, "{\"ID\":\"%s\"}%s%s%s", s->lease,
           s->also[0] ? "\n{\"ID\":\"" : "", s->also,
           s->also[0] ? "\"}" : "");
  if (etcd_call_text(s->ec, "/v3/lease/keepalive", body, keepalive_timeout(s),
                     keepalive_done, s) == 0)
    s->keepalive_inflight = true;
}

void etcd_session_also(struct etcd_session *s, const char *lease)
{
  /* Only digits: it goes into a request as is. */
  if (!lease || strspn(lease, "0123456789") != strlen(lease) ||
      strlen(lease) >= sizeof s->also)
    lease = "";
  snprintf(s->also, sizeof s->also, "%s", lease);
}

void etcd_session_start(struct etcd_session *s, struct etcd_client *ec)
{
  uint64_t ms = (uint64_t)(keepalive_period(s) * 1000);

  s->ec = ec;
  uv_timer_start(&s->keepalive, keepalive_tick, ms ? ms : 1, ms ? ms : 1);
}

void etcd_session_stop(struct etcd_session *s)
{
  s->stopped = true;
  uv_timer_stop(&s->keepalive);
}

void etcd_session_close(struct etcd_session *s)
{
  etcd_session_stop(s);
  etcd_last_word_disarm();
  s->ec = NULL;
  uv_close((uv_handle_t *)&s->keepalive, closed_cb);
}

/* ---- the alive set ------------------------------------------------------ */

int etcd_alive_find(const struct etcd_alive_set *a, const char *id)
{
  int i;

  for (i = 0; i < a->n; i++)
    if (strcmp(a->peer[i].id, id) == 0)
      return i;
  return -1;
}

static double jnum(const cJSON *o, const char *k, double dflt)
{
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, k);

  return cJSON_IsNumber(f) ? f->valuedouble : dflt;
}

static void peer_parse(struct etcd_peer *p, const char *value, size_t len)
{
  cJSON *j = value ? cJSON_ParseWithLength(value, len) : NULL;
  const cJSON *f;

  memset(&p->node, 0, sizeof p->node);
  snprintf(p->node.id, sizeof p->node.id, "%s", p->id);
  f = cJSON_GetObjectItemCaseSensitive(j, "host");
  snprintf(p->node.host, sizeof p->node.host, "%s",
           cJSON_IsString(f) ? f->valuestring : "");
  f = cJSON_GetObjectItemCaseSensitive(j, "addr");
  snprintf(p->node.addr, sizeof p->node.addr, "%s",
           cJSON_IsString(f) ? f->valuestring : "");
  p->node.pid = (int64_t)jnum(j, "pid", 0);
  p->node.nproc = (int)jnum(j, "nproc", 0);
  p->node.port = (int)jnum(j, "port", 0);
  p->conf.min_nodes = (int)jnum(j, "min_nodes", 0);
  p->conf.max_nodes = (int)jnum(j, "max_nodes", 0);
  p->conf.max_restarts = (int)jnum(j, "max_restarts", 0);
  p->conf.last_call_timeout = jnum(j, "last_call_timeout", 0);
  p->join = (int)jnum(j, "join", -1);
  p->exit = (int)jnum(j, "exit", -1);
  p->leave = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "leave"));
  /* An agent of another version, or a bad value: no requests from it. */
  if (p->node.nproc < 1 || p->conf.min_nodes < 1)
    p->join = -1;
  cJSON_Delete(j);
}

void etcd_alive_put(struct etcd_alive_set *a, const char *id, int64_t create,
                    const char *value, size_t len)
{
  struct etcd_peer *g;
  int i = etcd_alive_find(a, id), k;

  if (i < 0) {
    if (a->n == a->cap) {
      int cap = a->cap ? a->cap * 2 : 16;

      g = realloc(a->peer, (size_t)cap * sizeof *g);
      if (!g)
        return;
      a->peer = g;
      a->cap = cap;
    }
    /* Creation order: requests are applied in it. */
    for (i = a->n; i > 0 && a->peer[i - 1].create_rev > create; i--)
      ;
    for (k = a->n; k > i; k--)
      a->peer[k] = a->peer[k - 1];
    a->n++;
    memset(&a->peer[i], 0, sizeof a->peer[i]);
    snprintf(a->peer[i].id, sizeof a->peer[i].id, "%s", id);
    a->peer[i].create_rev = create;
  }
  peer_parse(&a->peer[i], value, len);
}

void etcd_alive_del(struct etcd_alive_set *a, const char *id)
{
  int i = etcd_alive_find(a, id);

  if (i < 0)
    return;
  for (; i + 1 < a->n; i++)
    a->peer[i] = a->peer[i + 1];
  a->n--;
}

void etcd_alive_clear(struct etcd_alive_set *a)
{
  a->n = 0;
}

void etcd_alive_free(struct etcd_alive_set *a)
{
  free(a->peer);
  a->peer = NULL;
  a->n = a->cap = 0;
}

char *etcd_alive_value(const struct etcd_peer *p)
{
  cJSON *v = cJSON_CreateObject();
  char *out;

  if (!v)
    return NULL;
  cJSON_AddStringToObject(v, "host", p->node.host);
  cJSON_AddStringToObject(v, "addr", p->node.addr);
  cJSON_AddNumberToObject(v, "pid", (double)p->node.pid);
  cJSON_AddNumberToObject(v, "nproc", p->node.nproc);
  cJSON_AddNumberToObject(v, "port", p->node.port);
  cJSON_AddNumberToObject(v, "min_nodes", p->conf.min_nodes);
  cJSON_AddNumberToObject(v, "max_nodes", p->conf.max_nodes);
  cJSON_AddNumberToObject(v, "max_restarts", p->conf.max_restarts);
  cJSON_AddNumberToObject(v, "last_call_timeout", p->conf.last_call_timeout);
  cJSON_AddNumberToObject(v, "join", p->join);
  cJSON_AddNumberToObject(v, "exit", p->exit);
  if (p->leave)
    cJSON_AddTrueToObject(v, "leave");
  out = cJSON_PrintUnformatted(v);
  cJSON_Delete(v);
  return out;
}
