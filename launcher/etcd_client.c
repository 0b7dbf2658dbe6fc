/* etcd_client.c -- etcd v3 over the JSON gateway, on libcurl + libuv: the
 * client, its calls and their members (etcd_client.h); the watches are
 * etcd_watch.c's. */
#include "etcd_client.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "libcurl_dl.h"

#include "etcd_client_internal.h"
#include "http_uv.h"
#include "list.h"
#include "monotime.h"
#include "say.h"

#define MAX_REPLY (8u << 20)      /* bounds a reply (etcd sends <= ~1.5 MiB) */
/* Note [a hung member]: a member that accepts connections and never
 * answers (SIGSTOPped, a long GC, a disk stall, a half-open network) must
 * cost a request about half a second, not the whole request timeout.
 * Each attempt on a member gets ATTEMPT_MS (four times that member's
 * recent answers when they are slower) while another member is left to
 * try; the last member of the round gets the whole timeout (a slow
 * cluster still answers).  A member
 * that timed out, refused or had no leader is avoided for BAD_MS (etcd's
 * own client balancer does the same with its unhealthy endpoints), and
 * the watches leave it with the calls. */
#define ATTEMPT_MS 500L
#define CONNECT_TIMEOUT_MS 500L
#define BAD_MS 5000.0


struct etcd_call {
  struct http_uv_req req;
  struct etcd_client *c;
  struct list_node node;        /* in c->calls */
  char *path;
  char *body;
  struct curl_slist *hdrs;
  char *buf;
  size_t len, cap;
  etcd_reply_cb cb;
  void *ctx;
  int member;                   /* tried now */
  int tries;                    /* members tried */
  unsigned tried;               /* bit per member tried */
  long timeout_ms;              /* the last member's (the whole) */
  double sent_at;               /* this attempt's start (monotime) */
  bool reauthed;                /* retried once with a fresh token */
  bool is_auth;                 /* the authenticate call itself */
  bool waiting_token;           /* queued until the token comes */
  char last_error[256];
  char errors[600];             /* every member's, for the message */
};

static int curl_users;          /* clients alive: global init/cleanup */

/* A closed client is freed when nothing of it is still in use: its
 * watches' handles are closed and no walk of its calls is running. */
void etcd_client_free_if_done(struct etcd_client *c)
{
  if (!c->closing || c->walking || c->watches_alive || !list_empty(&c->calls))
    return;
  free(c->token);
  free(c);
}

/* etcd_client_internal.h. */
bool etcd_debug_on(void)
{
  static int on = -1;

  if (on < 0) {
    const char *l = getenv("LOGLEVEL");

    on = l && strcmp(l, "DEBUG") == 0;
  }
  return on;
}


/* ---- base64 and JSON helpers ------------------------------------------- */

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void etcd_b64_encode(const void *in, size_t n, char *out)
{
  const unsigned char *p = in;
  size_t i;
  uint32_t v;

  for (i = 0; i + 2 < n; i += 3) {
    v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    *out++ = b64[v >> 18];
    *out++ = b64[(v >> 12) & 63];
    *out++ = b64[(v >> 6) & 63];
    *out++ = b64[v & 63];
  }
  if (i < n) {
    v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
    *out++ = b64[v >> 18];
    *out++ = b64[(v >> 12) & 63];
    *out++ = i + 1 < n ? b64[(v >> 6) & 63] : '=';
    *out++ = '=';
  }
  *out = '\0';
}

static int b64_val(char ch)
{
  const char *p = ch ? strchr(b64, ch) : NULL;

  return p ? (int)(p - b64) : -1;
}

int etcd_b64_decode(const char *in, size_t n, char *out)
{
  size_t i, o = 0;
  int a, b, c, d;

  if (n % 4)
    return -1;
  for (i = 0; i < n; i += 4) {
    bool last = i + 4 == n;

    a = b64_val(in[i]);
    b = b64_val(in[i + 1]);
    c = last && in[i + 2] == '=' && in[i + 3] == '=' ? -2
                                                      : b64_val(in[i + 2]);
    d = last && in[i + 3] == '=' ? -2 : b64_val(in[i + 3]);
    if (a < 0 || b < 0 || c == -1 || d == -1 || (c == -2 && d != -2))
      return -1;
    out[o++] = (char)(a << 2 | b >> 4);
    if (c >= 0)
      out[o++] = (char)((b & 15) << 4 | c >> 2);
    if (d >= 0)
      out[o++] = (char)((c & 3) << 6 | d);
  }
  out[o] = '\0';
  return (int)o;
}

