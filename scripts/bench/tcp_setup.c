/* tcp_setup.c -- how long libpg's TCP communicator takes to connect N
 * ranks on loopback (scripts/bench/setup).  Forks a store server and N
 * ranks; each rank connects to the store, waits until all are there, then
 * times pg__tcp_create (publish the endpoint, read the others', connect
 * the mesh) and destroys it; R rounds.  Prints, per round, the slowest
 * rank's time, and then one line:
 *
 *   tcp_setup ranks=N rounds=R median_ms=X max_ms=Y
 *
 *   tcp_setup N R
 *
 * Links libpg.a: pg__tcp_create is internal. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pg.h"
#include "pg_internal.h"

static int cmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return x < y ? -1 : x > y;
}

/* Waits until all n ranks have added to key: a start line. */
static int line_up(pg_store *st, const char *key, int n)
{
  int64_t v = 0;
  int err = pg_store_add(st, key, 1, &v);

  while (!err && v < n) {
    usleep(1000);
    err = pg_store_add(st, key, 0, &v);
  }
  return err;
}

static void rank_main(int me, int n, int rounds, int port, int out)
{
  pg_store *st;
  int *ranks = malloc((size_t)n * sizeof *ranks), r, i, err;

  if (!ranks || pg_store_connect("127.0.0.1", port, 30, &st))
    _exit(2);
  for (i = 0; i < n; i++)
    ranks[i] = i;
  for (r = 0; r < rounds; r++) {
    struct pg__setup s;
    struct pg__comm *c;
    char ns[64], key[64];
    double t0, dt;

    snprintf(key, sizeof key, "go/%d", r);
    if (line_up(st, key, n))
      _exit(3);
    snprintf(ns, sizeof ns, "bench/%d/", r);
    memset(&s, 0, sizeof s);
    s.store = st;
    s.ns = ns;
    s.ranks = ranks;
    s.n = n;
    s.me = me;
    s.timeout = 60;
    s.device = -1;
    t0 = pg__now();
    err = pg__tcp_create(&s, &c);
    dt = pg__now() - t0;
    if (err) {
      fprintf(stderr, "rank %d: %s\n", me, pg_last_error());
      _exit(4);
    }
    if (write(out, &dt, sizeof dt) != sizeof dt)
      _exit(5);
    /* Everyone connected before anyone closes. */
    snprintf(key, sizeof key, "done/%d", r);
    if (line_up(st, key, n))
      _exit(3);
    c->ops->destroy(c);
  }
  pg_store_close(st);
  _exit(0);
}

int main(int argc, char **argv)
{
  int n = argc > 1 ? atoi(argv[1]) : 16, rounds = argc > 2 ? atoi(argv[2])
                                                            : 5;
  int up[2], down[2], res[2], port = 0, i, r, bad = 0;
  double *worst, *all;
  pid_t srv, *pids;

  if (n < 2 || rounds < 1)
    return fprintf(stderr, "usage: tcp_setup N>=2 ROUNDS>=1\n"), 2;
  setenv("MASTER_ADDR", "127.0.0.1", 1);  /* endpoints on loopback */
  if (pipe(up) || pipe(down) || pipe(res))
    return perror("pipe"), 1;
  srv = fork();
  if (srv == 0) {
    pg_store_server *s;
    char b;

    close(res[0]);
    close(res[1]);    /* the parent reads until every rank closed it */
    close(down[1]);   /* ... and stops this one by closing its end */

    if (pg_store_server_start("127.0.0.1", &port, &s))
      port = -1;
    if (write(up[1], &port, sizeof port) != sizeof port || port < 0)
      _exit(1);
    while (read(down[0], &b, 1) > 0)
      ;
    pg_store_server_stop(s);
    _exit(0);
  }
  close(down[0]);
  if (read(up[0], &port, sizeof port) != sizeof port || port <= 0)
    return fprintf(stderr, "tcp_setup: no store\n"), 1;
  pids = calloc((size_t)n, sizeof *pids);
  worst = calloc((size_t)rounds, sizeof *worst);
  all = calloc((size_t)n * (size_t)rounds, sizeof *all);
  for (i = 0; i < n; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      close(res[0]);
      rank_main(i, n, rounds, port, res[1]);
    }
  }
  close(res[1]);
  for (i = 0; i < n * rounds; i++)
    if (read(res[0], &all[i], sizeof all[i]) != sizeof all[i])
      break;
  for (i = 0; i < n; i++) {
    int st;

    waitpid(pids[i], &st, 0);
    bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  close(down[1]);
  waitpid(srv, NULL, 0);
  if (bad)
    return fprintf(stderr, "tcp_setup: %d ranks failed\n", bad), 1;
  /* Results arrive round by round (the done line keeps rounds apart). */
  for (r = 0; r < rounds; r++) {
    for (i = 0; i < n; i++)
      if (all[r * n + i] > worst[r])
        worst[r] = all[r * n + i];
    printf("round %d slowest_ms=%.2f\n", r, worst[r] * 1e3);
  }
  qsort(worst, (size_t)rounds, sizeof *worst, cmp);
  printf("tcp_setup ranks=%d rounds=%d median_ms=%.2f max_ms=%.2f\n", n,
         rounds, worst[rounds / 2] * 1e3, worst[rounds - 1] * 1e3);
  return 0;
}
