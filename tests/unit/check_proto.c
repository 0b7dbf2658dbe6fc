/* check_proto.c -- unit tests for the rendezvous wire codec. */
#include "rdzv_proto.h"
#include "rdzv_proto_frames.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SAFE 9007199254740991LL     /* 2^53 - 1 */

static struct rdzv_proto_msg M;
static char err[256];

/* ---- helpers ---- */

/* M holds the last decode; each decode frees the one before. */
static int decode_n(const char *body, size_t len)
{
  rdzv_proto_msg_free(&M);
  return rdzv_proto_decode(body, len, &M, err, sizeof err);
}

static int decode(const char *body)
{
  return decode_n(body, strlen(body));
}

/* tpl with its one '@' replaced by val; caller frees. */
static char *fill(const char *tpl, const char *val)
{
  const char *at = strchr(tpl, '@');
  size_t a, v = strlen(val), b;
  char *s;

  ck_assert_ptr_nonnull(at);
  a = (size_t)(at - tpl);
  b = strlen(at + 1);
  s = malloc(a + v + b + 1);
  ck_assert_ptr_nonnull(s);
  memcpy(s, tpl, a);
  memcpy(s + a, val, v);
  memcpy(s + a + v, at + 1, b + 1);
  return s;
}

static int decode_fill(const char *tpl, const char *val)
{
  char *body = fill(tpl, val);
  int rc = decode(body);

  free(body);
  return rc;
}

/* n bytes of 'a' as a JSON string literal; caller frees. */
static char *quoted(size_t n)
{
  char *s = malloc(n + 3);

  ck_assert_ptr_nonnull(s);
  s[0] = '"';
  memset(s + 1, 'a', n);
  s[n + 1] = '"';
  s[n + 2] = '\0';
  return s;
}

#define ck_assert_ok(rc) \
  ck_assert_msg((rc) == 0, "decode failed: rc %d, err '%s'", (rc), err)

/* A refusal: the code, one line naming needle, nothing left in M. */
#define ck_assert_refused(rc, want, needle) do { \
    int rc_ = (rc); \
    ck_assert_msg(rc_ == (want), "rc %d, want %d (err '%s')", rc_, (want), \
                  err); \
    ck_assert_msg(strstr(err, (needle)) != NULL, "err '%s' lacks '%s'", \
                  err, (needle)); \
    ck_assert_ptr_null(strchr(err, '\n')); \
    ck_assert_int_eq(M.op, RDZV_PROTO_OP_INVALID); \
  } while (0)

static bool same_cause(const struct rdzv_proto_cause *a,
                       const struct rdzv_proto_cause *b)
{
  return a->exited_at == b->exited_at && a->rank == b->rank &&
         a->local_rank == b->local_rank && a->exitcode == b->exitcode &&
         a->pid == b->pid && !strcmp(a->host, b->host);
}

static bool same_conf(const struct rdzv_proto_conf *a,
                      const struct rdzv_proto_conf *b)
{
  return a->min_nodes == b->min_nodes && a->max_nodes == b->max_nodes &&
         a->max_restarts == b->max_restarts &&
         a->join_timeout == b->join_timeout &&
         a->last_call_timeout == b->last_call_timeout &&
         a->close_timeout == b->close_timeout &&
         a->keepalive_interval == b->keepalive_interval &&
         a->keepalive_misses == b->keepalive_misses;
}

/* Field by field, for the fields the op carries. */
static bool same_msg(const struct rdzv_proto_msg *a,
                     const struct rdzv_proto_msg *b)
{
  const struct rdzv_proto_join *ja = &a->u.join, *jb = &b->u.join;
  const struct rdzv_proto_kv *ka = &a->u.kv, *kb = &b->u.kv;
  const struct rdzv_proto_waiting *wa = &a->u.waiting, *wb = &b->u.waiting;
  const struct rdzv_proto_round *ra = &a->u.round, *rb = &b->u.round;
  const struct rdzv_proto_text *ta = &a->u.text, *tb = &b->u.text;

  if (a->op != b->op)
    return false;
  switch (a->op) {
  case RDZV_PROTO_JOIN:
    return !strcmp(ja->id, jb->id) && !strcmp(ja->addr, jb->addr) &&
           !strcmp(ja->host, jb->host) && ja->pid == jb->pid &&
           ja->nproc == jb->nproc && ja->master_port == jb->master_port &&
           ja->reason == jb->reason && same_conf(&ja->conf, &jb->conf);
  case RDZV_PROTO_FAILURE:
    return a->u.failure.final == b->u.failure.final &&
           !strcmp(a->u.failure.message, b->u.failure.message) &&
           same_cause(&a->u.failure.cause, &b->u.failure.cause);
  case RDZV_PROTO_BARRIER:
  case RDZV_PROTO_BARRIER_DONE:
    return !strcmp(a->u.barrier.name, b->u.barrier.name) &&
           a->u.barrier.round == b->u.barrier.round;
  case RDZV_PROTO_KV_SET:
  case RDZV_PROTO_KV_VALUE:
    if (ka->value_len != kb->value_len || (ka->value_len &&
        memcmp(ka->value, kb->value, ka->value_len) != 0))
      return false;
    /* fall through */
  case RDZV_PROTO_KV_GET:
  case RDZV_PROTO_KV_ADD:
    return !strcmp(ka->key, kb->key) && ka->delta == kb->delta &&
           ka->wait == kb->wait && ka->found == kb->found;
  case RDZV_PROTO_WAITING:
    return wa->round == wb->round && wa->present == wb->present &&
           wa->min_nodes == wb->min_nodes && wa->max_nodes == wb->max_nodes &&
           wa->deadline == wb->deadline && wa->last_call == wb->last_call;
  case RDZV_PROTO_ROUND:
    return ra->round == rb->round && ra->restart_count == rb->restart_count &&
           ra->group_rank == rb->group_rank &&
           ra->group_world_size == rb->group_world_size &&
           ra->rank_offset == rb->rank_offset &&
           ra->world_size == rb->world_size &&
           !strcmp(ra->master_addr, rb->master_addr) &&
           ra->master_port == rb->master_port;
  case RDZV_PROTO_RESTART:
  case RDZV_PROTO_CLOSED:
  case RDZV_PROTO_ERROR:
    return ta->code == tb->code && ta->success == tb->success &&
           !strcmp(ta->message, tb->message) &&
           same_cause(&ta->cause, &tb->cause) &&
           !strcmp(ta->lost_host, tb->lost_host) &&
           !strcmp(ta->lost_why, tb->lost_why);
  case RDZV_PROTO_STATUS_REPLY:
    return !strcmp(a->u.status_json, b->u.status_json);
  case RDZV_PROTO_HELLO:
  case RDZV_PROTO_CHALLENGE:
    return !memcmp(a->u.auth.nonce, b->u.auth.nonce, RDZV_PROTO_AUTH_BYTES);
  case RDZV_PROTO_AUTH:
  case RDZV_PROTO_AUTH_OK:
    return !memcmp(a->u.auth.mac, b->u.auth.mac, RDZV_PROTO_AUTH_BYTES);
  default:
    return true;
  }
}

/* Encodes, frames, decodes into M and compares; returns the body (a
 * NUL-terminated copy) for tests that look at the wire form. */
static char *round_trip(const struct rdzv_proto_msg *m)
{
  char *frame, *body;
  size_t len, flen, blen;
  int rc;

  rc = rdzv_proto_encode(m, &frame, &len);
  ck_assert_int_eq(rc, 0);
  ck_assert_uint_gt(len, RDZV_PROTO_FRAME_HEADER);
  ck_assert_int_eq(rdzv_proto_frame_peek(frame, len, &flen), 1);
  ck_assert_uint_eq(flen, len);
  blen = len - RDZV_PROTO_FRAME_HEADER;
  ck_assert_uint_eq((size_t)(unsigned char)frame[0] << 24 |
                    (size_t)(unsigned char)frame[1] << 16 |
                    (size_t)(unsigned char)frame[2] << 8 |
                    (size_t)(unsigned char)frame[3], blen);
  rc = decode_n(frame + RDZV_PROTO_FRAME_HEADER, blen);
  ck_assert_ok(rc);
  ck_assert_msg(same_msg(m, &M), "round trip changed: %.*s", (int)blen,
                frame + RDZV_PROTO_FRAME_HEADER);
  body = strndup(frame + RDZV_PROTO_FRAME_HEADER, blen);
  ck_assert_ptr_nonnull(body);
  free(frame);
  return body;
}

static void round_trip_body(const struct rdzv_proto_msg *m, const char *want)
{
  char *body = round_trip(m);

  ck_assert_str_eq(body, want);
  free(body);
  rdzv_proto_msg_free(&M);
}

static void round_trip_free(const struct rdzv_proto_msg *m)
{
  free(round_trip(m));
  rdzv_proto_msg_free(&M);
}

static void msg_init(struct rdzv_proto_msg *m, enum rdzv_proto_op op)
{
  memset(m, 0, sizeof *m);
  m->op = op;
}

static int encode_rc(const struct rdzv_proto_msg *m)
{
  char *frame = (char *)1;
  size_t len = 1;
  int rc = rdzv_proto_encode(m, &frame, &len);

  if (rc) {
    ck_assert_ptr_null(frame);
    ck_assert_uint_eq(len, 0);
  }
  free(frame);
  return rc;
}

/* ---- names, defaults, framing ---- */

START_TEST(names)
{
  static const char *const want[RDZV_PROTO_OP_COUNT] = {
    NULL, "join", "keepalive", "failure", "barrier", "leave", "kv_set",
    "kv_get", "kv_add", "status", "waiting", "round", "restart",
    "barrier_done", "closed", "kv_value", "status_reply", "pong", "error",
    "hello", "challenge", "auth", "auth_ok", "resume", "going_away",
  };
  int i;

  ck_assert_ptr_null(rdzv_proto_op_name(RDZV_PROTO_OP_INVALID));
  ck_assert_ptr_null(rdzv_proto_op_name(RDZV_PROTO_OP_COUNT));
  ck_assert_ptr_null(rdzv_proto_op_name((enum rdzv_proto_op)-1));
  for (i = 1; i < RDZV_PROTO_OP_COUNT; i++)
    ck_assert_str_eq(rdzv_proto_op_name((enum rdzv_proto_op)i), want[i]);
  ck_assert_str_eq(rdzv_proto_error_name(RDZV_PROTO_ERR_BAD_REQUEST),
                   "bad_request");
  ck_assert_str_eq(rdzv_proto_error_name(RDZV_PROTO_ERR_CONFIG_MISMATCH),
                   "config_mismatch");
  ck_assert_str_eq(rdzv_proto_error_name(RDZV_PROTO_ERR_JOIN_TIMEOUT),
                   "join_timeout");
  ck_assert_str_eq(rdzv_proto_error_name(RDZV_PROTO_ERR_CLOSED), "closed");
  ck_assert_str_eq(rdzv_proto_error_name(RDZV_PROTO_ERR_NOT_JOINED),
                   "not_joined");
  ck_assert_str_eq(rdzv_proto_error_name(RDZV_PROTO_ERR_LIMIT), "limit");
  ck_assert_str_eq(rdzv_proto_error_name(RDZV_PROTO_ERR_TIMEOUT), "timeout");
  ck_assert_str_eq(rdzv_proto_error_name(RDZV_PROTO_ERR_AUTH), "auth");
  ck_assert_ptr_null(rdzv_proto_error_name((enum rdzv_proto_error_code)0));
  ck_assert_ptr_null(rdzv_proto_error_name(
      (enum rdzv_proto_error_code)(RDZV_PROTO_ERR_AUTH + 1)));
}
END_TEST

START_TEST(conf_defaults)
{
  struct rdzv_proto_conf c;

  memset(&c, 0xff, sizeof c);
  rdzv_proto_conf_default(&c);
  ck_assert_int_eq(c.min_nodes, 1);
  ck_assert_int_eq(c.max_nodes, 1);
  ck_assert_int_eq(c.max_restarts, 0);
  ck_assert_double_eq(c.join_timeout, 600);
  ck_assert_double_eq(c.last_call_timeout, 30);
  ck_assert_double_eq(c.close_timeout, 30);
  ck_assert_double_eq(c.keepalive_interval, 1);
  ck_assert_int_eq(c.keepalive_misses, 5);
}
END_TEST

START_TEST(peek_every_prefix_is_incomplete)
{
  static const char frame[] = "\0\0\0\x18{\"v\":2,\"op\":\"keepalive\"}";
  size_t len = sizeof frame - 1, flen, i;

  ck_assert_uint_eq(len, 28);
  for (i = 0; i < len; i++) {
    flen = 12345;
    ck_assert_int_eq(rdzv_proto_frame_peek(frame, i, &flen), 0);
    ck_assert_uint_eq(flen, 12345);
  }
  ck_assert_int_eq(rdzv_proto_frame_peek(frame, len, &flen), 1);
  ck_assert_uint_eq(flen, len);
  ck_assert_ok(decode_n(frame + 4, flen - 4));
  ck_assert_int_eq(M.op, RDZV_PROTO_KEEPALIVE);
}
END_TEST

