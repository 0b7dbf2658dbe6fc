/* ar_mpi.c -- MPI_Allreduce (f32 SUM, MPI_IN_PLACE) for
 * scripts/bench/allreduce; started by mpirun.  Same method and output as
 * ar_libpg.c (ar_common.h): per size one checked all-reduce of the pattern,
 * zeros, warm-up rounds (>= 0.1 s), the slowest rank's estimate, a
 * barrier, the timed loop; time per op = max over ranks of the mean (MPI_Allreduce MAX).
 * Rank 0 also prints to stderr the mode Open MPI runs in, read back with
 * MPI_T: mpi_oversubscribe (mpirun sets it when it oversubscribes) and
 * mpi_yield_when_idle (defaults to mpi_oversubscribe: yield the CPU while
 * waiting instead of busy-polling). */
#include <mpi.h>

#include "ar_common.h"

/* The value of an integer/bool MCA variable as this process sees it after
 * MPI_Init (MPI_T), or -1. */
static int cvar_int(const char *name)
{
  int prov, idx, v = -1, cnt, nlen = 0, dlen = 0, verb, bind, scope, sz;
  MPI_T_cvar_handle h;
  MPI_Datatype dt;
  MPI_T_enum en;
  unsigned char raw[16] = { 0 };

  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &prov) != MPI_SUCCESS)
    return -1;
  /* Open MPI keeps bools in one byte: read the raw value, size by type. */
  if (MPI_T_cvar_get_index(name, &idx) == MPI_SUCCESS &&
      MPI_T_cvar_get_info(idx, NULL, &nlen, &verb, &dt, &en, NULL, &dlen,
                          &bind, &scope) == MPI_SUCCESS &&
      MPI_Type_size(dt, &sz) == MPI_SUCCESS && sz >= 1 && sz <= 4 &&
      MPI_T_cvar_handle_alloc(idx, NULL, &h, &cnt) == MPI_SUCCESS) {
    if (cnt == 1 && MPI_T_cvar_read(h, raw) == MPI_SUCCESS) {
      v = 0;
      memcpy(&v, raw, (size_t)sz);
    }
    MPI_T_cvar_handle_free(&h);
  }
  MPI_T_finalize();
  return v;
}

static double max_over_ranks(double v)
{
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

int main(int argc, char **argv)
{
  size_t sizes[AR_MAX_SIZES], nsizes = ar_size_list(sizes);
  size_t maxb = ar_size_max(sizes, nsizes);
  float *buf = NULL;
  int rank, ws;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  if (rank == 0) {
    fprintf(stderr, "ar_mpi: n=%d mpi_oversubscribe=%d "
            "mpi_yield_when_idle=%d (1: yields the CPU when idle, 0: "
            "busy-polls; -1: unknown)\n", ws,
            cvar_int("mpi_oversubscribe"), cvar_int("mpi_yield_when_idle"));
  }
  if (nsizes == 0) {
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
  }
  if (posix_memalign((void **)&buf, 4096, maxb) != 0) {
    fprintf(stderr, "ar_mpi: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  for (size_t k = 0; k < nsizes; k++) {
    size_t bytes = sizes[k], cnt = bytes / sizeof(float);
    long round = ar_warm_round(bytes), rounds, iters, i, done, passes;
    double t0, est = 0, warm, dt, bad, mine, seen;

    ar_fill(buf, cnt, rank);
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    bad = (double)ar_check(buf, cnt, ws);
    if (bad)
      fprintf(stderr, "ar_mpi: rank %d: %.0f of %zu elements wrong at "
              "%zu bytes\n", rank, bad, cnt, bytes);
    if (max_over_ranks(bad) > 0) {
      if (rank == 0)
        fprintf(stderr, "ar_mpi: WRONG RESULT at %zu bytes\n", bytes);
      MPI_Finalize();
      return 1;
    }
    memset(buf, 0, bytes);
    warm = 0;
    for (rounds = 0; rounds < 2 || (warm < AR_WARM_S &&
                                    rounds < AR_WARM_MAX_ROUNDS); rounds++) {
      t0 = ar_now();
      for (i = 0; i < round; i++)
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      est = max_over_ranks((ar_now() - t0) / (double)round);
      warm += est * (double)round;
    }
    /* Timed passes; mine: this rank's time, seen: the slowest's. */
    mine = seen = 0;
    done = 0;
    for (passes = 0; passes < 1 || (seen < AR_TIMED_MIN_S &&
                                    passes < AR_MAX_PASSES); passes++) {
      iters = (long)ar_iters(est, AR_TARGET_S - seen);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = ar_now();
      for (i = 0; i < iters; i++)
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      dt = ar_now() - t0;
      mine += dt;
      done += iters;
      dt = max_over_ranks(dt);
      seen += dt;
      est = dt / (double)iters;
    }
    dt = max_over_ranks(mine / (double)done);
    if (rank == 0)
      ar_report("mpi", ws, bytes, done, dt);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
