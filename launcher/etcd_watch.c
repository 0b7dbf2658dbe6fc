/* etcd_watch.c -- the etcd client's watches (etcd_client.h): a
 * long-lived streaming POST to /v3/watch each, its lines handed to the
 * watcher outside curl's callbacks, resumed on the next member from the
 * last revision it delivered. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_client_internal.h"
#include "http_uv.h"
#include "monotime.h"

#define WATCH_RETRY_MIN_MS 100
#define WATCH_RETRY_MAX_MS 2000

struct etcd_watch {
  struct http_uv_req req;
  struct etcd_client *c;
  struct list_node node;        /* in c->watches */
  char *key64, *end64;
  int64_t next_rev;
  unsigned flags;               /* ETCD_WATCH_* */
  int member;
  bool running;                 /* a transfer is in flight */
  bool stopped;
  int retry_ms;
  struct curl_slist *hdrs;
  char *body;
  char *buf;                    /* bytes not yet split into lines */
  size_t len, cap;
  uv_timer_t retry;             /* reconnect later */
  uv_timer_t deliver;           /* lines out of curl's write callback */
  uv_timer_t first_byte;        /* Note [a hung member]: no answer yet */
  bool answered;                /* this connection sent something */
  int silent;                   /* connections in a row that did not */
  int open_handles;
  etcd_watch_cb cb;
  etcd_watch_err_cb ecb;
  void *ctx;
};


/* ---- watches ------------------------------------------------------------ */

static void watch_closed(uv_handle_t *h)
{
  struct etcd_watch *w = h->data;
  struct etcd_client *c = w->c;

  if (--w->open_handles > 0)
    return;
  free(w->key64);
  free(w->end64);
  free(w->buf);
  free(w);
  c->watches_alive--;
  etcd_client_free_if_done(c);
}

static void deliver_cb(uv_timer_t *t);

static size_t watch_write(char *data, size_t size, size_t nmemb, void *userp)
{
  struct etcd_watch *w = userp;
  size_t n = etcd_grow_append(&w->buf, &w->len, &w->cap, data, size * nmemb);

  if (n && !w->answered) {
    w->answered = true;
    w->silent = 0;
    uv_timer_stop(&w->first_byte);
  }
  if (n && memchr(data, '\n', size * nmemb))
    uv_timer_start(&w->deliver, deliver_cb, 0, 0);
  return n;
}

static void watch_schedule(struct etcd_watch *w);

/* Hands every complete line to the watcher (outside curl's callbacks). */
static void watch_deliver(struct etcd_watch *w)
{
  const cJSON *res, *err;
  char *line = w->buf, *nl;
  cJSON *j;
  size_t used;

  while (!w->stopped && w->len && (nl = memchr(line, '\n', w->len -
                                             (size_t)(line - w->buf)))) {
    j = cJSON_ParseWithLength(line, (size_t)(nl - line));
    line = nl + 1;
    if (!j)
      continue;
    res = cJSON_GetObjectItemCaseSensitive(j, "result");
    err = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsObject(res)) {
      const cJSON *hdr = cJSON_GetObjectItemCaseSensitive(res, "header");
      int64_t rev = etcd_i64(hdr, "revision");

      if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "canceled"))) {
        int64_t compact = etcd_i64(res, "compact_revision");
        char msg[128];

        cJSON_Delete(j);
        w->stopped = true;
        snprintf(msg, sizeof msg, "etcd watch canceled (compacted at "
                 "revision %" PRId64 ")", compact);
        if (w->ecb)
          w->ecb(w->ctx, compact ? -ESTALE : -ECANCELED, msg);
        return;
      }
      w->retry_ms = WATCH_RETRY_MIN_MS;
      /* The "created" answer's revision is the member's current one, sent
       * before the events that lead up to it (a watch that resumes from an
       * older revision): it says nothing about what was delivered, and a
       * watch that resumed from it would skip those events. */
      if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "created")) &&
          !cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(res,
                                                               "events"))) {
        cJSON_Delete(j);
        continue;
      }
      if (rev >= w->next_rev)
        w->next_rev = rev + 1;
      w->cb(w->ctx, res);
    } else if (err) {
      /* {"error":{"grpc_code":14,...}}: this member cannot serve it;
       * 16: the token expired (etcd restarted): get a new one first. */
      int code = (int)etcd_i64(err, "grpc_code");

      DEBUG("%s watch error: grpc code %d", w->c->members[w->member], code);
      if (code == 16 && w->c->user && !w->c->authenticating) {
        free(w->c->token);
        w->c->token = NULL;
        etcd_authenticate(w->c);
      }
      cJSON_Delete(j);
      if (w->running) {
        http_uv_remove(w->c->cu, &w->req);
        w->running = false;
      }
      uv_timer_stop(&w->first_byte);
      if (code != 16)
        etcd_member_bad_now(w->c, w->member);
      w->member = etcd_member_pick(w->c, 0);
      w->len = 0;
      watch_schedule(w);
      return;
    }
    cJSON_Delete(j);
  }
  used = (size_t)(line - w->buf);
  if (used && used <= w->len) {
    memmove(w->buf, line, w->len - used);
    w->len -= used;
  }
}