bool etcd_add_b64(cJSON *obj, const char *name, const char *s, size_t n)
{
  char *enc = malloc(4 * ((n + 2) / 3) + 1);
  bool ok;

  if (!enc)
    return false;
  etcd_b64_encode(s, n, enc);
  ok = cJSON_AddStringToObject(obj, name, enc) != NULL;
  free(enc);
  return ok;
}

char *etcd_get_b64(const cJSON *obj, const char *name, size_t *len)
{
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
  size_t n;
  char *out;
  int k;

  if (!cJSON_IsString(f))
    return NULL;
  n = strlen(f->valuestring);
  out = malloc(n / 4 * 3 + 1);
  if (!out)
    return NULL;
  k = etcd_b64_decode(f->valuestring, n, out);
  if (k < 0) {
    free(out);
    return NULL;
  }
  if (len)
    *len = (size_t)k;
  return out;
}

int64_t etcd_i64(const cJSON *obj, const char *name)
{
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);

  /* Not num.h: this is etcd's own output, not user input, and int64 is
   * wider than num.h's long on some targets; etcd's gateway writes these
   * as decimal strings (protobuf's JSON mapping of int64). */
  if (cJSON_IsString(f))
    return strtoll(f->valuestring, NULL, 10);
  if (cJSON_IsNumber(f))
    return (int64_t)f->valuedouble;
  if (cJSON_IsTrue(f))
    return 1;
  return 0;
}

void etcd_prefix_end(const char *prefix, char *out)
{
  size_t n = strlen(prefix);

  memcpy(out, prefix, n + 1);
  while (n > 0 && (unsigned char)out[n - 1] == 0xff)
    out[--n] = '\0';
  if (n > 0)
    out[n - 1] = (char)((unsigned char)out[n - 1] + 1);
}

/* ---- requests -------------------------------------------------------------- */

size_t etcd_grow_append(char **buf, size_t *len, size_t *cap,
                   const char *data, size_t n)
{
  char *g;
  size_t want;

  if (*len + n + 1 > *cap) {
    if (*len + n + 1 > MAX_REPLY)
      return 0;
    want = *cap ? *cap * 2 : 4096;
    while (want < *len + n + 1)
      want *= 2;
    g = realloc(*buf, want);
    if (!g)
      return 0;
    *buf = g;
    *cap = want;
  }
  memcpy(*buf + *len, data, n);
  *len += n;
  (*buf)[*len] = '\0';
  return n;
}

static size_t call_write(char *data, size_t size, size_t nmemb, void *userp)
{
  struct etcd_call *k = userp;

  return etcd_grow_append(&k->buf, &k->len, &k->cap, data, size * nmemb);
}

/* Options every transfer to etcd shares. */
CURL *etcd_easy_for(struct etcd_client *c, int member, const char *path,
               const char *body, struct curl_slist **hdrs)
{
  char url[600], auth[1200];
  CURL *e = curl_easy_init();

  if (!e)
    return NULL;
  snprintf(url, sizeof url, "%s://%s%s", c->https ? "https" : "http",
           c->members[member], path);
  *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
  *hdrs = curl_slist_append(*hdrs, "Expect:");
  if (c->token && c->token[0]) {
    snprintf(auth, sizeof auth, "Authorization: %s", c->token);
    *hdrs = curl_slist_append(*hdrs, auth);
  }
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, *hdrs);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  if (c->cacert)
    curl_easy_setopt(e, CURLOPT_CAINFO, c->cacert);
  if (c->cert)
    curl_easy_setopt(e, CURLOPT_SSLCERT, c->cert);
  if (c->key)
    curl_easy_setopt(e, CURLOPT_SSLKEY, c->key);
  return e;
}

static void call_free(struct etcd_call *k)
{
  list_remove(&k->node);
  if (k->req.easy)
    curl_easy_cleanup(k->req.easy);
  curl_slist_free_all(k->hdrs);
  free(k->path);
  free(k->body);
  free(k->buf);
  free(k);
}

static void call_done(struct http_uv_req *r, CURLcode result);

/* ---- members: Note [a hung member] ---------------------------------------- */

static bool member_bad(const struct etcd_client *c, int m, double now)
{
  return c->bad_until[m] > now;
}

