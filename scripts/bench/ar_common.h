/* ar_common.h -- what the all-reduce benchmark programs (ar_libpg.c,
 * ar_mpi.c) share: sizes, the test pattern, iteration counts, the output
 * line.  See scripts/bench/allreduce.
 *
 * Pattern: rank r, element i holds (7 i + 13 r) mod 251, a small integer,
 * so every partial sum is an integer below 2^24: exact in f32 whatever the
 * order of the additions. */
#ifndef AR_COMMON_H
#define AR_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const size_t ar_sizes[] = { 4096, 65536, 1 << 20, 16 << 20, 64 << 20 };
#define AR_NSIZES (sizeof ar_sizes / sizeof ar_sizes[0])
#define AR_MAX_SIZES 64

/* The sizes to run: AR_SIZES from the environment (byte counts, multiples
 * of 4, separated by spaces; scripts/bench/net), else ar_sizes.  Returns
 * how many, 0 on a malformed list (with a message). */
static inline size_t ar_size_list(size_t *out)
{
  const char *e = getenv("AR_SIZES");
  size_t n = 0;

  if (!e || !*e) {
    for (n = 0; n < AR_NSIZES; n++)
      out[n] = ar_sizes[n];
    return n;
  }
  while (*e) {
    char *end;
    unsigned long long v;

    while (*e == ' ')
      e++;
    if (!*e)
      break;
    v = strtoull(e, &end, 10);
    if (end == e || (*end && *end != ' ') || v == 0 || v % 4 ||
        v > (1ull << 30) || n == AR_MAX_SIZES) {
      fprintf(stderr, "AR_SIZES: '%s' is not a list of at most %d byte "
              "counts, multiples of 4, up to 1 GiB\n", getenv("AR_SIZES"),
              AR_MAX_SIZES);
      return 0;
    }
    out[n++] = (size_t)v;
    e = end;
  }
  return n;
}

static inline size_t ar_size_max(const size_t *s, size_t n)
{
  size_t m = 0;

  for (size_t k = 0; k < n; k++)
    if (s[k] > m)
      m = s[k];
  return m;
}

#define AR_TARGET_S 0.25   /* timed seconds per size (at least ~0.2) */
#define AR_WARM_S 0.1      /* warm-up seconds per size, at least */
#define AR_WARM_MAX_ROUNDS 1000
#define AR_MIN_ITERS 5
#define AR_MAX_ITERS 200000

static inline double ar_now(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline float ar_val(size_t i, int r)
{
  return (float)((7 * (i % 251) + 13 * (size_t)r) % 251);
}

static inline void ar_fill(float *b, size_t n, int rank)
{
  for (size_t i = 0; i < n; i++)
    b[i] = ar_val(i, rank);
}

/* Elements of b that differ from the sum over ranks 0..ws-1. */
static inline size_t ar_check(const float *b, size_t n, int ws)
{
  size_t bad = 0;
  /* The pattern repeats every 251 elements. */
  float want[251];

  for (size_t j = 0; j < 251; j++) {
    float s = 0;

    for (int r = 0; r < ws; r++)
      s += ar_val(j, r);
    want[j] = s;
  }
  for (size_t i = 0; i < n; i++)
    if (b[i] != want[i % 251])
      bad++;
  return bad;
}

/* Warm-up: rounds of this many ops (at least 2 rounds, and at least
 * AR_WARM_S seconds by the slowest rank's clock, so that every rank runs
 * the same number); the last round's time per op sizes the timed loop. */
static inline long ar_warm_round(size_t bytes)
{
  return bytes <= 65536 ? 50 : bytes <= (1 << 20) ? 10 : 2;
}

/* Iterations for ~secs seconds given the time of one op.  The timed loop
 * runs in passes: one pass of ar_iters(est, AR_TARGET_S), then more (each
 * sized from the last pass, the slowest rank's) while the passes so far
 * took less than AR_TIMED_MIN_S by the slowest rank's clock: a warm-up
 * estimate that was too slow does not leave a size timed too briefly. */
#define AR_TIMED_MIN_S 0.2
#define AR_MAX_PASSES 10

static inline double ar_iters(double per_op, double secs)
{
  double it = per_op > 0 ? secs / per_op : AR_MAX_ITERS;

  if (it < AR_MIN_ITERS)
    it = AR_MIN_ITERS;
  if (it > AR_MAX_ITERS)
    it = AR_MAX_ITERS;
  return (double)(long)it;
}

/* nccl-tests' figures: algbw = bytes / time, busbw = algbw * 2(n-1)/n. */
static inline void ar_report(const char *who, int ws, size_t bytes,
                             long iters, double secs)
{
  double algbw = (double)bytes / secs / 1e9;
  double busbw = algbw * 2.0 * (ws - 1) / ws;

  printf("result impl=%s n=%d bytes=%zu iters=%ld time_us=%.3f algbw=%.4f "
         "busbw=%.4f\n", who, ws, bytes, iters, secs * 1e6, algbw, busbw);
  fflush(stdout);
}

#endif
