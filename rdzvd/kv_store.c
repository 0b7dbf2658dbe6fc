/* kv_store.c -- each job's key-value store: SET, GET (optionally waiting
 * for the key), ADD, bounded per job and for the whole daemon
 * (rdzv_state_limits).
 *
 * Who uses it: nothing in cdrun (its workers' store is libpg's, hosted by
 * rank 0).  It is part of protocol 1 for other clients of the rendezvous
 * (a job script or tool that needs a value shared by the job's nodes
 * before any worker runs), so it stays, within its limits, documented in
 * proto/PROTOCOL.md and rdzvd(8).  Waiting GETs are timers of the
 * registry's heap and die with their node. */
#include "rdzv_state_int.h"

#include "num.h"
#include "rdzv_reply.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool kv_eq(const void *item, const void *key)
{
  return strcmp(((const struct kv *)item)->key, key) == 0;
}

static bool wkey_eq(const void *item, const void *key)
{
  return strcmp(((const struct wkey *)item)->key, key) == 0;
}

void kv_store_waiter_free(struct rdzv_state *r, struct job *job,
                          struct waiter *w)
{
  struct wkey *wk = w->wk;

  list_remove(&w->by_key);
  if (list_empty(&wk->waiters)) {
    hashtab_remove(&job->waits, wk->h, wk);
    free(wk);
  }
  list_remove(&w->by_node);
  timer_heap_clear(&r->heap, &w->t);
  timer_heap_unreserve(&r->heap, 1);
  job->n_waiters--;
  free(w);
}

static void send_value(const struct rdzv_state *r, void *conn,
                       const char *key, const struct kv *e)
{
  struct rdzv_proto_msg m;
  char empty[1] = "";

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KV_VALUE;
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "%s", key);
  m.u.kv.found = e != NULL;
  m.u.kv.value = e ? e->value : empty;
  m.u.kv.value_len = e ? e->len : 0;
  rdzv_reply_send(&r->sink, conn, &m);
}

static bool key_ok(const char *key)
{
  size_t n = strnlen(key, RDZV_PROTO_MAX_KEY + 1);

  return n > 0 && n <= RDZV_PROTO_MAX_KEY;
}

/* Stores key = value (len bytes) and answers the GETs waiting for it.
 * Returns the entry, or NULL with *err set after sending ERROR. */
static struct kv *kv_put(struct rdzv_state *r, struct node *n,
                         const char *key, const char *value, size_t len,
                         int *err)
{
  struct job *job = n->job;
  uint64_t h = hashtab_hash_str(r->seed, key);
  struct kv *e = hashtab_find(&job->kv, h, key, kv_eq);
  size_t klen = strlen(key), old = e ? klen + e->len : 0;
  bool fresh = !e;
  struct waiter *w;
  bool more;
  struct wkey *wk;
  char *v;

  if (!e && job->kv.n >= (size_t)r->lim.max_keys_per_job) {
    *err =
        rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_LIMIT, -ENOSPC,
                          "too many keys (%d)", r->lim.max_keys_per_job);
    return NULL;
  }
  if (r->kv_total - old + klen + len > r->lim.max_kv_total) {
    *err = rdzv_reply_refuse(
        &r->sink, n->c->conn, RDZV_PROTO_ERR_LIMIT, -ENOSPC,
        "the server's store would exceed %zu bytes", r->lim.max_kv_total);
    return NULL;
  }
  if (job->kv_bytes - old + klen + len > r->lim.max_kv_bytes) {
    *err = rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_LIMIT,
                             -ENOSPC, "the job's store would exceed %zu bytes",
                             r->lim.max_kv_bytes);
    return NULL;
  }
  v = malloc(len + 1);
  if (!v || (!e && !(e = calloc(1, sizeof(*e) + klen + 1)))) {
    free(v);
    *err = rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_LIMIT,
                             -ENOMEM, "out of memory");
    return NULL;
  }
  if (fresh) {
    memcpy(e->key, key, klen + 1);
    e->h = h;
    if (hashtab_insert(&job->kv, h, e)) {
      free(v);
      free(e);
      *err = rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_LIMIT,
                               -ENOMEM, "out of memory");
      return NULL;
    }
  }
  if (len)
    memcpy(v, value, len);
  v[len] = '\0';
  free(e->value);
  e->value = v;
  e->len = len;
  job->kv_bytes = job->kv_bytes - old + klen + len;
  r->kv_total = r->kv_total - old + klen + len;
  wk = hashtab_find(&job->waits, h, key, wkey_eq);
  for (more = wk != NULL; more;) {
    w = list_first(&wk->waiters, struct waiter, by_key);
    /* kv_store_waiter_free frees wk after the last */
    more = w->by_key.next != &wk->waiters;
    send_value(r, w->node->c->conn, key, e);
    kv_store_waiter_free(r, job, w);
  }
  *err = 0;
  return e;
}