START_TEST(peek_big_endian_unaligned)
{
  unsigned char buf[1 + 4 + 258 + 3];
  size_t flen = 0;

  memset(buf, 'x', sizeof buf);
  /* At an odd address, with bytes of the next frame behind it. */
  buf[1] = 0;
  buf[2] = 0;
  buf[3] = 1;
  buf[4] = 2;
  ck_assert_int_eq(rdzv_proto_frame_peek(buf + 1, sizeof buf - 1, &flen), 1);
  ck_assert_uint_eq(flen, 4 + 258);
  ck_assert_int_eq(rdzv_proto_frame_peek(buf + 1, 4 + 257, &flen), 0);
}
END_TEST

START_TEST(peek_zero_and_oversized)
{
  static const unsigned char zero[4] = { 0, 0, 0, 0 };
  static const unsigned char max[4] = { 0, 0x10, 0, 0 };
  static const unsigned char over[4] = { 0, 0x10, 0, 1 };
  static const unsigned char huge[4] = { 0xff, 0xff, 0xff, 0xff };
  size_t flen = 7;

  /* Errors show as soon as the header is in: no waiting for a body. */
  ck_assert_int_eq(rdzv_proto_frame_peek(zero, 4, &flen), -EBADMSG);
  ck_assert_int_eq(rdzv_proto_frame_peek(over, 4, &flen), -EMSGSIZE);
  ck_assert_int_eq(rdzv_proto_frame_peek(huge, 4, &flen), -EMSGSIZE);
  ck_assert_int_eq(rdzv_proto_frame_peek(zero, 3, &flen), 0);
  /* Exactly RDZV_PROTO_MAX_FRAME is allowed: it needs its body. */
  ck_assert_int_eq(rdzv_proto_frame_peek(max, 4, &flen), 0);
  ck_assert_uint_eq(flen, 7);
}
END_TEST

START_TEST(peek_stream_of_frames)
{
  struct rdzv_proto_msg a, b;
  char *fa, *fb, *buf;
  size_t la, lb, flen;

  msg_init(&a, RDZV_PROTO_KEEPALIVE);
  msg_init(&b, RDZV_PROTO_BARRIER);
  snprintf(b.u.barrier.name, sizeof b.u.barrier.name, "exit");
  b.u.barrier.round = 3;
  ck_assert_int_eq(rdzv_proto_encode(&a, &fa, &la), 0);
  ck_assert_int_eq(rdzv_proto_encode(&b, &fb, &lb), 0);
  buf = malloc(la + lb);
  ck_assert_ptr_nonnull(buf);
  memcpy(buf, fa, la);
  memcpy(buf + la, fb, lb);
  ck_assert_int_eq(rdzv_proto_frame_peek(buf, la + lb, &flen), 1);
  ck_assert_uint_eq(flen, la);
  ck_assert_int_eq(rdzv_proto_frame_peek(buf + la, lb, &flen), 1);
  ck_assert_uint_eq(flen, lb);
  ck_assert_ok(decode_n(buf + la + 4, lb - 4));
  ck_assert_int_eq(M.op, RDZV_PROTO_BARRIER);
  ck_assert_str_eq(M.u.barrier.name, "exit");
  ck_assert_int_eq(M.u.barrier.round, 3);
  free(buf);
  free(fa);
  free(fb);
}
END_TEST

/* ---- round trips ---- */

START_TEST(rt_join)
{
  struct rdzv_proto_msg m;
  struct rdzv_proto_conf *c = &m.u.join.conf;

  msg_init(&m, RDZV_PROTO_JOIN);
  snprintf(m.u.join.id, sizeof m.u.join.id, "job-42");
  snprintf(m.u.join.addr, sizeof m.u.join.addr, "10.0.0.7");
  snprintf(m.u.join.host, sizeof m.u.join.host, "node7.example");
  m.u.join.pid = 123456;
  m.u.join.nproc = 8;
  m.u.join.master_port = 29500;
  m.u.join.reason = RDZV_PROTO_REASON_MEMBERSHIP;
  c->min_nodes = 2;
  c->max_nodes = 16;
  c->max_restarts = 3;
  c->join_timeout = 900.5;
  c->last_call_timeout = 0.25;
  c->close_timeout = 0;
  c->keepalive_interval = 0.1;
  c->keepalive_misses = 7;
  round_trip_body(&m,
    "{\"v\":2,\"op\":\"join\",\"id\":\"job-42\",\"addr\":\"10.0.0.7\","
    "\"host\":\"node7.example\",\"pid\":123456,\"nproc\":8,"
    "\"master_port\":29500,\"reason\":\"membership\",\"conf\":"
    "{\"min_nodes\":2,\"max_nodes\":16,\"max_restarts\":3,"
    "\"join_timeout\":900.5,\"last_call_timeout\":0.25,"
    "\"close_timeout\":0,\"keepalive_interval\":0.1,"
    "\"keepalive_misses\":7}}");
  m.u.join.reason = RDZV_PROTO_REASON_FAILURE;
  round_trip_free(&m);
}
END_TEST

START_TEST(rt_no_fields)
{
  static const struct { enum rdzv_proto_op op; const char *body;
  } t[] = {
      {RDZV_PROTO_KEEPALIVE, "{\"v\":2,\"op\":\"keepalive\"}"},
      {RDZV_PROTO_LEAVE, "{\"v\":2,\"op\":\"leave\"}"},
      {RDZV_PROTO_STATUS,
       "{\"v\":2,\"op\":\"status\",\"job\":\"\",\"limit\":0}"},
      {RDZV_PROTO_PONG, "{\"v\":2,\"op\":\"pong\"}"},
  };
  struct rdzv_proto_msg m;
  size_t i;

  for (i = 0; i < sizeof t / sizeof t[0]; i++) {
    msg_init(&m, t[i].op);
    round_trip_body(&m, t[i].body);
  }
}
END_TEST

/* A status request may name one job and bound the summary; an older
 * request without either still decodes (both optional). */
START_TEST(rt_status_request)
{
  struct rdzv_proto_msg m;
  char *body;

  msg_init(&m, RDZV_PROTO_STATUS);
  snprintf(m.u.status.job, sizeof m.u.status.job, "train7");
  m.u.status.limit = 25;
  round_trip_body(&m, "{\"v\":2,\"op\":\"status\",\"job\":\"train7\","
                  "\"limit\":25}");
  body = strdup("{\"v\":2,\"op\":\"status\"}");
  ck_assert_ok(decode_n(body, strlen(body)));
  ck_assert_str_eq(M.u.status.job, "");
  ck_assert_int_eq(M.u.status.limit, 0);
  free(body);
}
END_TEST

START_TEST(rt_failure)
{
  struct rdzv_proto_msg m;

  msg_init(&m, RDZV_PROTO_FAILURE);
  m.u.failure.final = true;
  snprintf(m.u.failure.message, sizeof m.u.failure.message,
           "rank 3 \"exited\"\twith \\ code 1\n\x01 caf\xc3\xa9");
  round_trip_body(&m,
    "{\"v\":2,\"op\":\"failure\",\"final\":true,\"message\":"
    "\"rank 3 \\\"exited\\\"\\twith \\\\ code 1\\n\\u0001 caf\xc3\xa9\"}");
  m.u.failure.final = false;
  m.u.failure.message[0] = '\0';
  round_trip_body(&m,
    "{\"v\":2,\"op\":\"failure\",\"final\":false,\"message\":\"\"}");
}
END_TEST

START_TEST(rt_barrier)
{
  struct rdzv_proto_msg m;

  msg_init(&m, RDZV_PROTO_BARRIER);
  snprintf(m.u.barrier.name, sizeof m.u.barrier.name, "exit");
  m.u.barrier.round = RDZV_PROTO_MAX_ROUND;
  round_trip_body(&m, "{\"v\":2,\"op\":\"barrier\",\"name\":\"exit\","
                  "\"round\":1073741824}");
  /* BARRIER_DONE says which barrier of which round passed. */
  m.op = RDZV_PROTO_BARRIER_DONE;
  m.u.barrier.round = 0;
  round_trip_body(&m, "{\"v\":2,\"op\":\"barrier_done\",\"name\":"
                  "\"exit\",\"round\":0}");
  ck_assert_refused(decode("{\"v\":2,\"op\":\"barrier_done\"}"), -EINVAL,
                    "barrier_done.name: missing");
}
END_TEST

START_TEST(rt_kv)
{
  struct rdzv_proto_msg m;
  char value[] = "hello\x80world";

  msg_init(&m, RDZV_PROTO_KV_SET);
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "nccl/uid");
  m.u.kv.value = value;
  m.u.kv.value_len = strlen(value);
  round_trip_body(&m, "{\"v\":2,\"op\":\"kv_set\",\"key\":\"nccl/uid\","
                  "\"value\":\"hello\x80world\"}");

  /* value_len rules, not the terminator. */
  m.u.kv.value_len = 5;
  round_trip_body(&m, "{\"v\":2,\"op\":\"kv_set\",\"key\":\"nccl/uid\","
                  "\"value\":\"hello\"}");

  msg_init(&m, RDZV_PROTO_KV_GET);
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "k");
  m.u.kv.wait = 2.5;
  round_trip_body(&m, "{\"v\":2,\"op\":\"kv_get\",\"key\":\"k\","
                  "\"wait\":2.5}");

  msg_init(&m, RDZV_PROTO_KV_ADD);
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "counter");
  m.u.kv.delta = -MAX_SAFE;
  round_trip_body(&m, "{\"v\":2,\"op\":\"kv_add\",\"key\":\"counter\","
                  "\"delta\":-9007199254740991}");
  m.u.kv.delta = MAX_SAFE;
  round_trip_free(&m);

  msg_init(&m, RDZV_PROTO_KV_VALUE);
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "counter");
  m.u.kv.found = true;
  m.u.kv.value = value;
  m.u.kv.value_len = 3;
  round_trip_body(&m, "{\"v\":2,\"op\":\"kv_value\",\"key\":\"counter\","
                  "\"found\":true,\"value\":\"hel\"}");

  /* Not found: a NULL value goes out as "" and comes back as "". */
  m.u.kv.found = false;
  m.u.kv.value = NULL;
  m.u.kv.value_len = 0;
  free(round_trip(&m));
  ck_assert_ptr_nonnull(M.u.kv.value);
  ck_assert_str_eq(M.u.kv.value, "");
  ck_assert_uint_eq(M.u.kv.value_len, 0);
  ck_assert(!M.u.kv.found);
  rdzv_proto_msg_free(&M);
  ck_assert_ptr_null(M.u.kv.value);
}
END_TEST

START_TEST(rt_waiting)
{
  struct rdzv_proto_msg m;

  msg_init(&m, RDZV_PROTO_WAITING);
  m.u.waiting.round = 4;
  m.u.waiting.present = 3;
  m.u.waiting.min_nodes = 2;
  m.u.waiting.max_nodes = 8;
  m.u.waiting.deadline = 587.125;
  m.u.waiting.last_call = -1;
  round_trip_body(&m, "{\"v\":2,\"op\":\"waiting\",\"round\":4,"
                  "\"present\":3,\"min_nodes\":2,\"max_nodes\":8,"
                  "\"deadline\":587.125,\"last_call\":-1}");
  m.u.waiting.last_call = 29.75;
  round_trip_free(&m);
}
END_TEST

START_TEST(rt_round)
{
  struct rdzv_proto_msg m;

  msg_init(&m, RDZV_PROTO_ROUND);
  m.u.round.round = 2;
  m.u.round.restart_count = 1;
  m.u.round.group_rank = 1;
  m.u.round.group_world_size = 3;
  m.u.round.rank_offset = 8;
  m.u.round.world_size = 24;
  snprintf(m.u.round.master_addr, sizeof m.u.round.master_addr,
           "fe80::1%%eth0");
  m.u.round.master_port = 65535;
  round_trip_body(&m, "{\"v\":2,\"op\":\"round\",\"round\":2,"
                  "\"restart_count\":1,\"group_rank\":1,"
                  "\"group_world_size\":3,\"rank_offset\":8,"
                  "\"world_size\":24,\"master_addr\":\"fe80::1%eth0\","
                  "\"master_port\":65535}");
}
END_TEST

/* Note [node tokens]: WAITING and ROUND carry a token, RESUME presents
 * one; without one (all zero) the field and WAITING's restart_count are
 * absent, so bodies are what they were before tokens. */
START_TEST(rt_tokens)
{
  struct rdzv_proto_msg m;
  char *body;
  size_t i;

  msg_init(&m, RDZV_PROTO_WAITING);
  m.u.waiting.round = 2;
  m.u.waiting.min_nodes = 1;
  m.u.waiting.max_nodes = 1;
  m.u.waiting.last_call = -1;
  round_trip_body(&m, "{\"v\":2,\"op\":\"waiting\",\"round\":2,"
                  "\"present\":0,\"min_nodes\":1,\"max_nodes\":1,"
                  "\"deadline\":0,\"last_call\":-1}");
  m.u.waiting.restart_count = 3;
  for (i = 0; i < RDZV_PROTO_TOKEN_BYTES; i++)
    m.u.waiting.token[i] = (unsigned char)(i * 7 + 1);
  body = round_trip(&m);
  ck_assert(strstr(body, "\"restart_count\":3,\"token\":\"01080f"));
  free(body);
  ck_assert(
      !memcmp(M.u.waiting.token, m.u.waiting.token, RDZV_PROTO_TOKEN_BYTES));
  ck_assert_int_eq(M.u.waiting.restart_count, 3);
  ck_assert(!rdzv_proto_token_none(M.u.waiting.token));
  rdzv_proto_msg_free(&M);
  ck_assert_refused(decode("{\"v\":2,\"op\":\"waiting\",\"round\":2,"
                           "\"present\":0,\"min_nodes\":1,\"max_nodes\":1,"
                           "\"deadline\":0,\"last_call\":-1,\"token\":"
                           "\"AB\"}"), -EINVAL, "waiting.token");
}
END_TEST

