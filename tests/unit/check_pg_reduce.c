/* check_pg_reduce.c -- unit tests for libpg/core/reduce.c: every dtype x op
 * against a scalar reference, the f16/bf16 conversions, aliasing, and
 * PG_AVG's division. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

/* ---- an independent reference for f16 / bf16 (double arithmetic) ---------- */

static float ref_f16_to_f32(uint16_t h)
{
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;

  if (e == 31) {
    if (m == 0)
      return (h & 0x8000) ? -INFINITY : INFINITY;
    return NAN;
  }
  v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return (float)((h & 0x8000) ? -v : v);
}

/* Round to nearest, ties to even, by hand. */
static uint16_t ref_f32_to_f16(float f)
{
  double a = fabs((double)f);
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  int e;
  double q;

  if (isnan(f))
    return 0x7e00;   /* compared as "some NaN" */
  if (a >= 65520.0)
    return sign | 0x7c00;
  if (a < ldexp(1, -14)) {
    q = rint(a * ldexp(1, 24));      /* exact in double; ties to even */
    return sign | (uint16_t)q;       /* 1024 is the smallest normal: ok */
  }
  frexp(a, &e);                      /* a = m * 2^e, m in [0.5, 1) */
  e -= 1;                            /* a in [2^e, 2^(e+1)) */
  q = rint(a * ldexp(1, 10 - e));    /* [1024, 2048] */
  if (q >= 2048) {
    q = 1024;
    e++;
  }
  if (e + 15 >= 31)
    return sign | 0x7c00;
  return sign | (uint16_t)(((e + 15) << 10) | ((int)q - 1024));
}

static uint32_t bits(float f)
{
  uint32_t u;

  memcpy(&u, &f, 4);
  return u;
}

static float fbits(uint32_t u)
{
  float f;

  memcpy(&f, &u, 4);
  return f;
}

static uint16_t ref_f32_to_bf16(float f)
{
  uint32_t u = bits(f), lo = u & 0xffff, hi = u >> 16;

  if (isnan(f))
    return 0x7fc0;
  if (lo > 0x8000 || (lo == 0x8000 && (hi & 1)))
    hi++;
  return (uint16_t)hi;
}

