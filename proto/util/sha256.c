/* sha256.c -- SHA-256 and HMAC-SHA256 (sha256.h). */
#include "sha256.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

static const uint32_t K[64] = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
  0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
  0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
  0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
  0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
  0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, int n)
{
  return x >> n | x << (32 - n);
}

static void compress_portable(uint32_t h[8], const uint8_t p[64])
{
  uint32_t w[64], a, b, c, d, e, f, g, hh;
  int i;

  for (i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (; i < 64; i++) {
    uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ w[i - 15] >> 3;
    uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ w[i - 2] >> 10;

    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  a = h[0]; b = h[1]; c = h[2]; d = h[3];
  e = h[4]; f = h[5]; g = h[6]; hh = h[7];
  for (i = 0; i < 64; i++) {
    uint32_t t1 = hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) +
                  ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) +
                  ((a & b) ^ (a & c) ^ (b & c));

    hh = g; g = f; f = e; e = d + t1;
    d = c; c = b; b = a; a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d;
  h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

#if defined(__x86_64__)
/* Note [SHA-NI]: x86's SHA extensions do a block in about a fifth of the
 * portable code's time; a rendezvous of 10,000 nodes computes some 30,000
 * token MACs.  The round structure is Intel's: four message words per
 * step, two rounds per sha256rnds2, the state kept as ABEF and CDGH. */
__attribute__((target("sha,sse4.1")))
static void compress_shani(uint32_t h[8], const uint8_t p[64])
{
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL,
                                       0x0405060700010203ULL);
  __m128i st0, st1, tmp, msg, m[4], abef, cdgh;
  int g;

  tmp = _mm_loadu_si128((const __m128i *)&h[0]);
  st1 = _mm_loadu_si128((const __m128i *)&h[4]);
  tmp = _mm_shuffle_epi32(tmp, 0xB1);           /* CDAB */
  st1 = _mm_shuffle_epi32(st1, 0x1B);           /* EFGH */
  st0 = _mm_alignr_epi8(tmp, st1, 8);           /* ABEF */
  st1 = _mm_blend_epi16(st1, tmp, 0xF0);        /* CDGH */
  abef = st0;
  cdgh = st1;
  for (g = 0; g < 16; g++) {
    if (g < 4)
      m[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)),
                              bswap);
    msg = _mm_add_epi32(m[g % 4],
                        _mm_loadu_si128((const __m128i *)&K[4 * g]));
    st1 = _mm_sha256rnds2_epu32(st1, st0, msg);
    if (g >= 3 && g <= 14) {
      tmp = _mm_alignr_epi8(m[g % 4], m[(g + 3) % 4], 4);
      m[(g + 1) % 4] = _mm_add_epi32(m[(g + 1) % 4], tmp);
      m[(g + 1) % 4] = _mm_sha256msg2_epu32(m[(g + 1) % 4], m[g % 4]);
    }
    msg = _mm_shuffle_epi32(msg, 0x0E);
    st0 = _mm_sha256rnds2_epu32(st0, st1, msg);
    if (g >= 1 && g <= 12)
      m[(g + 3) % 4] = _mm_sha256msg1_epu32(m[(g + 3) % 4], m[g % 4]);
  }
  st0 = _mm_add_epi32(st0, abef);
  st1 = _mm_add_epi32(st1, cdgh);
  tmp = _mm_shuffle_epi32(st0, 0x1B);           /* FEBA */
  st1 = _mm_shuffle_epi32(st1, 0xB1);           /* DCHG */
  st0 = _mm_blend_epi16(tmp, st1, 0xF0);        /* DCBA */
  st1 = _mm_alignr_epi8(st1, tmp, 8);           /* ABEF */
  _mm_storeu_si128((__m128i *)&h[0], st0);
  _mm_storeu_si128((__m128i *)&h[4], st1);
}

/* Whether this CPU has the SHA extensions (and SSSE3, SSE4.1): asked of
 * cpuid once (a virtual machine traps it), remembered by every thread.
 * CDRUN_SHA256_PORTABLE=1 takes the portable code (its unit test). */
