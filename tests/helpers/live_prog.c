/* live_prog.c -- a generated libpg program for scripts/bench/live_conformance
 * and tests/integ/t_live_conformance.sh: a deterministic data-parallel
 * "training" loop whose shape is decided by a seed, written from
 * libpg(3) and pg.h alone as a user would, with the documented
 * pg_recover loop (libpg(3), LIVE RECOVERY).
 *
 *   live_prog SEED          run it (under cdrun --recovery=live, or not)
 *   live_prog --shape SEED  print its shape and exit (no group)
 *
 * Shape (all from SEED): the number of steps; one or two reducers, each
 * with one to four parameters (f32 or f64, 1 to 40,000 elements), one
 * bucket or several, gradients accumulated with += and zeroed after the
 * optimizer (libpg(3)'s EXAMPLE) or zeroed before each step, or written
 * with = and never zeroed; one or two micro-batches (the first no_sync);
 * the order gradients are marked ready in; a plain all-reduce before the
 * reducers and a collective after them (broadcast, all-gather,
 * reduce-scatter or barrier); sub-groups (halves from pg_new_group,
 * parity from pg_split); a pg_send/pg_recv ring; registered state of
 * several sizes (the parameters, an extra blob of 0 to 5 MiB, the
 * accumulators, the step counter); the transport (host ids: shared
 * memory, TCP, hierarchical).
 *
 * A step computes everything into temporaries and commits to the
 * registered state only once every collective of the step has
 * succeeded, so that a step interrupted anywhere can be redone from the
 * healed state; what differs by rank (sub-group, ring, reduce-scatter
 * results) is summed by one last all-reduce first, since the heal sends
 * one rank's state to all.  At the end each rank prints
 *   live_prog: digest rank=R world=W step=S recoveries=K keys=N digest=H
 * (H: FNV-1a over every registered buffer; keys: the live store's key
 * count, rank 0 only, else -1), and on stderr, for each failed step and
 * recovery, "lost a peer in step S after X s" and "recovered ... after
 * X s" (the driver checks that no death took PG_TIMEOUT to be seen).
 *
 * Test hooks (never in libpg; the driver's only way in):
 *   LIVE_PROG_DIR=D     marker files: D/pid.R.K.PID (written before
 *                       pg_init; K = CDRUN_WORKER_RESTARTS),
 *                       D/init.R.K (after pg_init), D/held.R.K (a stop
 *                       hook fired; holds the pid).
 *   LIVE_PROG_FAULT=PHASE:STEP:RANKS:RESTARTS:HOW[,...]
 *                       at PHASE of STEP (- : any step), on each rank of
 *                       RANKS ('+'-separated; 'all'), in the process
 *                       whose CDRUN_WORKER_RESTARTS is RESTARTS (* : any),
 *                       HOW = kill (raise SIGKILL) or stop (write
 *                       D/held.R.K, raise SIGSTOP: the driver kills it);
 *                       only in the job's first attempt
 *                       (TORCHELASTIC_RESTART_COUNT 0).
 *                       Phases: create (after pg_init, before the
 *                       reducers are made), register (before
 *                       pg_state_register),
 *                       pre (the pre all-reduce submitted, not waited),
 *                       reducer (half of a reducer's gradients marked
 *                       ready), finish (after pg_reducer_finish), sub (a
 *                       sub-group all-reduce submitted), p2p (the ring's
 *                       send submitted), post (the post collective
 *                       submitted), commit (every collective done, state
 *                       not yet written), recover (before pg_recover),
 *                       resub (before sub-groups are made again), last
 *                       (after the digest line, before pg_destroy). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pg.h"

#define MAX_RED 2
#define MAX_PAR 4
#define MAX_RECOVER 50

enum zero_mode { ZERO_AFTER, ZERO_BEFORE, ASSIGN };
static const char *const zero_names[] = { "after", "before", "assign" };
enum post_kind { POST_NONE, POST_BCAST, POST_GATHER, POST_RSCATTER,
                 POST_BARRIER };
static const char *const post_names[] = { "none", "bcast", "gather",
                                          "rscatter", "barrier" };

struct red_shape {
  size_t np;
  struct pg_param_spec p[MAX_PAR];
  size_t order[MAX_PAR];       /* the order gradients are marked ready */
  bool several;                /* small caps: several buckets */
  enum zero_mode zero;
  int micro;                   /* 1 or 2 (the first no_sync) */
};

