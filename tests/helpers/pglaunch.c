/* pglaunch.c -- a libpg program started once per rank without cdrun, by
 * `srun -n N` or `mpirun -n N`: pg_init must find its rank and world in
 * the launcher's environment.  Each rank all-reduces its rank and writes
 * DIR/id.<rank>: "rank world sum backend host pid". */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pg.h"

int main(int argc, char **argv)
{
  struct pg_options o = PG_OPTIONS_INIT;
  pg_group *g;
  char path[4096], host[256] = "?";
  int64_t v;
  FILE *f;
  int err, r, n;

  if (argc != 2) {
    fprintf(stderr, "usage: pglaunch DIR\n");
    return 2;
  }
  err = pg_init(&o, &g);
  if (err) {
    fprintf(stderr, "pglaunch: pg_init: %s\n", pg_last_error());
    return 1;
  }
  r = pg_rank(g);
  n = pg_size(g);
  v = r;
  err = pg_all_reduce(g, &v, &v, 1, PG_I64, PG_SUM);
  if (err) {
    fprintf(stderr, "pglaunch rank %d: all_reduce: %s\n", r,
            pg_last_error());
    pg_destroy(g);
    return 1;
  }
  gethostname(host, sizeof host);
  snprintf(path, sizeof path, "%s/id.%d", argv[1], r);
  f = fopen(path, "w");
  if (!f) {
    perror(path);
    pg_destroy(g);
    return 1;
  }
  fprintf(f, "%d %d %lld %s %s %d\n", r, n, (long long)v,
          pg_backend_name(g), host, (int)getpid());
  fclose(f);
  pg_destroy(g);
  return v == (int64_t)n * (n - 1) / 2 ? 0 : 1;
}
