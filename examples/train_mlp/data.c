/* data.c -- train_mlp's numbers and data (data.h). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "data.h"

/* ---- random numbers and data --------------------------------------------
 * splitmix64: tiny, fast and good enough; every stream is a pure function
 * of (seed, purpose), so every rank and every restart sees the same
 * numbers. */

static uint64_t mix64(uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t data_stream(uint64_t seed, uint64_t purpose, uint64_t index)
{
  uint64_t s = seed ^ (purpose * 0x632be59bd9b4e019ULL);

  s = mix64(&s) ^ index;
  return mix64(&s);
}

/* Two N(0, 1) numbers (Box-Muller; u1 in (0, 1] keeps log finite). */
static void normal2(uint64_t *s, double *a, double *b)
{
  double u1 = (double)((mix64(s) >> 11) + 1) * 0x1p-53;
  double u2 = (double)(mix64(s) >> 11) * 0x1p-53;
  double r = sqrt(-2.0 * log(u1));

  *a = r * cos(2.0 * M_PI * u2);
  *b = r * sin(2.0 * M_PI * u2);
}

void data_fill_normal(uint64_t *s, float *x, size_t n, double scale)
{
  double a, b;
  size_t i;

  for (i = 0; i < n; i += 2) {
    normal2(s, &a, &b);
    x[i] = (float)(a * scale);
    if (i + 1 < n)
      x[i + 1] = (float)(b * scale);
  }
}

/* n rows drawn around the centres: class and cluster uniform. */
static void make_rows(struct dataset *d, size_t n, const float *centres,
                      uint64_t s)
{
  size_t i, j;

  d->n = n;
  d->x = mlp_xcalloc(n * NIN, sizeof *d->x);
  d->y = mlp_xcalloc(n, 1);
  for (i = 0; i < n; i++) {
    uint64_t r = mix64(&s);
    unsigned c = (unsigned)(r % NCLS), k = (unsigned)(r / NCLS % NSUB);
    const float *mu = centres + ((size_t)c * NSUB + k) * NIN;
    float *x = d->x + i * NIN;

    d->y[i] = (unsigned char)c;
    data_fill_normal(&s, x, NIN, NOISE);
    for (j = 0; j < NIN; j++)
      x[j] += mu[j];
  }
}

void data_make(uint64_t seed, size_t n, struct dataset *train,
                      struct dataset *test)
{
  float centres[NCLS * NSUB * NIN];
  uint64_t s = data_stream(seed, 1, 0);

  data_fill_normal(&s, centres, sizeof centres / sizeof *centres, SEPARATION);
  make_rows(train, n, centres, data_stream(seed, 2, 0));
  make_rows(test, NTEST, centres, data_stream(seed, 3, 0));
}

/* The epoch's permutation of 0..n-1 (Fisher-Yates), the same on every
 * rank. */
void data_permute(uint32_t *perm, size_t n, uint64_t seed, long epoch)
{
  uint64_t s = data_stream(seed, 4, (uint64_t)epoch);
  size_t i, j;
  uint32_t t;

  for (i = 0; i < n; i++)
    perm[i] = (uint32_t)i;
  for (i = n - 1; i > 0; i--) {
    j = (size_t)(mix64(&s) % (i + 1));
    t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

