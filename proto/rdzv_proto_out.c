/* rdzv_proto_out.c -- the encoder's output: JSON text written straight into a
 * buffer (see rdzv_proto_out.h). */
#include "rdzv_proto_out.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_proto.h"

/* Note [direct encoder]: a body is written straight into the caller's
 * buffer (rdzvd: one on its stack per reply), byte for byte what
 * cJSON_PrintUnformatted printed of the tree the encoder used to build
 * (the same key order, escapes and number texts; check_proto compares
 * them), without the tree's allocations: a round's replies are O(N) and
 * this is their per-node cost. */

bool rdzv_proto_out_grow(struct rdzv_proto_out *o, size_t n)
{
  size_t cap;
  char *b;

  if (o->err)
    return false;
  if (o->len + n > RDZV_PROTO_FRAME_HEADER + RDZV_PROTO_MAX_FRAME) {
    o->err = -EMSGSIZE;
    return false;
  }
  cap = o->cap < 512 ? 512 : o->cap;
  while (cap - o->len < n)
    cap *= 2;
  b = o->heap ? realloc(o->buf, cap) : malloc(cap);
  if (!b) {
    o->err = -ENOMEM;
    return false;
  }
  if (!o->heap && o->len)
    memcpy(b, o->buf, o->len);
  o->buf = b;
  o->cap = cap;
  o->heap = true;
  return true;
}

/* A JSON string as cJSON prints one: '"' '\\' and \b \f \n \r \t escaped,
 * other control bytes as \u00xx, every other byte as it is. */
void rdzv_proto_out_string(struct rdzv_proto_out *o, const char *s)
{
  static const char digits[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;

  rdzv_proto_out_char(o, '"');
  for (; *u; u++) {
    size_t run = 0;

    while (u[run] >= 0x20 && u[run] != '"' && u[run] != '\\')
      run++;
    if (run) {
      rdzv_proto_out_put(o, (const char *)u, run);
      u += run;
      if (!*u)
        break;
    }
    switch (*u) {
    case '"': rdzv_proto_out_put(o, "\\\"", 2); break;
    case '\\': rdzv_proto_out_put(o, "\\\\", 2); break;
    case '\b': rdzv_proto_out_put(o, "\\b", 2); break;
    case '\f': rdzv_proto_out_put(o, "\\f", 2); break;
    case '\n': rdzv_proto_out_put(o, "\\n", 2); break;
    case '\r': rdzv_proto_out_put(o, "\\r", 2); break;
    case '\t': rdzv_proto_out_put(o, "\\t", 2); break;
    default: {
      char esc[6] = { '\\', 'u', '0', '0', digits[*u >> 4], digits[*u & 15] };

      rdzv_proto_out_put(o, esc, sizeof esc);
    }
    }
  }
  rdzv_proto_out_char(o, '"');
}

/* ,"name": (the comma unless it is the object's first member) */
void rdzv_proto_out_key(struct rdzv_proto_out *o, const char *name, bool *first)
{
  if (!*first)
    rdzv_proto_out_char(o, ',');
  *first = false;
  rdzv_proto_out_string(o, name);
  rdzv_proto_out_char(o, ':');
}

void rdzv_proto_out_i64(struct rdzv_proto_out *o, int64_t v)
{
  char buf[24], *p = buf + sizeof buf;
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

  do {
    *--p = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0)
    *--p = '-';
  rdzv_proto_out_put(o, p, (size_t)(buf + sizeof buf - p));
}

/* Numbers go out as text of their own: cJSON's printer rounds to 15
 * digits when that is "close enough", which would not survive a round
 * trip.  A whole double below 1e15 prints as %.15g would print it. */
void rdzv_proto_out_number(struct rdzv_proto_out *o, double d, bool integral)
{
  char buf[40];
  const char *dp;
  char *p;
  int prec;

  if (integral || (d == floor(d) && fabs(d) < 1e15 && !(d == 0 && signbit(d)))) {
    rdzv_proto_out_i64(o, (int64_t)d);
    return;
  }
  /* The shortest of 15..17 digits that reads back exactly. */
  for (prec = 15; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (strtod(buf, NULL) == d)
      break;
  }
  /* JSON wants '.', whatever LC_NUMERIC says. */
  dp = localeconv()->decimal_point;
  if (dp && dp[0] && dp[0] != '.' && (p = strchr(buf, dp[0])))
    *p = '.';
  rdzv_proto_out_put(o, buf, strlen(buf));
}
