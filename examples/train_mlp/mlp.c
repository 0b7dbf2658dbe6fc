/* mlp.c -- train_mlp's error reporting and small helpers (mlp.h). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mlp.h"

int mlp_rank = -1;   /* for messages */

void mlp_err_msg(const char *what, const char *detail)
{
  if (mlp_rank >= 0)
    fprintf(stderr, "train_mlp: rank %d: %s%s%s\n", mlp_rank, what,
            *detail ? ": " : "", detail);
  else
    fprintf(stderr, "train_mlp: %s%s%s\n", what, *detail ? ": " : "",
            detail);
}

void mlp_pg_fail(const char *what, int err)
{
  char buf[512];

  snprintf(buf, sizeof buf, "%s (%s)", pg_last_error(), pg_err_name(err));
  mlp_err_msg(what, *pg_last_error() ? buf : pg_strerror(err));
}

double mlp_now_s(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void *mlp_xcalloc(size_t n, size_t size)
{
  void *p = calloc(n ? n : 1, size);

  if (!p) {
    mlp_err_msg("out of memory", "");
    exit(1);
  }
  return p;
}
