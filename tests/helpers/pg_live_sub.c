/* pg_live_sub.c -- a live recovery worker with sub-groups and
 * point-to-point, for tests/integ/t_pg_live_sub.sh: a program written
 * as libpg(3)'s LIVE RECOVERY says, whose peers die while others wait in
 * a sub-group collective, in point-to-point or in making the sub-groups
 * again after pg_recover.
 *
 *   pg_live_sub STEPS ELEMS
 *
 * World of 4.  Sub-groups: the halves {0,1} and {2,3} (pg_new_group)
 * and the parities {0,2} and {1,3} (pg_split, color rank % 2).  A step
 * runs the phases of LIVE_ORDER (default half,parity,pp2p,wp2p,world):
 *   half    all-reduce of a[ELEMS] over this rank's half
 *   parity  all-reduce of b[ELEMS] over this rank's parity group
 *   pp2p    send c[ELEMS] to the other rank of the parity group, then
 *           receive its c (pg_send/pg_recv on the sub-group)
 *   wp2p    the same over the world with rank ^ 2 (another host in the
 *           hierarchical scenario)
 *   world   all-reduce of a + 2b + 3c' + 5d' over the world
 *   cross   instead of parity and wp2p, each rank in its own order:
 *           rank 0 starts the parity all-reduce async, receives d' from
 *           rank 3, sends d to rank 2, then waits for the parity; rank 2
 *           receives d' from rank 0 before its parity all-reduce; rank 3
 *           sends d to rank 0 before its; rank 1 runs it async.  So when
 *           rank 3 dies, rank 0 recovers with its parity all-reduce in
 *           flight (waited for and freed after pg_recover), waiting on
 *           rank 2, which waits on rank 0 in the world (pg_recover must
 *           close the world first)
 * and only then x = x / 2 + that sum and step++ (the state changes only
 * once every collective of the step succeeded), so every rank holds the
 * same x and a fault-free run of the same world gives the same bits.
 * State registered: x and the step counter.
 *
 * Environment (besides libpg's):
 *   LIVE_DIE=S:R:PHASE  rank R SIGKILLs itself in step S just before
 *                       PHASE, unless CDRUN_WORKER_RESTARTS > 0 (a
 *                       replacement does not die again)
 *   LIVE_DIE_CREATE=G:R:K  rank R SIGKILLs itself when it makes the
 *                       sub-groups of generation G, just before the K-th
 *                       call (0, 1: pg_new_group of each half; 2:
 *                       pg_split), same exception
 *   LIVE_ORDER=p,p,...  the phases of a step
 *
 * Every PG_ERR_PEER_LOST is printed on stderr as
 *   lost phase=P step=S err=ERR_PEER_LOST why=<pg_last_error>
 * and any other error ends the worker with status 1.  At the end, on
 * stdout: final rank=R world=W step=S hash=H */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg.h"

#define WORLD 4
#define MAX_RECOVER_TRIES 20
#define MAX_PHASES 16

static pg_group *g, *half[2], *parity;
static pg_work *in_flight;      /* cross's, when a loss cut it short */
static double *x, *a, *b, *c, *cin, *d, *din, *y;
static int64_t step_no;
static uint64_t gen_no;
static size_t elems;

static void die(const char *what, int err)
{
  fprintf(stderr, "pg_live_sub: %s: %s (%s)\n", what, pg_err_name(err),
          pg_last_error());
  exit(1);
}

static bool replacement(void)
{
  const char *r = getenv("CDRUN_WORKER_RESTARTS");

  return r && atoi(r) > 0;
}

/* Whether "A:B:WORD" in v (comma-separated) names a, b and word. */
static bool listed(const char *v, long a_, long b_, const char *word)
{
  char w[16];
  long va, vb;
  int used;

  while (v && sscanf(v, "%ld:%ld:%15[a-z0-9]%n", &va, &vb, w, &used) == 3) {
    if (va == a_ && vb == b_ && strcmp(w, word) == 0)
      return true;
    v += used;
    if (*v != ',')
      break;
    v++;
  }
  return false;
}

static void maybe_die(const char *phase)
{
  if (!replacement() && listed(getenv("LIVE_DIE"), step_no, pg_rank(g),
                               phase))
    raise(SIGKILL);
}

static void maybe_die_create(int k)
{
  char w[8];

  snprintf(w, sizeof w, "%d", k);
  if (!replacement() && listed(getenv("LIVE_DIE_CREATE"), (long)gen_no,
                               pg_rank(g), w))
    raise(SIGKILL);
}