/* The member to use: the one in use while it is not known bad, else the
 * next one that is not (in the order given), else the one whose
 * trouble is oldest.  Members in skip (a bit each) are not picked while
 * another one is left. */
int etcd_member_pick(const struct etcd_client *c, unsigned skip)
{
  double now = monotime_now();
  int i, m, best = -1;

  for (i = 0; i < c->n_members; i++) {
    m = (c->cur + i) % c->n_members;
    if (!(skip & 1u << m) && !member_bad(c, m, now))
      return m;
  }
  for (i = 0; i < c->n_members; i++) {
    m = (c->cur + i) % c->n_members;
    if (skip & 1u << m)
      continue;
    if (best < 0 || c->bad_until[m] < c->bad_until[best])
      best = m;
  }
  return best >= 0 ? best : c->cur;
}

/* m answered in `took` seconds: it is good, and the one in use. */
static void member_good(struct etcd_client *c, int m, double took)
{
  c->bad_until[m] = 0;
  c->latency[m] = c->latency[m] > 0 ? 0.8 * c->latency[m] + 0.2 * took
                                    : took;
  if (c->cur != m) {
    c->cur = m;
    etcd_watches_follow(c);
  }
}

/* m failed (timed out, refused, no leader): avoided for a while; when it
 * was the one in use, the calls and watches move to another. */
void etcd_member_bad_now(struct etcd_client *c, int m)
{
  c->bad_until[m] = monotime_now() + BAD_MS / 1000;
  if (c->cur == m) {
    c->cur = etcd_member_pick(c, 1u << m);
    etcd_watches_follow(c);
  }
}

/* How long one attempt on m may take: ATTEMPT_MS (more when m's answers
 * have been slow), the whole timeout for the last member of the round or
 * when there is only one. */
long etcd_attempt_ms(const struct etcd_client *c, int m, long whole_ms,
                int tries)
{
  long ms = (long)(4000 * c->latency[m]);

  if (tries + 1 >= c->n_members)
    return whole_ms;
  if (ms < ATTEMPT_MS)
    ms = ATTEMPT_MS;
  return ms < whole_ms ? ms : whole_ms;
}

/* Sends k to its current member. */
static int call_send(struct etcd_call *k)
{
  struct etcd_client *c = k->c;
  long ms = etcd_attempt_ms(c, k->member, k->timeout_ms, k->tries);

  if (k->req.easy)
    curl_easy_cleanup(k->req.easy);
  curl_slist_free_all(k->hdrs);
  k->hdrs = NULL;
  k->len = 0;
  k->tried |= 1u << k->member;
  k->sent_at = monotime_now();
  k->req.easy = etcd_easy_for(c, k->member, k->path, k->body, &k->hdrs);
  if (!k->req.easy)
    return -ENOMEM;
  curl_easy_setopt(k->req.easy, CURLOPT_WRITEFUNCTION, call_write);
  curl_easy_setopt(k->req.easy, CURLOPT_WRITEDATA, k);
  curl_easy_setopt(k->req.easy, CURLOPT_TIMEOUT_MS, ms);
  if (ms < CONNECT_TIMEOUT_MS)
    curl_easy_setopt(k->req.easy, CURLOPT_CONNECTTIMEOUT_MS, ms);
  k->req.done = call_done;
  k->req.data = k;
  return http_uv_add(c->cu, &k->req) ? -EIO : 0;
}

/* Ends k with an error, its callback once. */
static void call_fail(struct etcd_call *k, int err, const char *msg)
{
  etcd_reply_cb cb = k->cb;
  void *ctx = k->ctx;
  char text[512];

  snprintf(text, sizeof text, "%s", msg);
  call_free(k);
  if (cb)
    cb(ctx, err, NULL, text);
}

/* Notes what went wrong on k's member, for the message that names every
 * member tried. */
static void call_note_error(struct etcd_call *k)
{
  size_t n = strlen(k->errors);

  snprintf(k->errors + n, sizeof k->errors - n, "%s%s", n ? "; " : "",
           k->last_error);
}

/* The member failed k: the next one, or give up once all were tried. */
static void call_next_member(struct etcd_call *k, int err)
{
  struct etcd_client *c = k->c;
  char msg[800];
  int rc;

  call_note_error(k);
  etcd_member_bad_now(c, k->member);
  if (++k->tries >= c->n_members) {
    snprintf(msg, sizeof msg, "etcd at %s: %s", c->members_text,
             k->errors);
    call_fail(k, err, msg);
    return;
  }
  k->member = etcd_member_pick(c, k->tried);
  rc = call_send(k);
  if (rc)
    call_fail(k, rc, "etcd: cannot start a request");
}