static bool have_shani(void)
{
  static atomic_int known;      /* 0: not asked yet, 1: no, 2: yes */
  int v = atomic_load_explicit(&known, memory_order_relaxed);

  if (!v) {
    unsigned a, b, c, d;
    const char *portable = getenv("CDRUN_SHA256_PORTABLE");
    bool yes = !(portable && strcmp(portable, "1") == 0) &&
               __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSSE3) &&
               (c & bit_SSE4_1) && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
               (b & bit_SHA);

    v = yes ? 2 : 1;
    atomic_store_explicit(&known, v, memory_order_relaxed);
  }
  return v == 2;
}
#endif

static void compress(uint32_t h[8], const uint8_t p[64])
{
#if defined(__x86_64__)
  if (have_shani()) {
    compress_shani(h, p);
    return;
  }
#endif
  compress_portable(h, p);
}

void sha256_init(struct sha256 *s)
{
  static const uint32_t iv[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  };

  memcpy(s->h, iv, sizeof iv);
  s->total = 0;
  s->used = 0;
}

void sha256_update(struct sha256 *s, const void *p, size_t n)
{
  const uint8_t *b = p;

  s->total += n;
  while (n > 0) {
    size_t k;

    if (s->used == 0 && n >= SHA256_BLOCK_BYTES) {
      compress(s->h, b);        /* a whole block: no copy */
      b += SHA256_BLOCK_BYTES;
      n -= SHA256_BLOCK_BYTES;
      continue;
    }
    k = SHA256_BLOCK_BYTES - s->used < n ? SHA256_BLOCK_BYTES - s->used : n;
    memcpy(s->block + s->used, b, k);
    s->used += k;
    b += k;
    n -= k;
    if (s->used == SHA256_BLOCK_BYTES) {
      compress(s->h, s->block);
      s->used = 0;
    }
  }
}

void sha256_final(struct sha256 *s, uint8_t out[SHA256_BYTES])
{
  uint64_t bits = s->total * 8;
  int i;

  /* The padding: 0x80, zeros to 56 bytes mod 64, the length in bits. */
  s->block[s->used++] = 0x80;
  if (s->used > 56) {
    memset(s->block + s->used, 0, SHA256_BLOCK_BYTES - s->used);
    compress(s->h, s->block);
    s->used = 0;
  }
  memset(s->block + s->used, 0, 56 - s->used);
  for (i = 0; i < 8; i++)
    s->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
  compress(s->h, s->block);
  for (i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(s->h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
    out[4 * i + 3] = (uint8_t)s->h[i];
  }
  explicit_bzero(s, sizeof *s);
}

void sha256_hmac(const void *key, size_t keylen, const void *msg,
                 size_t msglen, uint8_t out[SHA256_BYTES])
{
  sha256_hmac_parts(key, keylen, &msg, &msglen, 1, out);
}

void sha256_hmac_parts(const void *key, size_t keylen,
                       const void *const *parts, const size_t *lens,
                       size_t n, uint8_t out[SHA256_BYTES])
{
  uint8_t k[SHA256_BLOCK_BYTES], pad[SHA256_BLOCK_BYTES], inner[SHA256_BYTES];
  struct sha256 s;
  size_t i;

  memset(k, 0, sizeof k);
  if (keylen > sizeof k) {
    sha256_init(&s);
    sha256_update(&s, key, keylen);
    sha256_final(&s, k);
  } else if (keylen > 0) {
    memcpy(k, key, keylen);
  }
  for (i = 0; i < sizeof pad; i++)
    pad[i] = k[i] ^ 0x36;
  sha256_init(&s);
  sha256_update(&s, pad, sizeof pad);
  for (i = 0; i < n; i++)
    sha256_update(&s, parts[i], lens[i]);
  sha256_final(&s, inner);
  for (i = 0; i < sizeof pad; i++)
    pad[i] = k[i] ^ 0x5c;
  sha256_init(&s);
  sha256_update(&s, pad, sizeof pad);
  sha256_update(&s, inner, sizeof inner);
  sha256_final(&s, out);
  explicit_bzero(k, sizeof k);
  explicit_bzero(pad, sizeof pad);
  explicit_bzero(inner, sizeof inner);
}

bool sha256_equal_ct(const void *a, const void *b, size_t n)
{
  const volatile uint8_t *x = a, *y = b;
  uint8_t d = 0;
  size_t i;

  for (i = 0; i < n; i++)
    d |= x[i] ^ y[i];
  return d == 0;
}
