/* reducertest.c -- a libpg reducer worker for the integration tests: run
 * under cdrun, each rank checks the reducer's results against a serial
 * reference (every rank can compute every rank's gradients).
 *
 *   reducertest average    3 iterations, marks out of order, the rebuild
 *                          after the first; caps from $PG_BUCKET_CAP_MB and
 *                          $PG_FIRST_BUCKET_CAP_MB, which must be 64 KiB
 *                          and 16 KiB (0.0625 and 0.015625)
 *   reducertest nosync     2 accumulating iterations, then a synced one
 *   reducertest nosync_unused  an accumulating iteration, then a synced one
 *                          that leaves some accumulated parameters unused
 *   reducertest unused     parameters never marked on some or all ranks
 *   reducertest mismatch   ranks disagree on the parameter list
 *   reducertest overlap    bucket 0 is reduced before finish is called
 *
 * Every rank prints "reducertest MODE: rank R: N checks, F failed" on
 * stderr; exit status 0 when every check passed. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pg.h"

#define KIB ((size_t)1024)
#define NPARAMS 20

struct ctx {
  pg_group *g;
  int rank, world;
  const char *mode;
  long checks, failures;
};

#define CHECK(c, cond, ...)                                           \
  do {                                                                \
    (c)->checks++;                                                    \
    if (!(cond)) {                                                    \
      (c)->failures++;                                                \
      if ((c)->failures <= 20) {                                      \
        fprintf(stderr, "reducertest %s: rank %d: ", (c)->mode,       \
                (c)->rank);                                           \
        fprintf(stderr, __VA_ARGS__);                                 \
        fputc('\n', stderr);                                          \
      }                                                               \
    }                                                                 \
  } while (0)

#define TRY(c, call)                                                  \
  do {                                                                \
    int err_ = (call);                                                \
    if (err_) {                                                       \
      fprintf(stderr, "reducertest %s: rank %d: %s: %s (%s)\n",       \
              (c)->mode, (c)->rank, #call, pg_strerror(err_),         \
              pg_last_error());                                       \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

/* A model: f32 and f64 parameters of many sizes (one empty), so that
 * with 16 KiB / 64 KiB caps there are many buckets of both dtypes. */
static const struct pg_param_spec model[NPARAMS] = {
  { 1000, PG_F32 }, { 10, PG_F32 }, { 4096, PG_F32 }, { 300, PG_F64 },
  { 5000, PG_F32 }, { 1, PG_F32 }, { 2048, PG_F64 }, { 7000, PG_F32 },
  { 64, PG_F64 }, { 12000, PG_F32 }, { 3, PG_F32 }, { 9000, PG_F64 },
  { 257, PG_F32 }, { 100, PG_F64 }, { 20000, PG_F32 }, { 33, PG_F32 },
  { 4000, PG_F64 }, { 1500, PG_F32 }, { 0, PG_F32 }, { 8192, PG_F32 },
};

#define FIRST_CAP (16 * KIB)
#define CAP (64 * KIB)

/* Rank r's gradient of element j of parameter i in iteration it: halves
 * in [-15, 15], exact in both dtypes, different on every rank. */
static double grad_value(int r, size_t i, size_t j, int it)
{
  unsigned h = (unsigned)r * 7919u + (unsigned)i * 104729u +
               (unsigned)j * 31u + (unsigned)it * 613u;

  return (double)((int)(h % 61) - 30) * 0.5;
}

static double load(const void *p, pg_dtype t, size_t j)
{
  return t == PG_F64 ? ((const volatile double *)p)[j]
                     : ((const volatile float *)p)[j];
}

static void store(void *p, pg_dtype t, size_t j, double v)
{
  if (t == PG_F64)
    ((double *)p)[j] = v;
  else
    ((float *)p)[j] = (float)v;
}

static bool close_enough(double got, double want, pg_dtype t)
{
  double tol = t == PG_F64 ? 1e-12 : 1e-6;

  return fabs(got - want) <= tol * (fabs(want) + 1);
}