START_TEST(rt_resume)
{
  struct rdzv_proto_msg m;

  msg_init(&m, RDZV_PROTO_RESUME);
  snprintf(m.u.resume.join.id, sizeof m.u.resume.join.id, "j");
  m.u.resume.join.nproc = 2;
  m.u.resume.join.master_port = 29500;
  rdzv_proto_conf_default(&m.u.resume.join.conf);
  m.u.resume.phase = RDZV_PROTO_PHASE_EXIT;
  m.u.resume.round.round = 3;
  m.u.resume.round.restart_count = 1;
  m.u.resume.round.group_rank = 1;
  m.u.resume.round.group_world_size = 2;
  m.u.resume.round.rank_offset = 2;
  m.u.resume.round.world_size = 4;
  snprintf(m.u.resume.round.master_addr,
           sizeof m.u.resume.round.master_addr, "10.0.0.1");
  m.u.resume.round.master_port = 29501;
  free(round_trip(&m));
  ck_assert_int_eq(M.u.resume.phase, RDZV_PROTO_PHASE_EXIT);
  ck_assert_int_eq(M.u.resume.round.round, 3);
  ck_assert_int_eq(M.u.resume.round.rank_offset, 2);
  ck_assert_int_eq(M.u.resume.round.master_port, 29501);
  ck_assert_int_eq(M.u.resume.join.master_port, 29500);
  rdzv_proto_msg_free(&M);
  /* Its ranks must lie in the world (int64: both near INT_MAX). */
  m.u.resume.round.rank_offset = 3;
  ck_assert_int_eq(rdzv_proto_encode(&m, &(char *){ NULL }, &(size_t){ 0 }),
                   -EINVAL);
  m.u.resume.round.world_size = INT_MAX;
  m.u.resume.round.rank_offset = INT_MAX - 1;
  ck_assert_int_eq(rdzv_proto_encode(&m, &(char *){ NULL }, &(size_t){ 0 }),
                   -EINVAL);
  m.u.resume.round.rank_offset = INT_MAX - 2;
  free(round_trip(&m));
  rdzv_proto_msg_free(&M);
  /* A round beyond RDZV_PROTO_MAX_ROUND: no room to go on from it. */
  m.u.resume.round.round = RDZV_PROTO_MAX_ROUND + 1;
  ck_assert_int_eq(rdzv_proto_encode(&m, &(char *){ NULL }, &(size_t){ 0 }),
                   -EINVAL);
  m.u.resume.round.round = 3;
  /* Running without a whole assignment: refused. */
  m.u.resume.round.group_rank = 2;
  ck_assert_int_eq(rdzv_proto_encode(&m, &(char *){ NULL }, &(size_t){ 0 }),
                   -EINVAL);
  /* Gathering: only round and restart_count. */
  memset(&m.u.resume.round, 0, sizeof m.u.resume.round);
  m.u.resume.phase = RDZV_PROTO_PHASE_GATHERING;
  m.u.resume.round.round = 4;
  free(round_trip(&m));
  ck_assert_int_eq(M.u.resume.phase, RDZV_PROTO_PHASE_GATHERING);
  ck_assert_int_eq(M.u.resume.round.round, 4);
  rdzv_proto_msg_free(&M);

  msg_init(&m, RDZV_PROTO_GOING_AWAY);
  snprintf(m.u.text.message, sizeof m.u.text.message, "bye");
  round_trip_body(&m, "{\"v\":2,\"op\":\"going_away\","
                  "\"message\":\"bye\"}");

  /* ROUND's embedded host: only when set. */
  msg_init(&m, RDZV_PROTO_ROUND);
  m.u.round.group_world_size = 2;
  m.u.round.world_size = 2;
  snprintf(m.u.round.master_addr, sizeof m.u.round.master_addr, "a");
  m.u.round.master_port = 1;
  m.u.round.embedded = true;
  m.u.round.host_rank = 1;
  free(round_trip(&m));
  ck_assert(M.u.round.embedded);
  ck_assert_int_eq(M.u.round.host_rank, 1);
  rdzv_proto_msg_free(&M);
}
END_TEST

/* Note [root cause]: the optional cause, absent when exited_at is 0, in
 * failure, restart and closed; checked like any field. */
START_TEST(rt_cause)
{
  struct rdzv_proto_msg m;

  msg_init(&m, RDZV_PROTO_FAILURE);
  m.u.failure.final = true;
  m.u.failure.cause.exited_at = 1764150000.125;
  m.u.failure.cause.rank = 7;
  m.u.failure.cause.local_rank = 3;
  m.u.failure.cause.exitcode = -9;
  m.u.failure.cause.pid = 4242;
  snprintf(m.u.failure.cause.host, sizeof m.u.failure.cause.host, "n2");
  round_trip_body(&m,
    "{\"v\":2,\"op\":\"failure\",\"final\":true,\"message\":\"\","
    "\"cause\":{\"exited_at\":1764150000.125,\"rank\":7,\"local_rank\":3,"
    "\"exitcode\":-9,\"pid\":4242,\"host\":\"n2\"}}");
  msg_init(&m, RDZV_PROTO_CLOSED);
  m.u.text.cause.exited_at = 12.5;
  m.u.text.cause.exitcode = 28;
  round_trip_body(&m,
    "{\"v\":2,\"op\":\"closed\",\"success\":false,\"message\":\"\","
    "\"cause\":{\"exited_at\":12.5,\"rank\":0,\"local_rank\":0,"
    "\"exitcode\":28,\"pid\":0,\"host\":\"\"}}");
  msg_init(&m, RDZV_PROTO_RESTART);
  m.u.text.cause.exited_at = 1;
  free(round_trip(&m));
  ck_assert_double_eq(M.u.text.cause.exited_at, 1);
  rdzv_proto_msg_free(&M);
  /* A loss: its host and how, absent when "". */
  msg_init(&m, RDZV_PROTO_RESTART);
  snprintf(m.u.text.lost_host, sizeof m.u.text.lost_host, "n2");
  snprintf(m.u.text.lost_why, sizeof m.u.text.lost_why, "its agent exited");
  round_trip_body(&m, "{\"v\":2,\"op\":\"restart\",\"message\":\"\","
                  "\"lost_host\":\"n2\",\"lost_why\":\"its agent exited\"}");
  msg_init(&m, RDZV_PROTO_RESTART);
  /* Only the time is required; a bad field is named. */
  ck_assert_ok(decode("{\"v\":2,\"op\":\"restart\",\"cause\":"
                      "{\"exited_at\":5}}"));
  ck_assert_int_eq(M.u.text.cause.rank, 0);
  ck_assert_refused(decode("{\"v\":2,\"op\":\"failure\",\"cause\":"
                           "{\"rank\":1}}"), -EINVAL,
                    "failure.cause.exited_at: missing");
  ck_assert_refused(decode("{\"v\":2,\"op\":\"failure\",\"cause\":"
                           "{\"exited_at\":0}}"), -EINVAL,
                    "failure.cause.exited_at");
  ck_assert_refused(decode("{\"v\":2,\"op\":\"closed\",\"cause\":"
                           "{\"exited_at\":1,\"exitcode\":256}}"), -EINVAL,
                    "closed.cause.exitcode");
  ck_assert_refused(decode("{\"v\":2,\"op\":\"closed\",\"cause\":7}"),
                    -EINVAL, "closed.cause");
  m.u.text.cause.exited_at = -1;
  {
    char *out;
    size_t len;

    ck_assert_int_eq(rdzv_proto_encode(&m, &out, &len), -EINVAL);
  }
}
END_TEST

START_TEST(rt_text)
{
  struct rdzv_proto_msg m;
  int code;

  msg_init(&m, RDZV_PROTO_RESTART);
  snprintf(m.u.text.message, sizeof m.u.text.message, "node n3 joined");
  round_trip_body(&m, "{\"v\":2,\"op\":\"restart\","
                  "\"message\":\"node n3 joined\"}");

  msg_init(&m, RDZV_PROTO_CLOSED);
  m.u.text.success = true;
  snprintf(m.u.text.message, sizeof m.u.text.message, "finished");
  round_trip_body(&m, "{\"v\":2,\"op\":\"closed\",\"success\":true,"
                  "\"message\":\"finished\"}");

  msg_init(&m, RDZV_PROTO_ERROR);
  m.u.text.code = RDZV_PROTO_ERR_CONFIG_MISMATCH;
  snprintf(m.u.text.message, sizeof m.u.text.message, "min 2 != 3");
  round_trip_body(&m, "{\"v\":2,\"op\":\"error\","
                  "\"code\":\"config_mismatch\",\"message\":\"min 2 != 3\"}");
  for (code = RDZV_PROTO_ERR_BAD_REQUEST; code <= RDZV_PROTO_ERR_AUTH; code++) {
    m.u.text.code = (enum rdzv_proto_error_code)code;
    free(round_trip(&m));
    ck_assert_int_eq(M.u.text.code, code);
    rdzv_proto_msg_free(&M);
  }
}
END_TEST

START_TEST(rt_status_reply)
{
  struct rdzv_proto_msg m;
  char js[] = " { \"jobs\" : [ {\"id\":\"j\", \"nodes\": [1, 2.5, null,"
              " true, {\"x\": {}}]} ], \"n\": 3 } \n";
  char *frame;
  size_t len;

  /* Any object text goes out embedded, compact. */
  msg_init(&m, RDZV_PROTO_STATUS_REPLY);
  m.u.status_json = js;
  ck_assert_int_eq(rdzv_proto_encode(&m, &frame, &len), 0);
  ck_assert_ok(decode_n(frame + 4, len - 4));
  free(frame);
  ck_assert_str_eq(M.u.status_json, "{\"jobs\":[{\"id\":\"j\",\"nodes\":"
                   "[1,2.5,null,true,{\"x\":{}}]}],\"n\":3}");
  /* The compact form survives a second trip unchanged. */
  m.u.status_json = strdup(M.u.status_json);
  ck_assert_ptr_nonnull(m.u.status_json);
  rdzv_proto_msg_free(&M);
  round_trip_body(&m, "{\"v\":2,\"op\":\"status_reply\",\"status\":"
                  "{\"jobs\":[{\"id\":\"j\",\"nodes\":[1,2.5,null,true,"
                  "{\"x\":{}}]}],\"n\":3}}");
  rdzv_proto_msg_free(&m);
  ck_assert_ptr_null(m.u.status_json);
}
END_TEST

START_TEST(rt_doubles_exact)
{
  static const double v[] = {
    0.1 + 0.2, 1.0 / 3.0, 1e7, 9999999.999999998, 5e-324,
    2.2250738585072014e-308, 123456.78901234567, 0.5, 0,
  };
  struct rdzv_proto_msg m;
  size_t i;

  msg_init(&m, RDZV_PROTO_KV_GET);
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "k");
  for (i = 0; i < sizeof v / sizeof v[0]; i++) {
    m.u.kv.wait = v[i];
    free(round_trip(&m));
    ck_assert_msg(M.u.kv.wait == v[i], "%.17g came back as %.17g", v[i],
                  M.u.kv.wait);
    rdzv_proto_msg_free(&M);
  }
  /* The floors themselves are accepted, exactly. */
  msg_init(&m, RDZV_PROTO_JOIN);
  snprintf(m.u.join.id, sizeof m.u.join.id, "j");
  m.u.join.nproc = 1;
  m.u.join.master_port = 1;
  rdzv_proto_conf_default(&m.u.join.conf);
  m.u.join.conf.keepalive_interval = RDZV_PROTO_MIN_KEEPALIVE;
  m.u.join.conf.keepalive_misses = 10;
  m.u.join.conf.join_timeout = RDZV_PROTO_MIN_JOIN_TIMEOUT;
  free(round_trip(&m));
  ck_assert(M.u.join.conf.keepalive_interval == RDZV_PROTO_MIN_KEEPALIVE);
  ck_assert(M.u.join.conf.join_timeout == RDZV_PROTO_MIN_JOIN_TIMEOUT);
  rdzv_proto_msg_free(&M);
}
END_TEST

START_TEST(rt_limits)
{
  struct rdzv_proto_msg m;

  msg_init(&m, RDZV_PROTO_JOIN);
  memset(m.u.join.id, 'i', RDZV_PROTO_MAX_ID);
  memset(m.u.join.addr, 'a', RDZV_PROTO_MAX_ADDR);
  memset(m.u.join.host, 'h', RDZV_PROTO_MAX_ADDR);
  m.u.join.pid = MAX_SAFE;
  m.u.join.nproc = 65536;
  m.u.join.master_port = 65535;
  m.u.join.conf.min_nodes = RDZV_PROTO_MAX_NODES;
  m.u.join.conf.max_nodes = RDZV_PROTO_MAX_NODES;
  m.u.join.conf.max_restarts = 1000000;
  m.u.join.conf.join_timeout = 1e7;
  m.u.join.conf.last_call_timeout = 1e7;
  m.u.join.conf.close_timeout = 1e7;
  m.u.join.conf.keepalive_interval = 3600;
  m.u.join.conf.keepalive_misses = 1000;
  free(round_trip(&m));
  ck_assert_uint_eq(strlen(M.u.join.id), RDZV_PROTO_MAX_ID);
  ck_assert_uint_eq(strlen(M.u.join.host), RDZV_PROTO_MAX_ADDR);
  ck_assert_int_eq(M.u.join.pid, MAX_SAFE);
  rdzv_proto_msg_free(&M);
}
END_TEST