static void destroy_subs(void)
{
  pg_destroy(half[0]);
  pg_destroy(half[1]);
  pg_destroy(parity);
  half[0] = half[1] = parity = NULL;
}

/* The sub-groups, made by every rank in the same order. */
static int make_subs(void)
{
  static const int h0[] = { 0, 1 }, h1[] = { 2, 3 };
  int err, r = pg_rank(g);

  maybe_die_create(0);
  if ((err = pg_new_group(g, h0, 2, &half[0])))
    return err;
  maybe_die_create(1);
  if ((err = pg_new_group(g, h1, 2, &half[1])))
    return err;
  maybe_die_create(2);
  return pg_split(g, r % 2, r, &parity);
}

static void lost(const char *phase, int err)
{
  if (err != PG_ERR_PEER_LOST)
    die(phase, err);
  fprintf(stderr, "lost phase=%s step=%" PRId64 " err=%s why=%s\n", phase,
          step_no, pg_err_name(err), pg_last_error());
}

/* libpg(3)'s recovery loop: recover, then destroy the old sub-groups
 * and make them again; a loss in either starts over.  The old ones are
 * destroyed only after pg_recover, as the man page allows: their peers
 * must learn of the loss from pg_recover itself. */
static void recover(void)
{
  struct pg_recover_info info;
  int err, tries;

  for (tries = 0; tries < MAX_RECOVER_TRIES; tries++) {
    err = pg_recover(g, &info);
    if (in_flight) {
      /* Done: pg_recover closed its group first.  Freed before the
       * group is destroyed. */
      int e = pg_work_wait(in_flight, 0);

      if (e != PG_ERR_PEER_LOST && e != PG_EPEERFAIL)
        die("the parity all-reduce in flight", e);
      pg_work_free(in_flight);
      in_flight = NULL;
    }
    if (err) {
      lost("recover", err);
      continue;
    }
    destroy_subs();
    gen_no = info.generation;
    fprintf(stderr, "recovered generation=%" PRIu64 " rank=%d world=%d "
            "step=%" PRId64 "\n", info.generation, info.rank, info.world,
            step_no);
    err = make_subs();
    if (!err)
      return;
    destroy_subs();
    lost("create", err);
  }
  die("pg_recover (too many tries)", PG_ERR_PEER_LOST);
}

/* Send and receive as one group (NCCL needs it; the CPU backends run
 * the send first). */
static int exchange(pg_group *grp, int peer, const double *out, double *in)
{
  int err = pg_group_start(grp), e;

  if (err)
    return err;
  err = pg_send(grp, out, elems, PG_F64, peer, 7);
  if (!err)
    err = pg_recv(grp, in, elems, PG_F64, peer, 7);
  e = pg_group_end(grp);
  return err ? err : e;
}

static int cross(void)
{
  pg_work *w = NULL;
  int r = pg_rank(g), err = 0, e;

  if (r == 2 || r == 3) {
    err = r == 2 ? pg_recv(g, din, elems, PG_F64, 0, 7)
                 : pg_send(g, d, elems, PG_F64, 0, 7);
    return err ? err : pg_all_reduce(parity, b, b, elems, PG_F64, PG_SUM);
  }
  if ((err = pg_all_reduce_async(parity, b, b, elems, PG_F64, PG_SUM, &w)))
    return err;
  if (r == 0 && !(err = pg_recv(g, din, elems, PG_F64, 3, 7)))
    err = pg_send(g, d, elems, PG_F64, 2, 7);
  if (err) {
    in_flight = w;      /* recover() waits for it after pg_recover */
    return err;
  }
  e = pg_work_wait(w, -1);
  pg_work_free(w);
  return e;
}

static int run_phase(const char *p)
{
  int r = pg_rank(g);

  if (strcmp(p, "half") == 0)
    return pg_all_reduce(half[r / 2], a, a, elems, PG_F64, PG_SUM);
  if (strcmp(p, "parity") == 0)
    return pg_all_reduce(parity, b, b, elems, PG_F64, PG_SUM);
  if (strcmp(p, "pp2p") == 0)
    return exchange(parity, 1 - pg_rank(parity), c, cin);
  if (strcmp(p, "wp2p") == 0)
    return exchange(g, r ^ 2, d, din);
  if (strcmp(p, "world") == 0)
    return pg_all_reduce(g, y, y, elems, PG_F64, PG_SUM);
  if (strcmp(p, "cross") == 0)
    return cross();
  fprintf(stderr, "pg_live_sub: unknown phase '%s' in LIVE_ORDER\n", p);
  exit(2);
}

