/* rdzv_proto_decode.c -- the codec's decoder: a frame's body, checked
 * field by field against the message tables (rdzv_proto.c), into a
 * struct rdzv_proto_msg.  The flat form the encoder prints is read
 * without an allocation (rdzv_proto_flat.h); anything else goes to cJSON. */
#include "rdzv_proto.h"
#include "rdzv_proto_int.h"
#include "rdzv_proto_flat.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <locale.h>

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
          rdzv_proto__path(c, name, p, sizeof p);
        else
          snprintf(p, sizeof p, "%s", name);
        return rdzv_proto__fail(c, dup_rc, "%s: duplicate field", p);
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

  return rdzv_proto__fail(c, -EINVAL, "%s: expected %s, got %s",
                          rdzv_proto__path(c, f->name, p, sizeof p), want,
                          rdzv_proto__type_name(it));
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
  return rdzv_proto__fail(c, -EINVAL, "%s: unknown value \"%s\"",
                          rdzv_proto__path(c, f->name, p, sizeof p),
                          rdzv_proto__sanitize(it->valuestring, s, sizeof s));
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
    return rdzv_proto__fail(
        c, -EINVAL, "%s: expected %zu hex digits, got %zu bytes",
        rdzv_proto__path(c, f->name, p, sizeof p), 2 * f->size, n);
  for (i = 0; i < f->size; i++) {
    hi = s[2 * i] ? strchr(digits, s[2 * i]) : NULL;
    lo = s[2 * i + 1] ? strchr(digits, s[2 * i + 1]) : NULL;
    if (!hi || !lo)
      return rdzv_proto__fail(c, -EINVAL, "%s: not lowercase hex",
                              rdzv_proto__path(c, f->name, p, sizeof p));
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
    rc = rdzv_proto__check_number(c, f, it->valuedouble);
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
    rc = rdzv_proto__check_length(c, f, n);
    if (rc)
      return rc;
    memcpy(base + f->off, it->valuestring, n + 1);
    return 0;
  case K_VALUE:
    if (!cJSON_IsString(it))
      return wrong_type(c, f, "a string", it);
    n = strlen(it->valuestring);
    rc = rdzv_proto__check_length(c, f, n);
    if (rc)
      return rc;
    kv = (struct rdzv_proto_kv *)(base + f->off);
    s = malloc(n + 1);
    if (!s)
      return rdzv_proto__fail(c, -ENOMEM, "out of memory");
    memcpy(s, it->valuestring, n + 1);
    free(kv->value);
    kv->value = s;
    kv->value_len = n;
    return 0;
  case K_REASON:
    rc = decode_enum(c, f, it, rdzv_proto__reasons, RDZV_PROTO__N_REASONS, 0,
                     &e);
    if (!rc)
      *(enum rdzv_proto_join_reason *)(base + f->off) =
          (enum rdzv_proto_join_reason)e;
    return rc;
  case K_PHASE:
    rc = decode_enum(c, f, it, rdzv_proto__phases, RDZV_PROTO__N_PHASES, 0, &e);
    if (!rc)
      *(enum rdzv_proto_resume_phase *)(base + f->off) =
          (enum rdzv_proto_resume_phase)e;
    return rc;
  case K_CODE:
    rc = decode_enum(c, f, it, rdzv_proto__codes, RDZV_PROTO__N_CODES,
                     RDZV_PROTO_ERR_BAD_REQUEST, &e);
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
    return decode_fields(&sub, it, rdzv_proto__sub_fields(f->kind),
                         base + f->off);
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
      return rdzv_proto__fail(c, -ENOMEM, "out of memory");
    *(char **)(base + f->off) = s;
    return 0;
  }
  return rdzv_proto__fail(c, -EINVAL, "internal: bad field kind");
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
      return rdzv_proto__fail(c, -EINVAL, "internal: more than %d fields",
                              FIELDS_MAX);
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
      return rdzv_proto__fail(c, -EINVAL, "%s: duplicate field",
                              rdzv_proto__path(c, f->name, p, sizeof p));
    if (!found[i]) {
      if (f->required)
        return rdzv_proto__fail(c, -EINVAL, "%s: missing",
                                rdzv_proto__path(c, f->name, p, sizeof p));
      if (f->kind == K_VALUE) {
        /* A value is never NULL after decode: absent is "". */
        kv = (struct rdzv_proto_kv *)(base + f->off);
        kv->value = calloc(1, 1);
        if (!kv->value)
          return rdzv_proto__fail(c, -ENOMEM, "out of memory");
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
    if (strcmp(rdzv_proto__ops[i].name, s) == 0)
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
    return rdzv_proto__fail(c, -EPROTO, "missing v");
  if (!cJSON_IsNumber(v))
    return rdzv_proto__fail(c, -EPROTO, "v: expected the integer %d, got %s",
                            RDZV_PROTO_VERSION, rdzv_proto__type_name(v));
  if (v->valuedouble != RDZV_PROTO_VERSION)
    return rdzv_proto__fail(c, -EPROTO,
                            "v: unsupported protocol version %s (this side "
                            "speaks version %d)",
                            rdzv_proto__num_text(v->valuedouble, n, sizeof n),
                            RDZV_PROTO_VERSION);
  rc = member(c, j, "op", &o, -EBADMSG);
  if (rc)
    return rc;
  if (!o)
    return rdzv_proto__fail(c, -EBADMSG, "missing op");
  if (!cJSON_IsString(o))
    return rdzv_proto__fail(c, -EBADMSG, "op: expected a string, got %s",
                            rdzv_proto__type_name(o));
  *op = op_by_name(o->valuestring);
  if (*op == RDZV_PROTO_OP_INVALID)
    return rdzv_proto__fail(c, -ENOTSUP, "unknown op \"%s\"",
                            rdzv_proto__sanitize(o->valuestring, s, sizeof s));
  return 0;
}


int rdzv_proto_decode(const void *body, size_t len, struct rdzv_proto_msg *m,
                      char *err, size_t errlen)
{
  struct ctx c = { err, errlen, NULL, NULL };
  enum rdzv_proto_op op = RDZV_PROTO_OP_INVALID;
  cJSON *j = NULL, *heap = NULL;  /* heap: cJSON's tree, not the stack's */
  struct rdzv_proto_flat fl;
  int rc;

  if (err && errlen)
    err[0] = '\0';
  memset(m, 0, sizeof *m);
  if (len == 0)
    return rdzv_proto__fail(&c, -EBADMSG, "empty body");
  if (len > RDZV_PROTO_MAX_FRAME)
    return rdzv_proto__fail(&c, -EMSGSIZE, "body of %zu bytes exceeds %u", len,
                            RDZV_PROTO_MAX_FRAME);
  rc = rdzv_proto__check_nul(&c, body, len);
  if (rc)
    return rc;
  j = rdzv_proto_flat_parse(&fl, body, len);
  if (!j) {
    rc = rdzv_proto__parse_object(&c, body, len, &j);
    if (rc)
      return rc;
    heap = j;
  }
  rc = decode_head(&c, j, &op);
  if (!rc) {
    c.op = rdzv_proto__ops[op].name;
    m->op = op;
    if (op == RDZV_PROTO_JOIN)
      rdzv_proto_conf_default(&m->u.join.conf);
    if (op == RDZV_PROTO_RESUME)
      rdzv_proto_conf_default(&m->u.resume.join.conf);
    rc = decode_fields(&c, j, rdzv_proto__ops[op].fields, (char *)m);
  }
  if (!rc)
    rc = rdzv_proto__check_relations(&c, m);
  cJSON_Delete(heap);
  if (rc) {
    rdzv_proto_msg_free(m);
    memset(m, 0, sizeof *m);
  }
  return rc;
}
