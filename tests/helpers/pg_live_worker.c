/* pg_live_worker.c -- a live recovery worker for tests/integ/t_pg_live*.sh,
 * started with the live environment by the scenario itself (cdrun's side
 * is tested elsewhere): a loop of training-like steps over a state
 * buffer and a step counter, recovering in place from PG_ERR_PEER_LOST.
 *
 *   pg_live_worker STEPS ELEMS
 *
 * A step: a reducer iteration over ELEMS f64 "gradients" (three
 * parameters, several buckets, marked ready in an order that makes the
 * reducer rebuild its buckets after the first step; each rank's gradient
 * depends on the step, the element and its rank), then x = x / 2 +
 * averaged gradient,
 * then step++.  State: x and the step counter, registered with
 * pg_state_register, so a replacement continues where the group is and a
 * fault-free run of the same world gives the same bits.
 *
 * Environment (besides libpg's):
 *   LIVE_DIE=S:R[,S:R...]  rank R SIGKILLs itself in step S, after the
 *                          first gradient is marked ready (a bucket in
 *                          flight), unless CDRUN_WORKER_RESTARTS > 0 (a
 *                          replacement does not die again)
 *   LIVE_HOLD=S:W          at the start of step S, print "holding at
 *                          step S" and poll the membership until the
 *                          world is W (a grow: new workers)
 *   LIVE_SUBGROUP=1        an original worker makes a sub-group of the
 *                          whole world first; after a recovery, its
 *                          barrier must fail with PG_ESTALE_GROUP
 *   LIVE_ACCUM=1           libpg(3)'s EXAMPLE pattern: gradients are
 *                          added (+=) and zeroed after the update, and a
 *                          "loss" all-reduce follows pg_reducer_finish
 *                          (the same bits as the default pattern, which
 *                          overwrites them, when nothing fails)
 *   LIVE_DIE_AT=PHASE      where LIVE_DIE's rank dies: "mark" (the
 *                          default, above), "marked" (every gradient
 *                          marked, before pg_reducer_finish), "finished"
 *                          (after pg_reducer_finish, before the loss
 *                          all-reduce and the update)
 *
 * Prints "joined_running=0|1" first, a "recovered ..." line per recovery
 * on stderr, and at the end on stdout:
 *   final rank=R world=W step=S hash=H */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg.h"

#define NPARAMS 3
#define MAX_RECOVER_TRIES 20

static pg_group *g, *sub;
static pg_reducer *red;
static double *x;
static int64_t step_no;
static size_t elems;
static struct pg_param_spec specs[NPARAMS];

static void die(const char *what, int err)
{
  fprintf(stderr, "pg_live_worker: %s: %s (%s)\n", what, pg_err_name(err),
          pg_last_error());
  exit(1);
}

static bool dies_now(int64_t s, const char *phase)
{
  const char *v = getenv("LIVE_DIE"), *r = getenv("CDRUN_WORKER_RESTARTS");
  const char *at = getenv("LIVE_DIE_AT");
  long ds, dr;
  int used;

  if (!v || (r && atoi(r) > 0) || strcmp(at ? at : "mark", phase))
    return false;
  while (sscanf(v, "%ld:%ld%n", &ds, &dr, &used) == 2) {
    if (ds == s && dr == pg_rank(g))
      return true;
    v += used;
    if (*v != ',')
      break;
    v++;
  }
  return false;
}

/* One step; 0 or the error of its first failing call. */
static int one_step(void)
{
  /* Not the reverse registration order: the reducer rebuilds its
   * buckets after the first step, and a newcomer must get that layout. */
  static const size_t mark_order[NPARAMS] = { 0, 2, 1 };
  size_t p, i, k, off = 0;
  double *grad[NPARAMS], v, loss = 1;
  bool accum = getenv("LIVE_ACCUM") != NULL;
  int err, rank = pg_rank(g);

  if ((err = pg_reducer_prepare(red, true)))
    return err;
  for (k = 0; k < NPARAMS; k++) {
    p = mark_order[k];
    grad[p] = pg_reducer_grad(red, p);
    for (off = 0, i = 0; i < p; i++)
      off += specs[i].numel;
    for (i = 0; i < specs[p].numel; i++) {
      v = (double)(((uint64_t)step_no * 131 + (off + i) * 7 +
                    (uint64_t)rank * 13) % 1009);
      grad[p][i] = accum ? grad[p][i] + v : v;
    }
    if ((err = pg_reducer_mark_ready(red, p)))
      return err;
    if (k == 0 && dies_now(step_no, "mark"))
      raise(SIGKILL);
  }
  if (dies_now(step_no, "marked"))
    raise(SIGKILL);
  if ((err = pg_reducer_finish(red)))
    return err;
  if (dies_now(step_no, "finished"))
    raise(SIGKILL);
  if (accum && (err = pg_all_reduce(g, &loss, &loss, 1, PG_F64, PG_SUM)))
    return err;
  for (p = 0, off = 0; p < NPARAMS; off += specs[p].numel, p++) {
    grad[p] = pg_reducer_grad(red, p);
    for (i = 0; i < specs[p].numel; i++)
      x[off + i] = x[off + i] / 2 + grad[p][i];
  }
  step_no++;
  if (accum && (err = pg_reducer_zero_grad(red)))
    return err;
  return 0;
}

