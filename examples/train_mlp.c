/* train_mlp.c -- data-parallel training of an MLP classifier on libpg.
 *
 *   cdrun --standalone --nproc_per_node=4 --max_restarts=3 bin/train_mlp
 *
 * A real (small) training job, written the way PyTorch DDP scripts are:
 *
 *  - data: a Gaussian-mixture classification problem generated from --seed
 *    (10 classes, 4 clusters each, 64 features), --samples training rows
 *    and a held-out test set; every rank generates the same arrays;
 *  - model: 64 -> hidden -> hidden -> 10 (--layers N: N hidden layers),
 *    ReLU, softmax cross-entropy; forward and backward passes in plain C;
 *  - sampler: as torch's DistributedSampler, a permutation per (seed,
 *    epoch), identical on every rank; the global batch is fixed, so each
 *    rank takes global_batch / WORLD_SIZE rows of it per step and one
 *    step's math does not depend on the world size;
 *  - gradients: written straight into libpg's reducer buckets during the
 *    backward pass, last layer first, each marked ready at once so that
 *    buckets are all-reduced while earlier layers' backward still runs;
 *  - checkpoints: rank 0 writes ckpt/latest.ckpt every --ckpt-every steps
 *    (temporary file, fsync, rename); at start rank 0 reads it and
 *    broadcasts it, and everyone resumes at its step, whatever the world
 *    size now is;
 *  - live recovery (--recovery live, under cdrun --recovery=live): the
 *    state is registered with libpg; a step that fails because a peer
 *    died is recovered (pg_recover) and run again, re-sharded for the new
 *    world; a node that joins is taken in at a step boundary
 *    (train_mlp/live.h).
 *
 * Rank 0 prints one line per epoch; "step_ms=" (the mean step time after
 * warm-up, the slowest rank's) and "wait_ms=" (the mean time spent after
 * the backward pass waiting for the gradients' all-reduce, the least of
 * any rank); and a final line with a checksum of the parameters
 * ("params: sum=... abs=... l2=...") that the tests compare.
 * Exit status: 0, 1 on a runtime error (libpg, I/O, corrupt checkpoint),
 * 2 on bad flags or a checkpoint written for other flags.
 *
 * This file is the job: the group, the training loop and main.  Beside
 * it, train_mlp/: flags.c (the command line), data.c (random numbers and
 * the data set), model.c (the network's kernels, passes and optimizers),
 * ckpt.c (checkpoints), live.c (live recovery), mlp.c (error messages);
 * mlp.h is what they share. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pg.h"
#include "train_mlp/ckpt.h"
#include "train_mlp/data.h"
#include "train_mlp/flags.h"
#include "train_mlp/live.h"
#include "train_mlp/mlp.h"
#include "train_mlp/model.h"

/* ---- the group ----------------------------------------------------------- */

/* Alone (no RANK in the environment): a group of one, on a free port. */
static int init_group(pg_group **g)
{
  struct pg_options po = PG_OPTIONS_INIT;
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  int s, err;

  if (!getenv("RANK") && !getenv("WORLD_SIZE")) {
    s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(s, (struct sockaddr *)&sa, &sl) != 0) {
      mlp_err_msg("cannot find a free port", strerror(errno));
      if (s >= 0)
        close(s);
      return -1;
    }
    close(s);
    po.rank = 0;
    po.world_size = 1;
    po.master_addr = "127.0.0.1";
    po.master_port = ntohs(sa.sin_port);
  }
  err = pg_init(&po, g);
  if (err) {
    mlp_pg_fail("pg_init", err);
    return -1;
  }
  return 0;
}

/* ---- training ------------------------------------------------------------ */

struct stats {
  double loss, correct, rows;
};

/* Test accuracy: rank r evaluates rows r, r + W, ...; *correct and *rows
 * are this rank's counts. */
