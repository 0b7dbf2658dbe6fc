/* rdzv_proto_flat.c -- agents' flat bodies parsed without cJSON's allocations
 * (see rdzv_proto_flat.h). */
#include "rdzv_proto_flat.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Note [flat parse]: every frame an agent sends is one small object in
 * the form the encoder prints: no whitespace, strings of printable ASCII
 * without escapes, whole numbers of at most 15 digits, one nested
 * object.  Such a body is parsed here into cJSON items on the stack,
 * the same tree cJSON would build (so everything after the parse is
 * shared), without cJSON's allocation per item and strtod per number: a
 * round's N JOINs are the daemon's other O(N) cost.  Anything else
 * (whitespace, an escape, a fraction, a leading zero, more items or text
 * than fit) is left to cJSON, which also names every syntax error. */

static cJSON *rdzv_proto_flat_item(struct rdzv_proto_flat *fl)
{
  cJSON *it;

  if (fl->n_items == RDZV_PROTO_FLAT_ITEMS)
    return NULL;
  it = &fl->items[fl->n_items++];
  memset(it, 0, sizeof *it);
  return it;
}

/* At '"': the string's copy, or NULL outside the flat form. */
static char *rdzv_proto_flat_string(struct rdzv_proto_flat *fl)
{
  const char *s = fl->p + 1, *q = s;
  size_t n;
  char *copy;

  while (q < fl->end && *q != '"') {
    if (*q < 0x20 || *q > 0x7e || *q == '\\')
      return NULL;
    q++;
  }
  n = (size_t)(q - s);
  if (q == fl->end || n + 1 > RDZV_PROTO_FLAT_TEXT - fl->n_text)
    return NULL;
  copy = fl->text + fl->n_text;
  memcpy(copy, s, n);
  copy[n] = '\0';
  fl->n_text += n + 1;
  fl->p = q + 1;
  return copy;
}

/* A whole number of 1..15 digits, no leading zero, not -0: exact in a
 * double, so it is what strtod would read. */
static bool rdzv_proto_flat_number(struct rdzv_proto_flat *fl, double *d)
{
  const char *q = fl->p;
  bool neg = q < fl->end && *q == '-';
  uint64_t v = 0;
  int digits = 0;

  q += neg;
  if (q == fl->end || *q < '0' || *q > '9' ||
      (*q == '0' && (neg || (q + 1 < fl->end && q[1] >= '0' && q[1] <= '9'))))
    return false;
  while (q < fl->end && *q >= '0' && *q <= '9') {
    if (++digits > 15)
      return false;
    v = v * 10 + (uint64_t)(*q++ - '0');
  }
  if (q < fl->end && (*q == '.' || *q == 'e' || *q == 'E'))
    return false;
  *d = neg ? -(double)v : (double)v;
  fl->p = q;
  return true;
}

static bool rdzv_proto_flat_object(struct rdzv_proto_flat *fl, cJSON *obj,
                                   int depth);

static cJSON *rdzv_proto_flat_value(struct rdzv_proto_flat *fl, int depth)
{
  cJSON *it = rdzv_proto_flat_item(fl);
  size_t left = (size_t)(fl->end - fl->p);

  if (!it || !left)
    return NULL;
  if (*fl->p == '"') {
    it->type = cJSON_String;
    it->valuestring = rdzv_proto_flat_string(fl);
    return it->valuestring ? it : NULL;
  }
  if (*fl->p == '{')
    return depth < RDZV_PROTO_FLAT_DEPTH &&
           rdzv_proto_flat_object(fl, it, depth + 1) ? it : NULL;
  if (left >= 4 && memcmp(fl->p, "true", 4) == 0) {
    it->type = cJSON_True;
    fl->p += 4;
    return it;
  }
  if (left >= 5 && memcmp(fl->p, "false", 5) == 0) {
    it->type = cJSON_False;
    fl->p += 5;
    return it;
  }
  if (left >= 4 && memcmp(fl->p, "null", 4) == 0) {
    it->type = cJSON_NULL;
    fl->p += 4;
    return it;
  }
  if (!rdzv_proto_flat_number(fl, &it->valuedouble))
    return NULL;
  it->type = cJSON_Number;
  /* cJSON's valueint: the number, saturated */
  it->valueint = it->valuedouble >= INT_MAX   ? INT_MAX
                 : it->valuedouble <= INT_MIN ? INT_MIN
                                              : (int)it->valuedouble;
  return it;
}

/* At '{': its members, linked as cJSON links them. */
static bool rdzv_proto_flat_object(struct rdzv_proto_flat *fl, cJSON *obj,
                                   int depth)
{
  cJSON *it, *last = NULL;
  char *key;

  obj->type = cJSON_Object;
  fl->p++;
  if (fl->p < fl->end && *fl->p == '}') {
    fl->p++;
    return true;
  }
  for (;;) {
    if (fl->p == fl->end || *fl->p != '"' ||
        !(key = rdzv_proto_flat_string(fl)) || fl->p == fl->end ||
        *fl->p++ != ':' || !(it = rdzv_proto_flat_value(fl, depth)))
      return false;
    it->string = key;
    if (last) {
      last->next = it;
      it->prev = last;
    } else {
      obj->child = it;
    }
    last = it;
    if (fl->p == fl->end)
      return false;
    if (*fl->p == '}')
      break;
    if (*fl->p++ != ',')
      return false;
  }
  fl->p++;
  obj->child->prev = last;      /* as cJSON: the head's prev is the tail */
  return true;
}

cJSON *rdzv_proto_flat_parse(struct rdzv_proto_flat *fl, const char *s,
                             size_t len)
{
  cJSON *root;

  if (len >= RDZV_PROTO_FLAT_TEXT || len == 0 || s[0] != '{')
    return NULL;
  fl->n_items = fl->n_text = 0;
  fl->p = s;
  fl->end = s + len;
  root = rdzv_proto_flat_item(fl);
  if (!rdzv_proto_flat_object(fl, root, 1) || fl->p != fl->end)
    return NULL;
  return root;
}