/* pg_rank_is_new's ranks, "r1,r2" ("-": none), and a newline. */
static void print_new(FILE *f, const pg_group *grp, int world)
{
  bool any = false;
  int r;

  for (r = 0; r < world; r++)
    if (pg_rank_is_new(grp, r)) {
      fprintf(f, "%s%d", any ? "," : "", r);
      any = true;
    }
  fprintf(f, "%s\n", any ? "" : "-");
}

static void recover(void)
{
  struct pg_recover_info info;
  int err, tries;

  for (tries = 0; tries < MAX_RECOVER_TRIES; tries++) {
    err = pg_recover(g, &info);
    if (err == 0)
      break;
    if (err != PG_ERR_PEER_LOST)
      die("pg_recover", err);
    fprintf(stderr, "pg_live_worker: pg_recover: lost a peer again (%s)\n",
            pg_last_error());
  }
  if (tries == MAX_RECOVER_TRIES)
    die("pg_recover (too many tries)", err);
  if (sub) {
    err = pg_barrier(sub);
    if (err != PG_ESTALE_GROUP)
      die("a stale sub-group's barrier did not fail with ESTALE_GROUP",
          err);
    fprintf(stderr, "stale sub-group: %s\n", pg_err_name(err));
    {
      pg_group *child = NULL;

      err = pg_split(sub, 0, 0, &child);
      if (err != PG_ESTALE_GROUP || child)
        die("splitting a stale sub-group did not fail with ESTALE_GROUP",
            err);
    }
    pg_destroy(sub);
    sub = NULL;
  }
  fprintf(stderr, "recovered generation=%" PRIu64 " rank=%d world=%d "
          "old_rank=%d old_world=%d joined=%d left=%d heal_source=%d "
          "step=%" PRId64 " rebuild_ms=%.1f heal_ms=%.1f new=", info.generation,
          info.rank, info.world, info.old_rank, info.old_world, info.joined,
          info.left, info.heal_source, step_no, info.rebuild_s * 1e3,
          info.heal_s * 1e3);
  print_new(stderr, g, info.world);
}

static void hold(int64_t steps_total)
{
  const char *v = getenv("LIVE_HOLD");
  long hs, hw;
  bool pending;
  int err;

  if (!v || sscanf(v, "%ld:%ld", &hs, &hw) != 2 || step_no != hs)
    return;
  fprintf(stderr, "holding at step %ld\n", hs);
  while (pg_size(g) < hw) {
    err = pg_membership_poll(g, &pending);
    if (err == PG_ERR_PEER_LOST || (!err && pending))
      recover();
    else if (err)
      die("pg_membership_poll", err);
    else
      usleep(2000);
  }
  (void)steps_total;
}

int main(int argc, char **argv)
{
  struct pg_reducer_options ro = PG_REDUCER_OPTIONS_INIT;
  struct pg_state_buf st[2];
  uint64_t h = 0xcbf29ce484222325ull;
  int64_t steps;
  bool pending;
  size_t i;
  int err;

  if (argc != 3 || (steps = atoll(argv[1])) <= 0 ||
      (elems = strtoul(argv[2], NULL, 10)) < NPARAMS) {
    fprintf(stderr, "usage: pg_live_worker STEPS ELEMS (ELEMS >= 3)\n");
    return 2;
  }
  if ((err = pg_init(NULL, &g)))
    die("pg_init", err);
  printf("joined_running=%d live=%d new=", pg_joined_running(g), pg_live(g));
  print_new(stdout, g, pg_size(g));
  fflush(stdout);
  if (getenv("LIVE_SUBGROUP") && !pg_joined_running(g) &&
      (err = pg_split(g, 0, pg_rank(g), &sub)))
    die("pg_split", err);
  specs[0].numel = elems / 2;
  specs[1].numel = elems / 4;
  specs[2].numel = elems - elems / 2 - elems / 4;
  for (i = 0; i < NPARAMS; i++)
    specs[i].dtype = PG_F64;
  ro.first_bucket_cap = 64 << 10;
  ro.bucket_cap = 256 << 10;
  if ((err = pg_reducer_create(g, specs, NPARAMS, &ro, &red)))
    die("pg_reducer_create", err);
  x = calloc(elems, sizeof *x);
  if (!x)
    die("calloc", -12);
  st[0].ptr = x;
  st[0].bytes = elems * sizeof *x;
  st[1].ptr = &step_no;
  st[1].bytes = sizeof step_no;
  err = pg_state_register(g, st, 2);
  if (err == PG_ERR_PEER_LOST)
    recover();
  else if (err)
    die("pg_state_register", err);
  while (step_no < steps) {
    hold(steps);
    err = one_step();
    if (err == PG_ERR_PEER_LOST) {
      recover();
      continue;
    }
    if (err)
      die("step", err);
    err = pg_membership_poll(g, &pending);
    if (err == PG_ERR_PEER_LOST || (!err && pending))
      recover();
    else if (err)
      die("pg_membership_poll", err);
  }
  for (i = 0; i < elems * sizeof *x; i++)
    h = (h ^ ((unsigned char *)x)[i]) * 0x100000001b3ull;
  printf("final rank=%d world=%d step=%" PRId64 " hash=%016" PRIx64 "\n",
         pg_rank(g), pg_size(g), step_no, h);
  fflush(stdout);
  pg_reducer_destroy(red);
  pg_destroy(g);
  free(x);
  return 0;
}