static int kv_wait(struct rdzv_state *r, struct node *n, const char *key,
                   double wait, double now)
{
  struct job *job = n->job;
  uint64_t h = hashtab_hash_str(r->seed, key);
  struct wkey *wk = hashtab_find(&job->waits, h, key, wkey_eq);
  struct waiter *w;
  size_t klen = strlen(key);

  if (job->n_waiters >= r->lim.max_keys_per_job)
    return rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_LIMIT,
                             -ENOSPC, "too many waiting gets (%d)",
                             job->n_waiters);
  w = calloc(1, sizeof(*w));
  if (!w || timer_heap_reserve(&r->heap, 1)) {
    free(w);
    return rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_LIMIT,
                             -ENOMEM, "out of memory");
  }
  if (!wk) {
    wk = calloc(1, sizeof(*wk) + klen + 1);
    if (!wk || hashtab_insert(&job->waits, h, wk)) {
      free(wk);
      free(w);
      timer_heap_unreserve(&r->heap, 1);
      return rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_LIMIT,
                               -ENOMEM, "out of memory");
    }
    wk->h = h;
    list_init(&wk->waiters);
    memcpy(wk->key, key, klen + 1);
  }
  w->node = n;
  w->wk = wk;
  w->wait = wait;
  list_insert_head(&wk->waiters, &w->by_key);
  list_insert_head(&n->waiters, &w->by_node);
  job->n_waiters++;
  timer_heap_node_init(&w->t, T_KV_WAIT);
  timer_heap_set(&r->heap, &w->t, now + wait);
  return 0;
}

int kv_store_handle(struct rdzv_state *r, struct node *n,
                    const struct rdzv_proto_msg *m, double now)
{
  const struct rdzv_proto_kv *kv = &m->u.kv;
  struct job *job = n->job;
  void *conn = n->c->conn;
  char num[32];
  struct kv *e;
  int64_t v = 0;
  int err;

  if (!key_ok(kv->key))
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EINVAL, "bad key");
  e = hashtab_find(&job->kv, hashtab_hash_str(r->seed, kv->key), kv->key, kv_eq);
  switch (m->op) {
  case RDZV_PROTO_KV_SET:
    if (kv->value_len > RDZV_PROTO_MAX_VALUE || (!kv->value && kv->value_len))
      return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                               -EINVAL, "bad value");
    kv_put(r, n, kv->key, kv->value, kv->value_len, &err);
    return err;
  case RDZV_PROTO_KV_GET:
    if (e || !(kv->wait > 0)) {
      send_value(r, conn, kv->key, e);
      return 0;
    }
    return kv_wait(r, n, kv->key, fmin(kv->wait, r->lim.max_join_timeout),
                   now);
  default:                      /* RDZV_PROTO_KV_ADD */
    if (e && num_parse_i64_n(e->value, e->len, INT64_MIN, INT64_MAX, &v))
      return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                               -EINVAL, "key %s does not hold an integer",
                               kv->key);
    if (__builtin_add_overflow(v, kv->delta, &v))
      return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                               -ERANGE, "key %s would overflow", kv->key);
    snprintf(num, sizeof num, "%" PRId64, v);
    e = kv_put(r, n, kv->key, num, strlen(num), &err);
    if (e)
      send_value(r, conn, kv->key, e);
    return err;
  }
}

void kv_store_timeout(struct rdzv_state *r, struct waiter *w)
{
  struct node *n = w->node;

  rdzv_reply_refuse(&r->sink, n->c->conn, RDZV_PROTO_ERR_TIMEOUT, -ETIMEDOUT,
                    "key %s "
                    "not set within %g s",
                    w->wk->key, w->wait);
  kv_store_waiter_free(r, n->job, w);
}

void kv_store_job_free(struct rdzv_state *r, struct job *job)
{
  size_t i;

  for (i = 0; i < job->kv.cap; i++) {
    struct kv *e = job->kv.s[i].item;

    if (e) {
      free(e->value);
      free(e);
    }
  }
  free(job->kv.s);
  r->kv_total -= job->kv_bytes;
  free(job->waits.s);           /* empty: waits die with their nodes */
}
