/* ar_libpg.c -- libpg's CPU all-reduce (f32 SUM, in place) for
 * scripts/bench/allreduce; a cdrun worker (RANK, WORLD_SIZE, MASTER_* from
 * cdrun).  Rank 0 prints one "result ..." line per size (ar_common.h).
 *
 *   ar_libpg [--expect BACKEND]   fail unless pg_backend_name is BACKEND
 *
 * Per size: one all-reduce of the pattern, checked on every rank (a wrong
 * element fails the run on all ranks); then zeros (the values then stay
 * 0: no growth to inf, no denormals), warm-up rounds (ar_warm_round: at
 * least 2 and >= 0.1 s; the slowest rank's time per op of the last one
 * sizes the timed loop), then timed passes, each after a barrier, until
 * they took >= 0.2 s (ar_common.h); time per op = max over ranks of each
 * rank's mean over all timed ops, reduced with libpg itself. */
#include <errno.h>
#include <stdint.h>

#include "pg.h"
#include "ar_common.h"

static pg_group *g;

static void die(const char *what, int err)
{
  fprintf(stderr, "ar_libpg: %s: %s (%s)\n", what, pg_strerror(err),
          pg_last_error());
  exit(1);
}

static double max_over_ranks(double v)
{
  int err = pg_all_reduce(g, &v, &v, 1, PG_F64, PG_MAX);

  if (err)
    die("all_reduce(max)", err);
  return v;
}

int main(int argc, char **argv)
{
  struct pg_options o = PG_OPTIONS_INIT;
  const char *expect = NULL;
  size_t sizes[AR_MAX_SIZES], nsizes = ar_size_list(sizes);
  size_t maxb = ar_size_max(sizes, nsizes);
  float *buf;
  int err, rank, ws;

  if (argc == 3 && strcmp(argv[1], "--expect") == 0)
    expect = argv[2];
  if ((err = pg_init(&o, &g)) != 0)
    die("pg_init", err);
  rank = pg_rank(g);
  ws = pg_size(g);
  if (rank == 0)
    fprintf(stderr, "ar_libpg: n=%d backend=%s\n", ws, pg_backend_name(g));
  if (expect && strcmp(expect, pg_backend_name(g)) != 0) {
    fprintf(stderr, "ar_libpg: backend is %s, expected %s\n",
            pg_backend_name(g), expect);
    return 1;
  }
  if (nsizes == 0)
    return 2;
  if (posix_memalign((void **)&buf, 4096, maxb) != 0) {
    fprintf(stderr, "ar_libpg: out of memory\n");
    return 1;
  }
  for (size_t k = 0; k < nsizes; k++) {
    size_t bytes = sizes[k], cnt = bytes / sizeof(float);
    long round = ar_warm_round(bytes), rounds, iters, i, done, passes;
    double t0, est = 0, warm, dt, bad, mine, seen;

    ar_fill(buf, cnt, rank);
    if ((err = pg_all_reduce(g, buf, buf, cnt, PG_F32, PG_SUM)) != 0)
      die("all_reduce", err);
    bad = (double)ar_check(buf, cnt, ws);
    if (bad)
      fprintf(stderr, "ar_libpg: rank %d: %.0f of %zu elements wrong at "
              "%zu bytes\n", rank, bad, cnt, bytes);
    if (max_over_ranks(bad) > 0) {
      if (rank == 0)
        fprintf(stderr, "ar_libpg: WRONG RESULT at %zu bytes\n", bytes);
      return 1;
    }
    memset(buf, 0, bytes);
    warm = 0;
    for (rounds = 0; rounds < 2 || (warm < AR_WARM_S &&
                                    rounds < AR_WARM_MAX_ROUNDS); rounds++) {
      t0 = ar_now();
      for (i = 0; i < round; i++)
        if ((err = pg_all_reduce(g, buf, buf, cnt, PG_F32, PG_SUM)) != 0)
          die("all_reduce", err);
      est = max_over_ranks((ar_now() - t0) / (double)round);
      warm += est * (double)round;
    }
    /* Timed passes; mine: this rank's time, seen: the slowest's. */
    mine = seen = 0;
    done = 0;
    for (passes = 0; passes < 1 || (seen < AR_TIMED_MIN_S &&
                                    passes < AR_MAX_PASSES); passes++) {
      iters = (long)ar_iters(est, AR_TARGET_S - seen);
      if ((err = pg_barrier(g)) != 0)
        die("barrier", err);
      t0 = ar_now();
      for (i = 0; i < iters; i++)
        if ((err = pg_all_reduce(g, buf, buf, cnt, PG_F32, PG_SUM)) != 0)
          die("all_reduce", err);
      dt = ar_now() - t0;
      mine += dt;
      done += iters;
      dt = max_over_ranks(dt);
      seen += dt;
      est = dt / (double)iters;
    }
    dt = max_over_ranks(mine / (double)done);
    if (rank == 0)
      ar_report("libpg", ws, bytes, done, dt);
  }
  free(buf);
  pg_destroy(g);
  return 0;
}
