/* reduce.c -- the reduction kernels every CPU backend uses: dst op= src,
 * dst = a op b, the division that finishes PG_AVG, and the f16 / bf16
 * conversions.
 *
 * Note [vectorizing at -O2]: gcc 12 at -O2 only vectorizes a loop when the
 * vector code replaces the scalar loop entirely (the "very cheap" cost
 * model: no epilogue, no runtime alias checks).  So every kernel walks its
 * buffers in blocks of BLOCK elements (an inner loop with a constant trip
 * count, restrict pointers, no branches: selects instead of ifs) and
 * finishes the last count % BLOCK elements with a scalar loop.  Check with
 * `gcc -O2 -fopt-info-vec`: the f32/f64/i32/u8 loops and the bf16
 * conversions vectorize (i64 MIN/MAX/PROD do not: SSE2 has no 64-bit
 * compare or multiply).
 *
 * Integer SUM and PROD wrap like unsigned arithmetic (computed in unsigned,
 * so no overflow UB); MIN and MAX compare signed for i32/i64.  Float MIN
 * and MAX propagate NaN.  f16 and bf16 are widened to f32 for each step
 * and rounded back to nearest even; NaN stays NaN, inf stays inf.
 *
 * Aliasing: pg__reduce3 allows dst == a or dst == b (exactly, not partial
 * overlap); it never passes aliasing pointers to a restrict kernel. */
#include <string.h>

#include "pg_internal.h"

#define BLOCK 64

static inline uint32_t f2u(float f)
{
  uint32_t u;

  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float u2f(uint32_t u)
{
  float f;

  memcpy(&f, &u, sizeof f);
  return f;
}

/* c ? x : y without a branch (keeps the f16 loops free of control flow,
 * which gcc would not if-convert around float operations). */
static inline uint32_t sel(int c, uint32_t x, uint32_t y)
{
  uint32_t m = 0u - (uint32_t)(c != 0);

  return (x & m) | (y & ~m);
}

/* ---- f16 / bf16 <-> f32 ----------------------------------------------------
 * Branch-free (selects only) so that the kernels using them can vectorize.
 * After F. Giesen's half_to_float / float_to_half_rtne. */

static inline float h2f(uint16_t h)
{
  uint32_t em = (uint32_t)h & 0x7fff;
  uint32_t sign = ((uint32_t)h & 0x8000) << 16;
  uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  uint32_t special = (em << 13) | 0x7f800000u;            /* inf, NaN */
  /* Zero and subnormals: mantissa * 2^-24, exact in f32. */
  uint32_t sub = f2u((float)(int32_t)em * 0x1p-24f);
  uint32_t r = sel(em >= 0x7c00, special, sel(em < 0x0400, sub, normal));

  return u2f(r | sign);
}

static inline uint16_t f2h(float f)
{
  uint32_t u = f2u(f);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t a = u & 0x7fffffffu;
  /* NaN: quiet, keep the top of the payload; overflow (>= 65520 after
   * rounding, or inf): inf. */
  uint32_t big = sel(a > 0x7f800000u, 0x7e00u | ((a >> 13) & 0x3ff), 0x7c00u);
  /* Below 2^-14 the result is subnormal (or zero): adding 0.5 lets the
   * FPU round at the right bit (ties to even), the low bits are the
   * result. */
  uint32_t sub = f2u(u2f(a) + 0.5f) - 0x3f000000u;
  /* Normal: rebias, round to nearest even; a carry out of the mantissa
   * bumps the exponent, up to inf. */
  uint32_t norm = (a - ((127u - 15u) << 23) + 0xfffu + ((a >> 13) & 1)) >> 13;
  uint32_t r = sel(a >= 0x47800000u, big, sel(a < 0x38800000u, sub, norm));

  return (uint16_t)(r | sign);
}

static inline float b2f(uint16_t h)
{
  return u2f((uint32_t)h << 16);
}

static inline uint16_t f2b(float f)
{
  uint32_t u = f2u(f);
  uint32_t nan = (u >> 16) | 0x40;                        /* quiet */
  uint32_t rne = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;

  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rne);
}