/* ---- hand-written bodies ---- */

START_TEST(decode_hand_written_join)
{
  ck_assert_ok(decode(
    "\r\n {\n  \"op\" : \"join\",\n  \"extra\": {\"deep\": [1, 2]},\n"
    "  \"conf\": {\"keepalive_misses\": 3, \"min_nodes\": 2,"
    " \"max_nodes\": 4, \"future\": \"x\"},\n"
    "  \"nproc\": 4.0, \"master_port\": 2.95e4, \"v\": 2,\n"
    "  \"id\": \"j\\u00e9\", \"reason\": \"failure\", \"pid\": 77\n}\t\n"));
  ck_assert_int_eq(M.op, RDZV_PROTO_JOIN);
  ck_assert_str_eq(M.u.join.id, "j\xc3\xa9");
  ck_assert_str_eq(M.u.join.addr, "");
  ck_assert_str_eq(M.u.join.host, "");
  ck_assert_int_eq(M.u.join.pid, 77);
  ck_assert_int_eq(M.u.join.nproc, 4);
  ck_assert_int_eq(M.u.join.master_port, 29500);
  ck_assert_int_eq(M.u.join.reason, RDZV_PROTO_REASON_FAILURE);
  ck_assert_int_eq(M.u.join.conf.min_nodes, 2);
  ck_assert_int_eq(M.u.join.conf.max_nodes, 4);
  ck_assert_int_eq(M.u.join.conf.keepalive_misses, 3);
  ck_assert_double_eq(M.u.join.conf.join_timeout, 600);
  ck_assert_double_eq(M.u.join.conf.keepalive_interval, 1);
  ck_assert_str_eq(err, "");
}
END_TEST

START_TEST(decode_partial_conf_defaults)
{
  struct rdzv_proto_conf d;

  rdzv_proto_conf_default(&d);
  /* No conf at all, no reason: every default. */
  ck_assert_ok(decode("{\"v\":2,\"op\":\"join\",\"id\":\"j\",\"nproc\":2,"
                      "\"master_port\":9}"));
  ck_assert(same_conf(&M.u.join.conf, &d));
  ck_assert_int_eq(M.u.join.reason, RDZV_PROTO_REASON_FIRST);
  ck_assert_int_eq(M.u.join.pid, 0);
  /* Only max_nodes and one timeout. */
  ck_assert_ok(decode("{\"v\":2,\"op\":\"join\",\"id\":\"j\",\"nproc\":2,"
                      "\"master_port\":9,\"conf\":{\"max_nodes\":3,"
                      "\"close_timeout\":0.5}}"));
  ck_assert_int_eq(M.u.join.conf.min_nodes, 1);
  ck_assert_int_eq(M.u.join.conf.max_nodes, 3);
  ck_assert_int_eq(M.u.join.conf.max_restarts, 0);
  ck_assert_double_eq(M.u.join.conf.join_timeout, 600);
  ck_assert_double_eq(M.u.join.conf.last_call_timeout, 30);
  ck_assert_double_eq(M.u.join.conf.close_timeout, 0.5);
  ck_assert_double_eq(M.u.join.conf.keepalive_interval, 1);
  ck_assert_int_eq(M.u.join.conf.keepalive_misses, 5);
  /* An empty conf is all defaults too. */
  ck_assert_ok(decode("{\"v\":2,\"op\":\"join\",\"id\":\"j\",\"nproc\":2,"
                      "\"master_port\":9,\"conf\":{}}"));
  ck_assert(same_conf(&M.u.join.conf, &d));
  /* min_nodes alone above the default max is a contradiction. */
  ck_assert_refused(decode("{\"v\":2,\"op\":\"join\",\"id\":\"j\","
                           "\"nproc\":2,\"master_port\":9,"
                           "\"conf\":{\"min_nodes\":2}}"),
                    -EINVAL, "join.conf.min_nodes: 2 > max_nodes 1");
  ck_assert_refused(decode("{\"v\":2,\"op\":\"join\",\"id\":\"j\","
                           "\"nproc\":2,\"master_port\":9,\"conf\":[]}"),
                    -EINVAL, "join.conf: expected an object, got an array");
}
END_TEST

START_TEST(decode_optional_defaults)
{
  ck_assert_ok(decode("{\"v\":2,\"op\":\"failure\"}"));
  ck_assert(!M.u.failure.final);
  ck_assert_str_eq(M.u.failure.message, "");
  ck_assert_ok(decode("{\"v\":2,\"op\":\"closed\"}"));
  ck_assert(!M.u.text.success);
  ck_assert_str_eq(M.u.text.message, "");
  ck_assert_ok(decode("{\"v\":2,\"op\":\"restart\"}"));
  ck_assert_str_eq(M.u.text.message, "");
  ck_assert_ok(decode("{\"v\":2,\"op\":\"kv_get\",\"key\":\"k\"}"));
  ck_assert_double_eq(M.u.kv.wait, 0);
  ck_assert_ok(decode("{\"v\":2,\"op\":\"kv_value\",\"key\":\"k\","
                      "\"found\":false}"));
  ck_assert_str_eq(M.u.kv.value, "");
  rdzv_proto_msg_free(&M);
  ck_assert_ok(decode("{\"v\":2,\"op\":\"error\",\"code\":\"auth\"}"));
  ck_assert_int_eq(M.u.text.code, RDZV_PROTO_ERR_AUTH);
  ck_assert_str_eq(M.u.text.message, "");
}
END_TEST

START_TEST(decode_required_missing)
{
  static const struct { const char *body, *needle; } t[] = {
    { "{\"v\":2,\"op\":\"join\",\"nproc\":1,\"master_port\":1}",
      "join.id: missing" },
    { "{\"v\":2,\"op\":\"join\",\"id\":\"j\",\"master_port\":1}",
      "join.nproc: missing" },
    { "{\"v\":2,\"op\":\"join\",\"id\":\"j\",\"nproc\":1}",
      "join.master_port: missing" },
    { "{\"v\":2,\"op\":\"barrier\",\"name\":\"x\"}", "barrier.round: missing" },
    { "{\"v\":2,\"op\":\"barrier\",\"round\":1}", "barrier.name: missing" },
    { "{\"v\":2,\"op\":\"kv_set\",\"key\":\"k\"}", "kv_set.value: missing" },
    { "{\"v\":2,\"op\":\"kv_set\",\"value\":\"v\"}", "kv_set.key: missing" },
    { "{\"v\":2,\"op\":\"kv_add\",\"key\":\"k\"}", "kv_add.delta: missing" },
    { "{\"v\":2,\"op\":\"kv_value\",\"key\":\"k\"}",
      "kv_value.found: missing" },
    { "{\"v\":2,\"op\":\"waiting\",\"round\":1,\"present\":1,"
      "\"min_nodes\":1,\"max_nodes\":1,\"deadline\":1}",
      "waiting.last_call: missing" },
    { "{\"v\":2,\"op\":\"round\",\"round\":0,\"restart_count\":0,"
      "\"group_rank\":0,\"group_world_size\":1,\"rank_offset\":0,"
      "\"world_size\":1,\"master_port\":1}", "round.master_addr: missing" },
    { "{\"v\":2,\"op\":\"error\",\"message\":\"m\"}", "error.code: missing" },
    { "{\"v\":2,\"op\":\"status_reply\"}", "status_reply.status: missing" },
  };
  size_t i;

  for (i = 0; i < sizeof t / sizeof t[0]; i++)
    ck_assert_refused(decode(t[i].body), -EINVAL, t[i].needle);
}
END_TEST

/* ---- malformed input ---- */

START_TEST(malformed_bodies)
{
  static const struct { const char *body; int rc; const char *needle; } t[] = {
    { "nope", -EBADMSG, "not valid JSON" },
    { "{\"v\":2,\"op\":\"pong\"", -EBADMSG, "not valid JSON" },
    { "[1,2]", -EBADMSG, "expected a JSON object, got an array" },
    { "\"v\"", -EBADMSG, "expected a JSON object, got a string" },
    { "42", -EBADMSG, "expected a JSON object, got a number" },
    { "null", -EBADMSG, "expected a JSON object, got null" },
    { "   ", -EBADMSG, "not valid JSON" },
    { "{}", -EPROTO, "missing v" },
    { "{\"op\":\"pong\"}", -EPROTO, "missing v" },
    { "{\"v\":1,\"op\":\"pong\"}", -EPROTO,
      "v: unsupported protocol version 1 (this side speaks version 2)" },
    { "{\"v\":3,\"op\":\"pong\"}", -EPROTO, "unsupported protocol version 3" },
    { "{\"v\":0,\"op\":\"pong\"}", -EPROTO, "v: unsupported protocol version 0" },
    { "{\"v\":1.5,\"op\":\"pong\"}", -EPROTO, "version 1.5" },
    { "{\"v\":\"2\",\"op\":\"pong\"}", -EPROTO,
      "v: expected the integer 2, got a string" },
    { "{\"v\":null,\"op\":\"pong\"}", -EPROTO, "got null" },
    { "{\"v\":1,\"v\":1,\"op\":\"pong\"}", -EPROTO, "v: duplicate field" },
    /* v is checked before op. */
    { "{\"v\":1,\"op\":\"martian\"}", -EPROTO, "unsupported protocol version 1" },
    { "{\"v\":2}", -EBADMSG, "missing op" },
    { "{\"v\":2,\"op\":7}", -EBADMSG, "op: expected a string, got a number" },
    { "{\"v\":2,\"op\":[\"join\"]}", -EBADMSG, "got an array" },
    { "{\"v\":2,\"op\":\"martian\"}", -ENOTSUP, "unknown op \"martian\"" },
    { "{\"v\":2,\"op\":\"JOIN\"}", -ENOTSUP, "unknown op \"JOIN\"" },
    { "{\"v\":2,\"op\":\"\"}", -ENOTSUP, "unknown op \"\"" },
    { "{\"v\":2,\"op\":\"pong\",\"op\":\"leave\"}", -EBADMSG,
      "op: duplicate field" },
    { "{\"v\":2,\"op\":\"pong\"}x", -EBADMSG, "trailing bytes" },
    { "{\"v\":2,\"op\":\"pong\"}{}", -EBADMSG, "at byte 19" },
    { "{\"v\":2,\"op\":\"pong\"} \n ]", -EBADMSG, "trailing bytes" },
    { "{\"v\":2,\"op\":\"kv_get\",\"key\":\"k\\u0000x\"}", -EBADMSG,
      "\\u0000" },
    { "{\"v\":2,\"op\":\"kv_get\",\"key\":\"k\",\"x\\u0000\":1}", -EBADMSG,
      "\\u0000" },
    { "{\"v\":2,\"op\":\"kv_get\",\"key\":\"k\\ud800\"}", -EBADMSG,
      "not valid JSON" },
    { "{\"v\":2,\"op\":\"join\",\"id\":\"j\",\"id\":\"k\",\"nproc\":1,"
      "\"master_port\":1}", -EINVAL, "join.id: duplicate field" },
  };
  size_t i;

  for (i = 0; i < sizeof t / sizeof t[0]; i++)
    ck_assert_refused(decode(t[i].body), t[i].rc, t[i].needle);
}
END_TEST

START_TEST(malformed_nul_and_sizes)
{
  static const char nul[] = "{\"v\":2,\"op\":\"kv_get\",\"key\":\"a\0b\"}";
  static const char tail[] = "{\"v\":2,\"op\":\"pong\"}\0";
  char *big;

  ck_assert_refused(decode_n(nul, sizeof nul - 1), -EBADMSG,
                    "NUL byte at offset 29");
  ck_assert_refused(decode_n(tail, sizeof tail - 1), -EBADMSG, "NUL byte");
  ck_assert_refused(decode_n("{}", 0), -EBADMSG, "empty body");
  big = malloc(RDZV_PROTO_MAX_FRAME + 1);
  ck_assert_ptr_nonnull(big);
  memset(big, ' ', RDZV_PROTO_MAX_FRAME + 1);
  ck_assert_refused(decode_n(big, RDZV_PROTO_MAX_FRAME + 1), -EMSGSIZE,
                    "exceeds");
  /* Exactly the maximum, padded with whitespace, is fine. */
  memcpy(big, "{\"v\":2,\"op\":\"pong\"}", 19);
  ck_assert_ok(decode_n(big, RDZV_PROTO_MAX_FRAME));
  ck_assert_int_eq(M.op, RDZV_PROTO_PONG);
  free(big);
  /* An escaped backslash then "u0000" is text, not a NUL. */
  ck_assert_ok(decode("{\"v\":2,\"op\":\"kv_get\",\"key\":\"a\\\\u0000\"}"));
  ck_assert_str_eq(M.u.kv.key, "a\\u0000");
  ck_assert_ok(decode("{\"v\":2,\"op\":\"kv_get\",\"key\":\"\\u0001\"}"));
  ck_assert_str_eq(M.u.kv.key, "\x01");
}
END_TEST