static void evaluate(struct net *n, const struct dataset *test, int rank,
                     int world, double *correct, double *rows)
{
  size_t i = (size_t)rank, k, r;
  unsigned pred;

  *correct = *rows = 0;
  while (i < test->n) {
    for (k = 0; k < n->cap && i < test->n; k++, i += (size_t)world) {
      n->idx[k] = (uint32_t)i;
      memcpy(n->x + k * NIN, test->x + i * NIN, NIN * sizeof *n->x);
    }
    model_forward(n, k);
    for (r = 0; r < k; r++) {
      model_xent(n->z + r * NCLS, test->y[n->idx[r]], 0, NULL, &pred);
      *correct += pred == test->y[n->idx[r]];
    }
    *rows += (double)k;
  }
}

struct run {
  struct opts o;
  pg_group *g;
  pg_reducer *red;
  int rank, world;
  size_t local;          /* rows per rank per step */
  long spe;              /* steps per epoch */
  struct net n;
  struct dataset train, test;
  uint32_t *perm;
  long perm_epoch;
  long stats_from;       /* the step the epoch's statistics start at */
  struct live L;         /* --recovery live; L.st: the step counters */
  double op_t0;          /* when the last collective started */
};

/* The collective what failed with err: PG_ERR_PEER_LOST in live mode
 * (quietly: the caller recovers), or -1 after a message. */
static int failed(struct run *R, const char *what, int err)
{
  if (R->o.live && err == PG_ERR_PEER_LOST)
    return err;
  mlp_pg_fail(what, err);
  return -1;
}

/* The global batch must split evenly over the world (first start, or a
 * live recovery's new world: why says which).  0, or -1 after a message
 * from every rank: the first to exit makes cdrun stop the others, maybe
 * before rank 0 got here. */
static int check_batch(struct run *R, const char *why)
{
  char buf[160];

  if (R->o.global_batch % R->world == 0)
    return 0;
  snprintf(buf, sizeof buf, "%ld is not divisible by %s %d",
           R->o.global_batch, why, R->world);
  mlp_err_msg("--global-batch", buf);
  return -1;
}

/* Point n->g at this step's gradient memory. */
static int grads_for_step(struct run *R)
{
  size_t i, off = 0;
  int err;

  if (!R->red) {
    memset(R->n.own_grad, 0, R->n.total * sizeof *R->n.own_grad);
    for (i = 0; i < R->n.np; i++) {
      R->n.g[i] = R->n.own_grad + off;
      off += R->n.numel[i];
    }
    return 0;
  }
  /* Zeroed here, not after the optimizer's step: a step interrupted in
   * live mode leaves partial gradients behind. */
  R->op_t0 = mlp_now_s();
  if ((err = pg_reducer_zero_grad(R->red)) != 0)
    return failed(R, "pg_reducer_zero_grad", err);
  if ((err = pg_reducer_prepare(R->red, true)) != 0)
    return failed(R, "pg_reducer_prepare", err);
  /* After prepare: a bucket rebuild may have moved them. */
  for (i = 0; i < R->n.np; i++)
    R->n.g[i] = pg_reducer_grad(R->red, i);
  return 0;
}

/* One step on this rank's share of global batch (step % spe); *wait
 * gets the seconds spent waiting for the gradients' all-reduce after the
 * backward pass (the communication not hidden behind it).  0, or
 * failed()'s PG_ERR_PEER_LOST or -1 (R->op_t0: when the failed collective
 * started). */
