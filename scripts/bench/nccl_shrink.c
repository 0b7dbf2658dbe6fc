/* nccl_shrink.c -- what live recovery's shrink costs on NCCL, for
 * scripts/gpu-check: a cdrun worker, one per GPU (N >= 2 ranks).  The
 * last rank leaves; the others time, on raw NCCL (non-blocking
 * communicators, as libpg's):
 *
 *   shrink_ms         ncclCommShrink(NCCL_SHRINK_DEFAULT) of 1 rank out of
 *                     N (a planned shrink), until the new comm is ready;
 *   revoke_shrink_ms  ncclCommRevoke, then ncclCommShrink(NCCL_SHRINK_ABORT)
 *                     (after a failure), NCCL >= 2.28;
 *   init_ms           the alternative: a new unique id through the store
 *                     and ncclCommInitRankConfig over the N - 1;
 *
 * each followed by one all-reduce on the new comm, checked.  Rank 0
 * prints the slowest survivor's figures on one line,
 *
 *   nccl_shrink ranks=N shrink_ms=A revoke_shrink_ms=B init_ms=C failures=F
 *
 * (B is "-" without ncclCommRevoke).  With one rank (one GPU: NCCL
 * refuses two ranks of one communicator on one GPU, and a shrink needs a
 * survivor and a leaver) it times a split instead, as NCCL 2.28 does it
 * (ncclInProgress, the handle written later, the parent in progress
 * meanwhile), checks a split without color, and that a shrink leaving
 * nobody, or leaving the caller, is refused with no handle:
 *
 *   nccl_shrink ranks=1 split_ms=A shrink=refused failures=F
 *
 * Exit status 1 on a failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "pg.h"

static pg_group *g;
static pg_store *st;
static int rank, ws, fails;
static cudaStream_t stream;
static float *dbuf;

static void die(const char *what, const char *why)
{
  fprintf(stderr, "nccl_shrink: rank %d: %s: %s\n", rank, what, why);
  exit(1);
}

static double now_ms(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Polls a non-blocking comm until it leaves ncclInProgress. */
static ncclResult_t ready(ncclComm_t c, ncclResult_t r)
{
  ncclResult_t s = r;

  while (r == ncclInProgress) {
    if (ncclCommGetAsyncError(c, &s) != ncclSuccess)
      return ncclInternalError;
    if (s != ncclInProgress)
      return s;
  }
  return r;
}

/* A non-blocking comm of n ranks from the id under key (rank 0 of the n
 * makes it). */
static ncclComm_t make(const char *key, int n, int me)
{
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclUniqueId id;
  ncclComm_t c = NULL;
  void *v = NULL;
  size_t len = 0;

  if (me == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess ||
        (n > 1 && pg_store_set(st, key, &id, sizeof id) != 0))
      die("ncclGetUniqueId", "cannot share the id");
  } else {
    if (pg_store_get(st, key, 120, &v, &len) != 0 || len != sizeof id)
      die("the unique id", pg_last_error());
    memcpy(&id, v, sizeof id);
    free(v);
  }
  cfg.blocking = 0;
  if (ready(c, ncclCommInitRankConfig(&c, n, id, me, &cfg)) != ncclSuccess)
    die("ncclCommInitRankConfig", ncclGetLastError(c));
  return c;
}