float pg__f16_to_f32(uint16_t h) { return h2f(h); }
uint16_t pg__f32_to_f16(float f) { return f2h(f); }
float pg__bf16_to_f32(uint16_t h) { return b2f(h); }
uint16_t pg__f32_to_bf16(float f) { return f2b(f); }

/* ---- element operations --------------------------------------------------- */

#define OP_SUM(x, y) ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
/* Integers: plain compare.  Floats: NaN in either operand wins (y is
 * checked first: min(x, NaN) and min(NaN, x) are NaN). */
#define OP_MIN(x, y) ((y) < (x) ? (y) : (x))
#define OP_MAX(x, y) ((y) > (x) ? (y) : (x))
#define OP_FMIN(x, y) (((y) < (x) || (y) != (y)) ? (y) : (x))
#define OP_FMAX(x, y) (((y) > (x) || (y) != (y)) ? (y) : (x))

/* Signed integer SUM/PROD in unsigned: wraps, no UB. */
#define OP_USUM32(x, y) ((int32_t)((uint32_t)(x) + (uint32_t)(y)))
#define OP_UPROD32(x, y) ((int32_t)((uint32_t)(x) * (uint32_t)(y)))
#define OP_USUM64(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))
#define OP_UPROD64(x, y) ((int64_t)((uint64_t)(x) * (uint64_t)(y)))
#define OP_USUM8(x, y) ((uint8_t)((x) + (y)))
#define OP_UPROD8(x, y) ((uint8_t)((x) * (y)))

/* Half types: widen, operate in f32, round back. */
#define H_OP(F, x, y) f2h(F(h2f(x), h2f(y)))
#define OP_HSUM(x, y) H_OP(OP_SUM, x, y)
#define OP_HPROD(x, y) H_OP(OP_PROD, x, y)
#define OP_HMIN(x, y) H_OP(OP_FMIN, x, y)
#define OP_HMAX(x, y) H_OP(OP_FMAX, x, y)
#define B_OP(F, x, y) f2b(F(b2f(x), b2f(y)))
#define OP_BSUM(x, y) B_OP(OP_SUM, x, y)
#define OP_BPROD(x, y) B_OP(OP_PROD, x, y)
#define OP_BMIN(x, y) B_OP(OP_FMIN, x, y)
#define OP_BMAX(x, y) B_OP(OP_FMAX, x, y)

/* Three kernels per (type, op): d = a op b, d = d op s, d = s op d (the
 * last for pg__reduce3 with dst == b; float MIN/MAX are not symmetric in
 * which NaN or which zero they return, so the order is kept).  Each has a
 * typed body (restrict parameters: what lets gcc vectorize) and a void *
 * wrapper for the dispatch table. */
#define KERNELS(name, T, OP)                                                 \
  static inline void name##_3t(T *restrict d, const T *restrict a,          \
                               const T *restrict b, size_t n)               \
  {                                                                          \
    size_t i = 0, j;                                                         \
    for (; i + BLOCK <= n; i += BLOCK)                                       \
      for (j = 0; j < BLOCK; j++)                                            \
        d[i + j] = OP(a[i + j], b[i + j]);                                   \
    for (; i < n; i++)                                                       \
      d[i] = OP(a[i], b[i]);                                                 \
  }                                                                          \
  static inline void name##_2t(T *restrict d, const T *restrict s,          \
                               size_t n)                                     \
  {                                                                          \
    size_t i = 0, j;                                                         \
    for (; i + BLOCK <= n; i += BLOCK)                                       \
      for (j = 0; j < BLOCK; j++)                                            \
        d[i + j] = OP(d[i + j], s[i + j]);                                   \
    for (; i < n; i++)                                                       \
      d[i] = OP(d[i], s[i]);                                                 \
  }                                                                          \
  static inline void name##_2rt(T *restrict d, const T *restrict s,         \
                                size_t n)                                    \
  {                                                                          \
    size_t i = 0, j;                                                         \
    for (; i + BLOCK <= n; i += BLOCK)                                       \
      for (j = 0; j < BLOCK; j++)                                            \
        d[i + j] = OP(s[i + j], d[i + j]);                                   \
    for (; i < n; i++)                                                       \
      d[i] = OP(s[i], d[i]);                                                 \
  }                                                                          \
  static void name##_3(void *d, const void *a, const void *b, size_t n)     \
  {                                                                          \
    name##_3t(d, a, b, n);                                                   \
  }                                                                          \
  static void name##_2(void *d, const void *s, size_t n)                    \
  {                                                                          \
    name##_2t(d, s, n);                                                      \
  }                                                                          \
  static void name##_2r(void *d, const void *s, size_t n)                   \
  {                                                                          \
    name##_2rt(d, s, n);                                                     \
  }