static int train_step(struct run *R, long step, struct stats *st,
                      double *wait)
{
  struct net *n = &R->n;
  size_t j, base = (size_t)(step % R->spe) * (size_t)R->o.global_batch;
  float scale = 1.0f / (float)R->local;
  unsigned pred;
  int err;

  if (R->perm_epoch != step / R->spe) {
    R->perm_epoch = step / R->spe;
    data_permute(R->perm, R->train.n, R->o.seed, R->perm_epoch);
  }
  /* DistributedSampler: rank r takes rows r, r + W, r + 2W... of the
   * global batch, so the union over ranks is the same for any W. */
  for (j = 0; j < R->local; j++) {
    n->idx[j] = R->perm[base + (size_t)R->rank + j * (size_t)R->world];
    memcpy(n->x + j * NIN, R->train.x + (size_t)n->idx[j] * NIN,
           NIN * sizeof *n->x);
  }
  if ((err = grads_for_step(R)) != 0)
    return err;
  model_forward(n, R->local);
  for (j = 0; j < R->local; j++) {
    unsigned label = R->train.y[n->idx[j]];

    st->loss += model_xent(n->z + j * NCLS, label, scale, n->dz + j * NCLS,
                     &pred);
    st->correct += pred == label;
  }
  st->rows += (double)R->local;
  *wait = mlp_now_s();
  if ((err = model_backward(n, R->local, R->red, R->o.no_overlap)) != 0) {
    R->op_t0 = n->op_t0;
    return failed(R, "pg_reducer_mark_ready", err);
  }
  n->bw_s += mlp_now_s() - *wait;
  n->bw_steps++;
  *wait = mlp_now_s();
  R->op_t0 = *wait;
  if (R->red) {
    if ((err = pg_reducer_finish(R->red)) != 0)
      return failed(R, "pg_reducer_finish", err);
  } else if (R->o.no_reducer) {
    for (j = 0; j < n->np; j++) {
      R->op_t0 = mlp_now_s();
      if ((err = pg_all_reduce(R->g, n->g[j], n->g[j], n->numel[j], PG_F32,
                               PG_AVG)) != 0)
        return failed(R, "pg_all_reduce", err);
    }
  }
  *wait = mlp_now_s() - *wait;
  model_optimize(n, &R->o, step + 1);
  return 0;
}

/* End of an epoch (or of the run, mid-epoch): global loss and accuracy,
 * test accuracy, one line from rank 0.  0, or failed()'s error. */
static int report(struct run *R, long step, struct stats *st, double t0,
                  double *test_acc)
{
  double v[5];
  long epoch = (step - 1) / R->spe, in_epoch = (step - 1) % R->spe + 1;
  int err;

  evaluate(&R->n, &R->test, R->rank, R->world, &v[3], &v[4]);
  v[0] = st->loss;
  v[1] = st->correct;
  v[2] = st->rows;
  R->op_t0 = mlp_now_s();
  /* --no-comm: rank 0's own numbers. */
  if (!R->o.no_comm &&
      (err = pg_all_reduce(R->g, v, v, 5, PG_F64, PG_SUM)) != 0)
    return failed(R, "pg_all_reduce of the epoch's statistics", err);
  *test_acc = 100.0 * v[3] / v[4];
  if (R->rank == 0) {
    char part[64] = "";

    if (R->stats_from > epoch * R->spe)
      snprintf(part, sizeof part, " [since the resume at step %ld]",
               R->stats_from);
    else if (in_epoch != R->spe)
      snprintf(part, sizeof part, " [%ld of %ld steps]", in_epoch, R->spe);
    printf("epoch %ld/%ld: loss %.3f train-acc %.1f%% test-acc %.1f%% "
           "(%.1f s)%s\n", epoch + 1, R->o.epochs,
           v[2] > 0 ? v[0] / v[2] : 0.0, v[2] > 0 ? 100 * v[1] / v[2] : 0.0,
           *test_acc, mlp_now_s() - t0, part);
  }
  memset(st, 0, sizeof *st);
  R->stats_from = step;
  return 0;
}

/* Checksum of the parameters, and (unless --no-comm) a check that every
 * replica holds the same bits.  0, or failed()'s error. */