/* Writes (or adds, when add) rank r's gradient of parameter i. */
static void write_grad(pg_reducer *rd, size_t i, int r, int it, bool add)
{
  void *p = pg_reducer_grad(rd, i);
  size_t j;

  for (j = 0; j < model[i].numel; j++)
    store(p, model[i].dtype, j, grad_value(r, i, j, it) +
          (add ? load(p, model[i].dtype, j) : 0));
}

/* Compares parameter i with want(j); returns whether all matched. */
typedef double (*want_fn)(const struct ctx *c, size_t i, size_t j,
                          const void *arg);

static bool check_param(struct ctx *c, pg_reducer *rd, size_t i,
                        want_fn want, const void *arg, const char *what)
{
  const void *p = pg_reducer_grad(rd, i);
  size_t j;
  double got, w;

  for (j = 0; j < model[i].numel; j++) {
    got = load(p, model[i].dtype, j);
    w = want(c, i, j, arg);
    if (!close_enough(got, w, model[i].dtype)) {
      CHECK(c, 0, "%s: parameter %zu element %zu is %g, expected %g", what,
            i, j, got, w);
      return false;
    }
  }
  c->checks++;
  return true;
}

/* The mean over ranks of iteration *it's gradients. */
static double want_mean(const struct ctx *c, size_t i, size_t j,
                        const void *arg)
{
  int it = *(const int *)arg, r;
  double s = 0;

  for (r = 0; r < c->world; r++)
    s += grad_value(r, i, j, it);
  return s / c->world;
}

static double want_local(const struct ctx *c, size_t i, size_t j,
                         const void *arg)
{
  return grad_value(c->rank, i, j, *(const int *)arg);
}

static pg_reducer *create(struct ctx *c, bool caps_from_env)
{
  struct pg_reducer_options o = PG_REDUCER_OPTIONS_INIT;
  pg_reducer *rd;

  if (!caps_from_env) {
    o.bucket_cap = CAP;
    o.first_bucket_cap = FIRST_CAP;
  }
  TRY(c, pg_reducer_create(c->g, model, NPARAMS, &o, &rd));
  return rd;
}

/* The layout pg_bucket_assign gives for order (NULL: the initial one). */
static void check_layout(struct ctx *c, pg_reducer *rd, const size_t *order,
                         const char *what)
{
  size_t want[NPARAMS], nb, i;

  TRY(c, pg_bucket_assign(model, NPARAMS, order, FIRST_CAP, CAP, want,
                          &nb));
  CHECK(c, pg_reducer_num_buckets(rd) == nb, "%s: %zu buckets, expected "
        "%zu", what, pg_reducer_num_buckets(rd), nb);
  for (i = 0; i < NPARAMS; i++)
    CHECK(c, pg_reducer_bucket_of(rd, i) == want[i], "%s: parameter %zu "
          "in bucket %zu, expected %zu", what, i,
          pg_reducer_bucket_of(rd, i), want[i]);
}

/* ---- average ------------------------------------------------------------ */

/* Rank 0 marks in a scrambled order in the first iteration (that order
 * becomes everybody's layout); the others mark in other orders. */
static void mark_order(int rank, int it, size_t *order)
{
  size_t k;

  for (k = 0; k < NPARAMS; k++) {
    if (rank == 0 && it == 0)
      order[k] = (k * 7 + 3) % NPARAMS;
    else if (rank % 2)
      order[k] = NPARAMS - 1 - (k ^ 1);      /* reverse, pairs swapped */
    else
      order[k] = (k * 3 + (size_t)rank + (size_t)it) % NPARAMS;
  }
}

struct marker {
  struct ctx *c;
  pg_reducer *rd;
  const size_t *order;
  int it;
  int err;
};