/* One all-reduce of (rank + 1) on c, checked against want. */
static void check(ncclComm_t c, float want, const char *what)
{
  float h = (float)(rank + 1);

  if (cudaMemcpy(dbuf, &h, sizeof h, cudaMemcpyHostToDevice) != cudaSuccess ||
      ready(c, ncclAllReduce(dbuf, dbuf, 1, ncclFloat32, ncclSum, c,
                             stream)) != ncclSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess ||
      cudaMemcpy(&h, dbuf, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess)
    die(what, "all-reduce failed");
  if (h != want) {
    fprintf(stderr, "nccl_shrink: rank %d: %s: all-reduce %g, want %g\n",
            rank, what, h, want);
    fails++;
  }
}

/* The slowest survivor's time (an all-reduce max over the CPU group). */
static double slowest(double ms)
{
  double v = ms;

  if (pg_all_reduce(g, &v, &v, 1, PG_F64, PG_MAX) != 0)
    die("pg_all_reduce", pg_last_error());
  return v;
}

/* NCCL 2.28 (libpg's Note [child handle]): a non-blocking shrink answers
 * ncclInProgress with *out NULL, and NCCL's thread writes the handle
 * through out later (out must outlive this call: it is main's).  The
 * PARENT says ncclInProgress until then; only after it leaves that state
 * is *out read and the new comm waited ready. */
static double shrink(ncclComm_t parent, int flags, ncclComm_t *out)
{
  int leave[1] = { ws - 1 };
  double t0 = now_ms();
  ncclResult_t r;

  r = ready(parent, ncclCommShrink(parent, leave, 1, out, NULL, flags));
  if (r == ncclSuccess && __atomic_load_n(out, __ATOMIC_ACQUIRE))
    r = ready(*out, ncclInProgress);
  if (r != ncclSuccess || !*out)
    die("ncclCommShrink", ncclGetErrorString(r));
  return now_ms() - t0;
}

/* One rank: the split and the shrink's refusals (above). */
static void one_rank(void)
{
  ncclComm_t world = make("shrink/world1", 1, 0), c = NULL, nc = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  int self[1] = { 0 };
  double t0 = now_ms(), t_split;
  ncclResult_t r;

  check(world, 1, "the world");
  cfg.blocking = 0;
  t0 = now_ms();
  r = ncclCommSplit(world, 0, 0, &c, &cfg);
  if (r == ncclInProgress && c) {
    fprintf(stderr, "nccl_shrink: ncclCommSplit answered ncclInProgress "
            "with the handle already set (NCCL 2.28 writes it later)\n");
    fails++;
  }
  r = ready(world, r);
  if (r == ncclSuccess && __atomic_load_n(&c, __ATOMIC_ACQUIRE))
    r = ready(c, ncclInProgress);
  if (r != ncclSuccess || !c)
    die("ncclCommSplit", ncclGetErrorString(r));
  t_split = now_ms() - t0;
  check(c, 1, "the split comm");
  ncclCommDestroy(c);
  r = ready(world, ncclCommSplit(world, NCCL_SPLIT_NOCOLOR, 0, &nc, &cfg));
  if (r != ncclSuccess || nc) {
    fprintf(stderr, "nccl_shrink: a split without color: %s, handle %p\n",
            ncclGetErrorString(r), (void *)nc);
    fails++;
  }
  check(world, 1, "the parent after a split without color");
  r = ncclCommShrink(world, self, 0, &nc, NULL, NCCL_SHRINK_DEFAULT);
  if (r != ncclInvalidArgument || nc) {
    fprintf(stderr, "nccl_shrink: a shrink leaving nobody: %s\n",
            ncclGetErrorString(r));
    fails++;
  }
  r = ncclCommShrink(world, self, 1, &nc, NULL, NCCL_SHRINK_DEFAULT);
  if (r != ncclInvalidArgument || nc) {
    fprintf(stderr, "nccl_shrink: a shrink leaving the caller: %s\n",
            ncclGetErrorString(r));
    fails++;
  }
  ncclCommAbort(world);
  printf("nccl_shrink ranks=1 split_ms=%.1f shrink=refused failures=%d\n",
         t_split, fails);
}

int main(void)
{
  struct pg_options o = PG_OPTIONS_INIT;
  ncclComm_t world, c;
  double t_shrink = 0, t_revoke = -1, t_init = 0, t0;
  float want;
  int ndev = 0, i;
  const char *lr = getenv("LOCAL_RANK");

  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    fprintf(stderr, "nccl_shrink: no GPU here\n");
    return 3;
  }
  o.backend = PG_BACKEND_CPU;
  if (pg_init(&o, &g) != 0)
    die("pg_init", pg_last_error());
  rank = pg_rank(g);
  ws = pg_size(g);
  st = pg_group_store(g);
  if (cudaSetDevice(ndev == 1 ? 0 : (lr ? atoi(lr) : 0) % ndev) ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) ||
      cudaMalloc((void **)&dbuf, 64))
    die("CUDA setup", "failed");
  if (ws < 2) {
    one_rank();
    cudaFree(dbuf);
    cudaStreamDestroy(stream);
    pg_destroy(g);
    return fails ? 1 : 0;
  }
  world = make("shrink/world", ws, rank);
  check(world, (float)ws * (ws + 1) / 2, "the world");
  want = (float)(ws - 1) * ws / 2;
  /* The leaving rank takes part in nothing more; it waits for the end. */
  if (rank < ws - 1) {
    t_shrink = shrink(world, NCCL_SHRINK_DEFAULT, &c);
    check(c, want, "after the planned shrink");
    ncclCommDestroy(c);
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22807 && \
    defined(NCCL_REVOKE_DEFAULT)
    t0 = now_ms();
    if (ready(world, ncclCommRevoke(world, NCCL_REVOKE_DEFAULT)) !=
        ncclSuccess)
      die("ncclCommRevoke", ncclGetLastError(world));
    t_revoke = now_ms() - t0 + shrink(world, NCCL_SHRINK_ABORT, &c);
    check(c, want, "after revoke and shrink");
    ncclCommDestroy(c);
#endif
    t0 = now_ms();
    c = make("shrink/fresh", ws - 1, rank);
    t_init = now_ms() - t0;
    check(c, want, "a new communicator");
    ncclCommDestroy(c);
  }
  /* Every rank, the leaving one too, in the CPU group's all-reduces. */
  t_shrink = slowest(t_shrink);
  t_revoke = slowest(t_revoke);
  t_init = slowest(t_init);
  i = fails;
  if (pg_all_reduce(g, &i, &fails, 1, PG_I32, PG_SUM) != 0)
    die("pg_all_reduce", pg_last_error());
  ncclCommAbort(world);
  if (rank == 0) {
    printf("nccl_shrink ranks=%d shrink_ms=%.1f revoke_shrink_ms=", ws,
           t_shrink);
    if (t_revoke >= 0)
      printf("%.1f", t_revoke);
    else
      printf("-");
    printf(" init_ms=%.1f failures=%d\n", t_init, fails);
  }
  cudaFree(dbuf);
  cudaStreamDestroy(stream);
  pg_destroy(g);
  return fails ? 1 : 0;
}