static int final_report(struct run *R, long step, double test_acc,
                        double step_ms, double wait_ms, long timed)
{
  double sum = 0, abs_sum = 0, l2 = 0, v[6];
  char stages[MAX_W * 16] = "";
  size_t i;
  int err, k;

  for (i = 0; i < R->n.total; i++) {
    sum += R->n.w[i];
    abs_sum += fabs(R->n.w[i]);
    l2 += (double)R->n.w[i] * R->n.w[i];
  }
  l2 = sqrt(l2);
  v[0] = sum;
  v[1] = l2;
  v[2] = -sum;
  v[3] = -l2;
  v[4] = step_ms;
  v[5] = -wait_ms;
  R->op_t0 = mlp_now_s();
  if ((err = pg_all_reduce(R->g, v, v, 6, PG_F64, PG_MAX)) != 0)
    return failed(R, "pg_all_reduce of the checksums", err);
  if (!R->o.no_comm && (v[0] != -v[2] || v[1] != -v[3])) {
    if (R->rank == 0)
      mlp_err_msg("replicas differ", "the ranks' parameters are not equal");
    return -1;
  }
  if (R->rank != 0)
    return 0;
  for (k = 0; k < R->n.nw; k++)
    snprintf(stages + strlen(stages), sizeof stages - strlen(stages),
             "%s%.3f", k ? "," : "", model_stage_ms(&R->n, k));
  /* The slowest rank's step; the wait of the rank that waited least
   * (the others also wait for it): the communication left exposed. */
  if (timed > 0)
    printf("step_ms=%.3f wait_ms=%.3f (means of %ld steps after %d "
           "warm-up; %s, %d workers) backward_ms=%.3f compute=%s "
           "stages_ms=%s\n", v[4], -v[5], timed, WARMUP,
           R->o.no_comm ? "no-comm" : R->o.no_overlap ? "no-overlap" :
           R->o.no_reducer ? "no-reducer" : "reducer", R->world,
           R->n.bw_steps ? 1e3 * R->n.bw_s / (double)R->n.bw_steps : 0.0,
           R->n.device ? "device" : "cpu", stages);
  printf("final: step %ld test-acc %.2f%% params: sum=%.9g abs=%.9g "
         "l2=%.9g\n", step, test_acc, sum, abs_sum, l2);
  return R->o.params_out ? ckpt_write_params(R->o.params_out, &R->n) : 0;
}

/* Rank 0 writes the checkpoint of step (done) steps.  0, or -1 after a
 * message. */
static int save_ckpt(struct run *R, long step)
{
  unsigned char *b;
  size_t len;
  int rc;

  if (R->rank != 0)
    return 0;
  b = ckpt_encode(&R->n, &R->o, R->world, step, &len);
  rc = ckpt_save(R->o.ckpt_dir, b, len);
  free(b);
  return rc;
}

/* Where a run is, besides the registered counters (R->L.st). */
struct progress {
  long start, total, saved;
  bool first_attempt;
  struct stats st;
  double t0, test_acc;
  double busy, waited;   /* over the timed steps (after the warm-up) */
  long timed;
  bool held;             /* --hold-at-step: done (or a joiner's) */
};

#define DONE 1            /* advance(): the run is over */
#define MEMBERSHIP 2      /* advance(): a generation waits (live) */

/* Live mode, at a step boundary: whether a node joined (MEMBERSHIP). */
static int poll_membership(struct run *R)
{
  bool pending = false;
  int err;

  if (!R->o.live)
    return 0;
  R->op_t0 = mlp_now_s();
  if ((err = pg_membership_poll(R->g, &pending)) != 0)
    return failed(R, "pg_membership_poll", err);
  return pending ? MEMBERSHIP : 0;
}

/* --hold-at-step (tests): waits for --hold-file, then with --hold-join
 * polls the membership until a node joins: MEMBERSHIP, or failed()'s
 * error (every rank polls as often: the poll is collective). */
static int hold(struct run *R, struct progress *P, long step)
{
  struct timespec ts = { 0, 10 * 1000 * 1000 };
  int rc, k;

  P->held = true;
  fprintf(stderr, "train_mlp: rank %d: holding at step %ld until %s "
          "exists\n", R->rank, step, R->o.hold_file);
  while (access(R->o.hold_file, F_OK) != 0)
    nanosleep(&ts, NULL);
  for (k = 0; R->o.hold_join && k < 6000; k++) {
    if ((rc = poll_membership(R)) != 0)
      return rc;
    nanosleep(&ts, NULL);
  }
  return 0;
}