static void *mark_thread(void *arg)
{
  struct marker *m = arg;
  size_t k;

  for (k = 0; k < NPARAMS && !m->err; k++) {
    write_grad(m->rd, m->order[k], m->c->rank, m->it, false);
    m->err = pg_reducer_mark_ready(m->rd, m->order[k]);
  }
  return NULL;
}

static int mode_average(struct ctx *c)
{
  pg_reducer *rd = create(c, true);
  size_t order[NPARAMS], order0[NPARAMS], initial[NPARAMS], i, k;
  size_t changed = 0;
  int it, prev;

  check_layout(c, rd, NULL, "initial layout");
  CHECK(c, pg_reducer_num_buckets(rd) >= 6, "only %zu buckets",
        pg_reducer_num_buckets(rd));
  for (i = 0; i < NPARAMS; i++)
    initial[i] = pg_reducer_bucket_of(rd, i);
  mark_order(0, 0, order0);
  for (it = 0; it < 3; it++) {
    TRY(c, pg_reducer_prepare(rd, true));
    if (it == 1) {
      /* Rebuilt in rank 0's first order, gradients carried over. */
      check_layout(c, rd, order0, "rebuilt layout");
      for (i = 0; i < NPARAMS; i++)
        changed += pg_reducer_bucket_of(rd, i) != initial[i];
      CHECK(c, changed > 0, "the rebuild changed no bucket");
      prev = 0;
      for (i = 0; i < NPARAMS; i++)
        check_param(c, rd, i, want_mean, &prev, "carried over a rebuild");
    }
    mark_order(c->rank, it, order);
    if (it == 2) {
      /* From another thread than prepare/finish. */
      struct marker m = { c, rd, order, it, 0 };
      pthread_t th;

      CHECK(c, pthread_create(&th, NULL, mark_thread, &m) == 0,
            "pthread_create");
      pthread_join(th, NULL);
      CHECK(c, m.err == 0, "mark_ready on a thread: %s", pg_strerror(m.err));
    } else {
      for (k = 0; k < NPARAMS; k++) {
        write_grad(rd, order[k], c->rank, it, false);
        TRY(c, pg_reducer_mark_ready(rd, order[k]));
        if (k == 4) {
          CHECK(c, pg_reducer_mark_ready(rd, order[2]) == -EALREADY,
                "marking twice is not -EALREADY");
          CHECK(c, pg_reducer_mark_ready(rd, NPARAMS) == -EINVAL,
                "marking parameter %d is not -EINVAL", NPARAMS);
        }
      }
    }
    TRY(c, pg_reducer_finish(rd));
    for (i = 0; i < NPARAMS; i++)
      check_param(c, rd, i, want_mean, &it, "average");
  }
  TRY(c, pg_reducer_zero_grad(rd));
  for (i = 0; i < NPARAMS; i++)
    for (k = 0; k < model[i].numel; k++)
      if (load(pg_reducer_grad(rd, i), model[i].dtype, k) != 0) {
        CHECK(c, 0, "zero_grad left parameter %zu element %zu", i, k);
        break;
      }
  pg_reducer_destroy(rd);
  return 0;
}

/* ---- nosync -------------------------------------------------------------- */

/* The sum of this rank's gradients of iterations 0..upto, or the mean
 * over ranks of such sums. */
struct acc {
  int upto;
  bool mean;
};

static double want_acc(const struct ctx *c, size_t i, size_t j,
                       const void *arg)
{
  const struct acc *a = arg;
  double s = 0;
  int r, it;

  for (r = 0; r < c->world; r++) {
    if (!a->mean && r != c->rank)
      continue;
    for (it = 0; it <= a->upto; it++)
      s += grad_value(r, i, j, it);
  }
  return a->mean ? s / c->world : s;
}