static void deliver_cb(uv_timer_t *t)
{
  watch_deliver(t->data);
}

static void watch_done(struct http_uv_req *r, CURLcode result)
{
  struct etcd_watch *w = r->data;

  DEBUG("%s watch ended: %s", w->c->members[w->member],
        curl_easy_strerror(result));
  w->running = false;
  uv_timer_stop(&w->first_byte);
  watch_deliver(w);
  if (w->stopped)
    return;
  /* The stream ended (member gone, or closed by etcd): another member
   * when this one failed, from the next revision. */
  if (result != CURLE_OK)
    etcd_member_bad_now(w->c, w->member);
  w->member = etcd_member_pick(w->c, 0);
  w->len = 0;
  watch_schedule(w);
}

static void watch_connect(struct etcd_watch *w);

/* How long a new watch connection may stay silent: an attempt's time,
 * doubled for each one in a row that was (a slow cluster still gets its
 * watch), at most the whole timeout. */
static long watch_wait_ms(const struct etcd_watch *w)
{
  long ms = etcd_attempt_ms(w->c, w->member, w->c->timeout_ms, 0);
  int i;

  for (i = 0; i < w->silent && ms < w->c->timeout_ms; i++)
    ms *= 2;
  return ms < w->c->timeout_ms ? ms : w->c->timeout_ms;
}

/* Note [a hung member]: the watch's member has not said a word (not even
 * "created") within an attempt's time: it is bad, and the watch moves
 * (etcd_watches_follow, from etcd_member_bad_now). */
static void first_byte_cb(uv_timer_t *t)
{
  struct etcd_watch *w = t->data;
  struct etcd_client *c = w->c;
  int m = w->member;

  if (w->stopped || !w->running || w->answered)
    return;
  DEBUG("%s watch: no answer within %ld ms", c->members[m],
        watch_wait_ms(w));
  w->silent++;
  etcd_member_bad_now(c, m);
  if (w->member == m && c->n_members > 1) {   /* it was not the one in use */
    http_uv_remove(c->cu, &w->req);
    w->running = false;
    w->len = 0;
    w->member = etcd_member_pick(c, 1u << m);
    watch_connect(w);
  }
}

/* etcd_client_internal.h.  etcd ignores a field it does not know (a
 * misspelt filter would only cost the messages it was to save). */
char *etcd_watch_request(const char *key64, const char *end64,
                         int64_t start_rev, unsigned flags)
{
  cJSON *b = cJSON_CreateObject(), *cr;
  char *out;

  if (!b)
    return NULL;
  cr = cJSON_AddObjectToObject(b, "create_request");
  cJSON_AddStringToObject(cr, "key", key64);
  if (end64)
    cJSON_AddStringToObject(cr, "range_end", end64);
  if (start_rev > 0) {
    char rev[32];

    snprintf(rev, sizeof rev, "%" PRId64, start_rev);
    cJSON_AddStringToObject(cr, "start_revision", rev);
  }
  cJSON_AddTrueToObject(cr, "progress_notify");
  if (flags & ETCD_WATCH_NOPUT)
    cJSON_AddItemToObject(cr, "filters", cJSON_CreateRaw("[\"NOPUT\"]"));
  out = cJSON_PrintUnformatted(b);
  cJSON_Delete(b);
  return out;
}

static void watch_connect(struct etcd_watch *w)
{
  struct etcd_client *c = w->c;

  if (w->stopped || w->running)
    return;
  free(w->body);
  w->body = etcd_watch_request(w->key64, w->end64, w->next_rev, w->flags);
  if (w->req.easy)
    curl_easy_cleanup(w->req.easy);
  curl_slist_free_all(w->hdrs);
  w->hdrs = NULL;
  w->req.easy = w->body ? etcd_easy_for(c, w->member, "/v3/watch", w->body,
                                   &w->hdrs) : NULL;
  if (!w->req.easy) {
    watch_schedule(w);
    return;
  }
  curl_easy_setopt(w->req.easy, CURLOPT_WRITEFUNCTION, watch_write);
  curl_easy_setopt(w->req.easy, CURLOPT_WRITEDATA, w);
  w->req.done = watch_done;
  w->req.data = w;
  DEBUG("%s watch from revision %" PRId64, c->members[w->member],
        w->next_rev);
  w->answered = false;
  if (http_uv_add(c->cu, &w->req) == 0) {
    w->running = true;
    uv_timer_start(&w->first_byte, first_byte_cb, (uint64_t)watch_wait_ms(w),
                   0);
  } else {
    watch_schedule(w);
  }
}