/* One step; 0 or the first failing call's error (*phase: its phase). */
static int one_step(char phases[][16], int nphases, const char **phase)
{
  int err, i, r = pg_rank(g);
  size_t k;

  for (k = 0; k < elems; k++) {
    uint64_t s = (uint64_t)step_no;

    a[k] = (double)((s * 131 + k * 7 + (uint64_t)r * 13) % 1009);
    b[k] = (double)((s * 17 + k * 3 + (uint64_t)r * 5) % 1013);
    c[k] = (double)((s * 29 + k * 11 + (uint64_t)r * 3) % 1019);
    d[k] = (double)((s * 37 + k * 5 + (uint64_t)r * 7) % 1021);
    cin[k] = din[k] = 0;
  }
  for (i = 0; i < nphases; i++) {
    *phase = phases[i];
    if (strcmp(phases[i], "world") == 0)
      for (k = 0; k < elems; k++)
        y[k] = a[k] + 2 * b[k] + 3 * cin[k] + 5 * din[k];
    maybe_die(phases[i]);
    if ((err = run_phase(phases[i])))
      return err;
  }
  for (k = 0; k < elems; k++)
    x[k] = x[k] / 2 + y[k];
  step_no++;
  return 0;
}

static int parse_order(char phases[][16])
{
  const char *v = getenv("LIVE_ORDER");
  int n = 0, used;

  if (!v)
    v = "half,parity,pp2p,wp2p,world";
  while (n < MAX_PHASES && sscanf(v, "%15[a-z0-9]%n", phases[n], &used) == 1) {
    n++;
    v += used;
    if (*v != ',')
      break;
    v++;
  }
  if (n == 0 || strcmp(phases[n - 1], "world") != 0) {
    fprintf(stderr, "pg_live_sub: LIVE_ORDER must end with world\n");
    exit(2);
  }
  return n;
}

int main(int argc, char **argv)
{
  struct pg_state_buf st[2];
  char phases[MAX_PHASES][16];
  uint64_t h = 0xcbf29ce484222325ull;
  const char *phase = "";
  double **bufs[] = { &x, &a, &b, &c, &cin, &d, &din, &y };
  int64_t steps;
  bool pending;
  size_t i;
  int err, nphases = parse_order(phases);

  if (argc != 3 || (steps = atoll(argv[1])) <= 0 ||
      (elems = strtoul(argv[2], NULL, 10)) < 1) {
    fprintf(stderr, "usage: pg_live_sub STEPS ELEMS\n");
    return 2;
  }
  for (i = 0; i < sizeof bufs / sizeof *bufs; i++)
    if (!(*bufs[i] = calloc(elems, sizeof(double))))
      die("calloc", -12);
  if ((err = pg_init(NULL, &g)))
    die("pg_init", err);
  if (pg_size(g) != WORLD)
    die("the world must be 4", -22);
  printf("joined_running=%d\n", pg_joined_running(g));
  fflush(stdout);
  st[0].ptr = x;
  st[0].bytes = elems * sizeof *x;
  st[1].ptr = &step_no;
  st[1].bytes = sizeof step_no;
  err = pg_state_register(g, st, 2);
  if (!err)
    err = make_subs();
  if (err) {
    lost("start", err);
    recover();
  }
  while (step_no < steps) {
    err = one_step(phases, nphases, &phase);
    if (err) {
      lost(phase, err);
      recover();
      continue;
    }
    err = pg_membership_poll(g, &pending);
    if (err == PG_ERR_PEER_LOST || (!err && pending)) {
      if (err)
        lost("poll", err);
      recover();
    } else if (err) {
      die("pg_membership_poll", err);
    }
  }
  for (i = 0; i < elems * sizeof *x; i++)
    h = (h ^ ((unsigned char *)x)[i]) * 0x100000001b3ull;
  printf("final rank=%d world=%d step=%" PRId64 " hash=%016" PRIx64 "\n",
         pg_rank(g), pg_size(g), step_no, h);
  fflush(stdout);
  destroy_subs();
  pg_destroy(g);
  for (i = 0; i < sizeof bufs / sizeof *bufs; i++)
    free(*bufs[i]);
  return 0;
}
