/* nccl_check.c -- correctness of every libpg collective on the NCCL
 * backend, out of place (so data moves even with one rank) and in place,
 * for scripts/gpu-check; a cdrun worker (one per GPU, or 1 rank).
 *
 * Every dtype and reduction for all_reduce, reduce and reduce_scatter;
 * broadcast, all_gather, all_to_all, send/recv (2+ ranks), barrier, a
 * grouped exchange, and the async form (pg_work_wait) of all_reduce; the
 * in-place forms of all_reduce, reduce, all_gather and reduce_scatter.
 * All of it on the world, then on a sub-group from pg_split (every rank,
 * keys reversing the order: ncclCommSplit, whose child handle NCCL 2.28
 * writes after the call returns) and on one from pg_new_group, with a
 * split that gives no group (NCCL_SPLIT_NOCOLOR) between them.
 * Rank r's element i is a small integer ((7 i + 3 r) mod 5 + 1), so every
 * result is exact in every dtype.  Rank 0 prints one line,
 *
 *   nccl_check ranks=N checks=K failures=F groups=world,split,new_group
 *
 * and the first failures on stderr; exit status 1 on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "pg.h"

#define COUNT 4099           /* odd: no block is aligned by luck */

static pg_group *g;
static int rank, ws, checks, fails;

static void die(const char *what, const char *why)
{
  fprintf(stderr, "nccl_check: rank %d: %s: %s\n", rank, what, why);
  exit(1);
}