KERNELS(f32_sum, float, OP_SUM)
KERNELS(f32_prod, float, OP_PROD)
KERNELS(f32_min, float, OP_FMIN)
KERNELS(f32_max, float, OP_FMAX)
KERNELS(f64_sum, double, OP_SUM)
KERNELS(f64_prod, double, OP_PROD)
KERNELS(f64_min, double, OP_FMIN)
KERNELS(f64_max, double, OP_FMAX)
KERNELS(f16_sum, uint16_t, OP_HSUM)
KERNELS(f16_prod, uint16_t, OP_HPROD)
KERNELS(f16_min, uint16_t, OP_HMIN)
KERNELS(f16_max, uint16_t, OP_HMAX)
KERNELS(bf16_sum, uint16_t, OP_BSUM)
KERNELS(bf16_prod, uint16_t, OP_BPROD)
KERNELS(bf16_min, uint16_t, OP_BMIN)
KERNELS(bf16_max, uint16_t, OP_BMAX)
KERNELS(i32_sum, int32_t, OP_USUM32)
KERNELS(i32_prod, int32_t, OP_UPROD32)
KERNELS(i32_min, int32_t, OP_MIN)
KERNELS(i32_max, int32_t, OP_MAX)
KERNELS(i64_sum, int64_t, OP_USUM64)
KERNELS(i64_prod, int64_t, OP_UPROD64)
KERNELS(i64_min, int64_t, OP_MIN)
KERNELS(i64_max, int64_t, OP_MAX)
KERNELS(u8_sum, uint8_t, OP_USUM8)
KERNELS(u8_prod, uint8_t, OP_UPROD8)
KERNELS(u8_min, uint8_t, OP_MIN)
KERNELS(u8_max, uint8_t, OP_MAX)

typedef void (*kern3)(void *, const void *, const void *, size_t);
typedef void (*kern2)(void *, const void *, size_t);

struct kernel {
  kern3 k3;
  kern2 k2, k2r;
};

#define K(name) { name##_3, name##_2, name##_2r }
/* Indexed [dtype][op]; PG_AVG reduces like PG_SUM. */
#define KROW(p) { K(p##_sum), K(p##_sum), K(p##_min), K(p##_max), K(p##_prod) }

static const struct kernel kernels[PG_DTYPE_COUNT][PG_OP_COUNT] = {
  [PG_F32] = KROW(f32),
  [PG_F64] = KROW(f64),
  [PG_F16] = KROW(f16),
  [PG_BF16] = KROW(bf16),
  [PG_I32] = KROW(i32),
  [PG_I64] = KROW(i64),
  [PG_U8] = KROW(u8),
};

static const struct kernel *kernel_of(pg_dtype t, pg_op op)
{
  if ((unsigned)t >= PG_DTYPE_COUNT || (unsigned)op >= PG_OP_COUNT)
    return NULL;
  return &kernels[t][op];
}