static int mode_nosync(struct ctx *c)
{
  pg_reducer *rd = create(c, false);
  struct acc a;
  size_t i;
  int it;

  for (i = 0; i < NPARAMS; i++)
    for (size_t j = 0; j < model[i].numel; j++)
      if (load(pg_reducer_grad(rd, i), model[i].dtype, j) != 0) {
        CHECK(c, 0, "new gradient %zu not zero", i);
        break;
      }
  for (it = 0; it < 3; it++) {
    TRY(c, pg_reducer_prepare(rd, it == 2));
    for (i = NPARAMS; i-- > 0;) {
      write_grad(rd, i, c->rank, it, true);
      TRY(c, pg_reducer_mark_ready(rd, i));
    }
    TRY(c, pg_reducer_finish(rd));
    a.upto = it;
    a.mean = it == 2;
    for (i = 0; i < NPARAMS; i++)
      check_param(c, rd, i, want_acc, &a,
                  it == 2 ? "synced accumulation" : "local accumulation");
  }
  /* The next prepare rebuilds (the synced iteration recorded an order)
   * and keeps the gradients. */
  TRY(c, pg_reducer_prepare(rd, false));
  for (i = 0; i < NPARAMS; i++)
    check_param(c, rd, i, want_acc, &a, "accumulation after rebuild");
  TRY(c, pg_reducer_finish(rd));
  pg_reducer_destroy(rd);
  return 0;
}

/* ---- unused ------------------------------------------------------------ */

static bool is_used(int rank, size_t i)
{
  if (i == 5)
    return false;                     /* unused everywhere */
  if (i == 3)
    return rank % 2 == 0;             /* unused on odd ranks */
  if (i == 19)
    return rank != 0;                 /* all of a bucket, on rank 0 */
  return true;
}

static double want_used_mean(const struct ctx *c, size_t i, size_t j,
                             const void *arg)
{
  int it = *(const int *)arg, r;
  double s = 0;

  for (r = 0; r < c->world; r++)
    if (is_used(r, i))
      s += grad_value(r, i, j, it);
  return s / c->world;
}

static int mode_unused(struct ctx *c)
{
  pg_reducer *rd = create(c, false);
  size_t i, j;
  int it;

  for (it = 0; it < 3; it++) {
    TRY(c, pg_reducer_prepare(rd, true));
    for (i = NPARAMS; i-- > 0;) {
      if (is_used(c->rank, i)) {
        write_grad(rd, i, c->rank, it, false);
        TRY(c, pg_reducer_mark_ready(rd, i));
      } else {
        /* Stale data that must not leak into the average. */
        for (j = 0; j < model[i].numel; j++)
          store(pg_reducer_grad(rd, i), model[i].dtype, j, 999);
      }
    }
    TRY(c, pg_reducer_finish(rd));
    for (i = 0; i < NPARAMS; i++)
      check_param(c, rd, i, want_used_mean, &it, "unused");
  }
  pg_reducer_destroy(rd);
  return 0;
}

/* ---- nosync_unused --------------------------------------------------------
 * A gradient accumulated under no_sync for a parameter that the last
 * (synchronized) micro-batch does not use is kept and averaged, as DDP
 * keeps a defined .grad. */

static bool used_in_last(int rank, size_t i)
{
  if (i == 4 || i == 12)
    return false;                     /* on every rank */
  if (i == 9)
    return rank % 2 == 0;             /* on odd ranks */
  return true;
}

static double want_nosync_unused(const struct ctx *c, size_t i, size_t j,
                                 const void *arg)
{
  double s = 0;
  int r;

  (void)arg;
  for (r = 0; r < c->world; r++)
    s += grad_value(r, i, j, 0) +
         (used_in_last(r, i) ? grad_value(r, i, j, 1) : 0);
  return s / c->world;
}