/* etcd's error body: {"error":"...","message":"...","code":N}. */
static int grpc_errno(int code)
{
  switch (code) {
  case 3: return -EINVAL;       /* InvalidArgument */
  case 5: return -ENOENT;       /* NotFound (lease) */
  case 7: return -EPERM;        /* PermissionDenied */
  case 9: return -EAGAIN;       /* FailedPrecondition */
  case 11: return -ERANGE;      /* OutOfRange (compacted) */
  case 14: return -EAGAIN;      /* Unavailable */
  case 16: return -EACCES;      /* Unauthenticated */
  default: return -EIO;
  }
}

static void call_done(struct http_uv_req *r, CURLcode result)
{
  struct etcd_call *k = r->data;
  struct etcd_client *c = k->c;
  const cJSON *msgf, *codef, *errf;
  long http = 0;
  cJSON *j;
  char *ip = NULL;
  int code;

  if (result != CURLE_OK) {
    snprintf(k->last_error, sizeof k->last_error, "%s: %s",
             c->members[k->member], curl_easy_strerror(result));
    DEBUG("%s %s: %s", c->members[k->member], k->path,
          curl_easy_strerror(result));
    call_next_member(k, result == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
                        : result == CURLE_COULDNT_CONNECT  ? -ECONNREFUSED
                                                           : -EIO);
    return;
  }
  curl_easy_getinfo(k->req.easy, CURLINFO_RESPONSE_CODE, &http);
  DEBUG("%s %s -> HTTP %ld: %.300s", c->members[k->member], k->path, http,
        k->buf ? k->buf : "");
  if (curl_easy_getinfo(k->req.easy, CURLINFO_LOCAL_IP, &ip) == CURLE_OK &&
      ip)
    snprintf(c->local_ip, sizeof c->local_ip, "%s", ip);
  ip = NULL;
  if (curl_easy_getinfo(k->req.easy, CURLINFO_PRIMARY_IP, &ip) == CURLE_OK &&
      ip) {
    snprintf(c->peer_ip, sizeof c->peer_ip, "%s", ip);
    curl_easy_getinfo(k->req.easy, CURLINFO_PRIMARY_PORT, &c->peer_port);
  }
  j = cJSON_ParseWithLength(k->buf ? k->buf : "", k->len);
  /* A streaming call (lease keepalive) that failed answers 200 with
   * {"error":{"grpc_code":14,"message":...}}: an error like any other. */
  errf = cJSON_GetObjectItemCaseSensitive(j, "error");
  if (http == 200 && cJSON_IsObject(errf)) {
    msgf = cJSON_GetObjectItemCaseSensitive(errf, "message");
    code = (int)etcd_i64(errf, "grpc_code");
    snprintf(k->last_error, sizeof k->last_error, "%s: %s (grpc code %d)",
             c->members[k->member], cJSON_IsString(msgf) ? msgf->valuestring
                                                          : "error", code);
    cJSON_Delete(j);
    if (code == 14 || code == 4) {      /* no leader, timed out */
      call_next_member(k, -EAGAIN);
      return;
    }
    member_good(c, k->member, monotime_now() - k->sent_at);
    call_fail(k, grpc_errno(code), k->last_error);
    return;
  }
  if (http == 200 && j) {
    etcd_reply_cb cb = k->cb;
    void *ctx = k->ctx;

    member_good(c, k->member, monotime_now() - k->sent_at);
    call_free(k);
    if (cb)
      cb(ctx, 0, j, NULL);
    cJSON_Delete(j);
    return;
  }
  msgf = cJSON_GetObjectItemCaseSensitive(j, "message");
  codef = cJSON_GetObjectItemCaseSensitive(j, "code");
  code = cJSON_IsNumber(codef) ? codef->valueint : -1;
  snprintf(k->last_error, sizeof k->last_error, "%s: HTTP %ld%s%s",
           c->members[k->member], http, cJSON_IsString(msgf) ? ": " : "",
           cJSON_IsString(msgf) ? msgf->valuestring : "");
  cJSON_Delete(j);
  if (http == 503 || code == 14) {      /* no leader here: try another */
    call_next_member(k, -EAGAIN);
    return;
  }
  if (code == 16 && !k->is_auth && !k->reauthed && c->user) {
    /* The token expired (or etcd restarted): a new one, then again. */
    k->reauthed = true;
    free(c->token);
    c->token = NULL;
    k->waiting_token = true;
    etcd_authenticate(c);
    return;
  }
  member_good(c, k->member, monotime_now() - k->sent_at);
  call_fail(k, code >= 0 ? grpc_errno(code) : -EIO, k->last_error);
}

