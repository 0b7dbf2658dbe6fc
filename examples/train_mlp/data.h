/* data.h -- train_mlp's random numbers and data.  splitmix64 streams,
 * each a pure function of (seed, purpose, index), so every rank and every
 * restart sees the same numbers; the data is a Gaussian mixture of NCLS
 * classes, NSUB clusters each, in NIN dimensions. */
#ifndef MLP_DATA_H
#define MLP_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "mlp.h"

struct dataset {
  size_t n;
  float *x;          /* [n][NIN] */
  unsigned char *y;  /* [n] */
};

/* The state of stream (seed, purpose), index index. */
uint64_t data_stream(uint64_t seed, uint64_t purpose, uint64_t index);
/* x[0..n) ~ N(0, scale^2), drawn from state s. */
void data_fill_normal(uint64_t *s, float *x, size_t n, double scale);
/* n training rows and NTEST test rows around the same centres. */
void data_make(uint64_t seed, size_t n, struct dataset *train,
               struct dataset *test);
/* The epoch's permutation of 0..n-1 (Fisher-Yates), the same on every
 * rank. */
void data_permute(uint32_t *perm, size_t n, uint64_t seed, long epoch);

#endif