static int mode_nosync_unused(struct ctx *c)
{
  pg_reducer *rd = create(c, false);
  size_t i;

  TRY(c, pg_reducer_prepare(rd, false));
  for (i = NPARAMS; i-- > 0;) {
    write_grad(rd, i, c->rank, 0, true);
    TRY(c, pg_reducer_mark_ready(rd, i));
  }
  TRY(c, pg_reducer_finish(rd));
  TRY(c, pg_reducer_prepare(rd, true));
  for (i = NPARAMS; i-- > 0;) {
    if (!used_in_last(c->rank, i))
      continue;
    write_grad(rd, i, c->rank, 1, true);
    TRY(c, pg_reducer_mark_ready(rd, i));
  }
  TRY(c, pg_reducer_finish(rd));
  for (i = 0; i < NPARAMS; i++)
    check_param(c, rd, i, want_nosync_unused, NULL, "accumulated, unused "
                "in the last micro-batch");
  pg_reducer_destroy(rd);
  return 0;
}

/* ---- mismatch ------------------------------------------------------------ */

static void expect_mismatch(struct ctx *c, const struct pg_param_spec *p,
                            size_t n, const char *needle)
{
  struct pg_reducer_options o = { CAP, FIRST_CAP, false };
  pg_reducer *rd = NULL;
  int err = pg_reducer_create(c->g, p, n, &o, &rd);

  if (c->world == 1) {
    CHECK(c, err == 0, "create on one rank: %s", pg_strerror(err));
    pg_reducer_destroy(rd);
    return;
  }
  fprintf(stderr, "reducertest mismatch: rank %d: error: %s: %s\n",
          c->rank, pg_err_name(err), pg_last_error());
  CHECK(c, err == -EINVAL, "create returned %d, expected -EINVAL", err);
  CHECK(c, rd == NULL, "a failed create returned a reducer");
  CHECK(c, strstr(pg_last_error(), needle) != NULL,
        "message '%s' does not contain '%s'", pg_last_error(), needle);
}

static int mode_mismatch(struct ctx *c)
{
  struct pg_param_spec p[NPARAMS];
  struct pg_reducer_options o = { CAP, FIRST_CAP, false };
  pg_reducer *rd;
  char needle[128];
  int it = 0;

  /* A different count on the last rank. */
  memcpy(p, model, sizeof p);
  snprintf(needle, sizeof needle, "rank %d has %d parameters, rank 0 has "
           "%d", c->world - 1, NPARAMS - 1, NPARAMS);
  expect_mismatch(c, p, c->rank == c->world - 1 && c->world > 1
                  ? NPARAMS - 1 : NPARAMS, needle);

  /* A different size of parameter 3 on rank 1, and of parameter 7 on
   * the last rank: the first difference is named. */
  if (c->rank == 1)
    p[3].numel++;
  if (c->rank == c->world - 1 && c->rank > 0)
    p[7].dtype = PG_F64;
  expect_mismatch(c, p, NPARAMS, "parameter 3: rank 1 has 301 x f64, "
                  "rank 0 has 300 x f64");

  /* Different caps. */
  if (c->world > 1) {
    o.bucket_cap = c->rank == c->world - 1 ? CAP * 2 : CAP;
    CHECK(c, pg_reducer_create(c->g, model, NPARAMS, &o, &rd) == -EINVAL,
          "different caps not refused");
    CHECK(c, strstr(pg_last_error(), "bucket caps") != NULL,
          "caps message: %s", pg_last_error());
  }

  /* The group is still in step: a good reducer works. */
  rd = create(c, false);
  TRY(c, pg_reducer_prepare(rd, true));
  for (size_t i = 0; i < NPARAMS; i++) {
    write_grad(rd, i, c->rank, 0, false);
    TRY(c, pg_reducer_mark_ready(rd, i));
  }
  TRY(c, pg_reducer_finish(rd));
  for (size_t i = 0; i < NPARAMS; i++)
    check_param(c, rd, i, want_mean, &it, "after the mismatches");
  pg_reducer_destroy(rd);
  return 0;
}

/* ---- overlap ------------------------------------------------------------ */

