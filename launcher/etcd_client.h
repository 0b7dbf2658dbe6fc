/* etcd_client.h -- a small etcd v3 client over its HTTP/JSON gateway
 * (/v3/...), on the caller's libuv loop through libcurl (http_uv.h).
 *
 * Calls are POSTs of JSON bodies; replies come back parsed.  Keys and
 * values are base64 on the wire (etcd_b64_*); int64 fields come back as
 * JSON strings (etcd_i64 reads either).  The client fails over between
 * the members it was given: a request that cannot connect, times out or
 * gets 503 (no leader) is retried on the next member, once around the
 * list, each member but the last given half a second, and a member that
 * failed is avoided for a while (Note [a hung member], etcd_client.c).  With a user name it authenticates (/v3/auth/authenticate) and
 * sends the token with every request, renewing it when etcd says it is
 * invalid.  A watch is a long-lived streaming POST that resumes on the
 * next member from the last revision it delivered. */
#ifndef CDRUN_ETCD_CLIENT_H
#define CDRUN_ETCD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <uv.h>

struct etcd_client_opts {
  const char *endpoints;        /* "host:port,host:port,..." */
  bool https;
  const char *cacert, *cert, *key;  /* PEM files, or NULL */
  const char *user;             /* NULL: no authentication */
  const char *password;
  double timeout;               /* seconds: the last member's attempt */
};

struct etcd_client;
struct etcd_watch;

/* err 0: reply is the decoded JSON body (valid during the call only).
 * err < 0 (negative errno): msg says what failed, naming the members. */
typedef void (*etcd_reply_cb)(void *ctx, int err, const cJSON *reply,
                              const char *msg);

/* One message of a watch stream: its "result" object. */
typedef void (*etcd_watch_cb)(void *ctx, const cJSON *result);
/* The watch cannot resume: err -ESTALE when its revision was compacted. */
typedef void (*etcd_watch_err_cb)(void *ctx, int err, const char *msg);

/* Initialises libcurl (the first client only) and parses the member list.
 * Returns 0, or -EINVAL with a message in err. */
int etcd_client_create(uv_loop_t *loop, const struct etcd_client_opts *o,
                       struct etcd_client **out, char *err, size_t errlen);

/* POSTs body to path ("/v3/kv/range").  cb runs later, exactly once,
 * unless the client is closed first.  Returns 0 or a negative errno. */
int etcd_call(struct etcd_client *c, const char *path, const cJSON *body,
              etcd_reply_cb cb, void *ctx);

/* etcd_call with its own timeout per member (seconds; 0: the client's),
 * for calls that must fail over faster than the others (lease
 * keepalives). */
int etcd_call_within(struct etcd_client *c, const char *path,
                     const cJSON *body, double timeout, etcd_reply_cb cb,
                     void *ctx);

/* etcd_call_within with a body already in text: a streaming call (lease
 * keepalive) may carry several requests, one JSON object a line; the
 * reply is then the first one's answer. */
int etcd_call_text(struct etcd_client *c, const char *path,
                   const char *body, double timeout, etcd_reply_cb cb,
                   void *ctx);

/* Watches [key, range_end) (range_end NULL: key alone) from start_rev.
 * Returns NULL when out of memory. */
struct etcd_watch *etcd_watch_start(struct etcd_client *c, const char *key,
                                    const char *range_end, int64_t start_rev,
                                    etcd_watch_cb cb, etcd_watch_err_cb ecb,
                                    void *ctx);
/* etcd_watch_start with flags: ETCD_WATCH_NOPUT, etcd's NOPUT filter
 * (deletes only; a put sends nothing, and the watch's revision does not
 * move past it). */
#define ETCD_WATCH_NOPUT 1u
struct etcd_watch *etcd_watch_start_flags(struct etcd_client *c,
                                          const char *key,
                                          const char *range_end,
                                          int64_t start_rev, unsigned flags,
                                          etcd_watch_cb cb,
                                          etcd_watch_err_cb ecb, void *ctx);
void etcd_watch_stop(struct etcd_watch *w);

/* Cancels every call and watch (no callback runs) and frees the client
 * once its handles are closed. */
void etcd_client_close(struct etcd_client *c);

/* This machine's address on the connection to the member in use (""
 * before the first answer). */
const char *etcd_client_local_ip(const struct etcd_client *c);
/* The member that answered last, as an address and port, and the auth
 * token ("" without authentication), for a request made without the
 * client (etcd_last_word.h).  False over TLS or before any answer. */
bool etcd_client_plain_peer(const struct etcd_client *c, const char **ip,
                            int *port, const char **token);
/* How many members were given. */
int etcd_client_n_members(const struct etcd_client *c);

/* ---- wire helpers ---- */

/* Standard base64 with padding.  encode writes 4*ceil(n/3)+1 bytes. */
void etcd_b64_encode(const void *in, size_t n, char *out);
/* Returns the decoded length, or -1 on bad input; out holds n*3/4+1. */
int etcd_b64_decode(const char *in, size_t n, char *out);

/* Adds name: base64(s) to obj.  Returns false when out of memory. */
bool etcd_add_b64(cJSON *obj, const char *name, const char *s, size_t n);
/* A base64 field decoded into a fresh NUL-terminated string (NULL when
 * absent, bad or out of memory); *len gets its length. */
char *etcd_get_b64(const cJSON *obj, const char *name, size_t *len);
/* An int64 field (etcd sends them as strings); absent: 0. */
int64_t etcd_i64(const cJSON *obj, const char *name);
/* The end of the range of keys that start with prefix: prefix with its
 * last byte + 1 (written to out, which holds strlen(prefix) + 1). */
void etcd_prefix_end(const char *prefix, char *out);

#endif
