/* ar_nccl.c -- libpg's NCCL all-reduce against a raw NCCL loop on the
 * same GPUs and sizes, for scripts/bench/nccl; a cdrun worker (one per
 * GPU).  f32 SUM in place on device memory.
 *
 * Per size: one libpg all-reduce of the pattern (ar_common.h), copied back
 * and checked on every rank; then, for each of libpg and raw NCCL, warm-up
 * ops and timed ops (AR_TARGET_S), the time per op being the slowest
 * rank's.  libpg: pg_all_reduce on the legacy default stream (returns once
 * enqueued; the stream waits on the device, Note [stream model]), the
 * stream synchronized after the loop.  Raw: ncclAllReduce on a stream of
 * its own over a communicator of its own (unique id through libpg's
 * store), synchronized after the loop -- what nccl-tests' all_reduce_perf
 * measures.  Rank 0 prints
 *
 *   nccl_allreduce gpus=N bytes=B libpg_busbw=X nccl_busbw=Y ratio=R
 *
 * busbw = bytes / time * 2 (N - 1) / N in GB/s (nccl-tests; N = 1: the
 * algorithm bandwidth), ratio = libpg / nccl.  Sizes: argv[1..], default
 * 4 KiB to 256 MiB by 4x.  Exit status 3 when there is no GPU. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "pg.h"
#include "ar_common.h"

static pg_group *g;
static int rank, ws;

static void die(const char *what, const char *why)
{
  fprintf(stderr, "ar_nccl: rank %d: %s: %s\n", rank, what, why);
  exit(1);
}

#define CUDA(call) do { cudaError_t e_ = (call); \
  if (e_ != cudaSuccess) die(#call, cudaGetErrorString(e_)); } while (0)
#define NCCL(call) do { ncclResult_t r_ = (call); \
  if (r_ != ncclSuccess) die(#call, ncclGetErrorString(r_)); } while (0)
#define PG(call) do { int e_ = (call); \
  if (e_) die(#call, pg_last_error()); } while (0)

/* The slowest rank's value, through libpg (device memory). */
static double max_over_ranks(double v, double *dv)
{
  CUDA(cudaMemcpy(dv, &v, sizeof v, cudaMemcpyHostToDevice));
  PG(pg_all_reduce(g, dv, dv, 1, PG_F64, PG_MAX));
  CUDA(cudaMemcpy(&v, dv, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

static void run_libpg(float *d, size_t n, long iters)
{
  for (long i = 0; i < iters; i++)
    PG(pg_all_reduce(g, d, d, n, PG_F32, PG_SUM));
  CUDA(cudaStreamSynchronize(cudaStreamLegacy));
}

static void run_raw(ncclComm_t comm, cudaStream_t st, float *d, size_t n,
                    long iters)
{
  for (long i = 0; i < iters; i++)
    NCCL(ncclAllReduce(d, d, n, ncclFloat32, ncclSum, comm, st));
  CUDA(cudaStreamSynchronize(st));
}

/* Seconds per op: warm-up, then enough ops for AR_TARGET_S, the slowest
 * rank's mean. */
static double time_op(int raw, ncclComm_t comm, cudaStream_t st, float *d,
                      size_t n, double *dv)
{
  long iters = 2;
  double t0, per;

  for (;;) {
    t0 = ar_now();
    raw ? run_raw(comm, st, d, n, iters) : run_libpg(d, n, iters);
    per = max_over_ranks((ar_now() - t0) / (double)iters, dv);
    if (per * (double)iters >= AR_WARM_S || iters >= AR_MAX_ITERS)
      break;
    iters *= 4;
  }
  iters = (long)(AR_TARGET_S / per);
  if (iters < AR_MIN_ITERS)
    iters = AR_MIN_ITERS;
  if (iters > AR_MAX_ITERS)
    iters = AR_MAX_ITERS;
  PG(pg_barrier(g));
  t0 = ar_now();
  raw ? run_raw(comm, st, d, n, iters) : run_libpg(d, n, iters);
  return max_over_ranks((ar_now() - t0) / (double)iters, dv);
}

int main(int argc, char **argv)
{
  static const size_t dflt[] = { 4096, 65536, 1 << 20, 16 << 20, 64 << 20,
                                 256 << 20 };
  size_t sizes[32], nsizes = 0, maxb = 0, k, i;
  struct pg_options o = PG_OPTIONS_INIT;
  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t st;
  float *d, *h;
  double *dv, tl, tr, f;
  void *val;
  size_t len;
  int ndev = 0, dev, err;
  cudaError_t ce;

  for (i = 1; i < (size_t)argc && nsizes < 32; i++)
    sizes[nsizes++] = strtoull(argv[i], NULL, 10);
  if (!nsizes)
    for (i = 0; i < sizeof dflt / sizeof dflt[0]; i++)
      sizes[nsizes++] = dflt[i];
  for (k = 0; k < nsizes; k++)
    if (sizes[k] > maxb)
      maxb = sizes[k];
  ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev < 1) {
    fprintf(stderr, "ar_nccl: no GPU here (cudaGetDeviceCount: %s): "
            "nothing to measure\n", ce != cudaSuccess
            ? cudaGetErrorString(ce) : "0 devices");
    return 3;
  }
  o.backend = PG_BACKEND_NCCL;
  if ((err = pg_init(&o, &g)) != 0)
    die("pg_init", pg_last_error());
  rank = pg_rank(g);
  ws = pg_size(g);
  /* The device libpg picked (Note [device rule]). */
  CUDA(cudaGetDevice(&dev));
  {
    const char *lr = getenv("LOCAL_RANK");
    dev = ndev == 1 ? 0 : (lr ? atoi(lr) : 0) % ndev;
  }
  CUDA(cudaSetDevice(dev));
  CUDA(cudaMalloc((void **)&d, maxb));
  CUDA(cudaMalloc((void **)&dv, sizeof *dv));
  h = malloc(maxb);
  if (!h)
    die("malloc", "out of memory");
  /* A raw communicator over the same ranks and GPUs (a group of one has
   * no store, and needs none). */
  if (rank == 0) {
    NCCL(ncclGetUniqueId(&id));
    if (ws > 1)
      PG(pg_store_set(pg_group_store(g), "bench/nccl_id", &id, sizeof id));
  } else {
    PG(pg_store_get(pg_group_store(g), "bench/nccl_id", 120, &val, &len));
    if (len != sizeof id)
      die("nccl id", "wrong size");
    memcpy(&id, val, sizeof id);
    free(val);
  }
  NCCL(ncclCommInitRank(&comm, ws, id, rank));
  CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  if (rank == 0)
    fprintf(stderr, "ar_nccl: %d ranks, backend %s, device %d of %d\n", ws,
            pg_backend_name(g), dev, ndev);
  for (k = 0; k < nsizes; k++) {
    size_t n = sizes[k] / sizeof(float);

    ar_fill(h, n, rank);
    CUDA(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice));
    PG(pg_all_reduce(g, d, d, n, PG_F32, PG_SUM));
    CUDA(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost));
    for (i = 0; i < n; i++) {
      float want = 0;

      for (int r = 0; r < ws; r++)
        want += ar_val(i, r);
      if (h[i] != want)
        die("check", "libpg's all-reduce is wrong");
    }
    CUDA(cudaMemset(d, 0, n * sizeof *h));
    tl = time_op(0, comm, st, d, n, dv);
    tr = time_op(1, comm, st, d, n, dv);
    f = ws > 1 ? 2.0 * (ws - 1) / ws : 1.0;
    if (rank == 0)
      printf("nccl_allreduce gpus=%d bytes=%zu libpg_busbw=%.3f "
             "nccl_busbw=%.3f ratio=%.3f\n", ws, n * sizeof(float),
             (double)n * sizeof(float) / tl * f / 1e9,
             (double)n * sizeof(float) / tr * f / 1e9, tr / tl);
    fflush(stdout);
  }
  ncclCommDestroy(comm);
  cudaStreamDestroy(st);
  cudaFree(d);
  cudaFree(dv);
  free(h);
  pg_destroy(g);
  return 0;
}