static void retry_cb(uv_timer_t *t)
{
  struct etcd_watch *w = t->data;

  if (w->c->user && !w->c->token) {
    etcd_authenticate(w->c);
    watch_schedule(w);      /* once the token is there */
    return;
  }
  w->member = etcd_member_pick(w->c, 0);
  watch_connect(w);
}

static void watch_schedule(struct etcd_watch *w)
{
  if (w->stopped)
    return;
  uv_timer_start(&w->retry, retry_cb, (uint64_t)w->retry_ms, 0);
  w->retry_ms = w->retry_ms * 2 > WATCH_RETRY_MAX_MS ? WATCH_RETRY_MAX_MS
                                                      : w->retry_ms * 2;
}

/* The client moved to another member: watches follow at once. */
void etcd_watches_follow(struct etcd_client *c)
{
  struct list_node *pos, *next;

  list_for_each_safe(pos, next, &c->watches) {
    struct etcd_watch *w = list_entry(pos, struct etcd_watch, node);

    if (w->stopped || w->member == c->cur)
      continue;
    w->member = c->cur;
    if (w->running) {
      http_uv_remove(c->cu, &w->req);
      w->running = false;
      uv_timer_stop(&w->first_byte);
      watch_deliver(w);
      w->len = 0;
      watch_connect(w);
    }
  }
}

static char *b64_dup(const char *s)
{
  size_t n = strlen(s);
  char *out = malloc(4 * ((n + 2) / 3) + 1);

  if (out)
    etcd_b64_encode(s, n, out);
  return out;
}

struct etcd_watch *etcd_watch_start(struct etcd_client *c, const char *key,
                                    const char *range_end, int64_t start_rev,
                                    etcd_watch_cb cb, etcd_watch_err_cb ecb,
                                    void *ctx)
{
  return etcd_watch_start_flags(c, key, range_end, start_rev, 0, cb, ecb,
                                ctx);
}

struct etcd_watch *etcd_watch_start_flags(struct etcd_client *c,
                                          const char *key,
                                          const char *range_end,
                                          int64_t start_rev, unsigned flags,
                                          etcd_watch_cb cb,
                                          etcd_watch_err_cb ecb, void *ctx)
{
  struct etcd_watch *w = calloc(1, sizeof *w);

  if (!w)
    return NULL;
  w->c = c;
  w->key64 = b64_dup(key);
  w->end64 = range_end ? b64_dup(range_end) : NULL;
  if (!w->key64 || (range_end && !w->end64)) {
    free(w->key64);
    free(w->end64);
    free(w);
    return NULL;
  }
  w->next_rev = start_rev;
  w->flags = flags;
  w->member = etcd_member_pick(c, 0);
  w->retry_ms = WATCH_RETRY_MIN_MS;
  w->cb = cb;
  w->ecb = ecb;
  w->ctx = ctx;
  uv_timer_init(c->loop, &w->retry);
  uv_timer_init(c->loop, &w->deliver);
  uv_timer_init(c->loop, &w->first_byte);
  w->retry.data = w;
  w->deliver.data = w;
  w->first_byte.data = w;
  w->open_handles = 3;
  list_insert_head(&c->watches, &w->node);
  c->watches_alive++;
  if (c->user && !c->token)
    watch_schedule(w);
  else
    watch_connect(w);
  return w;
}

void etcd_watch_stop(struct etcd_watch *w)
{
  struct etcd_client *c = w->c;

  w->stopped = true;
  if (w->running)
    http_uv_remove(c->cu, &w->req);
  w->running = false;
  if (w->req.easy)
    curl_easy_cleanup(w->req.easy);
  w->req.easy = NULL;
  curl_slist_free_all(w->hdrs);
  w->hdrs = NULL;
  free(w->body);
  w->body = NULL;
  list_remove(&w->node);
  uv_close((uv_handle_t *)&w->retry, watch_closed);
  uv_close((uv_handle_t *)&w->deliver, watch_closed);
  uv_close((uv_handle_t *)&w->first_byte, watch_closed);
}

void etcd_watch_stop_all(struct etcd_client *c)
{
  while (!list_empty(&c->watches))
    etcd_watch_stop(list_first(&c->watches, struct etcd_watch, node));
}
