/* rdzv_proto.c -- the rendezvous wire codec (spec: proto/PROTOCOL.md). */
#include "rdzv_proto.h"
#include "rp_flat.h"
#include "rp_out.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SAFE_INT 9007199254740991.0   /* 2^53 - 1: exact in a double */
#define MAX_SECONDS 1e7

/* The kinds of field a message carries; each knows its C type. */
enum kind {
  K_INT,    /* int */
  K_I64,    /* int64_t, |x| <= 2^53 - 1 */
  K_DBL,    /* double, finite */
  K_BOOL,   /* bool */
  K_STR,    /* char[size] */
  K_OSTR,   /* char[size], optional: absent on the wire when "" */
  K_VALUE,  /* struct rdzv_proto_kv's heap value + value_len */
  K_REASON, /* enum rdzv_proto_join_reason */
  K_PHASE,  /* enum rdzv_proto_resume_phase */
  K_CODE,   /* enum rdzv_proto_error_code */
  K_CONF,   /* struct rdzv_proto_conf, a nested object */
  K_CAUSE,      /* struct rdzv_proto_cause, a nested object; absent on the wire
                   when its exited_at is 0 (none) */
  K_STATUS,     /* char *status_json, an object on the wire */
  K_HEX,        /* unsigned char[size], lowercase hex on the wire */
  K_TOKEN,      /* unsigned char[RDZV_PROTO_TOKEN_BYTES], optional hex: absent
                   on the wire when all zero (none) */
};

struct field {
  const char *name;
  enum kind kind;
  size_t off; /* from the start of struct rdzv_proto_msg (or rdzv_proto_conf) */
  size_t size;   /* K_STR: sizeof the array */
  double lo, hi; /* numbers: range; strings: byte length range */
  bool lo_open;  /* lo itself is excluded (timeouts > 0) */
  bool required;
};

/* size of a K_BOOL or K_INT field that is encoded only when not 0/false:
 * a field added later, so that bodies without it stay as they were. */
#define OMIT_ZERO 1

#define MSG(member) offsetof(struct rdzv_proto_msg, u.member)
#define ARR(member) MSG(member), sizeof(((struct rdzv_proto_msg *)0)->u.member)
#define CONF(member) offsetof(struct rdzv_proto_conf, member)
#define CAUSE(member) offsetof(struct rdzv_proto_cause, member)

static const struct field conf_fields[] = {
    {"min_nodes", K_INT, CONF(min_nodes), 0, 1, RDZV_PROTO_MAX_NODES, false,
     false},
    {"max_nodes", K_INT, CONF(max_nodes), 0, 1, RDZV_PROTO_MAX_NODES, false,
     false},
    {"max_restarts", K_INT, CONF(max_restarts), 0, 0, RDZV_PROTO_MAX_RESTARTS,
     false, false},
    {"join_timeout", K_DBL, CONF(join_timeout), 0, RDZV_PROTO_MIN_JOIN_TIMEOUT,
     MAX_SECONDS, false, false},
    {"last_call_timeout", K_DBL, CONF(last_call_timeout), 0, 0, MAX_SECONDS,
     false, false},
    {"close_timeout", K_DBL, CONF(close_timeout), 0, 0, MAX_SECONDS, false,
     false},
    {"keepalive_interval", K_DBL, CONF(keepalive_interval), 0,
     RDZV_PROTO_MIN_KEEPALIVE, 3600, false, false},
    {"keepalive_misses", K_INT, CONF(keepalive_misses), 0, 1, 1000, false,
     false},
    {"live", K_BOOL, CONF(live), OMIT_ZERO, 0, 0, false, false},
    {NULL, 0, 0, 0, 0, 0, false, false}};

/* Wall-clock seconds: after 0 and before the year 5138. */
#define MAX_EPOCH 1e11