static int call_start(struct etcd_client *c, const char *path,
                      const char *body, long timeout_ms, etcd_reply_cb cb,
                      void *ctx, bool is_auth)
{
  struct etcd_call *k;

  if (c->closing)
    return -ECANCELED;
  k = calloc(1, sizeof *k);
  if (!k)
    return -ENOMEM;
  k->c = c;
  k->path = strdup(path);
  k->body = strdup(body);
  k->cb = cb;
  k->ctx = ctx;
  k->member = etcd_member_pick(c, 0);
  k->timeout_ms = timeout_ms > 0 ? timeout_ms : c->timeout_ms;
  k->is_auth = is_auth;
  list_insert_head(&c->calls, &k->node);
  if (!k->path || !k->body) {
    call_free(k);
    return -ENOMEM;
  }
  if (c->user && !is_auth && (!c->token || c->authenticating)) {
    k->waiting_token = true;
    etcd_authenticate(c);
    return 0;
  }
  if (call_send(k)) {
    call_free(k);
    return -ENOMEM;
  }
  return 0;
}

/* The token came (or could not be had): release the queued calls.  A
 * failed call's callback may close the client (the agent gives up): the
 * walk stops there, and the client is freed once it has returned. */
static void token_ready(struct etcd_client *c, int err, const char *msg)
{
  struct list_node *pos, *next;

  c->walking++;
  list_for_each_safe(pos, next, &c->calls) {
    struct etcd_call *k = list_entry(pos, struct etcd_call, node);

    if (!k->waiting_token)
      continue;
    k->waiting_token = false;
    if (err)
      call_fail(k, err, msg);
    else if (call_send(k))
      call_fail(k, -ENOMEM, "etcd: cannot start a request");
    if (c->closing)
      break;            /* close freed every call, next included */
  }
  c->walking--;
  etcd_client_free_if_done(c);
}

static void auth_reply(void *ctx, int err, const cJSON *reply,
                       const char *msg)
{
  struct etcd_client *c = ctx;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(reply, "token");
  char text[600];

  c->authenticating = false;
  if (!err && !cJSON_IsString(t)) {
    err = -EPROTO;
    msg = "no token in the answer";
  }
  if (err) {
    snprintf(text, sizeof text, "etcd authentication as '%s' failed: %s",
             c->user, msg);
    token_ready(c, err, text);
    return;
  }
  free(c->token);
  c->token = strdup(t->valuestring);
  token_ready(c, c->token ? 0 : -ENOMEM, "out of memory");
}

void etcd_authenticate(struct etcd_client *c)
{
  cJSON *b;
  char *body;
  int rc;

  if (c->authenticating)
    return;
  b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "name", c->user);
  cJSON_AddStringToObject(b, "password", c->password ? c->password : "");
  body = cJSON_PrintUnformatted(b);
  cJSON_Delete(b);
  if (!body) {
    token_ready(c, -ENOMEM, "out of memory");
    return;
  }
  c->authenticating = true;
  rc = call_start(c, "/v3/auth/authenticate", body, 0, auth_reply, c, true);
  memset(body, 0, strlen(body));    /* the password */
  free(body);
  if (rc) {
    c->authenticating = false;
    token_ready(c, rc, "cannot start the authentication request");
  }
}

int etcd_call_text(struct etcd_client *c, const char *path,
                   const char *body, double timeout, etcd_reply_cb cb,
                   void *ctx)
{
  return call_start(c, path, body, timeout > 0 ? (long)(timeout * 1000) : 0,
                    cb, ctx, false);
}

int etcd_call_within(struct etcd_client *c, const char *path,
                     const cJSON *body, double timeout, etcd_reply_cb cb,
                     void *ctx)
{
  char *text = cJSON_PrintUnformatted(body);
  int rc;

  if (!text)
    return -ENOMEM;
  rc = call_start(c, path, text, timeout > 0 ? (long)(timeout * 1000) : 0,
                  cb, ctx, false);
  free(text);
  return rc;
}