/* The end: the last checkpoint (a later run with more --epochs or --steps
 * continues from it, at any world size), the test accuracy when no step
 * ran (live mode: always, so that every rank does the same whoever
 * joined when), the final lines.  0, or failed()'s error. */
static int finish_run(struct run *R, struct progress *P)
{
  long start = P->start, total = P->total;
  int err;

  if (R->o.ckpt_every && P->saved != total && save_ckpt(R, total) != 0)
    return -1;
  if (start >= total || R->o.live) {
    double v[2];

    evaluate(&R->n, &R->test, R->rank, R->world, &v[0], &v[1]);
    R->op_t0 = mlp_now_s();
    if ((err = pg_all_reduce(R->g, v, v, 2, PG_F64, PG_SUM)) != 0)
      return failed(R, "pg_all_reduce of the test accuracy", err);
    P->test_acc = 100.0 * v[0] / v[1];
    if (R->rank == 0 && start >= total)
      printf("nothing to do: the checkpoint is at step %ld of %ld\n",
             start, total);
  }
  return final_report(R, total > start ? total : start, P->test_acc,
                      P->timed ? 1e3 * P->busy / (double)P->timed : 0,
                      P->timed ? 1e3 * P->waited / (double)P->timed : 0,
                      P->timed);
}

/* The next thing to do from the registered counters R->L.st, so that in
 * live mode every rank does the same after a heal: an epoch's report
 * when one is due, the end, or the next step (after the membership poll,
 * live), then its checkpoint and lines.  0, DONE, MEMBERSHIP, or
 * failed()'s error; *redo: the error interrupted a step. */
static int advance(struct run *R, struct progress *P, bool *redo)
{
  struct live_state *ls = &R->L.st;
  long step = (long)ls->step;
  struct stats before;
  double t, w;
  int rc;

  if (ls->reported < step && (step % R->spe == 0 || step == P->total)) {
    if ((rc = report(R, step, &P->st, P->t0, &P->test_acc)) != 0)
      return rc;
    ls->reported = step;
    P->t0 = mlp_now_s();
  }
  if (step >= P->total)
    return (rc = finish_run(R, P)) != 0 ? rc : DONE;
  if (step == R->o.hold_at_step && !P->held &&
      (rc = hold(R, P, step)) != 0)
    return rc;
  if ((rc = poll_membership(R)) != 0)
    return rc;
  for (int k = 0; k < R->o.ndie_rank; k++)
    if (step == R->o.die_at_step && R->rank == R->o.die_rank[k] &&
        P->first_attempt) {
      fprintf(stderr, "train_mlp: rank %d: --die-at-step %ld: SIGKILL\n",
              R->rank, step);
      raise(SIGKILL);
    }
  t = mlp_now_s();
  before = P->st;
  if ((rc = train_step(R, step, &P->st, &w)) != 0) {
    P->st = before;
    *redo = true;
    return rc;
  }
  ls->step = step + 1;
  live_step_done(&R->L);
  /* Progress, for cdrun --worker-heartbeat-timeout. */
  pg_heartbeat();
  if (step - P->start >= WARMUP) {
    P->busy += mlp_now_s() - t;
    P->waited += w;
    P->timed++;
  }
  if (R->o.log_steps && (step + 1) % R->o.log_steps == 0 && R->rank == 0)
    printf("step %ld\n", step + 1);
  if (R->o.ckpt_every && (step + 1) % R->o.ckpt_every == 0) {
    P->saved = step + 1;
    if (save_ckpt(R, step + 1) != 0)
      return -1;
  }
  return 0;
}