START_TEST(error_text_is_safe)
{
  char small[8];
  int rc;

  /* Control bytes and quotes from the peer never reach the reason. */
  ck_assert_refused(decode("{\"v\":2,\"op\":\"a\\n\\\"b\xff\"}"), -ENOTSUP,
                    "unknown op \"a??b?\"");
  ck_assert_refused(decode("{\"v\":2,\"op\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                           "aaaaaaaaaaaaaaaaaaaa\"}"), -ENOTSUP,
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\"");
  /* A short buffer truncates; no buffer at all is allowed. */
  rc = rdzv_proto_decode("[]", 2, &M, small, sizeof small);
  ck_assert_int_eq(rc, -EBADMSG);
  ck_assert_uint_eq(strlen(small), sizeof small - 1);
  ck_assert_int_eq(rdzv_proto_decode("[]", 2, &M, NULL, 0), -EBADMSG);
  ck_assert_int_eq(
      rdzv_proto_decode("{\"v\":2,\"op\":\"pong\"}", 19, &M, NULL, 0), 0);
}
END_TEST

/* Every numeric field: its type, integrality and both ends of its range.
 * The template's '@' is the field's value; the rest is valid. */
struct num_case {
  const char *tpl, *path;
  const char *lo, *hi;          /* accepted */
  const char *below, *above;    /* refused */
  double lo_v, hi_v;
  bool integral;
  size_t off;
  char type;                    /* 'i' int, 'l' int64, 'd' double */
};

#define JOIN_T "{\"v\":2,\"op\":\"join\",\"id\":\"j\",\"nproc\":1," \
               "\"master_port\":1,"
#define WAIT_T "{\"v\":2,\"op\":\"waiting\","
#define W_RP "\"round\":1,\"present\":1,"
#define W_MM "\"min_nodes\":1,\"max_nodes\":1,"
#define W_DL "\"deadline\":1,\"last_call\":1,"
#define ROUND_T "{\"v\":2,\"op\":\"round\","
#define R_RC "\"round\":0,\"restart_count\":0,"
#define R_G "\"group_rank\":0,\"group_world_size\":1,\"rank_offset\":0," \
            "\"world_size\":1,"
#define R_M "\"master_addr\":\"m\",\"master_port\":1,"
#define OFF(m) offsetof(struct rdzv_proto_msg, u.m)
#define IMAX "2147483647"
#define RMAX "1073741824"

static const struct num_case num_cases[] = {
    {"{\"v\":2,\"op\":\"join\",\"id\":\"j\",\"master_port\":1,\"nproc\":@}",
     "join.nproc", "1", "65536", "0", "65537", 1, 65536, true, OFF(join.nproc),
     'i'},
    {"{\"v\":2,\"op\":\"join\",\"id\":\"j\",\"nproc\":1,\"master_port\":@}",
     "join.master_port", "1", "65535", "0", "65536", 1, 65535, true,
     OFF(join.master_port), 'i'},
    {JOIN_T "\"pid\":@}", "join.pid", "0", "9007199254740991", "-1",
     "9007199254740992", 0, 9007199254740991.0, true, OFF(join.pid), 'l'},
    {JOIN_T "\"conf\":{\"max_nodes\":100000,\"min_nodes\":@}}",
     "join.conf.min_nodes", "1", "100000", "0", "100001", 1, 100000, true,
     OFF(join.conf.min_nodes), 'i'},
    {JOIN_T "\"conf\":{\"max_nodes\":@}}", "join.conf.max_nodes", "1", "100000",
     "0", "100001", 1, 100000, true, OFF(join.conf.max_nodes), 'i'},
    {JOIN_T "\"conf\":{\"max_restarts\":@}}", "join.conf.max_restarts", "0",
     "1000000", "-1", "1000001", 0, 1e6, true, OFF(join.conf.max_restarts),
     'i'},
    {JOIN_T "\"conf\":{\"join_timeout\":@}}", "join.conf.join_timeout", "1",
     "1e7", "0.999", "10000000.000001", 1, 1e7, false,
     OFF(join.conf.join_timeout), 'd'},
    {JOIN_T "\"conf\":{\"last_call_timeout\":@}}",
     "join.conf.last_call_timeout", "0", "1e7", "-1e-9", "1.0000001e7", 0, 1e7,
     false, OFF(join.conf.last_call_timeout), 'd'},
    {JOIN_T "\"conf\":{\"close_timeout\":@}}", "join.conf.close_timeout", "0",
     "1e7", "-0.5", "2e7", 0, 1e7, false, OFF(join.conf.close_timeout), 'd'},
    {JOIN_T "\"conf\":{\"keepalive_misses\":10,\"keepalive_interval\":@}}",
     "join.conf.keepalive_interval", "0.05", "3600", "0.0499", "3600.5", 0.05,
     3600, false, OFF(join.conf.keepalive_interval), 'd'},
    {JOIN_T "\"conf\":{\"keepalive_misses\":@}}", "join.conf.keepalive_misses",
     "1", "1000", "0", "1001", 1, 1000, true, OFF(join.conf.keepalive_misses),
     'i'},
    {"{\"v\":2,\"op\":\"barrier\",\"name\":\"b\",\"round\":@}", "barrier.round",
     "0", RMAX, "-1", "1073741825", 0, RDZV_PROTO_MAX_ROUND, true,
     OFF(barrier.round), 'i'},
    {"{\"v\":2,\"op\":\"kv_get\",\"key\":\"k\",\"wait\":@}", "kv_get.wait", "0",
     "1e7", "-1", "1e8", 0, 1e7, false, OFF(kv.wait), 'd'},
    {"{\"v\":2,\"op\":\"kv_add\",\"key\":\"k\",\"delta\":@}", "kv_add.delta",
     "-9007199254740991", "9007199254740991", "-9007199254740992",
     "9007199254740992", -9007199254740991.0, 9007199254740991.0, true,
     OFF(kv.delta), 'l'},
    {WAIT_T "\"present\":1," W_MM W_DL "\"round\":@}", "waiting.round", "0",
     RMAX, "-1", "1073741825", 0, RDZV_PROTO_MAX_ROUND, true,
     OFF(waiting.round), 'i'},
    {WAIT_T "\"round\":1," W_MM W_DL "\"present\":@}", "waiting.present", "0",
     IMAX, "-1", "2147483648", 0, INT_MAX, true, OFF(waiting.present), 'i'},
    {WAIT_T W_RP W_DL "\"max_nodes\":100000,\"min_nodes\":@}",
     "waiting.min_nodes", "1", "100000", "0", "100001", 1, 100000, true,
     OFF(waiting.min_nodes), 'i'},
    {WAIT_T W_RP W_DL "\"min_nodes\":1,\"max_nodes\":@}", "waiting.max_nodes",
     "1", "100000", "0", "100001", 1, 100000, true, OFF(waiting.max_nodes),
     'i'},
    {WAIT_T W_RP W_MM "\"last_call\":1,\"deadline\":@}", "waiting.deadline",
     "0", "1e7", "-0.001", "10000001", 0, 1e7, false, OFF(waiting.deadline),
     'd'},
    {WAIT_T W_RP W_MM "\"deadline\":1,\"last_call\":@}", "waiting.last_call",
     "-1", "1e7", "-1.5", "10000001", -1, 1e7, false, OFF(waiting.last_call),
     'd'},
    {ROUND_T "\"restart_count\":0," R_G R_M "\"round\":@}", "round.round", "0",
     RMAX, "-1", "1073741825", 0, RDZV_PROTO_MAX_ROUND, true, OFF(round.round),
     'i'},
    {ROUND_T "\"round\":0," R_G R_M "\"restart_count\":@}",
     "round.restart_count", "0", "1000000", "-1", "1000001", 0, 1e6, true,
     OFF(round.restart_count), 'i'},
    {ROUND_T R_RC R_M "\"group_world_size\":100000,\"rank_offset\":0,"
                      "\"world_size\":100000,\"group_rank\":@}",
     "round.group_rank", "0", "99999", "-1", "100000", 0, 99999, true,
     OFF(round.group_rank), 'i'},
    {ROUND_T R_RC R_M "\"group_rank\":0,\"rank_offset\":0,"
                      "\"world_size\":" IMAX ",\"group_world_size\":@}",
     "round.group_world_size", "1", "100000", "0", "100001", 1, 100000, true,
     OFF(round.group_world_size), 'i'},
    {ROUND_T R_RC R_M "\"group_rank\":0,\"group_world_size\":1,"
                      "\"world_size\":" IMAX ",\"rank_offset\":@}",
     "round.rank_offset", "0", "2147483646", "-1", IMAX, 0, INT_MAX - 1, true,
     OFF(round.rank_offset), 'i'},
    {ROUND_T R_RC R_M "\"group_rank\":0,\"group_world_size\":1,"
                      "\"rank_offset\":0,\"world_size\":@}",
     "round.world_size", "1", IMAX, "0", "2147483648", 1, INT_MAX, true,
     OFF(round.world_size), 'i'},
    {"{\"v\":2,\"op\":\"round\",\"round\":0,\"restart_count\":0,"
     "\"group_rank\":0,\"group_world_size\":1,\"rank_offset\":0,"
     "\"world_size\":1,\"master_addr\":\"m\",\"master_port\":@}",
     "round.master_port", "1", "65535", "0", "65536", 1, 65535, true,
     OFF(round.master_port), 'i'},
};

static double field_value(const struct num_case *c)
{
  const char *at = (const char *)&M + c->off;

  if (c->type == 'i')
    return *(const int *)at;
  if (c->type == 'l')
    return (double)*(const int64_t *)at;
  return *(const double *)at;
}

START_TEST(numeric_fields)
{
  const struct num_case *c = &num_cases[_i];
  static const char *const bad_type[] = {
    "\"5\"", "true", "null", "[1]", "{}",
  };
  size_t i;

  ck_assert_ok(decode_fill(c->tpl, c->lo));
  ck_assert_double_eq(field_value(c), c->lo_v);
  ck_assert_ok(decode_fill(c->tpl, c->hi));
  ck_assert_double_eq(field_value(c), c->hi_v);
  ck_assert_refused(decode_fill(c->tpl, c->below), -EINVAL, c->path);
  ck_assert_refused(decode_fill(c->tpl, c->above), -EINVAL, c->path);
  ck_assert_refused(decode_fill(c->tpl, "1e300"), -EINVAL, "got 1e+300");
  ck_assert_refused(decode_fill(c->tpl, "1e400"), -EINVAL, "got inf");
  ck_assert_refused(decode_fill(c->tpl, "-1e400"), -EINVAL, c->path);
  for (i = 0; i < sizeof bad_type / sizeof bad_type[0]; i++)
    ck_assert_refused(decode_fill(c->tpl, bad_type[i]), -EINVAL, c->path);
  ck_assert_refused(decode_fill(c->tpl, "\"5\""), -EINVAL, "got a string");
  if (c->integral) {
    ck_assert_refused(decode_fill(c->tpl, "1.5"), -EINVAL, "got 1.5");
    ck_assert_refused(decode_fill(c->tpl, "1.5"), -EINVAL, "an integer");
    /* Integral values written as decimals are integers. */
    ck_assert_ok(decode_fill(c->tpl, "1.0e0"));
  }
}
END_TEST

START_TEST(numeric_messages)
{
  ck_assert_int_eq(decode("{\"v\":2,\"op\":\"join\",\"id\":\"j\","
                          "\"master_port\":1,\"nproc\":0}"), -EINVAL);
  ck_assert_str_eq(err, "join.nproc: expected an integer 1..65536, got 0");
  ck_assert_int_eq(decode("{\"v\":2,\"op\":\"join\",\"id\":\"j\","
                          "\"master_port\":1,\"nproc\":\"4\"}"), -EINVAL);
  ck_assert_str_eq(err, "join.nproc: expected an integer, got a string");
  ck_assert_int_eq(decode(JOIN_T "\"conf\":{\"join_timeout\":0}}"), -EINVAL);
  ck_assert_str_eq(err, "join.conf.join_timeout: expected a number "
                   "1..10000000, got 0");
  /* The keepalive window's floor: a first joiner cannot choose one in
   * which honest members are expelled before they speak. */
  ck_assert_int_eq(decode(JOIN_T "\"conf\":{\"keepalive_interval\":0.05,"
                          "\"keepalive_misses\":1}}"), -EINVAL);
  ck_assert_str_eq(err, "join.conf.keepalive_interval x keepalive_misses: "
                   "0.05 s, expected at least 0.5 s");
  ck_assert_int_eq(decode("{\"v\":2,\"op\":\"kv_get\",\"key\":\"k\","
                          "\"wait\":-2}"), -EINVAL);
  ck_assert_str_eq(err, "kv_get.wait: expected a number 0..10000000, got -2");
}
END_TEST