static bool is_f16_nan(uint16_t h)
{
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

static bool is_bf16_nan(uint16_t h)
{
  return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

/* ---- conversions ------------------------------------------------------------- */

START_TEST(test_f16_exact_values)
{
  static const struct { uint16_t h; float f; } cases[] = {
    { 0x0000, 0.0f }, { 0x3c00, 1.0f }, { 0xbc00, -1.0f },
    { 0x4000, 2.0f }, { 0x3800, 0.5f }, { 0x3555, 0.333251953125f },
    { 0x7bff, 65504.0f }, { 0x0400, 0x1p-14f }, { 0x0001, 0x1p-24f },
    { 0x03ff, 0x3ffp-24f }, { 0xc500, -5.0f }, { 0x5640, 100.0f },
  };
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ck_assert_msg(pg__f16_to_f32(cases[i].h) == cases[i].f, "%04x", cases[i].h);
    ck_assert_uint_eq(pg__f32_to_f16(cases[i].f), cases[i].h);
  }
  ck_assert(signbit(pg__f16_to_f32(0x8000)));
  ck_assert_uint_eq(pg__f32_to_f16(-0.0f), 0x8000);
  ck_assert(isinf(pg__f16_to_f32(0x7c00)) && pg__f16_to_f32(0x7c00) > 0);
  ck_assert(isinf(pg__f16_to_f32(0xfc00)) && pg__f16_to_f32(0xfc00) < 0);
  ck_assert(isnan(pg__f16_to_f32(0x7e00)));
  ck_assert(isnan(pg__f16_to_f32(0x7c01)));   /* signalling payload */
  ck_assert(isnan(pg__f16_to_f32(0xfe00)));
  ck_assert_uint_eq(pg__f32_to_f16(INFINITY), 0x7c00);
  ck_assert_uint_eq(pg__f32_to_f16(-INFINITY), 0xfc00);
  ck_assert(is_f16_nan(pg__f32_to_f16(NAN)));
  ck_assert(is_f16_nan(pg__f32_to_f16(-NAN)));
  ck_assert(is_f16_nan(pg__f32_to_f16(fbits(0x7f800001)))); /* low payload */
  /* Overflow: 65519.99 rounds down to 65504, 65520 (the tie) up to inf. */
  ck_assert_uint_eq(pg__f32_to_f16(65519.0f), 0x7bff);
  ck_assert_uint_eq(pg__f32_to_f16(65520.0f), 0x7c00);
  ck_assert_uint_eq(pg__f32_to_f16(1e10f), 0x7c00);
  ck_assert_uint_eq(pg__f32_to_f16(-1e10f), 0xfc00);
  /* Underflow: half the smallest subnormal is a tie, to even (0). */
  ck_assert_uint_eq(pg__f32_to_f16(0x1p-25f), 0x0000);
  ck_assert_uint_eq(pg__f32_to_f16(0x1.000002p-25f), 0x0001);
  ck_assert_uint_eq(pg__f32_to_f16(0x3p-25f), 0x0002);   /* 1.5 -> 2 */
  ck_assert_uint_eq(pg__f32_to_f16(0x5p-25f), 0x0002);   /* 2.5 -> 2 */
  ck_assert_uint_eq(pg__f32_to_f16(1e-30f), 0x0000);
  ck_assert_uint_eq(pg__f32_to_f16(-1e-30f), 0x8000);
  /* Largest subnormal rounding up into the smallest normal. */
  ck_assert_uint_eq(pg__f32_to_f16(0x7ffp-25f), 0x0400);
}
END_TEST

START_TEST(test_f16_ties_to_even)
{
  /* 1 + k/1024 +/- half an ulp. */
  ck_assert_uint_eq(pg__f32_to_f16(1.0f + 0x1p-11f), 0x3c00);    /* tie, even */
  ck_assert_uint_eq(pg__f32_to_f16(1.0f + 0x3p-11f), 0x3c02);    /* tie, odd up */
  ck_assert_uint_eq(pg__f32_to_f16(1.0f + 0x1.02p-11f), 0x3c01);
  ck_assert_uint_eq(pg__f32_to_f16(1.0f + 0x0.fep-11f), 0x3c00);
  ck_assert_uint_eq(pg__f32_to_f16(2047.0f + 0.5f), 0x6800); /* 2048 */
  ck_assert_uint_eq(pg__f32_to_f16(2049.0f), 0x6800);        /* tie, even */
  ck_assert_uint_eq(pg__f32_to_f16(2051.0f), 0x6802);        /* tie, up */
}
END_TEST

START_TEST(test_f16_roundtrip_all)
{
  uint32_t h;

  for (h = 0; h < 0x10000; h++) {
    float f = pg__f16_to_f32((uint16_t)h);
    float r = ref_f16_to_f32((uint16_t)h);

    if (is_f16_nan((uint16_t)h)) {
      ck_assert_msg(isnan(f), "%04x", h);
      ck_assert_msg(is_f16_nan(pg__f32_to_f16(f)), "%04x", h);
      continue;
    }
    ck_assert_msg(bits(f) == bits(r), "%04x: %a vs %a", h, f, r);
    ck_assert_msg(pg__f32_to_f16(f) == h, "%04x", h);
  }
}
END_TEST

/* Every exponent, a spread of mantissas, against the reference. */
START_TEST(test_f16_from_f32_sweep)
{
  uint64_t u;

  for (u = 0; u <= 0xffffffffu; u += 16411) {
    float f = fbits((uint32_t)u);
    uint16_t got = pg__f32_to_f16(f), want = ref_f32_to_f16(f);

    if (isnan(f))
      ck_assert_msg(is_f16_nan(got), "%08x", (unsigned)u);
    else
      ck_assert_msg(got == want, "%08x (%a): %04x, want %04x", (unsigned)u, f,
                    got, want);
  }
  /* Around every f16 value: the midpoints and their neighbours. */
  for (u = 0; u < 0x7c00; u++) {
    float lo = ref_f16_to_f32((uint16_t)u), hi = ref_f16_to_f32((uint16_t)(u + 1));
    float mid = (float)(((double)lo + (double)hi) / 2);
    float cand[3] = { mid, nextafterf(mid, 0), nextafterf(mid, INFINITY) };
    int k;

    for (k = 0; k < 3; k++) {
      ck_assert_msg(pg__f32_to_f16(cand[k]) == ref_f32_to_f16(cand[k]),
                    "%a", cand[k]);
      ck_assert_msg(pg__f32_to_f16(-cand[k]) == ref_f32_to_f16(-cand[k]),
                    "%a", -cand[k]);
    }
  }
}
END_TEST

START_TEST(test_bf16)
{
  uint64_t u;
  uint32_t h;

  ck_assert(pg__bf16_to_f32(0x3f80) == 1.0f);
  ck_assert(pg__bf16_to_f32(0xc000) == -2.0f);
  ck_assert(pg__bf16_to_f32(0x0001) == 0x1p-133f);            /* subnormal */
  ck_assert(isinf(pg__bf16_to_f32(0x7f80)));
  ck_assert(isnan(pg__bf16_to_f32(0x7fc0)));
  ck_assert(isnan(pg__bf16_to_f32(0x7f81)));
  ck_assert_uint_eq(pg__f32_to_bf16(1.0f), 0x3f80);
  ck_assert_uint_eq(pg__f32_to_bf16(INFINITY), 0x7f80);
  ck_assert_uint_eq(pg__f32_to_bf16(-INFINITY), 0xff80);
  ck_assert(is_bf16_nan(pg__f32_to_bf16(NAN)));
  ck_assert(is_bf16_nan(pg__f32_to_bf16(fbits(0x7f800001))));
  ck_assert(is_bf16_nan(pg__f32_to_bf16(fbits(0xff800001))));
  ck_assert_uint_eq(pg__f32_to_bf16(fbits(0x3f808000)), 0x3f80); /* tie even */
  ck_assert_uint_eq(pg__f32_to_bf16(fbits(0x3f818000)), 0x3f82); /* tie up */
  ck_assert_uint_eq(pg__f32_to_bf16(fbits(0x3f808001)), 0x3f81);
  ck_assert_uint_eq(pg__f32_to_bf16(fbits(0x7f7fffff)), 0x7f80); /* to inf */
  ck_assert_uint_eq(pg__f32_to_bf16(fbits(0x00008000)), 0x0000); /* sub tie */
  ck_assert_uint_eq(pg__f32_to_bf16(fbits(0x00018000)), 0x0002);
  for (h = 0; h < 0x10000; h++) {
    float f = pg__bf16_to_f32((uint16_t)h);

    if (is_bf16_nan((uint16_t)h))
      ck_assert(is_bf16_nan(pg__f32_to_bf16(f)));
    else
      ck_assert_uint_eq(pg__f32_to_bf16(f), h);
  }
  for (u = 0; u <= 0xffffffffu; u += 16411) {
    float f = fbits((uint32_t)u);
    uint16_t got = pg__f32_to_bf16(f);

    if (isnan(f))
      ck_assert(is_bf16_nan(got));
    else
      ck_assert_msg(got == ref_f32_to_bf16(f), "%08x", (unsigned)u);
  }
}
END_TEST

/* ---- kernels against a scalar reference ------------------------------------- */

/* Reference for one element: x op y, both stored at px/py, into pd. */
static float fop(pg_op op, float x, float y)
{
  switch (op) {
  case PG_SUM: case PG_AVG: return x + y;
  case PG_PROD: return x * y;
  case PG_MIN: return isnan(x) || isnan(y) ? NAN : (y < x ? y : x);
  default: return isnan(x) || isnan(y) ? NAN : (y > x ? y : x);
  }
}

static double dop(pg_op op, double x, double y)
{
  switch (op) {
  case PG_SUM: case PG_AVG: return x + y;
  case PG_PROD: return x * y;
  case PG_MIN: return isnan(x) || isnan(y) ? NAN : (y < x ? y : x);
  default: return isnan(x) || isnan(y) ? NAN : (y > x ? y : x);
  }
}

static uint64_t iop(pg_op op, uint64_t x, uint64_t y, int64_t sx, int64_t sy,
                    bool is_signed)
{
  switch (op) {
  case PG_SUM: case PG_AVG: return x + y;
  case PG_PROD: return x * y;
  case PG_MIN: return is_signed ? (sy < sx ? y : x) : (y < x ? y : x);
  default: return is_signed ? (sy > sx ? y : x) : (y > x ? y : x);
  }
}

static void ref_elem(pg_dtype t, pg_op op, void *d, const void *a,
                     const void *b, size_t i)
{
  switch (t) {
  case PG_F32:
    ((float *)d)[i] = fop(op, ((const float *)a)[i], ((const float *)b)[i]);
    break;
  case PG_F64:
    ((double *)d)[i] = dop(op, ((const double *)a)[i], ((const double *)b)[i]);
    break;
  case PG_F16:
    ((uint16_t *)d)[i] = ref_f32_to_f16(
        fop(op, ref_f16_to_f32(((const uint16_t *)a)[i]),
            ref_f16_to_f32(((const uint16_t *)b)[i])));
    break;
  case PG_BF16:
    ((uint16_t *)d)[i] = ref_f32_to_bf16(
        fop(op, fbits((uint32_t)((const uint16_t *)a)[i] << 16),
            fbits((uint32_t)((const uint16_t *)b)[i] << 16)));
    break;
  case PG_I32: {
    int32_t x = ((const int32_t *)a)[i], y = ((const int32_t *)b)[i];

    ((int32_t *)d)[i] = (int32_t)(uint32_t)iop(op, (uint32_t)x, (uint32_t)y,
                                               x, y, true);
    break;
  }
  case PG_I64: {
    int64_t x = ((const int64_t *)a)[i], y = ((const int64_t *)b)[i];

    ((int64_t *)d)[i] = (int64_t)iop(op, (uint64_t)x, (uint64_t)y, x, y, true);
    break;
  }
  case PG_U8: {
    uint8_t x = ((const uint8_t *)a)[i], y = ((const uint8_t *)b)[i];

    ((uint8_t *)d)[i] = (uint8_t)iop(op, x, y, x, y, false);
    break;
  }
  default:
    break;
  }
}

/* Equal, NaN matching any NaN. */
static bool same_elem(pg_dtype t, const void *x, const void *y, size_t i)
{
  size_t sz = pg_dtype_size(t);
  const char *p = (const char *)x + i * sz, *q = (const char *)y + i * sz;

  switch (t) {
  case PG_F32: {
    float a, b;

    memcpy(&a, p, 4);
    memcpy(&b, q, 4);
    if (isnan(a) || isnan(b))
      return isnan(a) && isnan(b);
    break;
  }
  case PG_F64: {
    double a, b;

    memcpy(&a, p, 8);
    memcpy(&b, q, 8);
    if (isnan(a) || isnan(b))
      return isnan(a) && isnan(b);
    break;
  }
  case PG_F16: {
    uint16_t a, b;

    memcpy(&a, p, 2);
    memcpy(&b, q, 2);
    if (is_f16_nan(a) || is_f16_nan(b))
      return is_f16_nan(a) && is_f16_nan(b);
    break;
  }
  case PG_BF16: {
    uint16_t a, b;

    memcpy(&a, p, 2);
    memcpy(&b, q, 2);
    if (is_bf16_nan(a) || is_bf16_nan(b))
      return is_bf16_nan(a) && is_bf16_nan(b);
    break;
  }
  default:
    break;
  }
  return memcmp(p, q, sz) == 0;
}

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Inputs with the awkward values mixed in: NaN, inf, -0, subnormals,
 * integer extremes. */
static void fill(pg_dtype t, void *buf, size_t count)
{
  size_t i;

  for (i = 0; i < count; i++) {
    uint64_t r = next_rand();
    int pick = (int)(r % 16);

    switch (t) {
    case PG_F32: {
      static const float sp[] = { NAN, INFINITY, -INFINITY, -0.0f, 0x1p-140f,
                                  3.4e38f };
      ((float *)buf)[i] = pick < 6 && (r >> 8) % 4 == 0
                              ? sp[pick]
                              : (float)((int64_t)(r >> 20) % 20001 - 10000) / 64.0f;
      break;
    }
    case PG_F64: {
      static const double sp[] = { NAN, INFINITY, -INFINITY, -0.0, 0x1p-1070,
                                   1.7e308 };
      ((double *)buf)[i] = pick < 6 && (r >> 8) % 4 == 0
                               ? sp[pick]
                               : (double)((int64_t)(r >> 20) % 2000001 - 1000000) / 1024.0;
      break;
    }
    case PG_F16:
    case PG_BF16:
      ((uint16_t *)buf)[i] = (uint16_t)(r >> 24);  /* every pattern */
      break;
    case PG_I32: {
      static const int32_t sp[] = { INT32_MAX, INT32_MIN, -1, 0 };
      ((int32_t *)buf)[i] = pick < 4 ? sp[pick] : (int32_t)(uint32_t)(r >> 16);
      break;
    }
    case PG_I64: {
      static const int64_t sp[] = { INT64_MAX, INT64_MIN, -1, 0 };
      ((int64_t *)buf)[i] = pick < 4 ? sp[pick] : (int64_t)(r * 0x9e3779b97f4a7c15ull);
      break;
    }
    case PG_U8:
      ((uint8_t *)buf)[i] = (uint8_t)(r >> 30);
      break;
    default:
      break;
    }
  }
}

static const size_t counts[] = { 0, 1, 2, 7, 63, 64, 65, 129, 1000, 4099 };
#define NCOUNTS (sizeof counts / sizeof counts[0])

static const char *dname[] = { "f32", "f64", "f16", "bf16", "i32", "i64", "u8" };
static const char *oname[] = { "sum", "avg", "min", "max", "prod" };

/* _i = dtype * PG_OP_COUNT + op. */
START_TEST(test_kernels)
{
  pg_dtype t = (pg_dtype)(_i / PG_OP_COUNT);
  pg_op op = (pg_op)(_i % PG_OP_COUNT);
  size_t sz = pg_dtype_size(t), ci, i, n;
  char *a, *b, *d, *want, *alias;

  for (ci = 0; ci < NCOUNTS; ci++) {
    n = counts[ci];
    /* +1 element either side: the kernels must not touch it. */
    a = malloc((n + 2) * sz);
    b = malloc((n + 2) * sz);
    d = malloc((n + 2) * sz);
    want = malloc((n + 2) * sz);
    alias = malloc((n + 2) * sz);
    fill(t, a, n + 2);
    fill(t, b, n + 2);
    memset(d, 0x5a, (n + 2) * sz);
    for (i = 0; i < n; i++)
      ref_elem(t, op, want + sz, a + sz, b + sz, i);

    /* dst = a op b, disjoint. */
    pg__reduce3(t, op, d + sz, a + sz, b + sz, n);
    for (i = 0; i < n; i++)
      ck_assert_msg(same_elem(t, d + sz, want + sz, i), "%s %s n=%zu i=%zu",
                    dname[t], oname[op], n, i);
    ck_assert_uint_eq((unsigned char)d[0], 0x5a);
    ck_assert_uint_eq((unsigned char)d[(n + 1) * sz], 0x5a);

    /* dst op= src (pg__reduce). */
    memcpy(alias, a, (n + 2) * sz);
    pg__reduce(t, op, alias + sz, b + sz, n);
    for (i = 0; i < n; i++)
      ck_assert_msg(same_elem(t, alias + sz, want + sz, i),
                    "reduce %s %s n=%zu i=%zu", dname[t], oname[op], n, i);
    ck_assert(memcmp(alias, a, sz) == 0);
    ck_assert(memcmp(alias + (n + 1) * sz, a + (n + 1) * sz, sz) == 0);

    /* dst == a. */
    memcpy(alias, a, (n + 2) * sz);
    pg__reduce3(t, op, alias + sz, alias + sz, b + sz, n);
    for (i = 0; i < n; i++)
      ck_assert_msg(same_elem(t, alias + sz, want + sz, i),
                    "dst==a %s %s n=%zu i=%zu", dname[t], oname[op], n, i);

    /* dst == b: still a op b, in that order. */
    memcpy(alias, b, (n + 2) * sz);
    pg__reduce3(t, op, alias + sz, a + sz, alias + sz, n);
    for (i = 0; i < n; i++)
      ck_assert_msg(same_elem(t, alias + sz, want + sz, i),
                    "dst==b %s %s n=%zu i=%zu", dname[t], oname[op], n, i);

    /* a == b, and dst == a == b. */
    for (i = 0; i < n; i++)
      ref_elem(t, op, want + sz, a + sz, a + sz, i);
    pg__reduce3(t, op, d + sz, a + sz, a + sz, n);
    for (i = 0; i < n; i++)
      ck_assert_msg(same_elem(t, d + sz, want + sz, i), "a==b %s %s i=%zu",
                    dname[t], oname[op], i);
    memcpy(alias, a, (n + 2) * sz);
    pg__reduce3(t, op, alias + sz, alias + sz, alias + sz, n);
    for (i = 0; i < n; i++)
      ck_assert_msg(same_elem(t, alias + sz, want + sz, i),
                    "d==a==b %s %s i=%zu", dname[t], oname[op], i);
    memcpy(alias, a, (n + 2) * sz);
    pg__reduce(t, op, alias + sz, alias + sz, n);
    for (i = 0; i < n; i++)
      ck_assert_msg(same_elem(t, alias + sz, want + sz, i),
                    "reduce d==s %s %s i=%zu", dname[t], oname[op], i);
    free(a);
    free(b);
    free(d);
    free(want);
    free(alias);
  }
}
END_TEST

/* Buffers aligned to their element only (not to a vector or a line), at
 * different offsets, give the same results. */
START_TEST(test_unaligned)
{
  pg_dtype t = (pg_dtype)_i;
  size_t sz = pg_dtype_size(t), n = 301, i;
  char *a = malloc((n + 1) * sz), *b = malloc((n + 3) * sz);
  char *d = malloc((n + 5) * sz), *want = malloc(n * sz);

  fill(t, a + sz, n);
  fill(t, b + 3 * sz, n);
  for (i = 0; i < n; i++)
    ref_elem(t, PG_SUM, want, a + sz, b + 3 * sz, i);
  pg__reduce3(t, PG_SUM, d + 5 * sz, a + sz, b + 3 * sz, n);
  for (i = 0; i < n; i++)
    ck_assert_msg(same_elem(t, d + 5 * sz, want, i), "%s i=%zu", dname[t], i);
  free(a);
  free(b);
  free(d);
  free(want);
}
END_TEST

START_TEST(test_integer_wrap)
{
  int32_t a32[2] = { INT32_MAX, INT32_MIN }, b32[2] = { 1, -1 };
  int64_t a64[2] = { INT64_MAX, INT64_MIN }, b64[2] = { 1, -1 };
  uint8_t a8[2] = { 200, 16 }, b8[2] = { 100, 16 };
  int32_t p32[2] = { 65536, INT32_MIN }, q32[2] = { 65536, -1 };

  pg__reduce(PG_I32, PG_SUM, a32, b32, 2);
  ck_assert_int_eq(a32[0], INT32_MIN);
  ck_assert_int_eq(a32[1], INT32_MAX);
  pg__reduce(PG_I64, PG_SUM, a64, b64, 2);
  ck_assert(a64[0] == INT64_MIN && a64[1] == INT64_MAX);
  pg__reduce(PG_U8, PG_SUM, a8, b8, 2);
  ck_assert_uint_eq(a8[0], 44);
  pg__reduce(PG_U8, PG_PROD, a8, b8, 2);
  ck_assert_uint_eq(a8[0], (44 * 100) & 0xff);
  ck_assert_uint_eq(a8[1], 0);         /* 32 * 16 = 512 */
  pg__reduce(PG_I32, PG_PROD, p32, q32, 2);
  ck_assert_int_eq(p32[0], 0);         /* 2^32 wraps to 0 */
  ck_assert_int_eq(p32[1], INT32_MIN); /* INT_MIN * -1 wraps */
  a32[0] = -5;
  b32[0] = 3;
  pg__reduce(PG_I32, PG_MIN, a32, b32, 1);
  ck_assert_int_eq(a32[0], -5);        /* signed compare */
  a8[0] = 250;
  b8[0] = 3;
  pg__reduce(PG_U8, PG_MIN, a8, b8, 1);
  ck_assert_uint_eq(a8[0], 3);         /* unsigned compare */
}
END_TEST

START_TEST(test_half_steps_round)
{
  /* f16: 2048 + 1 is a tie between 2048 and 2050: 2048 (even).  Reducing
   * one step at a time keeps it there; a wide accumulator would not. */
  uint16_t a[1] = { 0x6800 }, one[1] = { 0x3c00 };
  uint16_t b[1] = { 0x4380 }, c[1] = { 0x3f80 };   /* bf16: 256 + 1 */

  pg__reduce(PG_F16, PG_SUM, a, one, 1);
  ck_assert_uint_eq(a[0], 0x6800);
  pg__reduce(PG_F16, PG_SUM, a, one, 1);
  ck_assert_uint_eq(a[0], 0x6800);
  pg__reduce(PG_BF16, PG_SUM, b, c, 1);
  ck_assert_uint_eq(b[0], 0x4380);
  /* inf and NaN survive. */
  a[0] = 0x7c00;
  pg__reduce(PG_F16, PG_SUM, a, one, 1);
  ck_assert_uint_eq(a[0], 0x7c00);
  a[0] = 0x7bff;
  pg__reduce(PG_F16, PG_SUM, a, (uint16_t[]){ 0x7bff }, 1);
  ck_assert_uint_eq(a[0], 0x7c00);                  /* overflow: inf */
  a[0] = 0x7e00;
  pg__reduce(PG_F16, PG_MIN, a, one, 1);
  ck_assert(is_f16_nan(a[0]));
  a[0] = 0x3c00;
  pg__reduce(PG_F16, PG_MAX, a, (uint16_t[]){ 0x7e00 }, 1);
  ck_assert(is_f16_nan(a[0]));
  b[0] = 0x7f80;
  pg__reduce(PG_BF16, PG_PROD, b, (uint16_t[]){ 0x0000 }, 1);
  ck_assert(is_bf16_nan(b[0]));                    /* inf * 0 */
}
END_TEST

START_TEST(test_float_minmax_nan)
{
  float x[4] = { 1.0f, NAN, -INFINITY, -0.0f };
  float y[4] = { NAN, 2.0f, 5.0f, 0.0f };
  double dx[2] = { NAN, 1.0 }, dy[2] = { 0.0, NAN };
  float m[4];

  pg__reduce3(PG_F32, PG_MIN, m, x, y, 4);
  ck_assert(isnan(m[0]) && isnan(m[1]));
  ck_assert(m[2] == -INFINITY);
  ck_assert(m[3] == 0.0f);
  pg__reduce3(PG_F32, PG_MAX, m, x, y, 4);
  ck_assert(isnan(m[0]) && isnan(m[1]));
  ck_assert(m[2] == 5.0f);
  pg__reduce(PG_F64, PG_MAX, dx, dy, 2);
  ck_assert(isnan(dx[0]) && isnan(dx[1]));
}
END_TEST

/* PG_AVG is reduced as SUM. */
START_TEST(test_avg_reduces_as_sum)
{
  float a[3] = { 1, 2, 3 }, b[3] = { 4, 5, 6 };

  pg__reduce(PG_F32, PG_AVG, a, b, 3);
  ck_assert(a[0] == 5 && a[1] == 7 && a[2] == 9);
}
END_TEST

START_TEST(test_avg_finish)
{
  int n;

  for (n = 1; n <= 17; n++) {
    size_t cnt = 200, i;
    float f[200], fw[200];
    double d[200], dw[200];
    int32_t i32[200], i32w[200];
    int64_t i64[200], i64w[200];
    uint8_t u8[200], u8w[200];
    uint16_t h[200], hw[200], bf[200], bw[200];

    for (i = 0; i < cnt; i++) {
      int64_t v = (int64_t)(next_rand() % 2001) - 1000;

      f[i] = (float)v / 3.0f;
      fw[i] = f[i] / (float)n;
      d[i] = (double)v / 7.0;
      dw[i] = d[i] / (double)n;
      i32[i] = (int32_t)v;
      i32w[i] = (int32_t)v / n;           /* truncates toward zero */
      i64[i] = v * 1000000007LL;
      i64w[i] = i64[i] / n;
      u8[i] = (uint8_t)(v & 0xff);
      u8w[i] = (uint8_t)(u8[i] / n);
      h[i] = ref_f32_to_f16((float)v / 8.0f);
      hw[i] = ref_f32_to_f16(ref_f16_to_f32(h[i]) / (float)n);
      bf[i] = ref_f32_to_bf16((float)v / 8.0f);
      bw[i] = ref_f32_to_bf16(fbits((uint32_t)bf[i] << 16) / (float)n);
    }
    pg__avg_finish(PG_F32, f, cnt, n);
    pg__avg_finish(PG_F64, d, cnt, n);
    pg__avg_finish(PG_I32, i32, cnt, n);
    pg__avg_finish(PG_I64, i64, cnt, n);
    pg__avg_finish(PG_U8, u8, cnt, n);
    pg__avg_finish(PG_F16, h, cnt, n);
    pg__avg_finish(PG_BF16, bf, cnt, n);
    ck_assert(memcmp(f, fw, sizeof f) == 0);
    ck_assert(memcmp(d, dw, sizeof d) == 0);
    ck_assert(memcmp(i32, i32w, sizeof i32) == 0);
    ck_assert(memcmp(i64, i64w, sizeof i64) == 0);
    ck_assert(memcmp(u8, u8w, sizeof u8) == 0);
    ck_assert(memcmp(h, hw, sizeof h) == 0);
    ck_assert(memcmp(bf, bw, sizeof bf) == 0);
  }
  {
    int32_t v[2] = { -7, 7 };
    uint8_t u[1] = { 255 };

    pg__avg_finish(PG_I32, v, 2, 2);
    ck_assert_int_eq(v[0], -3);
    ck_assert_int_eq(v[1], 3);
    pg__avg_finish(PG_U8, u, 1, 300);
    ck_assert_uint_eq(u[0], 0);
    pg__avg_finish(PG_I32, v, 0, 2);     /* count 0: nothing */
  }
}
END_TEST

static Suite *pg_reduce_suite(void)
{
  Suite *s = suite_create("pg_reduce");
  TCase *tc = tcase_create("convert");
  TCase *tk = tcase_create("kernels");

  tcase_set_timeout(tc, 60);
  tcase_set_timeout(tk, 60);
  tcase_add_test(tc, test_f16_exact_values);
  tcase_add_test(tc, test_f16_ties_to_even);
  tcase_add_test(tc, test_f16_roundtrip_all);
  tcase_add_test(tc, test_f16_from_f32_sweep);
  tcase_add_test(tc, test_bf16);
  suite_add_tcase(s, tc);
  tcase_add_loop_test(tk, test_kernels, 0, PG_DTYPE_COUNT * PG_OP_COUNT);
  tcase_add_loop_test(tk, test_unaligned, 0, PG_DTYPE_COUNT);
  tcase_add_test(tk, test_integer_wrap);
  tcase_add_test(tk, test_half_steps_round);
  tcase_add_test(tk, test_float_minmax_nan);
  tcase_add_test(tk, test_avg_reduces_as_sum);
  tcase_add_test(tk, test_avg_finish);
  suite_add_tcase(s, tk);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(pg_reduce_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