struct shape {
  int64_t steps;
  int nred;
  struct red_shape red[MAX_RED];
  size_t pre;                  /* f64 elements of the pre all-reduce; 0 */
  enum post_kind post;
  size_t post_n;
  bool halves, parity;         /* sub-groups */
  size_t ring;                 /* f32 elements sent around the ring; 0 */
  size_t blob;                 /* bytes of extra registered state */
  int transport;               /* 0 shm, 1 tcp, 2 hier (host ids) */
};

static const char *const transport_names[] = { "shm", "tcp", "hier" };

/* splitmix64: the seed's stream. */
static uint64_t next(uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t pick(uint64_t *s, uint64_t n)
{
  return next(s) % n;
}

static void make_shape(uint64_t seed, struct shape *sh)
{
  static const size_t numels[] = { 1, 7, 100, 1000, 5000, 40000 };
  static const size_t blobs[] = { 0, 64, 1 << 20, (5 << 20) + 13 };
  static const size_t pres[] = { 0, 4, 3000, 70000 };
  static const size_t rings[] = { 0, 16, 5000, 300000 };
  uint64_t s = seed;
  int r;
  size_t i, j;

  memset(sh, 0, sizeof *sh);
  sh->steps = 4 + (int64_t)pick(&s, 9);
  sh->nred = 1 + (int)pick(&s, 2);
  for (r = 0; r < sh->nred; r++) {
    struct red_shape *rs = &sh->red[r];

    rs->np = 1 + pick(&s, MAX_PAR);
    for (i = 0; i < rs->np; i++) {
      rs->p[i].numel = numels[pick(&s, 6)];
      rs->p[i].dtype = pick(&s, 2) ? PG_F64 : PG_F32;
    }
    rs->several = pick(&s, 2);
    rs->zero = (enum zero_mode)pick(&s, 3);
    rs->micro = rs->zero == ASSIGN ? 1 : 1 + (int)pick(&s, 2);
    /* Last layer first, as a backward pass, or shuffled. */
    for (i = 0; i < rs->np; i++)
      rs->order[i] = rs->np - 1 - i;
    if (pick(&s, 2))
      for (i = rs->np; i-- > 1;) {
        size_t t;

        j = pick(&s, i + 1);
        t = rs->order[i];
        rs->order[i] = rs->order[j];
        rs->order[j] = t;
      }
  }
  sh->pre = pres[pick(&s, 4)];
  sh->post = (enum post_kind)pick(&s, 5);
  sh->post_n = 1 + pick(&s, 2000);
  sh->halves = pick(&s, 3) == 0;
  sh->parity = pick(&s, 3) == 0;
  sh->ring = rings[pick(&s, 4)];
  sh->blob = blobs[pick(&s, 4)];
  sh->transport = (int)pick(&s, 3);
}

static void print_shape(FILE *f, uint64_t seed, const struct shape *sh)
{
  int r;
  size_t i;

  fprintf(f, "shape seed=%" PRIu64 " steps=%" PRId64 " transport=%s "
          "pre=%zu post=%s/%zu halves=%d parity=%d ring=%zu blob=%zu "
          "reducers=%d", seed, sh->steps, transport_names[sh->transport],
          sh->pre, post_names[sh->post], sh->post_n, sh->halves,
          sh->parity, sh->ring, sh->blob, sh->nred);
  for (r = 0; r < sh->nred; r++) {
    const struct red_shape *rs = &sh->red[r];

    fprintf(f, " r%d=zero:%s,micro:%d,buckets:%s,params:", r,
            zero_names[rs->zero], rs->micro, rs->several ? "several" : "one");
    for (i = 0; i < rs->np; i++)
      fprintf(f, "%s%zu%s", i ? "+" : "", rs->p[i].numel,
              rs->p[i].dtype == PG_F64 ? "d" : "f");
    fprintf(f, ",order:");
    for (i = 0; i < rs->np; i++)
      fprintf(f, "%s%zu", i ? "+" : "", rs->order[i]);
  }
  fprintf(f, "\n");
}

/* ---- the program's state ------------------------------------------------ */

static uint64_t seed;
static struct shape sh;
static pg_group *g, *half, *par;
static pg_reducer *red[MAX_RED];
static void *w[MAX_RED][MAX_PAR];    /* parameters (registered) */
static void *w_new[MAX_RED][MAX_PAR];
static double acc[4];                /* pre, sub, ring, post (registered) */
static unsigned char *blob;          /* registered */
static int64_t step_no;              /* registered */
static double *pre_buf;
static float *ring_out, *ring_in;
static double *post_buf, *post_out;
static int rank, world, restarts, attempt, recoveries;
static struct pg_state_buf st[MAX_RED * MAX_PAR + 3];   /* registered */
static size_t nst;
static const char *mark_dir;

static void die(const char *what, int err)
{
  fprintf(stderr, "live_prog: rank %d pid %d: %s: %s (%s)\n", rank,
          (int)getpid(), what, pg_err_name(err), pg_last_error());
  exit(1);
}

static void marker(const char *kind, bool with_pid)
{
  char path[4096];
  FILE *f;

  if (!mark_dir)
    return;
  /* pid.R.K.PID: a group restarted in restart mode runs K = 0 again. */
  if (strcmp(kind, "pid") == 0)
    snprintf(path, sizeof path, "%s/%s.%d.%d.%d", mark_dir, kind, rank,
             restarts, (int)getpid());
  else
    snprintf(path, sizeof path, "%s/%s.%d.%d", mark_dir, kind, rank,
             restarts);
  f = fopen(path, "w");
  if (!f)
    return;
  if (with_pid)
    fprintf(f, "%d\n", (int)getpid());
  fclose(f);
}

static bool rank_listed(const char *ranks)
{
  char buf[128], *tok, *save = NULL;

  if (strcmp(ranks, "all") == 0)
    return true;
  snprintf(buf, sizeof buf, "%s", ranks);
  for (tok = strtok_r(buf, "+", &save); tok; tok = strtok_r(NULL, "+", &save))
    if (atoi(tok) == rank)
      return true;
  return false;
}

/* The test hook: LIVE_PROG_FAULT says whether this process dies (or
 * stops to be killed) here. */
static void hook(const char *phase)
{
  const char *v = getenv("LIVE_PROG_FAULT");
  char spec[512], *tok, *save = NULL;

  /* A schedule is for the job's first attempt: a group that cdrun
   * restarted (restart mode's rules) runs without faults. */
  if (!v || attempt > 0)
    return;
  snprintf(spec, sizeof spec, "%s", v);
  for (tok = strtok_r(spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char ph[32], at[32], ranks[128], rs[16], how[16];

    if (sscanf(tok, "%31[a-z0-9]:%31[-0-9]:%127[a-z0-9+]:%15[*0-9]:%15[a-z]",
               ph, at, ranks, rs, how) != 5)
      continue;
    if (strcmp(ph, phase) != 0 || (strcmp(at, "-") && atoll(at) != step_no) ||
        (strcmp(rs, "*") && atoi(rs) != restarts) || !rank_listed(ranks))
      continue;
    fprintf(stderr, "live_prog: rank %d pid %d: fault %s at %s, step %" PRId64
            "\n", rank, (int)getpid(), how, phase, step_no);
    if (strcmp(how, "stop") == 0) {
      marker("held", true);
      raise(SIGSTOP);
    }
    raise(SIGKILL);
  }
}

/* Deterministic values: small multiples of 1/64, exact in f32 and f64. */
static double val(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
  uint64_t s = seed ^ (a * 0x100000001b3ull) ^ (b << 20) ^ (c << 40) ^ d;

  return (double)(next(&s) % 1009) / 64.0;
}

static size_t dtsize(pg_dtype t)
{
  return pg_dtype_size(t);
}

static double get(const void *p, pg_dtype t, size_t i)
{
  return t == PG_F64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

static void put(void *p, pg_dtype t, size_t i, double v)
{
  if (t == PG_F64)
    ((double *)p)[i] = v;
  else
    ((float *)p)[i] = (float)v;
}

/* ---- sub-groups ----------------------------------------------------------- */

static void drop_subgroups(void)
{
  pg_destroy(half);
  pg_destroy(par);
  half = par = NULL;
}

/* Collective over the world: every rank makes both halves (members or
 * not) and the parity split. */
static int make_subgroups(void)
{
  int lo[32], hi[32], nlo = 0, nhi = 0, r, err;
  pg_group *a = NULL, *b = NULL;

  drop_subgroups();
  if (sh.halves) {
    if (world > 64)
      return -EINVAL;
    for (r = 0; r < world; r++) {
      if (r < world / 2)
        lo[nlo++] = r;
      else
        hi[nhi++] = r;
    }
    if (nlo && (err = pg_new_group(g, lo, nlo, &a)))
      return err;
    if (nhi && (err = pg_new_group(g, hi, nhi, &b))) {
      pg_destroy(a);
      return err;
    }
    half = a ? a : b;
  }
  if (sh.parity && (err = pg_split(g, rank % 2, rank, &par)))
    return err;
  return 0;
}

/* ---- one step ------------------------------------------------------------- */

static int wait_work(pg_work *wk)
{
  int err = pg_work_wait(wk, -1);

  pg_work_free(wk);
  return err;
}

static int reducer_phase(int ri)
{
  struct red_shape *rs = &sh.red[ri];
  pg_reducer *r = red[ri];
  size_t k, i, p;
  int m, err;

  if (rs->zero == ZERO_BEFORE && (err = pg_reducer_zero_grad(r)))
    return err;
  for (m = 0; m < rs->micro; m++) {
    if ((err = pg_reducer_prepare(r, m == rs->micro - 1)))
      return err;
    for (k = 0; k < rs->np; k++) {
      void *gr;

      p = rs->order[k];
      gr = pg_reducer_grad(r, p);
      for (i = 0; i < rs->p[p].numel; i++) {
        double v = val((uint64_t)step_no, (uint64_t)rank + 1,
                       (uint64_t)(ri * 16 + (int)p) * 4 + (uint64_t)m, i);

        if (rs->zero != ASSIGN)
          v += get(gr, rs->p[p].dtype, i);
        put(gr, rs->p[p].dtype, i, v);
      }
      if ((err = pg_reducer_mark_ready(r, p)))
        return err;
      if (k == rs->np / 2)
        hook("reducer");
    }
    if ((err = pg_reducer_finish(r)))
      return err;
  }
  hook("finish");
  /* The optimizer, into temporaries: committed at the end of the step. */
  for (p = 0; p < rs->np; p++) {
    const void *gr = pg_reducer_grad(r, p);

    for (i = 0; i < rs->p[p].numel; i++)
      put(w_new[ri][p], rs->p[p].dtype, i,
          get(w[ri][p], rs->p[p].dtype, i) -
          0.03125 * get(gr, rs->p[p].dtype, i));
  }
  if (rs->zero == ZERO_AFTER && (err = pg_reducer_zero_grad(r)))
    return err;
  return 0;
}

static int sub_phase(double *out)
{
  pg_group *sg[2] = { half, par };
  double v[8];
  pg_work *wk;
  int i, j, err;

  *out = 0;
  for (i = 0; i < 2; i++) {
    if (!sg[i])
      continue;
    for (j = 0; j < 8; j++)
      v[j] = val((uint64_t)step_no, (uint64_t)rank + 1, 1000 + (uint64_t)i,
                 (uint64_t)j);
    if ((err = pg_all_reduce_async(sg[i], v, v, 8, PG_F64, PG_SUM, &wk)))
      return err;
    hook("sub");
    if ((err = wait_work(wk)))
      return err;
    for (j = 0; j < 8; j++)
      *out += v[j] * (i + 1);
  }
  return 0;
}

static int ring_phase(double *out)
{
  pg_work *wk;
  size_t i;
  int err;

  *out = 0;
  if (!sh.ring || world < 2)
    return 0;
  for (i = 0; i < sh.ring; i++)
    ring_out[i] = (float)val((uint64_t)step_no, (uint64_t)rank + 1, 2000, i);
  if ((err = pg_send_async(g, ring_out, sh.ring, PG_F32, (rank + 1) % world,
                           7, &wk)))
    return err;
  hook("p2p");
  err = pg_recv(g, ring_in, sh.ring, PG_F32, (rank + world - 1) % world, 7);
  if (err) {
    wait_work(wk);
    return err;
  }
  if ((err = wait_work(wk)))
    return err;
  for (i = 0; i < sh.ring; i += 1 + i / 7)
    *out += ring_in[i];
  return 0;
}

static int post_phase(double *out)
{
  size_t i, n = sh.post_n;
  pg_work *wk = NULL;
  int err = 0;

  *out = 0;
  for (i = 0; i < n; i++)
    post_buf[i] = val((uint64_t)step_no, (uint64_t)rank + 1, 3000, i);
  switch (sh.post) {
  case POST_NONE:
    return 0;
  case POST_BCAST:
    err = pg_broadcast_async(g, post_buf, n, PG_F64,
                             (int)(step_no % world), &wk);
    break;
  case POST_GATHER:
    err = pg_all_gather_async(g, post_buf, post_out, n, PG_F64, &wk);
    break;
  case POST_RSCATTER:
    /* post_buf holds world * n elements here. */
    for (i = n; i < n * (size_t)world; i++)
      post_buf[i] = val((uint64_t)step_no, (uint64_t)rank + 1, 3000, i);
    err = pg_reduce_scatter_async(g, post_buf, post_out, n, PG_F64, PG_SUM,
                                  &wk);
    break;
  case POST_BARRIER:
    err = pg_barrier_async(g, &wk);
    break;
  }
  if (err)
    return err;
  hook("post");
  if ((err = wait_work(wk)))
    return err;
  switch (sh.post) {
  case POST_BCAST:
    for (i = 0; i < n; i++)
      *out += post_buf[i];
    break;
  case POST_GATHER:
    for (i = 0; i < n * (size_t)world; i += 3)
      *out += post_out[i];
    break;
  case POST_RSCATTER:
    for (i = 0; i < n; i++)
      *out += post_out[i];
    break;
  default:
    *out = 1;
  }
  return 0;
}

/* One step: 0, or the first failing call's error; the registered state
 * changes only at its end, once every collective has succeeded. */
static int one_step(void)
{
  double pre_sum = 0, sub_sum, ring_sum, post_sum, sums[3];
  pg_work *wk;
  size_t i, p;
  int r, err;

  if (sh.pre) {
    for (i = 0; i < sh.pre; i++)
      pre_buf[i] = val((uint64_t)step_no, (uint64_t)rank + 1, 4000, i);
    if ((err = pg_all_reduce_async(g, pre_buf, pre_buf, sh.pre, PG_F64,
                                   PG_SUM, &wk)))
      return err;
    hook("pre");
    if ((err = wait_work(wk)))
      return err;
    for (i = 0; i < sh.pre; i += 1 + i / 3)
      pre_sum += pre_buf[i];
  }
  for (r = 0; r < sh.nred; r++)
    if ((err = reducer_phase(r)))
      return err;
  if ((err = sub_phase(&sub_sum)) || (err = ring_phase(&ring_sum)) ||
      (err = post_phase(&post_sum)))
    return err;
  /* The registered state is the same on every rank (the heal sends one
   * rank's to all): what differs by rank is summed first. */
  sums[0] = sub_sum;
  sums[1] = ring_sum;
  sums[2] = post_sum;
  if ((err = pg_all_reduce(g, sums, sums, 3, PG_F64, PG_SUM)))
    return err;
  hook("commit");
  for (r = 0; r < sh.nred; r++)
    for (p = 0; p < sh.red[r].np; p++)
      memcpy(w[r][p], w_new[r][p],
             sh.red[r].p[p].numel * dtsize(sh.red[r].p[p].dtype));
  acc[0] += pre_sum;
  acc[1] += sums[0];
  acc[2] += sums[1];
  acc[3] += sums[2];
  for (i = 0; i < sh.blob; i++)
    blob[i] = (unsigned char)(blob[i] * 31 + (unsigned char)step_no +
                              (unsigned char)i);
  step_no++;
  return 0;
}

static double now(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- recovery, as libpg(3) shows it -------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
  const unsigned char *b = p;
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t digest(void)
{
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i;

  for (i = 0; i < nst; i++)
    h = fnv(h, st[i].ptr, st[i].bytes);
  return h;
}

/* After every heal (a survivor's pg_recover, a fresh process's
 * pg_state_register: both, so that the collective matches), the members
 * hold the same state.  libpg(3): when every member with valid state
 * died, the next generation heals from nobody (heal_source -1) "and the
 * program should notice (its step counter)"; so it does, here, where
 * every member can (a fresh process is not told heal_source).  0,
 * PG_ERR_PEER_LOST, or exits. */
static int check_healed(void)
{
  int64_t v[4];
  uint64_t h = digest() >> 1;
  int err;

  v[0] = (int64_t)h;
  v[1] = -(int64_t)h;
  v[2] = step_no;
  v[3] = -step_no;
  if ((err = pg_all_reduce(g, v, v, 4, PG_I64, PG_MAX)))
    return err;
  if (v[0] != -v[1] || v[2] != -v[3]) {
    fprintf(stderr, "live_prog: rank %d pid %d: after the heal the "
            "members hold different states (steps %" PRId64 " to %" PRId64
            "; this rank: step %" PRId64 ")\n", rank, (int)getpid(), -v[3],
            v[2], step_no);
    exit(1);
  }
  return 0;
}

static void recover(void)
{
  struct pg_recover_info info;
  double t0 = now();
  int err, tries = 0;

  for (;;) {
    hook("recover");
    while ((err = pg_recover(g, &info)) == PG_ERR_PEER_LOST)
      if (++tries == MAX_RECOVER)
        die("pg_recover (lost a peer 50 times)", err);
    if (err)
      die("pg_recover", err);
    recoveries++;
    rank = info.rank;
    world = info.world;
    fprintf(stderr, "live_prog: rank %d pid %d: recovered generation=%" PRIu64
            " world=%d joined=%d left=%d heal_source=%d step=%" PRId64
            " after %.3f s\n", rank, (int)getpid(), info.generation,
            info.world, info.joined, info.left, info.heal_source, step_no,
            now() - t0);
    /* Sub-groups of the old generation are stale: make them again. */
    if (!(err = check_healed())) {
      hook("resub");
      err = make_subgroups();
    }
    if (err == PG_ERR_PEER_LOST)
      continue;
    if (err)
      die("making the sub-groups again after pg_recover", err);
    return;
  }
}

int main(int argc, char **argv)
{
  struct pg_options o = PG_OPTIONS_INIT;
  size_t i, p;
  char host[64];
  int64_t keys = -1;
  const char *v;
  bool pending;
  int r, err;

  if (argc == 3 && strcmp(argv[1], "--shape") == 0) {
    seed = strtoull(argv[2], NULL, 10);
    make_shape(seed, &sh);
    print_shape(stdout, seed, &sh);
    return 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: live_prog SEED | live_prog --shape SEED\n");
    return 2;
  }
  seed = strtoull(argv[1], NULL, 10);
  make_shape(seed, &sh);
  mark_dir = getenv("LIVE_PROG_DIR");
  rank = (v = getenv("RANK")) ? atoi(v) : 0;
  restarts = (v = getenv("CDRUN_WORKER_RESTARTS")) ? atoi(v) : 0;
  attempt = (v = getenv("TORCHELASTIC_RESTART_COUNT")) ? atoi(v) : 0;
  marker("pid", true);
  /* The transport, by host id (libpg(3): a host id per rank forces TCP). */
  if (sh.transport == 1) {
    snprintf(host, sizeof host, "live-prog-h%d", rank);
    o.host_id = host;
  } else if (sh.transport == 2) {
    snprintf(host, sizeof host, "live-prog-h%d", rank / 2);
    o.host_id = host;
  }
  if ((err = pg_init(&o, &g)))
    die("pg_init", err);
  rank = pg_rank(g);
  world = pg_size(g);
  marker("init", false);
  if (rank == 0 && !pg_joined_running(g))
    print_shape(stderr, seed, &sh);

  hook("create");
  for (r = 0; r < sh.nred; r++) {
    struct pg_reducer_options ro = PG_REDUCER_OPTIONS_INIT;

    if (sh.red[r].several) {
      ro.first_bucket_cap = 1024;
      ro.bucket_cap = 16384;
    } else {
      ro.first_bucket_cap = ro.bucket_cap = (size_t)64 << 20;
    }
    if ((err = pg_reducer_create(g, sh.red[r].p, sh.red[r].np, &ro, &red[r])))
      die("pg_reducer_create", err);
    for (p = 0; p < sh.red[r].np; p++) {
      size_t n = sh.red[r].p[p].numel, b = n * dtsize(sh.red[r].p[p].dtype);

      w[r][p] = malloc(b);
      w_new[r][p] = malloc(b);
      if (!w[r][p] || !w_new[r][p])
        die("malloc", -ENOMEM);
      for (i = 0; i < n; i++)
        put(w[r][p], sh.red[r].p[p].dtype, i,
            val(99, (uint64_t)r, (uint64_t)p, i));
      st[nst].ptr = w[r][p];
      st[nst++].bytes = b;
    }
  }
  pre_buf = calloc(sh.pre + 1, sizeof *pre_buf);
  ring_out = calloc(sh.ring + 1, sizeof *ring_out);
  ring_in = calloc(sh.ring + 1, sizeof *ring_in);
  post_buf = calloc(sh.post_n * 64, sizeof *post_buf);
  post_out = calloc(sh.post_n * 64, sizeof *post_out);
  blob = calloc(sh.blob + 1, 1);
  if (!pre_buf || !ring_out || !ring_in || !post_buf || !post_out || !blob)
    die("calloc", -ENOMEM);
  if (sh.blob) {
    st[nst].ptr = blob;
    st[nst++].bytes = sh.blob;
  }
  st[nst].ptr = acc;
  st[nst++].bytes = sizeof acc;
  st[nst].ptr = &step_no;
  st[nst++].bytes = sizeof step_no;

  hook("register");
  err = pg_state_register(g, st, nst);
  if (err == PG_ERR_PEER_LOST)
    recover();
  else if (err)
    die("pg_state_register", err);
  else if ((pg_joined_running(g) && (err = check_healed())) ||
           (err = make_subgroups())) {
    if (err != PG_ERR_PEER_LOST)
      die("making the sub-groups", err);
    recover();
  }

  while (step_no < sh.steps) {
    double t0 = now();

    err = one_step();
    if (err == PG_ERR_PEER_LOST) {   /* a peer died mid-step */
      fprintf(stderr, "live_prog: rank %d pid %d: lost a peer in step %"
              PRId64 " after %.3f s\n", rank, (int)getpid(), step_no,
              now() - t0);
      recover();
      continue;                      /* redo the step: state healed */
    }
    if (err)
      die("step", err);
    err = pg_membership_poll(g, &pending);
    if (err == PG_ERR_PEER_LOST || (!err && pending))
      recover();
    else if (err)
      die("pg_membership_poll", err);
  }

  if (rank == 0 && pg_group_store(g) &&
      pg_store_num_keys(pg_group_store(g), &keys))
    keys = -1;
  printf("live_prog: digest rank=%d world=%d step=%" PRId64 " recoveries=%d "
         "keys=%" PRId64 " digest=%016" PRIx64 "\n", rank, world, step_no,
         recoveries, keys, digest());
  fflush(stdout);
  hook("last");
  drop_subgroups();
  for (r = 0; r < sh.nred; r++)
    pg_reducer_destroy(red[r]);
  pg_destroy(g);
  for (r = 0; r < sh.nred; r++)
    for (p = 0; p < sh.red[r].np; p++) {
      free(w[r][p]);
      free(w_new[r][p]);
    }
  free(pre_buf);
  free(ring_out);
  free(ring_in);
  free(post_buf);
  free(post_out);
  free(blob);
  return 0;
}
