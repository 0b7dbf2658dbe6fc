/* rdzv_proto.c -- the rendezvous wire codec (spec: proto/PROTOCOL.md):
 * the messages' field tables, the names on the wire, and what the
 * encoder (rdzv_proto_encode.c) and the decoder (rdzv_proto_decode.c)
 * share: the error texts, the checks of every field and of the relations
 * between fields, the parse of a JSON body. */
#include "rdzv_proto.h"
#include "rdzv_proto_int.h"

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
const struct field *rdzv_proto__sub_fields(enum kind k)
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

const struct rdzv_proto__op rdzv_proto__ops[RDZV_PROTO_OP_COUNT] = {
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

const char *const rdzv_proto__reasons[RDZV_PROTO__N_REASONS] = {
  [RDZV_PROTO_REASON_FIRST] = "first",
  [RDZV_PROTO_REASON_FAILURE] = "failure",
  [RDZV_PROTO_REASON_MEMBERSHIP] = "membership",
};

const char *const rdzv_proto__phases[RDZV_PROTO__N_PHASES] = {
  [RDZV_PROTO_PHASE_GATHERING] = "gathering",
  [RDZV_PROTO_PHASE_RUNNING] = "running",
  [RDZV_PROTO_PHASE_EXIT] = "exit",
};

const char *const rdzv_proto__codes[RDZV_PROTO__N_CODES] = {
  [RDZV_PROTO_ERR_BAD_REQUEST] = "bad_request",
  [RDZV_PROTO_ERR_CONFIG_MISMATCH] = "config_mismatch",
  [RDZV_PROTO_ERR_JOIN_TIMEOUT] = "join_timeout",
  [RDZV_PROTO_ERR_CLOSED] = "closed",
  [RDZV_PROTO_ERR_NOT_JOINED] = "not_joined",
  [RDZV_PROTO_ERR_LIMIT] = "limit",
  [RDZV_PROTO_ERR_TIMEOUT] = "timeout",
  [RDZV_PROTO_ERR_AUTH] = "auth",
};

const char *rdzv_proto_op_name(enum rdzv_proto_op op)
{
  if ((int)op <= RDZV_PROTO_OP_INVALID || op >= RDZV_PROTO_OP_COUNT)
    return NULL;
  return rdzv_proto__ops[op].name;
}

const char *rdzv_proto_error_name(enum rdzv_proto_error_code code)
{
  if ((int)code < RDZV_PROTO_ERR_BAD_REQUEST ||
      (size_t)code >= RDZV_PROTO__N_CODES)
    return NULL;
  return rdzv_proto__codes[code];
}

const char *rdzv_proto__reason_name(enum rdzv_proto_join_reason r)
{
  if ((int)r < 0 || (size_t)r >= RDZV_PROTO__N_REASONS)
    return NULL;
  return rdzv_proto__reasons[r];
}

const char *rdzv_proto__phase_name(enum rdzv_proto_resume_phase p)
{
  if ((int)p < 0 || (size_t)p >= RDZV_PROTO__N_PHASES)
    return NULL;
  return rdzv_proto__phases[p];
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

int rdzv_proto__fail(struct ctx *c, int rc, const char *fmt, ...)
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
const char *rdzv_proto__path(const struct ctx *c, const char *name, char *buf,
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
const char *rdzv_proto__sanitize(const char *s, char *buf, size_t len)
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

const char *rdzv_proto__type_name(const cJSON *it)
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
const char *rdzv_proto__num_text(double d, char *buf, size_t len)
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

  rdzv_proto__num_text(f->lo, lo, sizeof lo);
  rdzv_proto__num_text(f->hi, hi, sizeof hi);
  if (integral)
    snprintf(buf, len, "an integer %s..%s", lo, hi);
  else if (f->lo_open)
    snprintf(buf, len, "a number > %s and <= %s", lo, hi);
  else
    snprintf(buf, len, "a number %s..%s", lo, hi);
  return buf;
}

/* ---- checks shared by encode and decode ---- */

int rdzv_proto__check_number(struct ctx *c, const struct field *f, double d)
{
  bool integral = f->kind == K_INT || f->kind == K_I64;
  bool ok = isfinite(d) && d <= f->hi &&
            (f->lo_open ? d > f->lo : d >= f->lo) &&
            (!integral || d == floor(d));
  char p[80], r[64], n[32];

  if (ok)
    return 0;
  return rdzv_proto__fail(c, -EINVAL, "%s: expected %s, got %s",
                          rdzv_proto__path(c, f->name, p, sizeof p),
                          range_text(f, integral, r, sizeof r),
                          rdzv_proto__num_text(d, n, sizeof n));
}

int rdzv_proto__check_length(struct ctx *c, const struct field *f, size_t n)
{
  char p[80], lo[32], hi[32];

  if (n >= f->lo && n <= f->hi)
    return 0;
  return rdzv_proto__fail(c, -EINVAL,
                          "%s: expected a string of %s..%s bytes, got %zu",
                          rdzv_proto__path(c, f->name, p, sizeof p),
                          rdzv_proto__num_text(f->lo, lo, sizeof lo),
                          rdzv_proto__num_text(f->hi, hi, sizeof hi), n);
}

/* The keepalive window (interval x misses) has a floor: below it a job's
 * first joiner could have every member declared dead before it spoke. */
static int check_keepalive_window(struct ctx *c, const char *op,
                                  const struct rdzv_proto_conf *cf)
{
  double window = cf->keepalive_interval * cf->keepalive_misses;

  if (window < RDZV_PROTO_MIN_KEEPALIVE_WINDOW)
    return rdzv_proto__fail(c, -EINVAL,
                            "%s.conf.keepalive_interval x "
                            "keepalive_misses: %g s, expected at least %g s",
                            op, window, RDZV_PROTO_MIN_KEEPALIVE_WINDOW);
  return 0;
}

/* Relations between fields, after each field is known to be valid. */
int rdzv_proto__check_relations(struct ctx *c, const struct rdzv_proto_msg *m)
{
  const struct rdzv_proto_conf *cf = &m->u.join.conf;
  const struct rdzv_proto_waiting *w = &m->u.waiting;
  const struct rdzv_proto_round *r = &m->u.round;
  const struct rdzv_proto_resume *rs = &m->u.resume;

  switch (m->op) {
  case RDZV_PROTO_JOIN:
    if (cf->min_nodes > cf->max_nodes)
      return rdzv_proto__fail(c, -EINVAL,
                              "join.conf.min_nodes: %d > max_nodes %d",
                              cf->min_nodes, cf->max_nodes);
    return check_keepalive_window(c, "join", cf);
  case RDZV_PROTO_WAITING:
    if (w->min_nodes > w->max_nodes)
      return rdzv_proto__fail(c, -EINVAL,
                              "waiting.min_nodes: %d > max_nodes %d",
                              w->min_nodes, w->max_nodes);
    if (w->last_call < 0 && w->last_call != -1)
      return rdzv_proto__fail(
          c, -EINVAL,
          "waiting.last_call: expected -1 or a number >= 0, "
          "got %g",
          w->last_call);
    break;
  case RDZV_PROTO_ROUND:
    if (r->group_rank >= r->group_world_size)
      return rdzv_proto__fail(c, -EINVAL,
                              "round.group_rank: %d >= group_world_size %d",
                              r->group_rank, r->group_world_size);
    if (r->group_world_size > r->world_size)
      return rdzv_proto__fail(c, -EINVAL,
                              "round.group_world_size: %d > world_size %d",
                              r->group_world_size, r->world_size);
    if (r->rank_offset >= r->world_size)
      return rdzv_proto__fail(c, -EINVAL,
                              "round.rank_offset: %d >= world_size %d",
                              r->rank_offset, r->world_size);
    break;
  case RDZV_PROTO_RESUME:
    if (rs->join.conf.min_nodes > rs->join.conf.max_nodes)
      return rdzv_proto__fail(
          c, -EINVAL, "resume.conf.min_nodes: %d > max_nodes %d",
          rs->join.conf.min_nodes, rs->join.conf.max_nodes);
    if (check_keepalive_window(c, "resume", &rs->join.conf))
      return -EINVAL;
    if (rs->phase == RDZV_PROTO_PHASE_GATHERING)
      break;
    /* A running node re-asserts its whole assignment. */
    if (rs->round.group_world_size < 1 ||
        rs->round.group_rank >= rs->round.group_world_size)
      return rdzv_proto__fail(c, -EINVAL, "resume.group_rank: %d not below "
                              "group_world_size %d", rs->round.group_rank,
                              rs->round.group_world_size);
    if (rs->round.group_world_size > rs->round.world_size ||
        rs->round.rank_offset >= rs->round.world_size)
      return rdzv_proto__fail(c, -EINVAL, "resume.world_size: %d below "
                              "group_world_size %d or rank_offset %d",
                              rs->round.world_size, rs->round.group_world_size,
                              rs->round.rank_offset);
    /* Its ranks rank_offset .. rank_offset + nproc - 1 lie in the world
     * (int64: both may be near INT_MAX). */
    if ((int64_t)rs->round.rank_offset + rs->join.nproc >
        rs->round.world_size)
      return rdzv_proto__fail(c, -EINVAL,
                              "resume.rank_offset: %d + nproc %d > "
                              "world_size %d",
                              rs->round.rank_offset, rs->join.nproc,
                              rs->round.world_size);
    if (!rs->round.master_addr[0] || rs->round.master_port < 1)
      return rdzv_proto__fail(c, -EINVAL, "resume.master_addr/job_master_port: "
                              "required when running");
    break;
  default:
    break;
  }
  return 0;
}

/* ---- parsing a body (the decoder's, and the encoder's STATUS_REPLY) ---- */

/* Raw NUL bytes and \u0000 escapes would silently cut a string short in
 * cJSON; refuse them before parsing.  String state is tracked so that an
 * escaped backslash followed by "u0000" is not mistaken for one. */
int rdzv_proto__check_nul(struct ctx *c, const char *s, size_t len)
{
  bool in_str = false;
  size_t i;

  /* The common body has neither a NUL nor a backslash (so no \u0000):
   * two vector scans say so; otherwise the walk finds where. */
  if (!memchr(s, '\0', len) && !memchr(s, '\\', len))
    return 0;
  for (i = 0; i < len; i++) {
    if (s[i] == '\0')
      return rdzv_proto__fail(c, -EBADMSG, "NUL byte at offset %zu", i);
    if (!in_str) {
      in_str = s[i] == '"';
    } else if (s[i] == '"') {
      in_str = false;
    } else if (s[i] == '\\' && i + 1 < len) {
      if (s[i + 1] == 'u' && i + 5 < len && memcmp(s + i + 2, "0000", 4) == 0)
        return rdzv_proto__fail(c, -EBADMSG,
                                "\\u0000 in a string at offset %zu", i);
      i++;
    }
  }
  return 0;
}

/* Parses exactly len bytes as one JSON object: no NUL, nothing but
 * whitespace after it. */
int rdzv_proto__parse_object(struct ctx *c, const char *s, size_t len,
                             cJSON **out)
{
  const char *end = NULL;
  cJSON *j;
  int rc;

  rc = rdzv_proto__check_nul(c, s, len);
  if (rc)
    return rc;
  j = cJSON_ParseWithLengthOpts(s, len, &end, false);
  if (!j) {
    size_t at = end && end >= s && end <= s + len ? (size_t)(end - s) : 0;

    return rdzv_proto__fail(c, -EBADMSG, "not valid JSON (at byte %zu)", at);
  }
  for (; end < s + len; end++) {
    if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
      cJSON_Delete(j);
      return rdzv_proto__fail(c, -EBADMSG,
                              "trailing bytes after the JSON object "
                              "(at byte %zu)",
                              (size_t)(end - s));
    }
  }
  if (!cJSON_IsObject(j)) {
    rc = rdzv_proto__fail(c, -EBADMSG, "expected a JSON object, got %s",
                          rdzv_proto__type_name(j));
    cJSON_Delete(j);
    return rc;
  }
  *out = j;
  return 0;
}