#define CUDA(call) do { cudaError_t e_ = (call); \
  if (e_ != cudaSuccess) die(#call, cudaGetErrorString(e_)); } while (0)

static uint16_t to_half(float f, int bf)
{
  uint32_t x;
  int e;

  memcpy(&x, &f, sizeof x);
  if (bf)
    return (uint16_t)(x >> 16);  /* small integers: exact */
  if (f == 0)
    return 0;
  e = (int)((x >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(((x >> 16) & 0x8000) | ((uint32_t)e << 10) |
                    ((x >> 13) & 0x3ff));
}

static float from_half(uint16_t h, int bf)
{
  uint32_t x;
  float f;

  if (bf) {
    x = (uint32_t)h << 16;
  } else if ((h & 0x7fff) == 0) {
    x = (uint32_t)(h & 0x8000) << 16;
  } else {
    x = ((uint32_t)(h & 0x8000) << 16) |
        ((uint32_t)(((h >> 10) & 0x1f) - 15 + 127) << 23) |
        ((uint32_t)(h & 0x3ff) << 13);
  }
  memcpy(&f, &x, sizeof f);
  return f;
}

static void put(pg_dtype t, void *b, size_t i, double v)
{
  switch (t) {
  case PG_F32: ((float *)b)[i] = (float)v; break;
  case PG_F64: ((double *)b)[i] = v; break;
  case PG_F16: ((uint16_t *)b)[i] = to_half((float)v, 0); break;
  case PG_BF16: ((uint16_t *)b)[i] = to_half((float)v, 1); break;
  case PG_I32: ((int32_t *)b)[i] = (int32_t)v; break;
  case PG_I64: ((int64_t *)b)[i] = (int64_t)v; break;
  default: ((uint8_t *)b)[i] = (uint8_t)v; break;
  }
}

static double get(pg_dtype t, const void *b, size_t i)
{
  switch (t) {
  case PG_F32: return ((const float *)b)[i];
  case PG_F64: return ((const double *)b)[i];
  case PG_F16: return from_half(((const uint16_t *)b)[i], 0);
  case PG_BF16: return from_half(((const uint16_t *)b)[i], 1);
  case PG_I32: return ((const int32_t *)b)[i];
  case PG_I64: return (double)((const int64_t *)b)[i];
  default: return ((const uint8_t *)b)[i];
  }
}

static double val(size_t i, int r)
{
  return (double)((7 * i + 3 * (size_t)r) % 5 + 1);
}

/* The reduction of element i over every rank. */
static double reduced(pg_dtype t, pg_op op, size_t i)
{
  double acc = val(i, 0);
  int r;

  for (r = 1; r < ws; r++) {
    double v = val(i, r);

    acc = op == PG_MIN ? fmin(acc, v) : op == PG_MAX ? fmax(acc, v)
        : op == PG_PROD ? acc * v : acc + v;
  }
  if (op == PG_AVG)
    acc = t == PG_I32 || t == PG_I64 || t == PG_U8
          ? (double)((int64_t)acc / ws) : acc / ws;
  return acc;
}

static void *dsend, *drecv, *hbuf;

static void fill(pg_dtype t, size_t n, size_t first, int r)
{
  size_t i;

  for (i = 0; i < n; i++)
    put(t, hbuf, i, val(first + i, r));
  CUDA(cudaMemcpy(dsend, hbuf, n * pg_dtype_size(t),
                  cudaMemcpyHostToDevice));
  CUDA(cudaMemset(drecv, 0xab, (size_t)ws * COUNT * 8));
}

static void fetch(pg_dtype t, void *d, size_t n)
{
  CUDA(cudaMemcpy(hbuf, d, n * pg_dtype_size(t), cudaMemcpyDeviceToHost));
}

static void expect(const char *what, pg_dtype t, pg_op op, size_t i,
                   double want)
{
  double got = get(t, hbuf, i), tol;

  /* ncclAvg scales before summing: the last bit may differ. */
  tol = op == PG_AVG && (t == PG_F16 || t == PG_BF16) ? 0.02 * fabs(want)
      : op == PG_AVG ? 1e-6 * fabs(want) : 0;
  if (fabs(got - want) <= tol)
    return;
  if (++fails <= 10)
    fprintf(stderr, "nccl_check: rank %d: %s dtype %d op %d [%zu]: got "
            "%g, want %g\n", rank, what, (int)t, (int)op, i, got, want);
}

static void rc(const char *what, int err)
{
  checks++;
  if (err)
    die(what, pg_last_error());
}

static void check_reductions(pg_dtype t, pg_op op)
{
  size_t i;
  int root = ws - 1;
  pg_work *w = NULL;

  fill(t, COUNT, 0, rank);
  rc("pg_all_reduce", pg_all_reduce(g, dsend, drecv, COUNT, t, op));
  fetch(t, drecv, COUNT);
  for (i = 0; i < COUNT; i++)
    expect("all_reduce", t, op, i, reduced(t, op, i));
  fill(t, COUNT, 0, rank);
  rc("pg_all_reduce_async", pg_all_reduce_async(g, dsend, drecv, COUNT, t,
                                                op, &w));
  rc("pg_work_wait", pg_work_wait(w, -1));
  pg_work_free(w);
  fetch(t, drecv, COUNT);
  for (i = 0; i < COUNT; i++)
    expect("all_reduce async", t, op, i, reduced(t, op, i));
  fill(t, COUNT, 0, rank);
  rc("pg_reduce", pg_reduce(g, dsend, rank == root ? drecv : NULL, COUNT,
                            t, op, root));
  if (rank == root) {
    fetch(t, drecv, COUNT);
    for (i = 0; i < COUNT; i++)
      expect("reduce", t, op, i, reduced(t, op, i));
  }
  fill(t, (size_t)ws * COUNT, 0, rank);
  rc("pg_reduce_scatter", pg_reduce_scatter(g, dsend, drecv, COUNT, t, op));
  fetch(t, drecv, COUNT);
  for (i = 0; i < COUNT; i++)
    expect("reduce_scatter", t, op, i,
           reduced(t, op, (size_t)rank * COUNT + i));
}

/* The in-place forms (pg.h): the data stays in dsend. */
static void check_in_place(pg_dtype t, pg_op op)
{
  size_t i, sz = pg_dtype_size(t);
  int root = 0;

  fill(t, COUNT, 0, rank);
  rc("pg_all_reduce in place", pg_all_reduce(g, dsend, dsend, COUNT, t, op));
  fetch(t, dsend, COUNT);
  for (i = 0; i < COUNT; i++)
    expect("all_reduce in place", t, op, i, reduced(t, op, i));
  fill(t, COUNT, 0, rank);
  rc("pg_reduce in place", pg_reduce(g, dsend, rank == root ? dsend : NULL,
                                     COUNT, t, op, root));
  if (rank == root) {
    fetch(t, dsend, COUNT);
    for (i = 0; i < COUNT; i++)
      expect("reduce in place", t, op, i, reduced(t, op, i));
  }
  fill(t, (size_t)ws * COUNT, 0, rank);
  rc("pg_reduce_scatter in place",
     pg_reduce_scatter(g, dsend, (char *)dsend + (size_t)rank * COUNT * sz,
                       COUNT, t, op));
  fetch(t, (char *)dsend + (size_t)rank * COUNT * sz, COUNT);
  for (i = 0; i < COUNT; i++)
    expect("reduce_scatter in place", t, op, i,
           reduced(t, op, (size_t)rank * COUNT + i));
}

static void check_moves(pg_dtype t)
{
  size_t i;
  int r, next = (rank + 1) % ws, prev = (rank + ws - 1) % ws;

  fill(t, COUNT, 0, rank);
  CUDA(cudaMemcpy(drecv, dsend, COUNT * pg_dtype_size(t),
                  cudaMemcpyDeviceToDevice));
  rc("pg_broadcast", pg_broadcast(g, drecv, COUNT, t, ws - 1));
  fetch(t, drecv, COUNT);
  for (i = 0; i < COUNT; i++)
    expect("broadcast", t, PG_SUM, i, val(i, ws - 1));
  fill(t, COUNT, 0, rank);
  rc("pg_all_gather", pg_all_gather(g, dsend, drecv, COUNT, t));
  fetch(t, drecv, (size_t)ws * COUNT);
  for (r = 0; r < ws; r++)
    for (i = 0; i < COUNT; i++)
      expect("all_gather", t, PG_SUM, (size_t)r * COUNT + i, val(i, r));
  /* In place: rank r's block already at r * COUNT of the output. */
  fill(t, COUNT, 0, rank);
  CUDA(cudaMemcpy((char *)drecv + (size_t)rank * COUNT * pg_dtype_size(t),
                  dsend, COUNT * pg_dtype_size(t), cudaMemcpyDeviceToDevice));
  rc("pg_all_gather in place",
     pg_all_gather(g, (char *)drecv + (size_t)rank * COUNT *
                   pg_dtype_size(t), drecv, COUNT, t));
  fetch(t, drecv, (size_t)ws * COUNT);
  for (r = 0; r < ws; r++)
    for (i = 0; i < COUNT; i++)
      expect("all_gather in place", t, PG_SUM, (size_t)r * COUNT + i,
             val(i, r));
  fill(t, (size_t)ws * COUNT, 0, rank);
  rc("pg_all_to_all", pg_all_to_all(g, dsend, drecv, COUNT, t));
  fetch(t, drecv, (size_t)ws * COUNT);
  for (r = 0; r < ws; r++)
    for (i = 0; i < COUNT; i++)
      expect("all_to_all", t, PG_SUM, (size_t)r * COUNT + i,
             val((size_t)rank * COUNT + i, r));
  if (ws < 2)
    return;
  fill(t, COUNT, 0, rank);
  rc("pg_group_start", pg_group_start(g));
  rc("pg_send", pg_send(g, dsend, COUNT, t, next, 1));
  rc("pg_recv", pg_recv(g, drecv, COUNT, t, prev, 1));
  rc("pg_group_end", pg_group_end(g));
  fetch(t, drecv, COUNT);
  for (i = 0; i < COUNT; i++)
    expect("send/recv", t, PG_SUM, i, val(i, prev));
}

/* Everything above on group grp (the globals follow it). */
static void check_group(pg_group *grp)
{
  int t, op;

  g = grp;
  rank = pg_rank(g);
  ws = pg_size(g);
  for (t = 0; t < PG_DTYPE_COUNT; t++) {
    for (op = 0; op < PG_OP_COUNT; op++) {
      check_reductions((pg_dtype)t, (pg_op)op);
      check_in_place((pg_dtype)t, (pg_op)op);
    }
    check_moves((pg_dtype)t);
  }
  rc("pg_barrier", pg_barrier(g));
}

int main(void)
{
  struct pg_options o = PG_OPTIONS_INIT;
  pg_group *world, *sub = NULL, *none = NULL;
  int ndev = 0, i, *all;

  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    fprintf(stderr, "nccl_check: no GPU here\n");
    return 3;
  }
  o.backend = PG_BACKEND_NCCL;
  if (pg_init(&o, &world) != 0)
    die("pg_init", pg_last_error());
  g = world;
  rank = pg_rank(g);
  ws = pg_size(g);
  {
    /* The device libpg picked (Note [device rule]). */
    const char *lr = getenv("LOCAL_RANK");

    CUDA(cudaSetDevice(ndev == 1 ? 0 : (lr ? atoi(lr) : 0) % ndev));
  }
  CUDA(cudaMalloc(&dsend, (size_t)ws * COUNT * 8));
  CUDA(cudaMalloc(&drecv, (size_t)ws * COUNT * 8));
  hbuf = malloc((size_t)ws * COUNT * 8);
  if (!hbuf)
    die("malloc", "out of memory");
  check_group(world);
  /* A split: every rank, keys reversing the order. */
  rc("pg_split", pg_split(world, 0, -pg_rank(world), &sub));
  if (!sub || pg_size(sub) != pg_size(world) ||
      pg_rank(sub) != pg_size(world) - 1 - pg_rank(world))
    die("pg_split", "the sub-group's size or order is wrong");
  check_group(sub);
  pg_destroy(sub);
  /* No color: no group, and the world goes on at once. */
  rc("pg_split (no color)", pg_split(world, -1, 0, &none));
  if (none)
    die("pg_split (no color)", "gave a group");
  all = calloc((size_t)pg_size(world), sizeof *all);
  if (!all)
    die("calloc", "out of memory");
  for (i = 0; i < pg_size(world); i++)
    all[i] = i;
  rc("pg_new_group", pg_new_group(world, all, pg_size(world), &sub));
  free(all);
  check_group(sub);
  pg_destroy(sub);
  check_group(world);
  if (rank == 0)
    printf("nccl_check ranks=%d checks=%d failures=%d "
           "groups=world,split,new_group\n", ws, checks, fails);
  fflush(stdout);
  cudaFree(dsend);
  cudaFree(drecv);
  free(hbuf);
  pg_destroy(world);
  return fails ? 1 : 0;
}