/* Live mode: recovers the group after cause (live_recover), then takes
 * the new rank and world: each rank's share of the global batch changes
 * with them (DistributedSampler's rows r, r + W, ... of the same batch).
 * 0, 1 on a runtime error, 2 when the new world does not divide the
 * batch. */
static int recover(struct run *R, const char *cause, bool redo)
{
  if (live_recover(&R->L, R->g, cause, mlp_now_s() - R->op_t0, redo) != 0)
    return 1;
  R->rank = R->L.info.rank;
  R->world = R->L.info.world;
  if (check_batch(R, "the new world size") != 0)
    return 2;
  R->local = (size_t)(R->o.global_batch / R->world);
  model_reserve(&R->n, R->local);
  return 0;
}

/* Steps start..total-1 (R->L.st says where the run is); in live mode a
 * collective that fails because a peer died, or a node that joins, is
 * recovered from, and the interrupted step run again.  The exit status. */
static int run_training(struct run *R, long start, long total)
{
  const char *rc_env = getenv("TORCHELASTIC_RESTART_COUNT");
  struct progress P;
  bool redo;
  int rc;

  memset(&P, 0, sizeof P);
  P.start = P.saved = start;
  P.total = total;
  P.first_attempt = (!rc_env || !strcmp(rc_env, "0")) &&
                    live_restarts() == 0;
  P.t0 = mlp_now_s();
  P.test_acc = NAN;
  P.held = !P.first_attempt || (R->o.live && pg_joined_running(R->g));
  R->stats_from = start;
  for (;;) {
    redo = false;
    rc = advance(R, &P, &redo);
    if (rc == DONE)
      break;
    if (rc == 0)
      continue;
    if (rc != PG_ERR_PEER_LOST && rc != MEMBERSHIP)
      return 1;
    if ((rc = recover(R, rc == MEMBERSHIP ? "membership" : "peer_lost",
                      redo)) != 0)
      return rc;
  }
  live_flush(&R->L);
  return 0;
}

/* Live mode: the state registered (live.h); a process that joins a
 * running job receives it there, and starts at its step. */
static int start_live(struct run *R, long *start)
{
  bool joined = pg_joined_running(R->g);

  if (live_register(&R->L, R->g, &R->n, &R->o) != 0)
    return 1;
  if (joined) {
    R->rank = mlp_rank = pg_rank(R->g);
    R->world = pg_size(R->g);
    if (check_batch(R, "the world size") != 0)
      return 2;
    R->local = (size_t)(R->o.global_batch / R->world);
    model_reserve(&R->n, R->local);
    *start = (long)R->L.st.step;
  }
  return 0;
}

static void print_banner(const struct run *R);

/* Where the run starts: the live state of a job this process joined, or
 * the checkpoint (none: step 0), with the banner.  The exit status. */
static int start_state(struct run *R, long *start)
{
  bool joined = R->o.live && pg_joined_running(R->g);
  int rc;

  *start = 0;
  if (R->o.live && (rc = start_live(R, start)) != 0)
    return rc;
  if (!joined) {
    if (R->rank == 0)
      print_banner(R);
    *start = ckpt_load(R->g, &R->o, &R->n);
    if (*start < 0)
      return *start == -2 ? 2 : 1;
    R->L.st.step = R->L.st.reported = *start;
  }
  if (R->o.live)
    printf("live: rank %d pid %ld started at step %ld (world %d, restart "
           "%ld)\n", R->rank, (long)getpid(), *start, R->world,
           live_restarts());
  return 0;
}

