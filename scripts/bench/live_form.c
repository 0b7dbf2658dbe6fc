/* live_form.c -- scripts/bench/live_form's program: how long forming one
 * live generation (libpg/live/live_form.c, Note [generations]) takes for N
 * members, and how many store requests it costs, against one store
 * server in this process; each member is a thread with a connection of
 * its own, as a process would have.
 *
 *   live_form N ROUNDS
 *
 * prints per round "live_form ranks=N ms=X requests=R" (from the start
 * of the first member to the end of the last; requests served by the
 * store from the first entry to the last member's return), then
 * "live_form ranks=N median_ms=X median_requests=R". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live.h"

struct member {
  struct pg__live_join j;
  struct pg__live_formed f;
  pthread_barrier_t *go;
  int err;
  pthread_t t;
};

static void *member_main(void *arg)
{
  struct member *m = arg;

  pthread_barrier_wait(m->go);
  m->err = pg__live_form(&m->j, 0, &m->f);
  if (m->err)
    fprintf(stderr, "live_form: member %d: %s\n", m->j.env_rank,
            pg_last_error());
  return NULL;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return (x > y) - (x < y);
}

/* One formation of n members: 0 and *ms, *requests, or -1. */
static int round_once(int n, double *ms, double *requests)
{
  pg_store_server *srv;
  struct member *m = calloc((size_t)n, sizeof *m);
  pthread_barrier_t go;
  uint64_t r0;
  double t0;
  int port = 0, i, bad = 0;

  if (!m || pg_store_server_start_auth("127.0.0.1", &port, "", &srv)) {
    fprintf(stderr, "live_form: no store: %s\n", pg_last_error());
    free(m);
    return -1;
  }
  pthread_barrier_init(&go, NULL, (unsigned)n + 1);
  for (i = 0; i < n; i++) {
    if (pg_store_connect_auth("127.0.0.1", port, 30, "", &m[i].j.store)) {
      fprintf(stderr, "live_form: connect: %s\n", pg_last_error());
      exit(1);
    }
    m[i].j.env_rank = i;
    m[i].j.env_world = n;
    m[i].j.inc = (uint64_t)i + 1;
    m[i].j.boot = "";
    m[i].j.fresh = true;
    m[i].j.old_rank = -1;
    m[i].j.from = -1;
    m[i].j.timeout = 300;
    m[i].go = &go;
    if (pthread_create(&m[i].t, NULL, member_main, &m[i]) != 0) {
      fprintf(stderr, "live_form: cannot start thread %d\n", i);
      exit(1);
    }
  }
  r0 = pg__store_server_requests(srv);
  t0 = pg__now();
  pthread_barrier_wait(&go);
  for (i = 0; i < n; i++) {
    pthread_join(m[i].t, NULL);
    bad |= m[i].err != 0;
  }
  *ms = (pg__now() - t0) * 1e3;
  *requests = (double)(pg__store_server_requests(srv) - r0);
  for (i = 0; i < n; i++) {
    free(m[i].f.m);
    pg_store_close(m[i].j.store);
  }
  pthread_barrier_destroy(&go);
  pg_store_server_stop(srv);
  free(m);
  return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
  int n = argc > 1 ? atoi(argv[1]) : 64;
  int rounds = argc > 2 ? atoi(argv[2]) : 3, k;
  double *ms, *req;

  if (n < 1 || n > 4096 || rounds < 1) {
    fprintf(stderr, "usage: live_form N(1..4096) ROUNDS(>= 1)\n");
    return 2;
  }
  ms = calloc((size_t)rounds, sizeof *ms);
  req = calloc((size_t)rounds, sizeof *req);
  if (!ms || !req)
    return 1;
  for (k = 0; k < rounds; k++) {
    if (round_once(n, &ms[k], &req[k]))
      return 1;
    printf("live_form ranks=%d ms=%.1f requests=%.0f\n", n, ms[k], req[k]);
    fflush(stdout);
  }
  qsort(ms, (size_t)rounds, sizeof *ms, cmp_double);
  qsort(req, (size_t)rounds, sizeof *req, cmp_double);
  printf("live_form ranks=%d median_ms=%.1f median_requests=%.0f\n", n,
         ms[rounds / 2], req[rounds / 2]);
  free(ms);
  free(req);
  return 0;
}