START_TEST(relations)
{
  static const struct { const char *body, *needle; } t[] = {
    { JOIN_T "\"conf\":{\"min_nodes\":3,\"max_nodes\":2}}",
      "join.conf.min_nodes: 3 > max_nodes 2" },
    { WAIT_T W_RP W_DL "\"min_nodes\":3,\"max_nodes\":2}",
      "waiting.min_nodes: 3 > max_nodes 2" },
    { WAIT_T W_RP W_MM "\"deadline\":1,\"last_call\":-0.5}",
      "waiting.last_call: expected -1 or a number >= 0, got -0.5" },
    { ROUND_T R_RC R_M "\"group_rank\":2,\"group_world_size\":2,"
      "\"rank_offset\":0,\"world_size\":4}",
      "round.group_rank: 2 >= group_world_size 2" },
    { ROUND_T R_RC R_M "\"group_rank\":0,\"group_world_size\":3,"
      "\"rank_offset\":0,\"world_size\":2}",
      "round.group_world_size: 3 > world_size 2" },
    { ROUND_T R_RC R_M "\"group_rank\":1,\"group_world_size\":2,"
      "\"rank_offset\":4,\"world_size\":4}",
      "round.rank_offset: 4 >= world_size 4" },
  };
  size_t i;

  for (i = 0; i < sizeof t / sizeof t[0]; i++)
    ck_assert_refused(decode(t[i].body), -EINVAL, t[i].needle);
  /* The edges of each relation are fine. */
  ck_assert_ok(decode(ROUND_T R_RC R_M "\"group_rank\":1,"
                      "\"group_world_size\":2,\"rank_offset\":3,"
                      "\"world_size\":4}"));
  ck_assert_int_eq(M.u.round.group_rank, 1);
  ck_assert_int_eq(M.u.round.rank_offset, 3);
  ck_assert_ok(decode(WAIT_T W_RP W_DL "\"min_nodes\":2,\"max_nodes\":2}"));
  ck_assert_int_eq(M.u.waiting.min_nodes, 2);
}
END_TEST

/* Every string field: exactly its maximum accepted, one more refused. */
struct str_case {
  const char *tpl, *path;
  size_t min, max;
  size_t off;
};

static const struct str_case str_cases[] = {
    {"{\"v\":2,\"op\":\"join\",\"nproc\":1,\"master_port\":1,\"id\":@}",
     "join.id", 1, RDZV_PROTO_MAX_ID, OFF(join.id)},
    {JOIN_T "\"addr\":@}", "join.addr", 0, RDZV_PROTO_MAX_ADDR, OFF(join.addr)},
    {JOIN_T "\"host\":@}", "join.host", 0, RDZV_PROTO_MAX_ADDR, OFF(join.host)},
    {"{\"v\":2,\"op\":\"failure\",\"message\":@}", "failure.message", 0,
     RDZV_PROTO_MAX_TEXT, OFF(failure.message)},
    {"{\"v\":2,\"op\":\"barrier\",\"round\":1,\"name\":@}", "barrier.name", 1,
     RDZV_PROTO_MAX_ID, OFF(barrier.name)},
    {"{\"v\":2,\"op\":\"kv_get\",\"key\":@}", "kv_get.key", 1,
     RDZV_PROTO_MAX_KEY, OFF(kv.key)},
    {"{\"v\":2,\"op\":\"kv_set\",\"value\":\"\",\"key\":@}", "kv_set.key", 1,
     RDZV_PROTO_MAX_KEY, OFF(kv.key)},
    {"{\"v\":2,\"op\":\"kv_add\",\"delta\":1,\"key\":@}", "kv_add.key", 1,
     RDZV_PROTO_MAX_KEY, OFF(kv.key)},
    {"{\"v\":2,\"op\":\"kv_value\",\"found\":false,\"key\":@}", "kv_value.key",
     1, RDZV_PROTO_MAX_KEY, OFF(kv.key)},
    {ROUND_T R_RC R_G "\"master_port\":1,\"master_addr\":@}",
     "round.master_addr", 1, RDZV_PROTO_MAX_ADDR, OFF(round.master_addr)},
    {"{\"v\":2,\"op\":\"restart\",\"message\":@}", "restart.message", 0,
     RDZV_PROTO_MAX_TEXT, OFF(text.message)},
    {"{\"v\":2,\"op\":\"closed\",\"message\":@}", "closed.message", 0,
     RDZV_PROTO_MAX_TEXT, OFF(text.message)},
    {"{\"v\":2,\"op\":\"error\",\"code\":\"limit\",\"message\":@}",
     "error.message", 0, RDZV_PROTO_MAX_TEXT, OFF(text.message)},
};

START_TEST(string_fields)
{
  const struct str_case *c = &str_cases[_i];
  const char *got;
  char *q, want[128];

  q = quoted(c->max);
  ck_assert_ok(decode_fill(c->tpl, q));
  free(q);
  got = (const char *)&M + c->off;
  ck_assert_uint_eq(strlen(got), c->max);
  ck_assert(got[0] == 'a' && got[c->max - 1] == 'a');
  q = quoted(c->max + 1);
  snprintf(want, sizeof want, "%s: expected a string of %zu..%zu bytes, "
           "got %zu", c->path, c->min, c->max, c->max + 1);
  ck_assert_refused(decode_fill(c->tpl, q), -EINVAL, want);
  free(q);
  ck_assert_refused(decode_fill(c->tpl, "7"), -EINVAL, c->path);
  ck_assert_refused(decode_fill(c->tpl, "7"), -EINVAL, "got a number");
  ck_assert_refused(decode_fill(c->tpl, "null"), -EINVAL, "got null");
  if (c->min) {
    ck_assert_refused(decode_fill(c->tpl, "\"\""), -EINVAL, "got 0");
  } else {
    ck_assert_ok(decode_fill(c->tpl, "\"\""));
    ck_assert_str_eq((const char *)&M + c->off, "");
  }
  /* Escapes count by the bytes they decode to: 2 x 2-byte "é" = 4. */
  ck_assert_ok(decode_fill(c->tpl, "\"\\u00e9\\u00e9\""));
  ck_assert_str_eq((const char *)&M + c->off, "\xc3\xa9\xc3\xa9");
}
END_TEST

START_TEST(kv_value_limits)
{
  static const char *const tpl[] = {
    "{\"v\":2,\"op\":\"kv_set\",\"key\":\"k\",\"value\":@}",
    "{\"v\":2,\"op\":\"kv_value\",\"key\":\"k\",\"found\":true,\"value\":@}",
  };
  static const char *const path[] = { "kv_set.value", "kv_value.value" };
  struct rdzv_proto_msg m;
  char *q;
  size_t i;

  for (i = 0; i < 2; i++) {
    q = quoted(RDZV_PROTO_MAX_VALUE);
    ck_assert_ok(decode_fill(tpl[i], q));
    free(q);
    ck_assert_uint_eq(M.u.kv.value_len, RDZV_PROTO_MAX_VALUE);
    ck_assert_uint_eq(strlen(M.u.kv.value), RDZV_PROTO_MAX_VALUE);
    rdzv_proto_msg_free(&M);
    q = quoted(RDZV_PROTO_MAX_VALUE + 1);
    ck_assert_refused(decode_fill(tpl[i], q), -EINVAL, path[i]);
    ck_assert_str_eq(err, i ? "kv_value.value: expected a string of "
                     "0..65536 bytes, got 65537" : "kv_set.value: expected "
                     "a string of 0..65536 bytes, got 65537");
    free(q);
    ck_assert_refused(decode_fill(tpl[i], "12"), -EINVAL, "got a number");
  }
  /* Encode has the same bound. */
  msg_init(&m, RDZV_PROTO_KV_SET);
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "k");
  m.u.kv.value = malloc(RDZV_PROTO_MAX_VALUE + 2);
  ck_assert_ptr_nonnull(m.u.kv.value);
  memset(m.u.kv.value, 'z', RDZV_PROTO_MAX_VALUE + 1);
  m.u.kv.value[RDZV_PROTO_MAX_VALUE + 1] = '\0';
  m.u.kv.value_len = RDZV_PROTO_MAX_VALUE;
  free(round_trip(&m));
  ck_assert_uint_eq(M.u.kv.value_len, RDZV_PROTO_MAX_VALUE);
  rdzv_proto_msg_free(&M);
  m.u.kv.value_len = RDZV_PROTO_MAX_VALUE + 1;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  rdzv_proto_msg_free(&m);
}
END_TEST

START_TEST(bools_and_enums)
{
  static const char *const reasons[] = { "first", "failure", "membership" };
  char body[160];
  int i;

  ck_assert_refused(decode("{\"v\":2,\"op\":\"failure\",\"final\":1}"),
                    -EINVAL, "failure.final: expected true or false, got a "
                    "number");
  ck_assert_refused(decode("{\"v\":2,\"op\":\"closed\",\"success\":"
                           "\"true\"}"), -EINVAL, "closed.success");
  ck_assert_refused(decode("{\"v\":2,\"op\":\"kv_value\",\"key\":\"k\","
                           "\"found\":null}"), -EINVAL, "kv_value.found");
  for (i = 0; i < 3; i++) {
    snprintf(body, sizeof body, JOIN_T "\"reason\":\"%s\"}", reasons[i]);
    ck_assert_ok(decode(body));
    ck_assert_int_eq(M.u.join.reason, i);
  }
  ck_assert_refused(decode(JOIN_T "\"reason\":\"boredom\"}"), -EINVAL,
                    "join.reason: unknown value \"boredom\"");
  ck_assert_refused(decode(JOIN_T "\"reason\":0}"), -EINVAL,
                    "join.reason: expected a string, got a number");
  for (i = RDZV_PROTO_ERR_BAD_REQUEST; i <= RDZV_PROTO_ERR_AUTH; i++) {
    snprintf(body, sizeof body, "{\"v\":2,\"op\":\"error\",\"code\":\"%s\"}",
             rdzv_proto_error_name((enum rdzv_proto_error_code)i));
    ck_assert_ok(decode(body));
    ck_assert_int_eq(M.u.text.code, i);
  }
  ck_assert_refused(decode("{\"v\":2,\"op\":\"error\",\"code\":\"\"}"),
                    -EINVAL, "error.code: unknown value \"\"");
  ck_assert_refused(decode("{\"v\":2,\"op\":\"error\",\"code\":1}"),
                    -EINVAL, "error.code: expected a string");
}
END_TEST

START_TEST(status_reply_decode)
{
  ck_assert_ok(decode("{\"v\":2,\"op\":\"status_reply\",\"status\":{\"jobs\":"
                      "{\"a\":{\"round\":1e0,\"s\":\"\\u00e9\\n\"}},"
                      "\"x\":[]}}"));
  ck_assert_str_eq(M.u.status_json, "{\"jobs\":{\"a\":{\"round\":1,"
                   "\"s\":\"\xc3\xa9\\n\"}},\"x\":[]}");
  rdzv_proto_msg_free(&M);
  ck_assert_ok(decode("{\"v\":2,\"op\":\"status_reply\",\"status\":{}}"));
  ck_assert_str_eq(M.u.status_json, "{}");
  rdzv_proto_msg_free(&M);
  ck_assert_refused(decode("{\"v\":2,\"op\":\"status_reply\","
                           "\"status\":\"{}\"}"), -EINVAL,
                    "status_reply.status: expected an object, got a string");
  ck_assert_refused(decode("{\"v\":2,\"op\":\"status_reply\","
                           "\"status\":[]}"), -EINVAL, "got an array");
}
END_TEST

/* ---- encode-side validation ---- */

START_TEST(encode_refuses_invalid)
{
  struct rdzv_proto_msg m;
  char js[64];

  msg_init(&m, RDZV_PROTO_OP_INVALID);
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  msg_init(&m, RDZV_PROTO_OP_COUNT);
  ck_assert_int_eq(encode_rc(&m), -EINVAL);

  msg_init(&m, RDZV_PROTO_JOIN);
  snprintf(m.u.join.id, sizeof m.u.join.id, "j");
  m.u.join.nproc = 1;
  m.u.join.master_port = 1;
  rdzv_proto_conf_default(&m.u.join.conf);
  ck_assert_int_eq(encode_rc(&m), 0);
  m.u.join.id[0] = '\0';
  ck_assert_int_eq(encode_rc(&m), -EINVAL);             /* empty id */
  memset(m.u.join.id, 'x', sizeof m.u.join.id);         /* unterminated */
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  snprintf(m.u.join.id, sizeof m.u.join.id, "j");
  m.u.join.nproc = 0;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  m.u.join.nproc = 1;
  m.u.join.pid = MAX_SAFE + 1;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  m.u.join.pid = -1;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  m.u.join.pid = 0;
  m.u.join.reason = (enum rdzv_proto_join_reason)3;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  m.u.join.reason = RDZV_PROTO_REASON_FIRST;
  m.u.join.conf.join_timeout = NAN;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  m.u.join.conf.join_timeout = INFINITY;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  m.u.join.conf.join_timeout = 0;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  m.u.join.conf.join_timeout = 1;
  m.u.join.conf.min_nodes = 2;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);             /* min > max */
  m.u.join.conf.max_nodes = 2;
  ck_assert_int_eq(encode_rc(&m), 0);

  msg_init(&m, RDZV_PROTO_ERROR);
  ck_assert_int_eq(encode_rc(&m), -EINVAL);             /* code 0 */

  msg_init(&m, RDZV_PROTO_KV_SET);
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "k");
  m.u.kv.value = (char *)"a\0b";
  m.u.kv.value_len = 3;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);             /* NUL inside */
  m.u.kv.value = NULL;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);             /* NULL, len 3 */
  m.u.kv.value_len = 0;
  ck_assert_int_eq(encode_rc(&m), 0);

  msg_init(&m, RDZV_PROTO_KV_GET);
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "k");
  m.u.kv.wait = -1;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);

  msg_init(&m, RDZV_PROTO_ROUND);
  snprintf(m.u.round.master_addr, sizeof m.u.round.master_addr, "h");
  m.u.round.group_world_size = 2;
  m.u.round.world_size = 2;
  m.u.round.master_port = 1;
  m.u.round.group_rank = 2;
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  m.u.round.group_rank = 1;
  ck_assert_int_eq(encode_rc(&m), 0);

  msg_init(&m, RDZV_PROTO_STATUS_REPLY);
  ck_assert_int_eq(encode_rc(&m), -EINVAL);             /* NULL */
  m.u.status_json = js;
  snprintf(js, sizeof js, "[1]");
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  snprintf(js, sizeof js, "{\"a\":");
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  snprintf(js, sizeof js, "{} {}");
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  snprintf(js, sizeof js, "{\"a\":\"\\u0000\"}");
  ck_assert_int_eq(encode_rc(&m), -EINVAL);
  snprintf(js, sizeof js, "{\"a\":1}\n");
  ck_assert_int_eq(encode_rc(&m), 0);
}
END_TEST