void pg__reduce(pg_dtype t, pg_op op, void *dst, const void *src,
                size_t count)
{
  const struct kernel *k = kernel_of(t, op);

  if (!k || count == 0)
    return;
  if (dst == src) {
    /* x op x: keep restrict honest with a bounded temporary. */
    unsigned char tmp[BLOCK * 8 * 4];
    size_t per = sizeof tmp / pg_dtype_size(t), done, m;
    char *d = dst;

    for (done = 0; done < count; done += m) {
      m = count - done < per ? count - done : per;
      memcpy(tmp, d + done * pg_dtype_size(t), m * pg_dtype_size(t));
      k->k2(d + done * pg_dtype_size(t), tmp, m);
    }
    return;
  }
  k->k2(dst, src, count);
}

void pg__reduce3(pg_dtype t, pg_op op, void *dst, const void *a,
                 const void *b, size_t count)
{
  const struct kernel *k = kernel_of(t, op);

  if (!k || count == 0)
    return;
  if (dst == a)
    pg__reduce(t, op, dst, b, count);
  else if (dst == b) {
    if (a == b)
      pg__reduce(t, op, dst, a, count);
    else
      k->k2r(dst, a, count);
  } else if (a == b) {
    memcpy(dst, a, count * pg_dtype_size(t));
    pg__reduce(t, op, dst, dst, count);
  } else
    k->k3(dst, a, b, count);
}

/* ---- PG_AVG's division ------------------------------------------------------
 * Floats divide (not multiply by 1/n: the result must equal a serial
 * sum / n).  Integers truncate toward zero (C division, in int or wider:
 * u8 / 300 is 0); common world sizes get a loop with a constant divisor,
 * which gcc turns into a multiply. */

#define DIV_LOOP(T, buf, count, DIV)                                         \
  do {                                                                       \
    T *restrict p_ = (T *)(buf);                                             \
    size_t i_ = 0, j_;                                                       \
    for (; i_ + BLOCK <= (count); i_ += BLOCK)                               \
      for (j_ = 0; j_ < BLOCK; j_++)                                         \
        p_[i_ + j_] = (T)DIV(p_[i_ + j_]);                                   \
    for (; i_ < (count); i_++)                                               \
      p_[i_] = (T)DIV(p_[i_]);                                               \
  } while (0)

#define DIV2(x) ((x) / 2)
#define DIV3(x) ((x) / 3)
#define DIV4(x) ((x) / 4)
#define DIV6(x) ((x) / 6)
#define DIV8(x) ((x) / 8)
#define DIVN(x) ((x) / n)
#define DIVF(x) ((x) / d)
#define DIVH(x) f2h(h2f(x) / d)
#define DIVB(x) f2b(b2f(x) / d)

#define DIV_INT(T, buf, count)                                               \
  do {                                                                       \
    switch (n) {                                                             \
    case 2: DIV_LOOP(T, buf, count, DIV2); break;                            \
    case 3: DIV_LOOP(T, buf, count, DIV3); break;                            \
    case 4: DIV_LOOP(T, buf, count, DIV4); break;                            \
    case 6: DIV_LOOP(T, buf, count, DIV6); break;                            \
    case 8: DIV_LOOP(T, buf, count, DIV8); break;                            \
    default: DIV_LOOP(T, buf, count, DIVN); break;                           \
    }                                                                        \
  } while (0)

void pg__avg_finish(pg_dtype t, void *buf, size_t count, int n)
{
  if (n <= 1 || count == 0)
    return;
  switch (t) {
  case PG_F32: {
    float d = (float)n;

    DIV_LOOP(float, buf, count, DIVF);
    break;
  }
  case PG_F64: {
    double d = (double)n;

    DIV_LOOP(double, buf, count, DIVF);
    break;
  }
  case PG_F16: {
    float d = (float)n;

    DIV_LOOP(uint16_t, buf, count, DIVH);
    break;
  }
  case PG_BF16: {
    float d = (float)n;

    DIV_LOOP(uint16_t, buf, count, DIVB);
    break;
  }
  case PG_I32:
    DIV_INT(int32_t, buf, count);
    break;
  case PG_I64:
    DIV_INT(int64_t, buf, count);
    break;
  case PG_U8:
    DIV_INT(uint8_t, buf, count);
    break;
  default:
    break;
  }
}
