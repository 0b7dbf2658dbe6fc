/* store_wire.c -- the store's wire codec (store_wire.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store_wire.h"

const uint8_t stw_hello[4] = { 'p', 'g', 's', ST_VERSION };

void stw_put_u32(uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

void stw_put_u64(uint8_t *p, uint64_t v)
{
  stw_put_u32(p, (uint32_t)v);
  stw_put_u32(p + 4, (uint32_t)(v >> 32));
}

uint32_t stw_get_u32(const uint8_t *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

uint64_t stw_get_u64(const uint8_t *p)
{
  return (uint64_t)stw_get_u32(p) | (uint64_t)stw_get_u32(p + 4) << 32;
}


bool stw_buf_reserve(struct buf *b, size_t extra)
{
  size_t cap;
  uint8_t *p;

  if (b->cap - b->len >= extra)
    return true;
  if (b->off > 0) {
    memmove(b->p, b->p + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
    if (b->cap - b->len >= extra)
      return true;
  }
  cap = b->cap ? b->cap : 4096;
  while (cap - b->len < extra)
    cap *= 2;
  p = realloc(b->p, cap);
  if (!p) {
    b->oom = true;
    return false;
  }
  b->p = p;
  b->cap = cap;
  return true;
}

void stw_buf_put(struct buf *b, const void *data, size_t n)
{
  if (n == 0 || !stw_buf_reserve(b, n))
    return;
  memcpy(b->p + b->len, data, n);
  b->len += n;
}

void stw_buf_u8(struct buf *b, uint8_t v)
{
  stw_buf_put(b, &v, 1);
}

void stw_buf_u32(struct buf *b, uint32_t v)
{
  uint8_t t[4];

  stw_put_u32(t, v);
  stw_buf_put(b, t, 4);
}

void stw_buf_u64(struct buf *b, uint64_t v)
{
  uint8_t t[8];

  stw_put_u64(t, v);
  stw_buf_put(b, t, 8);
}

void stw_buf_bytes(struct buf *b, const void *data, size_t n)
{
  stw_buf_u32(b, (uint32_t)n);
  stw_buf_put(b, data, n);
}

size_t stw_buf_used(const struct buf *b)
{
  return b->len - b->off;
}

/* Empties b; a buffer grown for one big value is given back. */
void stw_buf_clear(struct buf *b)
{
  b->off = b->len = 0;
  if (b->cap > (1u << 20)) {
    free(b->p);
    b->p = NULL;
    b->cap = 0;
  }
}

void stw_buf_free(struct buf *b)
{
  free(b->p);
  memset(b, 0, sizeof *b);
}


const uint8_t *stw_rd_take(struct rd *r, size_t n)
{
  const uint8_t *p = r->p;

  if (r->bad || r->n < n) {
    r->bad = true;
    return NULL;
  }
  r->p += n;
  r->n -= n;
  return p;
}

uint8_t stw_rd_u8(struct rd *r)
{
  const uint8_t *p = stw_rd_take(r, 1);

  return p ? p[0] : 0;
}

uint32_t stw_rd_u32(struct rd *r)
{
  const uint8_t *p = stw_rd_take(r, 4);

  return p ? stw_get_u32(p) : 0;
}

uint64_t stw_rd_u64(struct rd *r)
{
  const uint8_t *p = stw_rd_take(r, 8);

  return p ? stw_get_u64(p) : 0;
}

const uint8_t *stw_rd_bytes(struct rd *r, size_t *n)
{
  *n = stw_rd_u32(r);
  return stw_rd_take(r, *n);
}

/* The frame was used up exactly. */
bool stw_rd_done(const struct rd *r)
{
  return !r->bad && r->n == 0;
}

/* Decimal ASCII to int64: optional sign, at least one digit, nothing
 * else. */
bool stw_parse_i64(const uint8_t *p, size_t n, int64_t *out)
{
  uint64_t v = 0, lim = INT64_MAX;
  bool neg = false;
  size_t i = 0;

  if (n > 0 && (p[0] == '-' || p[0] == '+')) {
    neg = p[0] == '-';
    lim = (uint64_t)INT64_MAX + 1;
    i = 1;
  }
  if (i == n)
    return false;
  for (; i < n; i++) {
    unsigned d = (unsigned)p[i] - '0';

    if (d > 9 || v > (lim - d) / 10)
      return false;
    v = v * 10 + d;
  }
  if (!neg)
    *out = (int64_t)v;
  else
    *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
  return true;
}