/* Rank 0's first line: the job's shape. */
static void print_banner(const struct run *R)
{
  char grads[64], shape[MAX_W * 8 + 16];

  if (R->red)
    snprintf(grads, sizeof grads, "reducer, %zu bucket%s%s",
             pg_reducer_num_buckets(R->red),
             pg_reducer_num_buckets(R->red) == 1 ? "" : "s",
             R->o.no_overlap ? " after backward" : "");
  else
    snprintf(grads, sizeof grads, "%s",
             R->o.no_comm ? "no communication" : "all-reduce after "
             "backward");
  snprintf(shape, sizeof shape, "%d", NIN);
  for (int l = 1; l <= R->n.nw; l++)
    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "-%zu",
             R->n.dim[l]);
  printf("train_mlp: %d worker%s (%s), MLP %s (%zu "
         "parameters), %ld samples, global batch %ld (%zu per worker), "
         "%ld steps/epoch, %s lr %g, gradients: %s\n", R->world,
         R->world == 1 ? "" : "s", pg_backend_name(R->g), shape,
         R->n.total, R->o.samples, R->o.global_batch, R->local, R->spe,
         R->o.optimizer == OPT_ADAM ? "adam" : "sgd", R->o.lr, grads);
}

int main(int argc, char **argv)
{
  struct run R;
  struct pg_param_spec spec[MAX_P];
  struct pg_reducer_options ro = PG_REDUCER_OPTIONS_INIT;
  long start, total;
  size_t i;
  int rc, err;

  memset(&R, 0, sizeof R);
  setvbuf(stdout, NULL, _IOLBF, 0);
  rc = flags_parse(argc, argv, &R.o);
  if (rc)
    return rc > 0 ? 0 : 2;
  /* Not opting in (pg_init would): cdrun restarts the group instead. */
  if (getenv("CDRUN_RECOVERY") && !strcmp(getenv("CDRUN_RECOVERY"), "live")
      && (!R.o.live || R.o.no_live_opt_in))
    unsetenv("CDRUN_LIVE_OPT_IN");
  if (init_group(&R.g) != 0)
    return 1;
  R.rank = mlp_rank = pg_rank(R.g);
  R.world = pg_size(R.g);
  /* cdrun says when it cannot serve live recovery (and runs its workers
   * in restart mode): the job goes on as they do. */
  if (R.o.live && !pg_live(R.g)) {
    if (R.rank == 0)
      mlp_err_msg("--recovery live", "libpg is not in live mode (run it "
                  "under cdrun --recovery=live): restart mode");
    R.o.live = false;
  }
  if (check_batch(&R, "WORLD_SIZE") != 0) {
    pg_destroy(R.g);
    return 2;
  }
  R.local = (size_t)(R.o.global_batch / R.world);
  R.spe = R.o.samples / R.o.global_batch;   /* the last partial batch is
                                               dropped, as drop_last */
  data_make(R.o.seed, (size_t)R.o.samples, &R.train, &R.test);
  model_init(&R.n, (size_t)R.o.hidden, (int)R.o.layers,
           R.local > 256 ? R.local : 256, R.o.seed);
  R.n.device = R.o.device_compute;
  for (int k = 0; k < R.o.nbackward_ms; k++)
    R.n.given_s[k] = R.o.backward_ms[k] / 1e3;
  R.perm = mlp_xcalloc(R.train.n, sizeof *R.perm);
  R.perm_epoch = -1;
  if (R.o.no_reducer || R.o.no_comm) {
    R.n.own_grad = mlp_xcalloc(R.n.total, sizeof *R.n.own_grad);
  } else {
    for (i = 0; i < R.n.np; i++) {
      spec[i].numel = R.n.numel[i];
      spec[i].dtype = PG_F32;
    }
    if ((err = pg_reducer_create(R.g, spec, R.n.np, &ro, &R.red)) != 0) {
      mlp_pg_fail("pg_reducer_create", err);
      rc = 1;
      goto out;
    }
  }
  if ((rc = start_state(&R, &start)) != 0)
    goto out;
  total = R.o.epochs * R.spe;
  if (R.o.steps && R.o.steps < total)
    total = R.o.steps;
  rc = run_training(&R, start, total);
out:
  pg_reducer_destroy(R.red);
  pg_destroy(R.g);
  model_free(&R.n);
  free(R.train.x);
  free(R.train.y);
  free(R.test.x);
  free(R.test.y);
  free(R.perm);
  return rc;
}


