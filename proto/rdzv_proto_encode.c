/* rdzv_proto_encode.c -- the codec's encoder: a struct rdzv_proto_msg,
 * checked as the decoder would check it (rdzv_proto.c), written as one
 * frame straight into the caller's buffer (rdzv_proto_out.h). */
#include "rdzv_proto.h"
#include "rdzv_proto_int.h"
#include "rdzv_proto_out.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- encoding (into an rdzv_proto_out: Note [direct encoder] in
 * rdzv_proto_out.c) ---- */

static int encode_fields(struct ctx *c, struct rdzv_proto_out *o,
                         const struct field *fields, const char *base);

/* A C string in a fixed array: terminated within it. */
static int array_len(struct ctx *c, const struct field *f, const char *s,
                     size_t *n)
{
  char p[80];

  *n = strnlen(s, f->size);
  if (*n == f->size)
    return rdzv_proto__fail(c, -EINVAL, "%s: not NUL-terminated",
                            rdzv_proto__path(c, f->name, p, sizeof p));
  return rdzv_proto__check_length(c, f, *n);
}

static int encode_value(struct ctx *c, struct rdzv_proto_out *o,
                        const struct field *f, const struct rdzv_proto_kv *kv)
{
  char p[80], *s;
  int rc;

  /* A NULL value is the empty string (KV_VALUE with found = false). */
  if (!kv->value) {
    if (kv->value_len)
      return rdzv_proto__fail(c, -EINVAL, "%s: NULL with length %zu",
                              rdzv_proto__path(c, f->name, p, sizeof p),
                              kv->value_len);
    rdzv_proto_out_string(o, "");
    return 0;
  }
  rc = rdzv_proto__check_length(c, f, kv->value_len);
  if (rc)
    return rc;
  if (memchr(kv->value, '\0', kv->value_len))
    return rdzv_proto__fail(c, -EINVAL, "%s: NUL byte in the value",
                            rdzv_proto__path(c, f->name, p, sizeof p));
  /* Copy: the value need not be terminated at value_len. */
  s = malloc(kv->value_len + 1);
  if (!s)
    return -ENOMEM;
  memcpy(s, kv->value, kv->value_len);
  s[kv->value_len] = '\0';
  rdzv_proto_out_string(o, s);
  free(s);
  return 0;
}

/* The status report: checked to be one JSON object, printed as cJSON
 * prints it. */
static int encode_status(struct ctx *c, struct rdzv_proto_out *o,
                         const struct field *f, const char *json)
{
  char p[80], why[160], *text;
  struct ctx sub = { why, sizeof why, NULL, NULL };
  cJSON *st;
  int rc;

  if (!json)
    return rdzv_proto__fail(c, -EINVAL, "%s: NULL",
                            rdzv_proto__path(c, f->name, p, sizeof p));
  rc = rdzv_proto__parse_object(&sub, json, strlen(json), &st);
  if (rc)
    return rdzv_proto__fail(c, -EINVAL, "%s: %s",
                            rdzv_proto__path(c, f->name, p, sizeof p), why);
  text = cJSON_PrintUnformatted(st);
  cJSON_Delete(st);
  if (!text)
    return -ENOMEM;
  rdzv_proto_out_put(o, text, strlen(text));
  cJSON_free(text);
  return 0;
}

/* Writes f's value (its key is written already). */
static int encode_field(struct ctx *c, struct rdzv_proto_out *o,
                        const struct field *f, const char *base)
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
      return rdzv_proto__fail(
          c, -EINVAL, "%s: expected an integer %.0f..%.0f, got %" PRId64,
          rdzv_proto__path(c, f->name, p, sizeof p), f->lo, f->hi,
          *(const int64_t *)at);
    rc = rdzv_proto__check_number(c, f, d);
    if (!rc)
      rdzv_proto_out_number(o, d, f->kind != K_DBL);
    return rc;
  case K_BOOL:
    if (*(const bool *)at)
      rdzv_proto_out_put(o, "true", 4);
    else
      rdzv_proto_out_put(o, "false", 5);
    return 0;
  case K_STR:
  case K_OSTR:
    rc = array_len(c, f, at, &n);
    if (!rc)
      rdzv_proto_out_string(o, at);
    return rc;
  case K_VALUE:
    return encode_value(c, o, f, at);
  case K_REASON:
  case K_PHASE:
  case K_CODE:
    name = f->kind == K_REASON
             ? rdzv_proto__reason_name(*(const enum rdzv_proto_join_reason *)at)
           : f->kind == K_PHASE
             ? rdzv_proto__phase_name(*(const enum rdzv_proto_resume_phase *)at)
             : rdzv_proto_error_name(*(const enum rdzv_proto_error_code *)at);
    if (!name)
      return rdzv_proto__fail(c, -EINVAL, "%s: invalid value %d",
                              rdzv_proto__path(c, f->name, p, sizeof p),
                              *(const int *)at);
    rdzv_proto_out_string(o, name);
    return 0;
  case K_CONF:
  case K_CAUSE: {
    struct ctx sub = *c;

    sub.sub = f->name;
    return encode_fields(&sub, o, rdzv_proto__sub_fields(f->kind), at);
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
    rdzv_proto_out_put(o, hex, 2 * n + 2);
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
static int encode_members(struct ctx *c, struct rdzv_proto_out *o,
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
    rdzv_proto_out_key(o, f->name, first);
    rc = encode_field(c, o, f, base);
    if (rc)
      return rc;
  }
  return 0;
}

/* The object of fields at base (a nested one: conf, cause). */
static int encode_fields(struct ctx *c, struct rdzv_proto_out *o,
                         const struct field *fields, const char *base)
{
  bool first = true;
  int rc;

  rdzv_proto_out_char(o, '{');
  rc = encode_members(c, o, fields, base, &first);
  rdzv_proto_out_char(o, '}');
  return rc;
}

int rdzv_proto_encode_into(const struct rdzv_proto_msg *m, char *buf,
                           size_t cap, char **out, size_t *len)
{
  char why[256];
  struct ctx c = { why, sizeof why, NULL, NULL };
  struct rdzv_proto_out o = { buf, RDZV_PROTO_FRAME_HEADER, cap, false, 0 };
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
    rdzv_proto_out_put(&o, "\0\0\0\0", RDZV_PROTO_FRAME_HEADER);
  }
  rdzv_proto_out_put(&o, "{\"v\":", 5);
  rdzv_proto_out_i64(&o, RDZV_PROTO_VERSION);
  rdzv_proto_out_put(&o, ",\"op\":", 6);
  rdzv_proto_out_string(&o, c.op);
  rc = encode_members(&c, &o, rdzv_proto__ops[m->op].fields, (const char *)m,
                      &first);
  if (!rc)
    rc = rdzv_proto__check_relations(&c, m);
  rdzv_proto_out_char(&o, '}');
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