START_TEST(encode_too_large)
{
  struct rdzv_proto_msg m;
  size_t over, n;
  char *frame, *js;

  /* The body around the status object: {"a":""} is 8 bytes of it. */
  msg_init(&m, RDZV_PROTO_STATUS_REPLY);
  m.u.status_json = (char *)"{\"a\":\"\"}";
  ck_assert_int_eq(rdzv_proto_encode(&m, &frame, &over), 0);
  free(frame);
  over -= RDZV_PROTO_FRAME_HEADER;
  ck_assert_uint_eq(over, strlen("{\"v\":2,\"op\":\"status_reply\","
                                 "\"status\":{\"a\":\"\"}}"));
  /* A string filling the body exactly fits; one byte more does not. */
  n = RDZV_PROTO_MAX_FRAME - over;
  js = malloc(n + 16);
  ck_assert_ptr_nonnull(js);
  memcpy(js, "{\"a\":\"", 6);
  memset(js + 6, 'x', n + 1);
  memcpy(js + 6 + n + 1, "\"}", 3);
  m.u.status_json = js;
  ck_assert_int_eq(encode_rc(&m), -EMSGSIZE);
  memcpy(js + 6 + n, "\"}", 3);
  ck_assert_int_eq(rdzv_proto_encode(&m, &frame, &over), 0);
  ck_assert_uint_eq(over, RDZV_PROTO_FRAME_HEADER + RDZV_PROTO_MAX_FRAME);
  ck_assert_ok(decode_n(frame + RDZV_PROTO_FRAME_HEADER, RDZV_PROTO_MAX_FRAME));
  ck_assert_uint_eq(strlen(M.u.status_json), n + 8);
  rdzv_proto_msg_free(&M);
  free(frame);
  free(js);
}
END_TEST

/* ---- the wire bytes (Note [direct encoder]) ---- */

/* Messages whose bodies were printed by the encoder that built a cJSON
 * tree and printed it (cJSON_PrintUnformatted), before the direct one:
 * escapes of every control byte, '"' and '\\', raw UTF-8 and DEL, nested
 * objects, omitted fields, the number texts (whole doubles, 15..17 digits,
 * exponents, -0), a status object re-printed. */
static const char *const golden_bodies[] = {
    /* 0 */
    "{\"v\":2,\"op\":\"join\",\"id\":\"job \\\"q\\\" \\\\ back\",\"addr"
    "\":\"\",\"host\":\"h\\u0001\\t\\n\\r\\b\\f\\u001f \303\251\177/\","
    "\"pid\":123456789012,\"nproc\":8,\"master_port\":29500,\"reason\":"
    "\"failure\",\"conf\":{\"min_nodes\":2,\"max_nodes\":100000,\"max_r"
    "estarts\":3,\"join_timeout\":10000000,\"last_call_timeout\":0.5,\""
    "close_timeout\":30,\"keepalive_interval\":0.1,\"keepalive_misses\""
    ":5}}",
    /* 1 */
    "{\"v\":2,\"op\":\"waiting\",\"round\":7,\"present\":3,\"min_nodes"
    "\":2,\"max_nodes\":4,\"deadline\":599.123456789,\"last_call\":-1,"
    "\"restart_count\":2,\"token\":\"01264b7095badf04294e7398bde2072c51"
    "769bc0e50a2f54799ec3e80d32577c\"}",
    /* 2 */
    "{\"v\":2,\"op\":\"waiting\",\"round\":7,\"present\":3,\"min_nodes"
    "\":2,\"max_nodes\":4,\"deadline\":0.1,\"last_call\":3.000000000000"
    "0004,\"token\":\"01264b7095badf04294e7398bde2072c51769bc0e50a2f547"
    "99ec3e80d32577c\"}",
    /* 3 */
    "{\"v\":2,\"op\":\"waiting\",\"round\":7,\"present\":3,\"min_nodes"
    "\":2,\"max_nodes\":4,\"deadline\":1e-07,\"last_call\":1234567.125,"
    "\"token\":\"01264b7095badf04294e7398bde2072c51769bc0e50a2f54799ec3"
    "e80d32577c\"}",
    /* 4 */
    "{\"v\":2,\"op\":\"waiting\",\"round\":7,\"present\":3,\"min_nodes"
    "\":2,\"max_nodes\":4,\"deadline\":-0,\"last_call\":9999999.9999999"
    "98,\"token\":\"01264b7095badf04294e7398bde2072c51769bc0e50a2f54799"
    "ec3e80d32577c\"}",
    /* 5 */
    "{\"v\":2,\"op\":\"round\",\"round\":1073741824,\"restart_count\":1"
    "000000,\"group_rank\":99999,\"group_world_size\":100000,\"rank_off"
    "set\":2147483000,\"world_size\":2147483647,\"master_addr\":\"::fff"
    "f:10.0.0.1\",\"master_port\":65535,\"embedded\":true,\"host_rank\""
    ":5,\"token\":\"fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0efeeedecebeae9e8e7e"
    "6e5e4e3e2e1e0\",\"job_token\":\"000102030405060708090a0b0c0d0e0f10"
    "1112131415161718191a1b1c1d1e1f\"}",
    /* 6 */
    "{\"v\":2,\"op\":\"error\",\"code\":\"config_mismatch\",\"message\""
    ":\"\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u00"
    "0b\\f\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\"
    "u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u00"
    "1f\\\"\\\\\177\377 end\"}",
    /* 7 */
    "{\"v\":2,\"op\":\"kv_value\",\"key\":\"pg/g1/addr\",\"found\":true"
    ",\"value\":\"10.1.2.3:4567\\n\\\"x\\\"\"}",
    /* 8 */
    "{\"v\":2,\"op\":\"pong\"}",
    /* 9 */
    "{\"v\":2,\"op\":\"restart\",\"message\":\"node a workers failed\","
    "\"cause\":{\"exited_at\":1764160000.123456,\"rank\":3,\"local_rank"
    "\":1,\"exitcode\":-9,\"pid\":4242,\"host\":\"nodeA\"},\"lost_host"
    "\":\"nodeB\",\"lost_why\":\"no keepalive for 5.2 s\"}",
    /* 10 */
    "{\"v\":2,\"op\":\"status_reply\",\"status\":{\"jobs\":[{\"id\":\"a"
    "\\u0001\",\"n\":2.5,\"ok\":true,\"x\":null}],\"big\":1234567890123"
    "4568}}",
    /* 11 */
    "{\"v\":2,\"op\":\"resume\",\"id\":\"j\",\"addr\":\"10.0.0.2\",\"ho"
    "st\":\"\",\"pid\":0,\"nproc\":1,\"master_port\":1,\"reason\":\"fir"
    "st\",\"conf\":{\"min_nodes\":1,\"max_nodes\":1,\"max_restarts\":0,"
    "\"join_timeout\":600,\"last_call_timeout\":30,\"close_timeout\":30"
    ",\"keepalive_interval\":1,\"keepalive_misses\":5},\"phase\":\"runn"
    "ing\",\"round\":0,\"restart_count\":0,\"group_rank\":0,\"group_wor"
    "ld_size\":1,\"rank_offset\":0,\"world_size\":1,\"master_addr\":\"1"
    "0.0.0.2\",\"job_master_port\":1,\"token\":\"0100000000000000000000"
    "000000000000000000000000000000000000000000\"}",
    /* 12 */
    "{\"v\":2,\"op\":\"kv_get\",\"key\":\"k\",\"wait\":2.75}",
    /* 13 */
    "{\"v\":2,\"op\":\"kv_add\",\"key\":\"k\",\"delta\":-90071992547409"
    "91}",
};

static void golden_msg(int i, struct rdzv_proto_msg *m)
{
  int k;

  memset(m, 0, sizeof *m);
  switch (i) {
  case 0:
    m->op = RDZV_PROTO_JOIN;
    snprintf(m->u.join.id, sizeof m->u.join.id, "job \"q\" \\ back");
    snprintf(m->u.join.host, sizeof m->u.join.host,
             "h\x01\t\n\r\b\f\x1f \xc3\xa9\x7f/");
    m->u.join.pid = 123456789012;
    m->u.join.nproc = 8;
    m->u.join.master_port = 29500;
    m->u.join.reason = RDZV_PROTO_REASON_FAILURE;
    rdzv_proto_conf_default(&m->u.join.conf);
    m->u.join.conf.min_nodes = 2;
    m->u.join.conf.max_nodes = 100000;
    m->u.join.conf.last_call_timeout = 0.5;
    m->u.join.conf.keepalive_interval = 0.1;
    m->u.join.conf.join_timeout = 1e7;
    m->u.join.conf.max_restarts = 3;
    return;
  case 1:
  case 2:
  case 3:
  case 4:
    m->op = RDZV_PROTO_WAITING;
    m->u.waiting.round = 7;
    m->u.waiting.present = 3;
    m->u.waiting.min_nodes = 2;
    m->u.waiting.max_nodes = 4;
    m->u.waiting.deadline = i == 1 ? 599.123456789 : i == 2 ? 0.1
                            : i == 3 ? 1e-7 : -0.0;
    m->u.waiting.last_call = i == 1 ? -1 : i == 2 ? 3.0000000000000004
                             : i == 3 ? 1234567.125 : 9999999.999999998;
    m->u.waiting.restart_count = i == 1 ? 2 : 0;
    for (k = 0; k < RDZV_PROTO_TOKEN_BYTES; k++)
      m->u.waiting.token[k] = (unsigned char)(k * 37 + 1);
    return;
  case 5:
    m->op = RDZV_PROTO_ROUND;
    m->u.round.round = 1073741824;
    m->u.round.restart_count = 1000000;
    m->u.round.group_rank = 99999;
    m->u.round.group_world_size = 100000;
    m->u.round.rank_offset = 2147483000;
    m->u.round.world_size = 2147483647;
    snprintf(m->u.round.master_addr, sizeof m->u.round.master_addr,
             "::ffff:10.0.0.1");
    m->u.round.master_port = 65535;
    m->u.round.embedded = true;
    m->u.round.host_rank = 5;
    for (k = 0; k < RDZV_PROTO_TOKEN_BYTES; k++) {
      m->u.round.token[k] = (unsigned char)(255 - k);
      m->u.round.job_token[k] = (unsigned char)k;
    }
    return;
  case 6:
    m->op = RDZV_PROTO_ERROR;
    m->u.text.code = RDZV_PROTO_ERR_CONFIG_MISMATCH;
    for (k = 1; k < 32; k++)
      m->u.text.message[k - 1] = (char)k;
    strcat(m->u.text.message, "\"\\\x7f\xff end");
    return;
  case 7:
    m->op = RDZV_PROTO_KV_VALUE;
    snprintf(m->u.kv.key, sizeof m->u.kv.key, "pg/g1/addr");
    m->u.kv.value = (char *)"10.1.2.3:4567\n\"x\"";
    m->u.kv.value_len = strlen(m->u.kv.value);
    m->u.kv.found = true;
    return;
  case 8:
    m->op = RDZV_PROTO_PONG;
    return;
  case 9:
    m->op = RDZV_PROTO_RESTART;
    snprintf(m->u.text.message, sizeof m->u.text.message,
             "node a workers failed");
    m->u.text.cause.exited_at = 1764160000.123456;
    m->u.text.cause.rank = 3;
    m->u.text.cause.local_rank = 1;
    m->u.text.cause.exitcode = -9;
    m->u.text.cause.pid = 4242;
    snprintf(m->u.text.cause.host, sizeof m->u.text.cause.host, "nodeA");
    snprintf(m->u.text.lost_host, sizeof m->u.text.lost_host, "nodeB");
    snprintf(m->u.text.lost_why, sizeof m->u.text.lost_why,
             "no keepalive for 5.2 s");
    return;
  case 10:
    m->op = RDZV_PROTO_STATUS_REPLY;
    m->u.status_json = (char *)"{ \"jobs\": [ {\"id\": \"a\\u0001\", \"n\": "
                       "2.5, \"ok\": true, \"x\": null} ], \"big\": "
                       "12345678901234567 }";
    return;
  case 11:
    m->op = RDZV_PROTO_RESUME;
    snprintf(m->u.resume.join.id, sizeof m->u.resume.join.id, "j");
    snprintf(m->u.resume.join.addr, sizeof m->u.resume.join.addr,
             "10.0.0.2");
    m->u.resume.join.nproc = 1;
    m->u.resume.join.master_port = 1;
    rdzv_proto_conf_default(&m->u.resume.join.conf);
    m->u.resume.phase = RDZV_PROTO_PHASE_RUNNING;
    m->u.resume.round.group_world_size = 1;
    m->u.resume.round.world_size = 1;
    snprintf(m->u.resume.round.master_addr,
             sizeof m->u.resume.round.master_addr, "10.0.0.2");
    m->u.resume.round.master_port = 1;
    m->u.resume.round.token[0] = 1;
    return;
  case 12:
    m->op = RDZV_PROTO_KV_GET;
    snprintf(m->u.kv.key, sizeof m->u.kv.key, "k");
    m->u.kv.wait = 2.75;
    return;
  case 13:
    m->op = RDZV_PROTO_KV_ADD;
    snprintf(m->u.kv.key, sizeof m->u.kv.key, "k");
    m->u.kv.delta = -9007199254740991;
    return;
  }
}