static const struct field cause_fields[] = {
  { "exited_at", K_DBL, CAUSE(exited_at), 0, 0, MAX_EPOCH, true, true },
  { "rank", K_INT, CAUSE(rank), 0, 0, INT_MAX, false, false },
  { "local_rank", K_INT, CAUSE(local_rank), 0, 0, 65535, false, false },
  { "exitcode", K_INT, CAUSE(exitcode), 0, -255, 255, false, false },
  { "pid", K_I64, CAUSE(pid), 0, 0, MAX_SAFE_INT, false, false },
  { "host", K_STR, CAUSE(host), sizeof(((struct rdzv_proto_cause *)0)->host), 0,
    RDZV_PROTO_MAX_ADDR, false, false },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

/* The fields of a nested object's kind. */
static const struct field *sub_fields(enum kind k)
{
  return k == K_CAUSE ? cause_fields : conf_fields;
}

static const struct field join_fields[] = {
  { "id", K_STR, ARR(join.id), 1, RDZV_PROTO_MAX_ID, false, true },
  { "addr", K_STR, ARR(join.addr), 0, RDZV_PROTO_MAX_ADDR, false, false },
  { "host", K_STR, ARR(join.host), 0, RDZV_PROTO_MAX_ADDR, false, false },
  { "pid", K_I64, MSG(join.pid), 0, 0, MAX_SAFE_INT, false, false },
  { "nproc", K_INT, MSG(join.nproc), 0, 1, 65536, false, true },
  { "master_port", K_INT, MSG(join.master_port), 0, 1, 65535, false, true },
  { "reason", K_REASON, MSG(join.reason), 0, 0, 0, false, false },
  { "conf", K_CONF, MSG(join.conf), 0, 0, 0, false, false },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field failure_fields[] = {
    {"final", K_BOOL, MSG(failure.final), 0, 0, 0, false, false},
    {"message", K_STR, ARR(failure.message), 0, RDZV_PROTO_MAX_TEXT, false,
     false},
    {"cause", K_CAUSE, MSG(failure.cause), 0, 0, 0, false, false},
    {NULL, 0, 0, 0, 0, 0, false, false}};

static const struct field barrier_fields[] = {
    {"name", K_STR, ARR(barrier.name), 1, RDZV_PROTO_MAX_ID, false, true},
    {"round", K_INT, MSG(barrier.round), 0, 0, RDZV_PROTO_MAX_ROUND, false,
     true},
    {NULL, 0, 0, 0, 0, 0, false, false}};

#define KEY_FIELD \
  { "key", K_STR, ARR(kv.key), 1, RDZV_PROTO_MAX_KEY, false, true }

static const struct field kv_set_fields[] = {
  KEY_FIELD,
  { "value", K_VALUE, MSG(kv), 0, 0, RDZV_PROTO_MAX_VALUE, false, true },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field kv_get_fields[] = {
  KEY_FIELD,
  { "wait", K_DBL, MSG(kv.wait), 0, 0, MAX_SECONDS, false, false },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field kv_add_fields[] = {
  KEY_FIELD,
  { "delta", K_I64, MSG(kv.delta), 0, -MAX_SAFE_INT, MAX_SAFE_INT, false,
    true },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field kv_value_fields[] = {
  KEY_FIELD,
  { "found", K_BOOL, MSG(kv.found), 0, 0, 0, false, true },
  { "value", K_VALUE, MSG(kv), 0, 0, RDZV_PROTO_MAX_VALUE, false, false },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field waiting_fields[] = {
    {"round", K_INT, MSG(waiting.round), 0, 0, RDZV_PROTO_MAX_ROUND, false,
     true},
    {"present", K_INT, MSG(waiting.present), 0, 0, INT_MAX, false, true},
    {"min_nodes", K_INT, MSG(waiting.min_nodes), 0, 1, RDZV_PROTO_MAX_NODES,
     false, true},
    {"max_nodes", K_INT, MSG(waiting.max_nodes), 0, 1, RDZV_PROTO_MAX_NODES,
     false, true},
    {"deadline", K_DBL, MSG(waiting.deadline), 0, 0, MAX_SECONDS, false, true},
    {"last_call", K_DBL, MSG(waiting.last_call), 0, -1, MAX_SECONDS, false,
     true},
    {"restart_count", K_INT, MSG(waiting.restart_count), OMIT_ZERO, 0,
     RDZV_PROTO_MAX_RESTARTS, false, false},
    {"token", K_TOKEN, ARR(waiting.token), 0, 0, false, false},
    {NULL, 0, 0, 0, 0, 0, false, false}};

static const struct field round_fields[] = {
    {"round", K_INT, MSG(round.round), 0, 0, RDZV_PROTO_MAX_ROUND, false, true},
    {"restart_count", K_INT, MSG(round.restart_count), 0, 0,
     RDZV_PROTO_MAX_RESTARTS, false, true},
    {"group_rank", K_INT, MSG(round.group_rank), 0, 0, RDZV_PROTO_MAX_NODES - 1,
     false, true},
    {"group_world_size", K_INT, MSG(round.group_world_size), 0, 1,
     RDZV_PROTO_MAX_NODES, false, true},
    {"rank_offset", K_INT, MSG(round.rank_offset), 0, 0, INT_MAX, false, true},
    {"world_size", K_INT, MSG(round.world_size), 0, 1, INT_MAX, false, true},
    {"master_addr", K_STR, ARR(round.master_addr), 1, RDZV_PROTO_MAX_ADDR,
     false, true},
    {"master_port", K_INT, MSG(round.master_port), 0, 1, 65535, false, true},
    {"embedded", K_BOOL, MSG(round.embedded), OMIT_ZERO, 0, 0, false, false},
    {"host_rank", K_INT, MSG(round.host_rank), OMIT_ZERO, 0,
     RDZV_PROTO_MAX_NODES - 1, false, false},
    {"token", K_TOKEN, ARR(round.token), 0, 0, false, false},
    {"job_token", K_TOKEN, ARR(round.job_token), 0, 0, false, false},
    {"live_store_port", K_INT, MSG(round.live_store_port), OMIT_ZERO, 0,
     65535, false, false},
    {NULL, 0, 0, 0, 0, 0, false, false}};

static const struct field resume_fields[] = {
    {"id", K_STR, ARR(resume.join.id), 1, RDZV_PROTO_MAX_ID, false, true},
    {"addr", K_STR, ARR(resume.join.addr), 0, RDZV_PROTO_MAX_ADDR, false,
     false},
    {"host", K_STR, ARR(resume.join.host), 0, RDZV_PROTO_MAX_ADDR, false,
     false},
    {"pid", K_I64, MSG(resume.join.pid), 0, 0, MAX_SAFE_INT, false, false},
    {"nproc", K_INT, MSG(resume.join.nproc), 0, 1, 65536, false, true},
    {"master_port", K_INT, MSG(resume.join.master_port), 0, 1, 65535, false,
     true},
    {"reason", K_REASON, MSG(resume.join.reason), 0, 0, 0, false, false},
    {"conf", K_CONF, MSG(resume.join.conf), 0, 0, 0, false, false},
    {"phase", K_PHASE, MSG(resume.phase), 0, 0, 0, false, true},
    {"round", K_INT, MSG(resume.round.round), 0, 0, RDZV_PROTO_MAX_ROUND, false,
     true},
    {"restart_count", K_INT, MSG(resume.round.restart_count), 0, 0,
     RDZV_PROTO_MAX_RESTARTS, false, true},
    {"group_rank", K_INT, MSG(resume.round.group_rank), 0, 0,
     RDZV_PROTO_MAX_NODES - 1, false, false},
    {"group_world_size", K_INT, MSG(resume.round.group_world_size), 0, 0,
     RDZV_PROTO_MAX_NODES, false, false},
    {"rank_offset", K_INT, MSG(resume.round.rank_offset), 0, 0, INT_MAX, false,
     false},
    {"world_size", K_INT, MSG(resume.round.world_size), 0, 0, INT_MAX, false,
     false},
    {"master_addr", K_STR, ARR(resume.round.master_addr), 0,
     RDZV_PROTO_MAX_ADDR, false, false},
    {"job_master_port", K_INT, MSG(resume.round.master_port), 0, 0, 65535,
     false, false},
    {"token", K_TOKEN, ARR(resume.round.token), 0, 0, false, false},
    {NULL, 0, 0, 0, 0, 0, false, false}};

#define MESSAGE_FIELD \
  { "message", K_STR, ARR(text.message), 0, RDZV_PROTO_MAX_TEXT, false, false }

#define CAUSE_FIELD \
  { "cause", K_CAUSE, MSG(text.cause), 0, 0, 0, false, false }

static const struct field restart_fields[] = {
    MESSAGE_FIELD,
    CAUSE_FIELD,
    {"lost_host", K_OSTR, ARR(text.lost_host), 0, RDZV_PROTO_MAX_ADDR, false,
     false},
    {"lost_why", K_OSTR, ARR(text.lost_why), 0, RDZV_PROTO_MAX_ID, false,
     false},
    {NULL, 0, 0, 0, 0, 0, false, false}};

static const struct field closed_fields[] = {
  { "success", K_BOOL, MSG(text.success), 0, 0, 0, false, false },
  MESSAGE_FIELD,
  CAUSE_FIELD,
  /* Note [a lost node] (rdzvd/rdzv_rules.h): the job ended on it. */
  { "lost_host", K_OSTR, ARR(text.lost_host), 0, RDZV_PROTO_MAX_ADDR, false,
    false },
  { "lost_why", K_OSTR, ARR(text.lost_why), 0, RDZV_PROTO_MAX_ID, false,
    false },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field error_fields[] = {
  { "code", K_CODE, MSG(text.code), 0, 0, 0, false, true },
  MESSAGE_FIELD,
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field status_reply_fields[] = {
  { "status", K_STATUS, MSG(status_json), 0, 0, 0, false, true },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field nonce_fields[] = {
  { "nonce", K_HEX, ARR(auth.nonce), 0, 0, false, true },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field mac_fields[] = {
  { "mac", K_HEX, ARR(auth.mac), 0, 0, false, true },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field status_fields[] = {
  { "job", K_STR, ARR(status.job), 0, RDZV_PROTO_MAX_ID, false, false },
  { "limit", K_INT, MSG(status.limit), 0, 0, RDZV_PROTO_MAX_STATUS_JOBS, false,
    false },
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct field no_fields[] = {
  { NULL, 0, 0, 0, 0, 0, false, false }
};

static const struct {
  const char *name;
  const struct field *fields;
} ops[RDZV_PROTO_OP_COUNT] = {
  [RDZV_PROTO_JOIN] = { "join", join_fields },
  [RDZV_PROTO_KEEPALIVE] = { "keepalive", no_fields },
  [RDZV_PROTO_FAILURE] = { "failure", failure_fields },
  [RDZV_PROTO_BARRIER] = { "barrier", barrier_fields },
  [RDZV_PROTO_LEAVE] = { "leave", no_fields },
  [RDZV_PROTO_KV_SET] = { "kv_set", kv_set_fields },
  [RDZV_PROTO_KV_GET] = { "kv_get", kv_get_fields },
  [RDZV_PROTO_KV_ADD] = { "kv_add", kv_add_fields },
  [RDZV_PROTO_STATUS] = { "status", status_fields },
  [RDZV_PROTO_WAITING] = { "waiting", waiting_fields },
  [RDZV_PROTO_ROUND] = { "round", round_fields },
  [RDZV_PROTO_RESTART] = { "restart", restart_fields },
  [RDZV_PROTO_BARRIER_DONE] = { "barrier_done", barrier_fields },
  [RDZV_PROTO_CLOSED] = { "closed", closed_fields },
  [RDZV_PROTO_KV_VALUE] = { "kv_value", kv_value_fields },
  [RDZV_PROTO_STATUS_REPLY] = { "status_reply", status_reply_fields },
  [RDZV_PROTO_PONG] = { "pong", no_fields },
  [RDZV_PROTO_ERROR] = { "error", error_fields },
  [RDZV_PROTO_HELLO] = { "hello", nonce_fields },
  [RDZV_PROTO_CHALLENGE] = { "challenge", nonce_fields },
  [RDZV_PROTO_AUTH] = { "auth", mac_fields },
  [RDZV_PROTO_AUTH_OK] = { "auth_ok", mac_fields },
  [RDZV_PROTO_RESUME] = { "resume", resume_fields },
  [RDZV_PROTO_GOING_AWAY] = { "going_away", restart_fields },
};

static const char *const reasons[] = {
  [RDZV_PROTO_REASON_FIRST] = "first",
  [RDZV_PROTO_REASON_FAILURE] = "failure",
  [RDZV_PROTO_REASON_MEMBERSHIP] = "membership",
};
#define NREASONS (sizeof reasons / sizeof reasons[0])

static const char *const phases[] = {
  [RDZV_PROTO_PHASE_GATHERING] = "gathering",
  [RDZV_PROTO_PHASE_RUNNING] = "running",
  [RDZV_PROTO_PHASE_EXIT] = "exit",
};
#define NPHASES (sizeof phases / sizeof phases[0])

static const char *const codes[] = {
  [RDZV_PROTO_ERR_BAD_REQUEST] = "bad_request",
  [RDZV_PROTO_ERR_CONFIG_MISMATCH] = "config_mismatch",
  [RDZV_PROTO_ERR_JOIN_TIMEOUT] = "join_timeout",
  [RDZV_PROTO_ERR_CLOSED] = "closed",
  [RDZV_PROTO_ERR_NOT_JOINED] = "not_joined",
  [RDZV_PROTO_ERR_LIMIT] = "limit",
  [RDZV_PROTO_ERR_TIMEOUT] = "timeout",
  [RDZV_PROTO_ERR_AUTH] = "auth",
};
#define NCODES (sizeof codes / sizeof codes[0])

const char *rdzv_proto_op_name(enum rdzv_proto_op op)
{
  if ((int)op <= RDZV_PROTO_OP_INVALID || op >= RDZV_PROTO_OP_COUNT)
    return NULL;
  return ops[op].name;
}

const char *rdzv_proto_error_name(enum rdzv_proto_error_code code)
{
  if ((int)code < RDZV_PROTO_ERR_BAD_REQUEST || (size_t)code >= NCODES)
    return NULL;
  return codes[code];
}

static const char *reason_name(enum rdzv_proto_join_reason r)
{
  if ((int)r < 0 || (size_t)r >= NREASONS)
    return NULL;
  return reasons[r];
}

static const char *phase_name(enum rdzv_proto_resume_phase p)
{
  if ((int)p < 0 || (size_t)p >= NPHASES)
    return NULL;
  return phases[p];
}

void rdzv_proto_conf_default(struct rdzv_proto_conf *c)
{
  c->min_nodes = 1;
  c->max_nodes = 1;
  c->max_restarts = 0;
  c->join_timeout = 600;
  c->last_call_timeout = 30;
  c->close_timeout = 30;
  c->keepalive_interval = 1;
  c->keepalive_misses = 5;
  c->live = false;
}

void rdzv_proto_msg_free(struct rdzv_proto_msg *m)
{
  if (!m)
    return;
  switch (m->op) {
  case RDZV_PROTO_KV_SET:
  case RDZV_PROTO_KV_GET:
  case RDZV_PROTO_KV_ADD:
  case RDZV_PROTO_KV_VALUE:
    free(m->u.kv.value);
    m->u.kv.value = NULL;
    m->u.kv.value_len = 0;
    break;
  case RDZV_PROTO_STATUS_REPLY:
    free(m->u.status_json);
    m->u.status_json = NULL;
    break;
  default:
    break;
  }
}

int rdzv_proto_frame_peek(const void *buf, size_t avail, size_t *frame_len)
{
  const unsigned char *p = buf;
  uint32_t n;

  if (avail < RDZV_PROTO_FRAME_HEADER)
    return 0;
  /* Byte by byte: buf may be unaligned. */
  n = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
      (uint32_t)p[3];
  if (n == 0)
    return -EBADMSG;
  if (n > RDZV_PROTO_MAX_FRAME)
    return -EMSGSIZE;
  if (avail - RDZV_PROTO_FRAME_HEADER < n)
    return 0;
  *frame_len = RDZV_PROTO_FRAME_HEADER + (size_t)n;
  return 1;
}

/* ---- errors ---- */

struct ctx {
  char *err;
  size_t errlen;
  const char *op;         /* prefix of field names: "join" */
  const char *sub;        /* nested object: "conf", or NULL */
};

static int fail(struct ctx *c, int rc, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

static int fail(struct ctx *c, int rc, const char *fmt, ...)
{
  va_list ap;

  if (c->err && c->errlen) {
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* "join.conf.min_nodes" into buf. */
static const char *path(const struct ctx *c, const char *name, char *buf,
                        size_t len)
{
  if (c->sub)
    snprintf(buf, len, "%s.%s.%s", c->op, c->sub, name);
  else
    snprintf(buf, len, "%s.%s", c->op, name);
  return buf;
}

/* Untrusted text quoted in an error: printable ASCII only, bounded, so
 * the error itself can travel in an ERROR message and a log line. */
static const char *sanitize(const char *s, char *buf, size_t len)
{
  size_t i, o = 0;

  for (i = 0; s[i] && o + 4 < len; i++) {
    unsigned char ch = (unsigned char)s[i];

    buf[o++] = ch >= 0x20 && ch < 0x7f && ch != '"' ? (char)ch : '?';
    if (i == 31) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
  }
  buf[o] = '\0';
  return buf;
}

static const char *type_name(const cJSON *it)
{
  if (cJSON_IsString(it))
    return "a string";
  if (cJSON_IsNumber(it))
    return "a number";
  if (cJSON_IsBool(it))
    return cJSON_IsTrue(it) ? "true" : "false";
  if (cJSON_IsNull(it))
    return "null";
  if (cJSON_IsArray(it))
    return "an array";
  if (cJSON_IsObject(it))
    return "an object";
  return "an invalid value";
}

/* A number for an error message: integers in full, others short. */
static const char *num_text(double d, char *buf, size_t len)
{
  if (isfinite(d) && d == floor(d) && fabs(d) < 1e16)
    snprintf(buf, len, "%.0f", d);
  else
    snprintf(buf, len, "%g", d);
  return buf;
}

static const char *range_text(const struct field *f, bool integral,
                              char *buf, size_t len)
{
  char lo[32], hi[32];

  num_text(f->lo, lo, sizeof lo);
  num_text(f->hi, hi, sizeof hi);
  if (integral)
    snprintf(buf, len, "an integer %s..%s", lo, hi);
  else if (f->lo_open)
    snprintf(buf, len, "a number > %s and <= %s", lo, hi);
  else
    snprintf(buf, len, "a number %s..%s", lo, hi);
  return buf;
}

/* ---- checks shared by encode and decode ---- */

static int check_number(struct ctx *c, const struct field *f, double d)
{
  bool integral = f->kind == K_INT || f->kind == K_I64;
  bool ok = isfinite(d) && d <= f->hi &&
            (f->lo_open ? d > f->lo : d >= f->lo) &&
            (!integral || d == floor(d));
  char p[80], r[64], n[32];

  if (ok)
    return 0;
  return fail(c, -EINVAL, "%s: expected %s, got %s",
              path(c, f->name, p, sizeof p),
              range_text(f, integral, r, sizeof r),
              num_text(d, n, sizeof n));
}

static int check_length(struct ctx *c, const struct field *f, size_t n)
{
  char p[80], lo[32], hi[32];

  if (n >= f->lo && n <= f->hi)
    return 0;
  return fail(c, -EINVAL, "%s: expected a string of %s..%s bytes, got %zu",
              path(c, f->name, p, sizeof p), num_text(f->lo, lo, sizeof lo),
              num_text(f->hi, hi, sizeof hi), n);
}

/* The keepalive window (interval x misses) has a floor: below it a job's
 * first joiner could have every member declared dead before it spoke. */
static int check_keepalive_window(struct ctx *c, const char *op,
                                  const struct rdzv_proto_conf *cf)
{
  double window = cf->keepalive_interval * cf->keepalive_misses;

  if (window < RDZV_PROTO_MIN_KEEPALIVE_WINDOW)
    return fail(c, -EINVAL, "%s.conf.keepalive_interval x "
                "keepalive_misses: %g s, expected at least %g s", op,
                window, RDZV_PROTO_MIN_KEEPALIVE_WINDOW);
  return 0;
}

/* Relations between fields, after each field is known to be valid. */
static int check_relations(struct ctx *c, const struct rdzv_proto_msg *m)
{
  const struct rdzv_proto_conf *cf = &m->u.join.conf;
  const struct rdzv_proto_waiting *w = &m->u.waiting;
  const struct rdzv_proto_round *r = &m->u.round;
  const struct rdzv_proto_resume *rs = &m->u.resume;

  switch (m->op) {
  case RDZV_PROTO_JOIN:
    if (cf->min_nodes > cf->max_nodes)
      return fail(c, -EINVAL, "join.conf.min_nodes: %d > max_nodes %d",
                  cf->min_nodes, cf->max_nodes);
    return check_keepalive_window(c, "join", cf);
  case RDZV_PROTO_WAITING:
    if (w->min_nodes > w->max_nodes)
      return fail(c, -EINVAL, "waiting.min_nodes: %d > max_nodes %d",
                  w->min_nodes, w->max_nodes);
    if (w->last_call < 0 && w->last_call != -1)
      return fail(c, -EINVAL,
                  "waiting.last_call: expected -1 or a number >= 0, "
                  "got %g", w->last_call);
    break;
  case RDZV_PROTO_ROUND:
    if (r->group_rank >= r->group_world_size)
      return fail(c, -EINVAL, "round.group_rank: %d >= group_world_size %d",
                  r->group_rank, r->group_world_size);
    if (r->group_world_size > r->world_size)
      return fail(c, -EINVAL, "round.group_world_size: %d > world_size %d",
                  r->group_world_size, r->world_size);
    if (r->rank_offset >= r->world_size)
      return fail(c, -EINVAL, "round.rank_offset: %d >= world_size %d",
                  r->rank_offset, r->world_size);
    break;
  case RDZV_PROTO_RESUME:
    if (rs->join.conf.min_nodes > rs->join.conf.max_nodes)
      return fail(c, -EINVAL, "resume.conf.min_nodes: %d > max_nodes %d",
                  rs->join.conf.min_nodes, rs->join.conf.max_nodes);
    if (check_keepalive_window(c, "resume", &rs->join.conf))
      return -EINVAL;
    if (rs->phase == RDZV_PROTO_PHASE_GATHERING)
      break;
    /* A running node re-asserts its whole assignment. */
    if (rs->round.group_world_size < 1 ||
        rs->round.group_rank >= rs->round.group_world_size)
      return fail(c, -EINVAL, "resume.group_rank: %d not below "
                  "group_world_size %d", rs->round.group_rank,
                  rs->round.group_world_size);
    if (rs->round.group_world_size > rs->round.world_size ||
        rs->round.rank_offset >= rs->round.world_size)
      return fail(c, -EINVAL, "resume.world_size: %d below "
                  "group_world_size %d or rank_offset %d",
                  rs->round.world_size, rs->round.group_world_size,
                  rs->round.rank_offset);
    /* Its ranks rank_offset .. rank_offset + nproc - 1 lie in the world
     * (int64: both may be near INT_MAX). */
    if ((int64_t)rs->round.rank_offset + rs->join.nproc >
        rs->round.world_size)
      return fail(c, -EINVAL, "resume.rank_offset: %d + nproc %d > "
                  "world_size %d", rs->round.rank_offset, rs->join.nproc,
                  rs->round.world_size);
    if (!rs->round.master_addr[0] || rs->round.master_port < 1)
      return fail(c, -EINVAL, "resume.master_addr/job_master_port: "
                  "required when running");
    break;
  default:
    break;
  }
  return 0;
}

/* ---- parsing ---- */

/* Raw NUL bytes and \u0000 escapes would silently cut a string short in
 * cJSON; refuse them before parsing.  String state is tracked so that an
 * escaped backslash followed by "u0000" is not mistaken for one. */
static int check_nul(struct ctx *c, const char *s, size_t len)
{
  bool in_str = false;
  size_t i;

  /* The common body has neither a NUL nor a backslash (so no \u0000):
   * two vector scans say so; otherwise the walk finds where. */
  if (!memchr(s, '\0', len) && !memchr(s, '\\', len))
    return 0;
  for (i = 0; i < len; i++) {
    if (s[i] == '\0')
      return fail(c, -EBADMSG, "NUL byte at offset %zu", i);
    if (!in_str) {
      in_str = s[i] == '"';
    } else if (s[i] == '"') {
      in_str = false;
    } else if (s[i] == '\\' && i + 1 < len) {
      if (s[i + 1] == 'u' && i + 5 < len && memcmp(s + i + 2, "0000", 4) == 0)
        return fail(c, -EBADMSG, "\\u0000 in a string at offset %zu", i);
      i++;
    }
  }
  return 0;
}

/* Parses exactly len bytes as one JSON object: no NUL, nothing but
 * whitespace after it. */
static int parse_object(struct ctx *c, const char *s, size_t len,
                        cJSON **out)
{
  const char *end = NULL;
  cJSON *j;
  int rc;

  rc = check_nul(c, s, len);
  if (rc)
    return rc;
  j = cJSON_ParseWithLengthOpts(s, len, &end, false);
  if (!j) {
    size_t at = end && end >= s && end <= s + len ? (size_t)(end - s) : 0;

    return fail(c, -EBADMSG, "not valid JSON (at byte %zu)", at);
  }
  for (; end < s + len; end++) {
    if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
      cJSON_Delete(j);
      return fail(c, -EBADMSG, "trailing bytes after the JSON object "
                  "(at byte %zu)", (size_t)(end - s));
    }
  }
  if (!cJSON_IsObject(j)) {
    rc = fail(c, -EBADMSG, "expected a JSON object, got %s", type_name(j));
    cJSON_Delete(j);
    return rc;
  }
  *out = j;
  return 0;
}

/* The member called name, NULL if absent; a repeated name is an error
 * (two readers could disagree on which one counts). */
static int member(struct ctx *c, const cJSON *obj, const char *name,
                  cJSON **out, int dup_rc)
{
  cJSON *it, *found = NULL;
  char p[80];

  cJSON_ArrayForEach(it, obj) {
    if (it->string && strcmp(it->string, name) == 0) {
      if (found) {
        if (c->op)
          path(c, name, p, sizeof p);
        else
          snprintf(p, sizeof p, "%s", name);
        return fail(c, dup_rc, "%s: duplicate field", p);
      }
      found = it;
    }
  }
  *out = found;
  return 0;
}

static int decode_fields(struct ctx *c, const cJSON *obj,
                         const struct field *fields, char *base);

static int wrong_type(struct ctx *c, const struct field *f, const char *want,
                      const cJSON *it)
{
  char p[80];

  return fail(c, -EINVAL, "%s: expected %s, got %s",
              path(c, f->name, p, sizeof p), want, type_name(it));
}

static int decode_enum(struct ctx *c, const struct field *f, const cJSON *it,
                       const char *const *names, size_t n, size_t first,
                       int *out)
{
  char p[80], s[48];
  size_t i;

  if (!cJSON_IsString(it))
    return wrong_type(c, f, "a string", it);
  for (i = first; i < n; i++) {
    if (strcmp(it->valuestring, names[i]) == 0) {
      *out = (int)i;
      return 0;
    }
  }
  return fail(c, -EINVAL, "%s: unknown value \"%s\"",
              path(c, f->name, p, sizeof p),
              sanitize(it->valuestring, s, sizeof s));
}

/* Exactly 2 * f->size lowercase hex digits: one spelling per value. */
static int decode_hex(struct ctx *c, const struct field *f, const char *s,
                      unsigned char *out)
{
  static const char digits[] = "0123456789abcdef";
  size_t n = strlen(s), i;
  const char *hi, *lo;
  char p[80];

  if (n != 2 * f->size)
    return fail(c, -EINVAL, "%s: expected %zu hex digits, got %zu bytes",
                path(c, f->name, p, sizeof p), 2 * f->size, n);
  for (i = 0; i < f->size; i++) {
    hi = s[2 * i] ? strchr(digits, s[2 * i]) : NULL;
    lo = s[2 * i + 1] ? strchr(digits, s[2 * i + 1]) : NULL;
    if (!hi || !lo)
      return fail(c, -EINVAL, "%s: not lowercase hex",
                  path(c, f->name, p, sizeof p));
    out[i] = (unsigned char)((hi - digits) << 4 | (lo - digits));
  }
  return 0;
}

static int decode_field(struct ctx *c, const struct field *f,
                        const cJSON *it, char *base)
{
  struct rdzv_proto_kv *kv;
  size_t n;
  char *s;
  int rc, e;

  switch (f->kind) {
  case K_INT:
  case K_I64:
  case K_DBL:
    if (!cJSON_IsNumber(it))
      return wrong_type(c, f, f->kind == K_DBL ? "a number" : "an integer",
                        it);
    rc = check_number(c, f, it->valuedouble);
    if (rc)
      return rc;
    if (f->kind == K_INT)
      *(int *)(base + f->off) = (int)it->valuedouble;
    else if (f->kind == K_I64)
      *(int64_t *)(base + f->off) = (int64_t)it->valuedouble;
    else
      *(double *)(base + f->off) = it->valuedouble;
    return 0;
  case K_BOOL:
    if (!cJSON_IsBool(it))
      return wrong_type(c, f, "true or false", it);
    *(bool *)(base + f->off) = cJSON_IsTrue(it);
    return 0;
  case K_STR:
  case K_OSTR:
    if (!cJSON_IsString(it))
      return wrong_type(c, f, "a string", it);
    n = strlen(it->valuestring);
    rc = check_length(c, f, n);
    if (rc)
      return rc;
    memcpy(base + f->off, it->valuestring, n + 1);
    return 0;
  case K_VALUE:
    if (!cJSON_IsString(it))
      return wrong_type(c, f, "a string", it);
    n = strlen(it->valuestring);
    rc = check_length(c, f, n);
    if (rc)
      return rc;
    kv = (struct rdzv_proto_kv *)(base + f->off);
    s = malloc(n + 1);
    if (!s)
      return fail(c, -ENOMEM, "out of memory");
    memcpy(s, it->valuestring, n + 1);
    free(kv->value);
    kv->value = s;
    kv->value_len = n;
    return 0;
  case K_REASON:
    rc = decode_enum(c, f, it, reasons, NREASONS, 0, &e);
    if (!rc)
      *(enum rdzv_proto_join_reason *)(base + f->off) =
          (enum rdzv_proto_join_reason)e;
    return rc;
  case K_PHASE:
    rc = decode_enum(c, f, it, phases, NPHASES, 0, &e);
    if (!rc)
      *(enum rdzv_proto_resume_phase *)(base + f->off) =
          (enum rdzv_proto_resume_phase)e;
    return rc;
  case K_CODE:
    rc = decode_enum(c, f, it, codes, NCODES, RDZV_PROTO_ERR_BAD_REQUEST, &e);
    if (!rc)
      *(enum rdzv_proto_error_code *)(base + f->off) =
          (enum rdzv_proto_error_code)e;
    return rc;
  case K_CONF:
  case K_CAUSE: {
    struct ctx sub = *c;

    if (!cJSON_IsObject(it))
      return wrong_type(c, f, "an object", it);
    sub.sub = f->name;
    /* Missing keys keep the defaults filled in before. */
    return decode_fields(&sub, it, sub_fields(f->kind), base + f->off);
  }
  case K_HEX:
  case K_TOKEN:
    if (!cJSON_IsString(it))
      return wrong_type(c, f, "a string", it);
    return decode_hex(c, f, it->valuestring, (unsigned char *)base + f->off);
  case K_STATUS:
    if (!cJSON_IsObject(it))
      return wrong_type(c, f, "an object", it);
    s = cJSON_PrintUnformatted(it);
    if (!s)
      return fail(c, -ENOMEM, "out of memory");
    *(char **)(base + f->off) = s;
    return 0;
  }
  return fail(c, -EINVAL, "internal: bad field kind");
}

/* The most fields an object of the protocol has (resume's). */
#define FIELDS_MAX 32

/* One walk over obj's members finds each field's (a member whose name is
 * no field's is ignored); the fields are then checked in their table's
 * order, a duplicate first, so the first problem named is the same as
 * when each field was looked up by a walk of its own. */
static int decode_fields(struct ctx *c, const cJSON *obj,
                         const struct field *fields, char *base)
{
  const cJSON *found[FIELDS_MAX] = { NULL };
  bool dup[FIELDS_MAX] = { false };
  const struct field *f;
  struct rdzv_proto_kv *kv;
  cJSON *it;
  size_t nf = 0, i;
  char p[80];
  int rc;

  for (f = fields; f->name; f++)
    if (++nf > FIELDS_MAX)
      return fail(c, -EINVAL, "internal: more than %d fields", FIELDS_MAX);
  cJSON_ArrayForEach(it, obj) {
    if (!it->string)
      continue;
    for (i = 0; i < nf; i++) {
      if (it->string[0] == fields[i].name[0] &&
          strcmp(it->string, fields[i].name) == 0) {
        if (found[i])
          dup[i] = true;
        else
          found[i] = it;
        break;
      }
    }
  }
  for (i = 0; i < nf; i++) {
    f = &fields[i];
    if (dup[i])
      return fail(c, -EINVAL, "%s: duplicate field",
                  path(c, f->name, p, sizeof p));
    if (!found[i]) {
      if (f->required)
        return fail(c, -EINVAL, "%s: missing",
                    path(c, f->name, p, sizeof p));
      if (f->kind == K_VALUE) {
        /* A value is never NULL after decode: absent is "". */
        kv = (struct rdzv_proto_kv *)(base + f->off);
        kv->value = calloc(1, 1);
        if (!kv->value)
          return fail(c, -ENOMEM, "out of memory");
      }
      continue;
    }
    rc = decode_field(c, f, found[i], base);
    if (rc)
      return rc;
  }
  return 0;
}

static enum rdzv_proto_op op_by_name(const char *s)
{
  int i;

  for (i = RDZV_PROTO_OP_INVALID + 1; i < RDZV_PROTO_OP_COUNT; i++)
    if (strcmp(ops[i].name, s) == 0)
      return (enum rdzv_proto_op)i;
  return RDZV_PROTO_OP_INVALID;
}

static int decode_head(struct ctx *c, const cJSON *j, enum rdzv_proto_op *op)
{
  cJSON *v, *o;
  char s[48], n[32];
  int rc;

  rc = member(c, j, "v", &v, -EPROTO);
  if (rc)
    return rc;
  if (!v)
    return fail(c, -EPROTO, "missing v");
  if (!cJSON_IsNumber(v))
    return fail(c, -EPROTO, "v: expected the integer %d, got %s",
                RDZV_PROTO_VERSION, type_name(v));
  if (v->valuedouble != RDZV_PROTO_VERSION)
    return fail(c, -EPROTO, "v: unsupported protocol version %s (this side "
                "speaks version %d)", num_text(v->valuedouble, n, sizeof n),
                RDZV_PROTO_VERSION);
  rc = member(c, j, "op", &o, -EBADMSG);
  if (rc)
    return rc;
  if (!o)
    return fail(c, -EBADMSG, "missing op");
  if (!cJSON_IsString(o))
    return fail(c, -EBADMSG, "op: expected a string, got %s", type_name(o));
  *op = op_by_name(o->valuestring);
  if (*op == RDZV_PROTO_OP_INVALID)
    return fail(c, -ENOTSUP, "unknown op \"%s\"",
                sanitize(o->valuestring, s, sizeof s));
  return 0;
}


int rdzv_proto_decode(const void *body, size_t len, struct rdzv_proto_msg *m,
                      char *err, size_t errlen)
{
  struct ctx c = { err, errlen, NULL, NULL };
  enum rdzv_proto_op op = RDZV_PROTO_OP_INVALID;
  cJSON *j = NULL, *heap = NULL;  /* heap: cJSON's tree, not the stack's */
  struct rp_flat fl;
  int rc;

  if (err && errlen)
    err[0] = '\0';
  memset(m, 0, sizeof *m);
  if (len == 0)
    return fail(&c, -EBADMSG, "empty body");
  if (len > RDZV_PROTO_MAX_FRAME)
    return fail(&c, -EMSGSIZE, "body of %zu bytes exceeds %u", len,
                RDZV_PROTO_MAX_FRAME);
  rc = check_nul(&c, body, len);
  if (rc)
    return rc;
  j = rp_flat_parse(&fl, body, len);
  if (!j) {
    rc = parse_object(&c, body, len, &j);
    if (rc)
      return rc;
    heap = j;
  }
  rc = decode_head(&c, j, &op);
  if (!rc) {
    c.op = ops[op].name;
    m->op = op;
    if (op == RDZV_PROTO_JOIN)
      rdzv_proto_conf_default(&m->u.join.conf);
    if (op == RDZV_PROTO_RESUME)
      rdzv_proto_conf_default(&m->u.resume.join.conf);
    rc = decode_fields(&c, j, ops[op].fields, (char *)m);
  }
  if (!rc)
    rc = check_relations(&c, m);
  cJSON_Delete(heap);
  if (rc) {
    rdzv_proto_msg_free(m);
    memset(m, 0, sizeof *m);
  }
  return rc;
}

/* ---- encoding (into an rp_out: Note [direct encoder] in rp_out.c) ---- */


static int encode_fields(struct ctx *c, struct rp_out *o,
                         const struct field *fields, const char *base);

/* A C string in a fixed array: terminated within it. */
static int array_len(struct ctx *c, const struct field *f, const char *s,
                     size_t *n)
{
  char p[80];

  *n = strnlen(s, f->size);
  if (*n == f->size)
    return fail(c, -EINVAL, "%s: not NUL-terminated",
                path(c, f->name, p, sizeof p));
  return check_length(c, f, *n);
}

static int encode_value(struct ctx *c, struct rp_out *o, const struct field *f,
                        const struct rdzv_proto_kv *kv)
{
  char p[80], *s;
  int rc;

  /* A NULL value is the empty string (KV_VALUE with found = false). */
  if (!kv->value) {
    if (kv->value_len)
      return fail(c, -EINVAL, "%s: NULL with length %zu",
                  path(c, f->name, p, sizeof p), kv->value_len);
    rp_out_string(o, "");
    return 0;
  }
  rc = check_length(c, f, kv->value_len);
  if (rc)
    return rc;
  if (memchr(kv->value, '\0', kv->value_len))
    return fail(c, -EINVAL, "%s: NUL byte in the value",
                path(c, f->name, p, sizeof p));
  /* Copy: the value need not be terminated at value_len. */
  s = malloc(kv->value_len + 1);
  if (!s)
    return -ENOMEM;
  memcpy(s, kv->value, kv->value_len);
  s[kv->value_len] = '\0';
  rp_out_string(o, s);
  free(s);
  return 0;
}

/* The status report: checked to be one JSON object, printed as cJSON
 * prints it. */
static int encode_status(struct ctx *c, struct rp_out *o, const struct field *f,
                         const char *json)
{
  char p[80], why[160], *text;
  struct ctx sub = { why, sizeof why, NULL, NULL };
  cJSON *st;
  int rc;

  if (!json)
    return fail(c, -EINVAL, "%s: NULL", path(c, f->name, p, sizeof p));
  rc = parse_object(&sub, json, strlen(json), &st);
  if (rc)
    return fail(c, -EINVAL, "%s: %s", path(c, f->name, p, sizeof p), why);
  text = cJSON_PrintUnformatted(st);
  cJSON_Delete(st);
  if (!text)
    return -ENOMEM;
  rp_out_put(o, text, strlen(text));
  cJSON_free(text);
  return 0;
}

/* Writes f's value (its key is written already). */
static int encode_field(struct ctx *c, struct rp_out *o, const struct field *f,
                        const char *base)
{
  const void *at = base + f->off;
  const char *name;
  char p[80];
  double d;
  size_t n;
  int rc;

  switch (f->kind) {
  case K_INT:
  case K_I64:
  case K_DBL:
    d = f->kind == K_INT   ? *(const int *)at
        : f->kind == K_I64 ? (double)*(const int64_t *)at
                           : *(const double *)at;
    /* An int64 beyond 2^53 would round into range: check it exactly. */
    if (f->kind == K_I64 && (*(const int64_t *)at > (int64_t)f->hi ||
                             *(const int64_t *)at < (int64_t)f->lo))
      return fail(c, -EINVAL, "%s: expected an integer %.0f..%.0f, got %"
                  PRId64, path(c, f->name, p, sizeof p), f->lo, f->hi,
                  *(const int64_t *)at);
    rc = check_number(c, f, d);
    if (!rc)
      rp_out_number(o, d, f->kind != K_DBL);
    return rc;
  case K_BOOL:
    if (*(const bool *)at)
      rp_out_put(o, "true", 4);
    else
      rp_out_put(o, "false", 5);
    return 0;
  case K_STR:
  case K_OSTR:
    rc = array_len(c, f, at, &n);
    if (!rc)
      rp_out_string(o, at);
    return rc;
  case K_VALUE:
    return encode_value(c, o, f, at);
  case K_REASON:
  case K_PHASE:
  case K_CODE:
    name = f->kind == K_REASON
             ? reason_name(*(const enum rdzv_proto_join_reason *)at)
           : f->kind == K_PHASE
             ? phase_name(*(const enum rdzv_proto_resume_phase *)at)
             : rdzv_proto_error_name(*(const enum rdzv_proto_error_code *)at);
    if (!name)
      return fail(c, -EINVAL, "%s: invalid value %d",
                  path(c, f->name, p, sizeof p), *(const int *)at);
    rp_out_string(o, name);
    return 0;
  case K_CONF:
  case K_CAUSE: {
    struct ctx sub = *c;

    sub.sub = f->name;
    return encode_fields(&sub, o, sub_fields(f->kind), at);
  }
  case K_STATUS:
    return encode_status(c, o, f, *(char *const *)at);
  case K_HEX:
  case K_TOKEN: {
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = at;
    char hex[2 * RDZV_PROTO_AUTH_BYTES + 2];

    if (f->size > RDZV_PROTO_AUTH_BYTES)
      return -EINVAL;
    hex[0] = '"';
    for (n = 0; n < f->size; n++) {
      hex[1 + 2 * n] = digits[b[n] >> 4];
      hex[2 + 2 * n] = digits[b[n] & 15];
    }
    hex[1 + 2 * n] = '"';
    rp_out_put(o, hex, 2 * n + 2);
    return 0;
  }
  }
  return -EINVAL;
}

static bool all_zero(const char *p, size_t n)
{
  while (n--)
    if (*p++)
      return false;
  return true;
}

bool rdzv_proto_token_none(const unsigned char t[RDZV_PROTO_TOKEN_BYTES])
{
  return all_zero((const char *)t, RDZV_PROTO_TOKEN_BYTES);
}

/* The members of fields at base, each after a comma unless *first. */
static int encode_members(struct ctx *c, struct rp_out *o,
                          const struct field *fields, const char *base,
                          bool *first)
{
  const struct field *f;
  int rc;

  for (f = fields; f->name; f++) {
    if (f->size == OMIT_ZERO && (f->kind == K_BOOL || f->kind == K_INT) &&
        (f->kind == K_BOOL ? !*(const bool *)(base + f->off)
                           : *(const int *)(base + f->off) == 0))
      continue;
    if (f->kind == K_TOKEN && all_zero(base + f->off, f->size))
      continue;
    if (f->kind == K_OSTR && !*(base + f->off))
      continue;
    if (f->kind == K_CAUSE &&
        ((const struct rdzv_proto_cause *)(base + f->off))->exited_at == 0)
      continue;
    rp_out_key(o, f->name, first);
    rc = encode_field(c, o, f, base);
    if (rc)
      return rc;
  }
  return 0;
}

/* The object of fields at base (a nested one: conf, cause). */
static int encode_fields(struct ctx *c, struct rp_out *o,
                         const struct field *fields, const char *base)
{
  bool first = true;
  int rc;

  rp_out_char(o, '{');
  rc = encode_members(c, o, fields, base, &first);
  rp_out_char(o, '}');
  return rc;
}

int rdzv_proto_encode_into(const struct rdzv_proto_msg *m, char *buf,
                           size_t cap, char **out, size_t *len)
{
  char why[256];
  struct ctx c = { why, sizeof why, NULL, NULL };
  struct rp_out o = { buf, RDZV_PROTO_FRAME_HEADER, cap, false, 0 };
  bool first = false;           /* "op" is */
  size_t n;
  int rc;

  *out = NULL;
  *len = 0;
  c.op = rdzv_proto_op_name(m->op);
  if (!c.op)
    return -EINVAL;
  if (!buf || cap < RDZV_PROTO_FRAME_HEADER) {
    o.cap = 0;
    o.len = 0;
    rp_out_put(&o, "\0\0\0\0", RDZV_PROTO_FRAME_HEADER);
  }
  rp_out_put(&o, "{\"v\":", 5);
  rp_out_i64(&o, RDZV_PROTO_VERSION);
  rp_out_put(&o, ",\"op\":", 6);
  rp_out_string(&o, c.op);
  rc = encode_members(&c, &o, ops[m->op].fields, (const char *)m, &first);
  if (!rc)
    rc = check_relations(&c, m);
  rp_out_char(&o, '}');
  if (!rc)
    rc = o.err;
  if (rc) {
    if (o.heap)
      free(o.buf);
    return rc;
  }
  n = o.len - RDZV_PROTO_FRAME_HEADER;
  if (n > RDZV_PROTO_MAX_FRAME) {
    if (o.heap)
      free(o.buf);
    return -EMSGSIZE;
  }
  o.buf[0] = (char)(n >> 24 & 0xff);
  o.buf[1] = (char)(n >> 16 & 0xff);
  o.buf[2] = (char)(n >> 8 & 0xff);
  o.buf[3] = (char)(n & 0xff);
  *out = o.buf;
  *len = o.len;
  return 0;
}

int rdzv_proto_encode(const struct rdzv_proto_msg *m, char **out, size_t *len)
{
  return rdzv_proto_encode_into(m, NULL, 0, out, len);
}