int etcd_call(struct etcd_client *c, const char *path, const cJSON *body,
              etcd_reply_cb cb, void *ctx)
{
  return etcd_call_within(c, path, body, 0, cb, ctx);
}

/* ---- the client ------------------------------------------------------ */

static char *dup_opt(const char *s)
{
  return s && s[0] ? strdup(s) : NULL;
}

int etcd_client_create(uv_loop_t *loop, const struct etcd_client_opts *o,
                       struct etcd_client **out, char *err, size_t errlen)
{
  struct etcd_client *c = calloc(1, sizeof *c);
  char *p, *save = NULL, *tok;
  int rc;

  if (!c) {
    return err_set(err, errlen, -ENOMEM, "out of memory");
  }
  list_init(&c->calls);
  list_init(&c->watches);
  snprintf(c->members_text, sizeof c->members_text, "%s", o->endpoints);
  p = strdup(o->endpoints);
  for (tok = p ? strtok_r(p, ",", &save) : NULL; tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (c->n_members == MAX_MEMBERS) {
      err_set(err, errlen, -EINVAL,
              "--rdzv_endpoint: at most %d etcd members", MAX_MEMBERS);
      goto bad;
    }
    /* A URL is accepted too: its scheme picks the protocol. */
    if (strncmp(tok, "http://", 7) == 0)
      tok += 7;
    else if (strncmp(tok, "https://", 8) == 0)
      tok += 8;
    if (!tok[0] || strpbrk(tok, "/ \t")) {
      err_set(err, errlen, -EINVAL, "--rdzv_endpoint: invalid etcd "
              "member '%s' (expected host:port)", tok);
      goto bad;
    }
    c->members[c->n_members] = strdup(tok);
    if (!c->members[c->n_members])
      goto nomem;
    c->n_members++;
  }
  free(p);
  p = NULL;
  if (!c->n_members) {
    err_set(err, errlen, -EINVAL,
            "--rdzv_endpoint: no etcd member given");
    goto bad;
  }
  c->loop = loop;
  c->https = o->https;
  c->cacert = dup_opt(o->cacert);
  c->cert = dup_opt(o->cert);
  c->key = dup_opt(o->key);
  c->user = dup_opt(o->user);
  c->password = o->password ? strdup(o->password) : NULL;
  c->timeout_ms = (long)((o->timeout > 0 ? o->timeout : 10) * 1000);
  if (libcurl_dl_load(err, errlen))
    goto bad;
  if (curl_users++ == 0 && curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
    curl_users--;
    err_set(err, errlen, -EINVAL, "cannot initialise libcurl");
    goto bad;
  }
  rc = http_uv_create(loop, &c->cu);
  if (rc) {
    if (--curl_users == 0)
      curl_global_cleanup();
    goto nomem;
  }
  *out = c;
  return 0;
nomem:
  err_set(err, errlen, -ENOMEM, "out of memory");
bad:
  free(p);
  while (c->n_members)
    free(c->members[--c->n_members]);
  free(c->cacert);
  free(c->cert);
  free(c->key);
  free(c->user);
  free(c->password);
  free(c);
  return -EINVAL;
}

void etcd_client_close(struct etcd_client *c)
{
  c->closing = true;
  while (!list_empty(&c->calls)) {
    struct etcd_call *k = list_first(&c->calls, struct etcd_call, node);

    http_uv_remove(c->cu, &k->req);
    call_free(k);
  }
  etcd_watch_stop_all(c);
  http_uv_close(c->cu);
  c->cu = NULL;
  if (--curl_users == 0)
    curl_global_cleanup();
  while (c->n_members)
    free(c->members[--c->n_members]);
  free(c->cacert);
  free(c->cert);
  free(c->key);
  free(c->user);
  if (c->password) {
    memset(c->password, 0, strlen(c->password));
    free(c->password);
  }
  c->cacert = c->cert = c->key = c->user = c->password = NULL;
  etcd_client_free_if_done(c);
}

bool etcd_client_plain_peer(const struct etcd_client *c, const char **ip,
                            int *port, const char **token)
{
  if (c->https || !c->peer_ip[0] || c->peer_port <= 0 || c->peer_port > 65535)
    return false;
  *ip = c->peer_ip;
  *port = (int)c->peer_port;
  *token = c->token ? c->token : "";
  return true;
}

const char *etcd_client_local_ip(const struct etcd_client *c)
{
  return c->local_ip;
}

int etcd_client_n_members(const struct etcd_client *c)
{
  return c->n_members;
}