/* Each message encodes to the same bytes as before, through the heap
 * (rdzv_proto_encode), a buffer that holds it (rdzv_proto_encode_into:
 * *out is the buffer) and one too small by a byte (*out is the heap's). */
START_TEST(encode_bytes_unchanged)
{
  const char *want = golden_bodies[_i];
  size_t n = strlen(want), len, cap;
  struct rdzv_proto_msg m;
  char *frame, *buf;

  golden_msg(_i, &m);
  ck_assert_int_eq(rdzv_proto_encode(&m, &frame, &len), 0);
  ck_assert_uint_eq(len, RDZV_PROTO_FRAME_HEADER + n);
  ck_assert_msg(memcmp(frame + RDZV_PROTO_FRAME_HEADER, want, n) == 0,
                "message %d: %.*s", _i, (int)n,
                frame + RDZV_PROTO_FRAME_HEADER);
  free(frame);
  for (cap = len; cap >= len - 1; cap--) {
    buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(rdzv_proto_encode_into(&m, buf, cap, &frame, &len), 0);
    ck_assert(cap == RDZV_PROTO_FRAME_HEADER + n ? frame == buf
                                                 : frame != buf);
    ck_assert_uint_eq(len, RDZV_PROTO_FRAME_HEADER + n);
    ck_assert_int_eq((unsigned char)frame[2] << 8 | (unsigned char)frame[3],
                     (int)n);
    ck_assert(memcmp(frame + RDZV_PROTO_FRAME_HEADER, want, n) == 0);
    if (frame != buf)
      free(frame);
    free(buf);
  }
}
END_TEST

/* A refused message leaves no buffer behind, into a caller's or not. */
START_TEST(encode_into_refused)
{
  struct rdzv_proto_msg m;
  char buf[8], *frame = buf;
  size_t len = 1;

  golden_msg(5, &m);
  m.u.round.group_rank = 100000;        /* >= group_world_size */
  ck_assert_int_eq(rdzv_proto_encode_into(&m, buf, sizeof buf, &frame, &len),
                   -EINVAL);
  ck_assert_ptr_null(frame);
  ck_assert_uint_eq(len, 0);
}
END_TEST

/* ---- Note [flat parse]: the same message, or the same refusal ---- */

#define FLAT_JOIN_HEAD "{\"v\":2,\"op\":\"join\",\"id\":\"j\","
#define FLAT_CONF "\"conf\":{\"min_nodes\":2,\"max_nodes\":4}"

static const char *const flat_bodies[] = {
  FLAT_JOIN_HEAD "\"host\":\"h-1.x\",\"pid\":123456789012345,\"nproc\":8,"
  "\"master_port\":29500,\"reason\":\"failure\"," FLAT_CONF "}",
  FLAT_JOIN_HEAD "\"nproc\":08," FLAT_CONF "}",              /* leading 0 */
  FLAT_JOIN_HEAD "\"pid\":-0,\"nproc\":1," FLAT_CONF "}",     /* -0 */
  FLAT_JOIN_HEAD "\"pid\":1234567890123456,\"nproc\":1}",     /* 16 digits */
  FLAT_JOIN_HEAD "\"pid\":-42,\"nproc\":1}",
  FLAT_JOIN_HEAD "\"nproc\":8.0}",
  FLAT_JOIN_HEAD "\"nproc\":8e0}",
  FLAT_JOIN_HEAD "\"nproc\":1.5}",
  FLAT_JOIN_HEAD "\"nproc\":-1}",
  FLAT_JOIN_HEAD "\"nproc\":true}",
  FLAT_JOIN_HEAD "\"nproc\":null}",
  FLAT_JOIN_HEAD "\"nproc\":\"8\"}",
  FLAT_JOIN_HEAD "\"nproc\":2,\"nproc\":2}",                  /* duplicate */
  FLAT_JOIN_HEAD "\"conf\":{}}",
  FLAT_JOIN_HEAD "\"conf\":{\"min_nodes\":5,\"max_nodes\":4}}",
  FLAT_JOIN_HEAD "\"conf\":{\"min_nodes\":{\"deep\":1}}}",   /* depth 3 */
  FLAT_JOIN_HEAD "\"conf\":{\"min_nodes\":1,}}",
  FLAT_JOIN_HEAD "\"host\":\"tab\\there\"}",                  /* escape */
  FLAT_JOIN_HEAD "\"host\":\"del\177\"}",
  FLAT_JOIN_HEAD "\"host\":\"caf\303\251\"}",
  FLAT_JOIN_HEAD "\"unknown\":[1,2],\"x\":{}}",
  FLAT_JOIN_HEAD "\"nproc\" :1}",
  FLAT_JOIN_HEAD "\"nproc\":1,}",
  FLAT_JOIN_HEAD "\"nproc\":1",
  FLAT_JOIN_HEAD "\"nproc\":1}}",
  FLAT_JOIN_HEAD "\"nproc\":1}x",
  FLAT_JOIN_HEAD "\"nproc\":tru}",
  FLAT_JOIN_HEAD "\"nproc\"}",
  "{\"v\":2,\"op\":\"keepalive\"}",
  "{\"v\":2,\"op\":\"leave\",\"extra\":false}",
  "{\"v\":3,\"op\":\"leave\"}",
  "{\"v\":2.0,\"op\":\"leave\"}",
  "{\"op\":\"leave\"}",
  "{\"v\":2,\"op\":7}",
  "{\"v\":2,\"op\":\"nope\"}",
  "{\"v\":2,\"op\":\"barrier\",\"name\":\"exit\",\"round\":3}",
  "{\"v\":2,\"op\":\"kv_add\",\"key\":\"k\",\"delta\":-999999999999999}",
  "{\"v\":2,\"op\":\"kv_get\",\"key\":\"k\",\"wait\":0}",
  "{}",
  "{\"\":1}",
};

/* Each body decodes as it does with a space after its first '{', which
 * only cJSON parses: the same message, or the same error (a syntax
 * error's text names a byte offset, which the space moves). */
START_TEST(flat_parse_as_cjson)
{
  const char *body = flat_bodies[_i];
  size_t n = strlen(body);
  struct rdzv_proto_msg flat;
  char *spaced = malloc(n + 2), flat_err[256];
  int rc_flat, rc;

  ck_assert_ptr_nonnull(spaced);
  spaced[0] = '{';
  spaced[1] = ' ';
  memcpy(spaced + 2, body + 1, n);
  rc_flat = decode(body);
  flat = M;
  memset(&M, 0, sizeof M);
  snprintf(flat_err, sizeof flat_err, "%s", err);
  rc = decode(spaced);
  ck_assert_msg(rc == rc_flat, "%s: %d (%s), spaced %d (%s)", body, rc_flat,
                flat_err, rc, err);
  if (rc == 0)
    ck_assert_msg(same_msg(&flat, &M), "%s: decoded differently", body);
  else if (rc != -EBADMSG)
    ck_assert_str_eq(flat_err, err);
  rdzv_proto_msg_free(&flat);
  free(spaced);
}
END_TEST

/* An object past the stack's items (Note [flat parse]) is cJSON's. */
START_TEST(flat_parse_many_members)
{
  char body[4096];
  size_t n;
  int i;

  n = (size_t)snprintf(body, sizeof body, "{\"v\":2,\"op\":\"leave\"");
  for (i = 0; i < 100; i++)
    n += (size_t)snprintf(body + n, sizeof body - n, ",\"k%d\":%d", i, i);
  snprintf(body + n, sizeof body - n, "}");
  ck_assert_ok(decode(body));
  ck_assert_int_eq(M.op, RDZV_PROTO_LEAVE);
}
END_TEST

static void teardown(void)
{
  rdzv_proto_msg_free(&M);
}

/* ---- the frame loop (rdzv_proto_frames.c) ---- */

static int frames_seen;

static int count_frame(void *ctx, struct rdzv_proto_msg *m)
{
  int stop_after = *(int *)ctx;

  ck_assert_int_eq(m->op, RDZV_PROTO_KEEPALIVE);
  return ++frames_seen == stop_after;
}

START_TEST(frames_read_loop)
{
  struct rdzv_proto_msg m;
  char *f, buf[256], why[128];
  size_t len, used;
  int never = -1, one = 1;
  ssize_t rc;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KEEPALIVE;
  ck_assert_int_eq(rdzv_proto_encode(&m, &f, &len), 0);
  ck_assert_uint_lt(3 * len, sizeof buf);
  memcpy(buf, f, len);
  memcpy(buf + len, f, len);
  memcpy(buf + 2 * len, f, len - 1);          /* the third is partial */
  used = 3 * len - 1;
  frames_seen = 0;
  rc = rdzv_proto_frames_read(buf, used, 0, count_frame, &never, why, sizeof why);
  ck_assert_int_eq(rc, (ssize_t)(2 * len));
  ck_assert_int_eq(frames_seen, 2);
  /* A callback can stop the loop. */
  frames_seen = 0;
  rc = rdzv_proto_frames_read(buf, used, 0, count_frame, &one, why, sizeof why);
  ck_assert_int_eq(rc, (ssize_t)len);
  /* A header announcing more than max_body fails at once, body or not. */
  rc = rdzv_proto_frames_read(buf, 4, 2, count_frame, &never, why, sizeof why);
  ck_assert_int_eq(rc, -EMSGSIZE);
  ck_assert(strstr(why, "frame too large") != NULL);
  /* A bad body names the problem. */
  memcpy(buf + 4, "{\"v\":1}", 7);
  buf[0] = buf[1] = buf[2] = 0;
  buf[3] = 7;
  rc = rdzv_proto_frames_read(buf, 11, 0, count_frame, &never, why, sizeof why);
  ck_assert_int_lt(rc, 0);
  free(f);
}
END_TEST

static Suite *proto_suite(void)
{
  Suite *s = suite_create("proto");
  TCase *tc = tcase_create("proto");

  tcase_add_checked_fixture(tc, NULL, teardown);

  tcase_add_test(tc, names);
  tcase_add_test(tc, conf_defaults);
  tcase_add_test(tc, peek_every_prefix_is_incomplete);
  tcase_add_test(tc, peek_big_endian_unaligned);
  tcase_add_test(tc, peek_zero_and_oversized);
  tcase_add_test(tc, peek_stream_of_frames);
  tcase_add_test(tc, rt_join);
  tcase_add_test(tc, rt_no_fields);
  tcase_add_test(tc, rt_failure);
  tcase_add_test(tc, rt_barrier);
  tcase_add_test(tc, rt_tokens);
  tcase_add_test(tc, rt_kv);
  tcase_add_test(tc, rt_waiting);
  tcase_add_test(tc, rt_round);
  tcase_add_test(tc, rt_text);
  tcase_add_test(tc, rt_cause);
  tcase_add_test(tc, rt_resume);
  tcase_add_test(tc, rt_status_reply);
  tcase_add_test(tc, rt_doubles_exact);
  tcase_add_test(tc, rt_limits);
  tcase_add_test(tc, decode_hand_written_join);
  tcase_add_test(tc, decode_partial_conf_defaults);
  tcase_add_test(tc, decode_optional_defaults);
  tcase_add_test(tc, decode_required_missing);
  tcase_add_test(tc, malformed_bodies);
  tcase_add_test(tc, malformed_nul_and_sizes);
  tcase_add_test(tc, error_text_is_safe);
  tcase_add_loop_test(tc, numeric_fields, 0,
                      sizeof num_cases / sizeof num_cases[0]);
  tcase_add_test(tc, numeric_messages);
  tcase_add_test(tc, relations);
  tcase_add_loop_test(tc, string_fields, 0,
                      sizeof str_cases / sizeof str_cases[0]);
  tcase_add_test(tc, kv_value_limits);
  tcase_add_test(tc, bools_and_enums);
  tcase_add_test(tc, status_reply_decode);
  tcase_add_test(tc, encode_refuses_invalid);
  tcase_add_test(tc, encode_too_large);
  tcase_add_loop_test(tc, encode_bytes_unchanged, 0,
                      sizeof golden_bodies / sizeof golden_bodies[0]);
  tcase_add_test(tc, encode_into_refused);
  tcase_add_loop_test(tc, flat_parse_as_cjson, 0,
                      sizeof flat_bodies / sizeof flat_bodies[0]);
  tcase_add_test(tc, flat_parse_many_members);
  tcase_add_test(tc, frames_read_loop);
  tcase_add_test(tc, rt_status_request);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(proto_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