static bool param_is(const struct ctx *c, pg_reducer *rd, size_t i,
                     want_fn want, int it)
{
  const void *p = pg_reducer_grad(rd, i);
  size_t j;

  for (j = 0; j < model[i].numel; j++)
    if (!close_enough(load(p, model[i].dtype, j), want(c, i, j, &it),
                      model[i].dtype))
      return false;
  return true;
}

static int mode_overlap(struct ctx *c)
{
  pg_reducer *rd = create(c, false);
  struct timespec ms10 = { 0, 10 * 1000 * 1000 };
  bool in0[NPARAMS], done = false;
  size_t i, nb0 = 0, nb1 = 0;
  int it = 0, tries;

  TRY(c, pg_reducer_prepare(rd, true));
  for (i = 0; i < NPARAMS; i++) {
    in0[i] = pg_reducer_bucket_of(rd, i) == 0;
    nb0 += in0[i] && model[i].numel;
    nb1 += pg_reducer_bucket_of(rd, i) == 1;
  }
  CHECK(c, nb0 > 0 && nb1 > 0, "bucket 0 or 1 is empty");
  for (i = 0; i < NPARAMS; i++) {
    write_grad(rd, i, c->rank, it, false);
    if (in0[i])
      TRY(c, pg_reducer_mark_ready(rd, i));
  }
  /* Bucket 0 is full: its all-reduce runs in the background, so its data
   * turn into the averages while nothing else is called. */
  for (tries = 0; tries < 3000 && !done; tries++) {
    done = true;
    for (i = 0; i < NPARAMS && done; i++)
      if (in0[i])
        done = param_is(c, rd, i, want_mean, it);
    if (!done)
      nanosleep(&ms10, NULL);
  }
  CHECK(c, done, "bucket 0 was not reduced before finish (30 s)");
  /* The others are not full: untouched. */
  for (i = 0; i < NPARAMS; i++)
    if (!in0[i])
      CHECK(c, param_is(c, rd, i, want_local, it), "parameter %zu (bucket "
            "%zu) changed before it was marked", i,
            pg_reducer_bucket_of(rd, i));
  for (i = 0; i < NPARAMS; i++)
    if (!in0[i])
      TRY(c, pg_reducer_mark_ready(rd, i));
  TRY(c, pg_reducer_finish(rd));
  for (i = 0; i < NPARAMS; i++)
    check_param(c, rd, i, want_mean, &it, "overlap");
  pg_reducer_destroy(rd);
  return 0;
}

int main(int argc, char **argv)
{
  struct ctx c = { NULL, 0, 1, argc > 1 ? argv[1] : "", 0, 0 };
  int rc = 2, err;

  err = pg_init(NULL, &c.g);
  if (err) {
    fprintf(stderr, "reducertest: pg_init: %s: %s\n", pg_strerror(err),
            pg_last_error());
    return 1;
  }
  c.rank = pg_rank(c.g);
  c.world = pg_size(c.g);
  fprintf(stderr, "reducertest %s: rank %d of %d on %s\n", c.mode, c.rank,
          c.world, pg_backend_name(c.g));
  if (strcmp(c.mode, "average") == 0)
    rc = mode_average(&c);
  else if (strcmp(c.mode, "nosync") == 0)
    rc = mode_nosync(&c);
  else if (strcmp(c.mode, "nosync_unused") == 0)
    rc = mode_nosync_unused(&c);
  else if (strcmp(c.mode, "unused") == 0)
    rc = mode_unused(&c);
  else if (strcmp(c.mode, "mismatch") == 0)
    rc = mode_mismatch(&c);
  else if (strcmp(c.mode, "overlap") == 0)
    rc = mode_overlap(&c);
  else
    fprintf(stderr, "reducertest: unknown mode '%s'\n", c.mode);
  if (rc == 0 && c.failures)
    rc = 1;
  fprintf(stderr, "reducertest %s: rank %d: %ld checks, %ld failed\n",
          c.mode, c.rank, c.checks, c.failures);
  pg_destroy(c.g);
  return rc;
}
