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
 *    size now is.
 *
 * Rank 0 prints one line per epoch; "step_ms=" (the mean step time after
 * warm-up, the slowest rank's) and "wait_ms=" (the mean time spent after
 * the backward pass waiting for the gradients' all-reduce, the least of
 * any rank); and a final line with a checksum of the parameters
 * ("params: sum=... abs=... l2=...") that the tests compare.
 * Exit status: 0, 1 on a runtime error (libpg, I/O, corrupt checkpoint),
 * 2 on bad flags or a checkpoint written for other flags. */
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

#define NIN 64           /* features */
#define NCLS 10          /* classes */
#define NSUB 4           /* clusters per class: not linearly separable */
#define SEPARATION 1.0   /* cluster centres ~ N(0, SEPARATION^2) per dim */
#define NOISE 1.75       /* samples ~ centre + N(0, NOISE^2) per dim */
#define NTEST 10000
#define MAX_LAYERS 16    /* --layers: hidden layers */
#define MAX_W (MAX_LAYERS + 1)   /* weight layers */
#define MAX_P (2 * MAX_W)        /* parameters: W1 b1 W2 b2 ... */
#define WARMUP 5         /* steps left out of step_ms */
#define BLOCK 16         /* see Note [vectorizing] */

enum { OPT_SGD, OPT_ADAM };

struct opts {
  long epochs, global_batch, hidden, layers, samples, ckpt_every, steps;
  long die_at_step, die_rank;
  long log_steps;          /* --log-steps: rank 0 prints "step N" */
  const char *params_out;  /* --params-out: the final parameters' bytes */
  double lr, momentum;
  int optimizer;
  uint64_t seed;
  const char *ckpt_dir;
  bool no_reducer, no_overlap, no_comm, device_compute;
  double backward_ms[MAX_W];   /* --backward-ms; 0: measure */
  int nbackward_ms;
};

static int rank_g = -1;   /* for messages */

static void err_msg(const char *what, const char *detail)
{
  if (rank_g >= 0)
    fprintf(stderr, "train_mlp: rank %d: %s%s%s\n", rank_g, what,
            *detail ? ": " : "", detail);
  else
    fprintf(stderr, "train_mlp: %s%s%s\n", what, *detail ? ": " : "",
            detail);
}

static void pg_fail(const char *what, int err)
{
  char buf[512];

  snprintf(buf, sizeof buf, "%s (%s)", pg_last_error(), pg_err_name(err));
  err_msg(what, *pg_last_error() ? buf : pg_strerror(err));
}

static double now_s(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *xcalloc(size_t n, size_t size)
{
  void *p = calloc(n ? n : 1, size);

  if (!p) {
    err_msg("out of memory", "");
    exit(1);
  }
  return p;
}

/* ---- flags ------------------------------------------------------------- */

static void usage(FILE *f)
{
  fputs(
"usage: train_mlp [flags]   (run it under cdrun; alone it is one worker)\n"
"  --epochs N         passes over the training set (15)\n"
"  --global-batch N   rows per step over all ranks; WORLD_SIZE must\n"
"                     divide it (256)\n"
"  --lr X             learning rate (sgd 0.05, adam 0.001)\n"
"  --optimizer O      sgd (momentum 0.9) or adam (sgd)\n"
"  --ckpt-every K     checkpoint every K steps, 0: never (50)\n"
"  --ckpt-dir DIR     where latest.ckpt lives (./ckpt)\n"
"  --seed N           data, initial weights and sampler (1)\n"
"  --hidden N         width of the hidden layers (512)\n"
"  --layers N         hidden layers, 1 to 16 (2: 64-512-512-10)\n"
"  --samples N        training rows (60000)\n"
"  --steps N          stop once N steps in all are done (benchmarks)\n"
"  --no-reducer       all-reduce each gradient after the backward pass\n"
"  --no-overlap       the reducer, but every gradient marked ready after\n"
"                     the backward pass: its buckets, none hidden\n"
"  --no-comm          no communication in the steps (benchmarks)\n"
"  --device-compute   benchmarks: after the warm-up steps each stage of\n"
"                     the backward pass sleeps as long as it took on the\n"
"                     CPU (as a GPU's kernels leave the CPU free); the\n"
"                     gradients then stop being computed\n"
"  --backward-ms A,B,..  with --device-compute: the backward stages'\n"
"                     times (ms; one per layer, last layer first) from\n"
"                     the first step on, not measured\n"
"  --die-at-step S    SIGKILL one worker at step S, first attempt only\n"
"  --die-rank R       the worker that dies (0)\n"
"  --log-steps K      rank 0 prints \"step N\" every K steps done (0: no)\n"
"  --params-out FILE  rank 0 writes the final parameters there (raw\n"
"                     little-endian f32, forward order), for bitwise checks\n",
        f);
}

static int usage_error(const char *fmt, ...)
  __attribute__((format(printf, 1, 2)));

/* One line, "train_mlp: ... (see --help)"; returns -1. */
static int usage_error(const char *fmt, ...)
{
  va_list ap;

  fputs("train_mlp: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs(" (see --help)\n", stderr);
  return -1;
}

static int bad_value(const char *flag, const char *v, const char *want)
{
  return usage_error("%s: '%s' is not %s", flag, v, want);
}

static int parse_long(const char *flag, const char *v, long lo, long hi,
                      long *out)
{
  char *end, want[96];
  long x;

  errno = 0;
  x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) {
    snprintf(want, sizeof want, "an integer in %ld..%ld", lo, hi);
    return bad_value(flag, v, want);
  }
  *out = x;
  return 0;
}

static int parse_pos_double(const char *flag, const char *v, double *out)
{
  char *end;
  double x;

  errno = 0;
  x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x) || x <= 0)
    return bad_value(flag, v, "a positive number");
  *out = x;
  return 0;
}

static int parse_u64(const char *flag, const char *v, uint64_t *out)
{
  char *end;
  unsigned long long x;

  errno = 0;
  x = strtoull(v, &end, 10);
  if (errno || end == v || *end || *v == '-')
    return bad_value(flag, v, "an unsigned integer");
  *out = x;
  return 0;
}

/* Returns 0, 1 for --help, -1 on a bad flag (already reported). */
static int parse_flags(int argc, char **argv, struct opts *o)
{
  static const char *const takes_value[] = {
    "epochs", "global-batch", "lr", "optimizer", "ckpt-every", "ckpt-dir",
    "seed", "hidden", "samples", "steps", "die-at-step", "die-rank",
    "backward-ms", "layers", "log-steps", "params-out",
  };
  int i;
  size_t k;

  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *eq, *v = NULL;
    char name[32];
    size_t len;
    bool valued = false;
    int rc = 0;

    if (strncmp(a, "--", 2) != 0)
      return usage_error("unexpected argument '%s'", a);
    a += 2;
    eq = strchr(a, '=');
    len = eq ? (size_t)(eq - a) : strlen(a);
    if (len >= sizeof name)
      return usage_error("unknown flag %s", argv[i]);
    memcpy(name, a, len);
    name[len] = '\0';
    for (k = 0; k < sizeof takes_value / sizeof *takes_value; k++)
      valued |= strcmp(name, takes_value[k]) == 0;
    if (valued) {
      if (eq)
        v = eq + 1;
      else if (i + 1 < argc)
        v = argv[++i];
      else
        return usage_error("--%s needs a value", name);
    } else if (eq) {
      return usage_error("--%s takes no value", name);
    }
    if (!strcmp(name, "help")) {
      usage(stdout);
      return 1;
    } else if (!strcmp(name, "no-reducer")) {
      o->no_reducer = true;
    } else if (!strcmp(name, "no-overlap")) {
      o->no_overlap = true;
    } else if (!strcmp(name, "no-comm")) {
      o->no_comm = true;
    } else if (!strcmp(name, "device-compute")) {
      o->device_compute = true;
    } else if (!strcmp(name, "backward-ms")) {
      char *end;
      const char *q = v;

      o->nbackward_ms = 0;
      for (k = 0; k < MAX_W && rc == 0; k++) {
        errno = 0;
        o->backward_ms[k] = strtod(q, &end);
        if (errno || end == q || !(o->backward_ms[k] > 0) ||
            o->backward_ms[k] > 1e6 || (*end != ',' && *end != '\0') ||
            (*end == ',' && k == MAX_W - 1))
          rc = bad_value("--backward-ms", v, "times in ms, A,B,..., one "
                         "per backward stage");
        o->nbackward_ms = (int)k + 1;
        if (*end == '\0')
          break;
        q = end + 1;
      }
    } else if (!strcmp(name, "epochs")) {
      rc = parse_long("--epochs", v, 1, 1000000, &o->epochs);
    } else if (!strcmp(name, "global-batch")) {
      rc = parse_long("--global-batch", v, 1, 1 << 20, &o->global_batch);
    } else if (!strcmp(name, "lr")) {
      rc = parse_pos_double("--lr", v, &o->lr);
    } else if (!strcmp(name, "optimizer")) {
      if (!strcmp(v, "sgd"))
        o->optimizer = OPT_SGD;
      else if (!strcmp(v, "adam"))
        o->optimizer = OPT_ADAM;
      else
        rc = bad_value("--optimizer", v, "sgd or adam");
    } else if (!strcmp(name, "ckpt-every")) {
      rc = parse_long("--ckpt-every", v, 0, LONG_MAX, &o->ckpt_every);
    } else if (!strcmp(name, "ckpt-dir")) {
      o->ckpt_dir = v;
      if (!*v)
        rc = bad_value("--ckpt-dir", v, "a directory");
    } else if (!strcmp(name, "seed")) {
      rc = parse_u64("--seed", v, &o->seed);
    } else if (!strcmp(name, "hidden")) {
      rc = parse_long("--hidden", v, 1, 16384, &o->hidden);
    } else if (!strcmp(name, "layers")) {
      rc = parse_long("--layers", v, 1, MAX_LAYERS, &o->layers);
    } else if (!strcmp(name, "samples")) {
      rc = parse_long("--samples", v, 1, 10000000, &o->samples);
    } else if (!strcmp(name, "steps")) {
      rc = parse_long("--steps", v, 1, LONG_MAX, &o->steps);
    } else if (!strcmp(name, "die-at-step")) {
      rc = parse_long("--die-at-step", v, 0, LONG_MAX, &o->die_at_step);
    } else if (!strcmp(name, "die-rank")) {
      rc = parse_long("--die-rank", v, 0, 1 << 20, &o->die_rank);
    } else if (!strcmp(name, "log-steps")) {
      rc = parse_long("--log-steps", v, 0, LONG_MAX, &o->log_steps);
    } else if (!strcmp(name, "params-out")) {
      o->params_out = v;
      if (!*v)
        rc = bad_value("--params-out", v, "a file name");
    } else {
      return usage_error("unknown flag %s", argv[i]);
    }
    if (rc)
      return -1;
  }
  if (o->samples < o->global_batch)
    return usage_error("--samples %ld is less than one --global-batch "
                       "(%ld)", o->samples, o->global_batch);
  if (o->backward_ms[0] > 0 && !o->device_compute)
    return usage_error("--backward-ms needs --device-compute");
  if (o->nbackward_ms && o->nbackward_ms != o->layers + 1)
    return usage_error("--backward-ms has %d times; --layers %ld has %ld "
                       "backward stages", o->nbackward_ms, o->layers,
                       o->layers + 1);
  if (o->no_reducer + o->no_comm + o->no_overlap > 1)
    return usage_error("--no-reducer, --no-overlap and --no-comm: pick one");
  if (o->lr == 0)
    o->lr = o->optimizer == OPT_ADAM ? 0.001 : 0.05;
  return 0;
}

/* ---- random numbers and data --------------------------------------------
 * splitmix64: tiny, fast and good enough; every stream is a pure function
 * of (seed, purpose), so every rank and every restart sees the same
 * numbers. */

static uint64_t mix64(uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t stream(uint64_t seed, uint64_t purpose, uint64_t index)
{
  uint64_t s = seed ^ (purpose * 0x632be59bd9b4e019ULL);

  s = mix64(&s) ^ index;
  return mix64(&s);
}

/* Two N(0, 1) numbers (Box-Muller; u1 in (0, 1] keeps log finite). */
static void normal2(uint64_t *s, double *a, double *b)
{
  double u1 = (double)((mix64(s) >> 11) + 1) * 0x1p-53;
  double u2 = (double)(mix64(s) >> 11) * 0x1p-53;
  double r = sqrt(-2.0 * log(u1));

  *a = r * cos(2.0 * M_PI * u2);
  *b = r * sin(2.0 * M_PI * u2);
}

static void fill_normal(uint64_t *s, float *x, size_t n, double scale)
{
  double a, b;
  size_t i;

  for (i = 0; i < n; i += 2) {
    normal2(s, &a, &b);
    x[i] = (float)(a * scale);
    if (i + 1 < n)
      x[i + 1] = (float)(b * scale);
  }
}

struct dataset {
  size_t n;
  float *x;          /* [n][NIN] */
  unsigned char *y;  /* [n] */
};

/* n rows drawn around the centres: class and cluster uniform. */
static void make_rows(struct dataset *d, size_t n, const float *centres,
                      uint64_t s)
{
  size_t i, j;

  d->n = n;
  d->x = xcalloc(n * NIN, sizeof *d->x);
  d->y = xcalloc(n, 1);
  for (i = 0; i < n; i++) {
    uint64_t r = mix64(&s);
    unsigned c = (unsigned)(r % NCLS), k = (unsigned)(r / NCLS % NSUB);
    const float *mu = centres + ((size_t)c * NSUB + k) * NIN;
    float *x = d->x + i * NIN;

    d->y[i] = (unsigned char)c;
    fill_normal(&s, x, NIN, NOISE);
    for (j = 0; j < NIN; j++)
      x[j] += mu[j];
  }
}

static void make_data(uint64_t seed, size_t n, struct dataset *train,
                      struct dataset *test)
{
  float centres[NCLS * NSUB * NIN];
  uint64_t s = stream(seed, 1, 0);

  fill_normal(&s, centres, sizeof centres / sizeof *centres, SEPARATION);
  make_rows(train, n, centres, stream(seed, 2, 0));
  make_rows(test, NTEST, centres, stream(seed, 3, 0));
}

/* The epoch's permutation of 0..n-1 (Fisher-Yates), the same on every
 * rank. */
static void permute(uint32_t *perm, size_t n, uint64_t seed, long epoch)
{
  uint64_t s = stream(seed, 4, (uint64_t)epoch);
  size_t i, j;
  uint32_t t;

  for (i = 0; i < n; i++)
    perm[i] = (uint32_t)i;
  for (i = n - 1; i > 0; i--) {
    j = (size_t)(mix64(&s) % (i + 1));
    t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

/* ---- kernels ---------------------------------------------------------------
 * Note [vectorizing]: gcc 12 at -O2 vectorizes only loops whose vector
 * code replaces the scalar loop entirely, so the kernels run an inner
 * loop of constant trip count BLOCK over restrict pointers and finish the
 * rest with a scalar loop (as libpg/reduce.c does).
 *
 * Note [determinism]: every output element is accumulated in one fixed
 * order (inputs ascending), whatever the blocking, so the results are the
 * same bits on every run with the same world size; that is what lets a
 * run killed and resumed from a checkpoint end bitwise equal to an
 * uninterrupted one.  Terms with a zero coefficient (ReLU's zeros, about
 * half) are skipped: adding 0 * w leaves the sum as it is. */

/* y += a0 x0 + a1 x1 + a2 x2 + a3 x3, added in that order. */
static void axpy4(size_t n, float *restrict y, float a0,
                  const float *restrict x0, float a1,
                  const float *restrict x1, float a2,
                  const float *restrict x2, float a3,
                  const float *restrict x3)
{
  size_t i = 0, k;

  for (; i + BLOCK <= n; i += BLOCK)
    for (k = 0; k < BLOCK; k++) {
      float t = y[i + k];

      t += a0 * x0[i + k];
      t += a1 * x1[i + k];
      t += a2 * x2[i + k];
      t += a3 * x3[i + k];
      y[i + k] = t;
    }
  for (; i < n; i++) {
    float t = y[i];

    t += a0 * x0[i];
    t += a1 * x1[i];
    t += a2 * x2[i];
    t += a3 * x3[i];
    y[i] = t;
  }
}

static void axpy1(size_t n, float *restrict y, float a,
                  const float *restrict x)
{
  size_t i = 0, k;

  for (; i + BLOCK <= n; i += BLOCK)
    for (k = 0; k < BLOCK; k++)
      y[i + k] += a * x[i + k];
  for (; i < n; i++)
    y[i] += a * x[i];
}

/* Gathered terms of one output row: coefficients and input rows. */
struct terms {
  size_t m;
  float *a;
  const float **x;
};

/* y += sum of the terms, in order. */
static void apply(size_t n, float *y, const struct terms *t)
{
  size_t k = 0;

  for (; k + 4 <= t->m; k += 4)
    axpy4(n, y, t->a[k], t->x[k], t->a[k + 1], t->x[k + 1], t->a[k + 2],
          t->x[k + 2], t->a[k + 3], t->x[k + 3]);
  for (; k < t->m; k++)
    axpy1(n, y, t->a[k], t->x[k]);
}

static void add_term(struct terms *t, float a, const float *x)
{
  if (a != 0.0f) {
    t->a[t->m] = a;
    t->x[t->m++] = x;
  }
}

/* out[r] = b + sum_i in[r][i] W[i] for each row; W is [ni][no]: stored
 * input-major so that the inner loop runs along contiguous outputs. */
static void layer_fwd(size_t rows, size_t ni, size_t no, const float *in,
                      const float *W, const float *b, float *out,
                      struct terms *t)
{
  size_t r, i;

  for (r = 0; r < rows; r++) {
    float *o = out + r * no;

    memcpy(o, b, no * sizeof *o);
    t->m = 0;
    for (i = 0; i < ni; i++)
      add_term(t, in[r * ni + i], W + i * no);
    apply(no, o, t);
  }
}

static void relu(float *x, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* gW[i] += sum_r in[r][i] d[r]; gb += sum_r d[r] (rows ascending). */
static void layer_wgrad(size_t rows, size_t ni, size_t no, const float *in,
                        const float *d, float *gW, float *gb,
                        struct terms *t)
{
  size_t r, i;

  for (i = 0; i < ni; i++) {
    t->m = 0;
    for (r = 0; r < rows; r++)
      add_term(t, in[r * ni + i], d + r * no);
    apply(no, gW + i * no, t);
  }
  t->m = 0;
  for (r = 0; r < rows; r++) {
    t->a[t->m] = 1.0f;
    t->x[t->m++] = d + r * no;
  }
  apply(no, gb, t);
}

/* din[r] = (sum_o d[r][o] WT[o]) where act[r] > 0, else 0 (ReLU's
 * derivative); WT is W transposed, [no][ni]. */
static void layer_dgrad(size_t rows, size_t ni, size_t no, const float *d,
                        const float *WT, const float *act, float *din,
                        struct terms *t)
{
  size_t r, o, i;

  for (r = 0; r < rows; r++) {
    float *y = din + r * ni;

    memset(y, 0, ni * sizeof *y);
    t->m = 0;
    for (o = 0; o < no; o++)
      add_term(t, d[r * no + o], WT + o * ni);
    apply(ni, y, t);
    for (i = 0; i < ni; i++)
      y[i] = act[r * ni + i] > 0.0f ? y[i] : 0.0f;
  }
}

/* at = a transposed; a is [rows][cols].  In 16 x 16 tiles: a naive loop
 * writes with a stride of a whole row and misses the cache on every
 * store. */
static void transpose(size_t rows, size_t cols, const float *a, float *at)
{
  size_t r0, c0, r, c, rn, cn;

  for (r0 = 0; r0 < rows; r0 += 16)
    for (c0 = 0; c0 < cols; c0 += 16) {
      rn = rows - r0 < 16 ? rows - r0 : 16;
      cn = cols - c0 < 16 ? cols - c0 : 16;
      for (r = r0; r < r0 + rn; r++)
        for (c = c0; c < c0 + cn; c++)
          at[c * rows + r] = a[r * cols + c];
    }
}

/* ---- the model ----------------------------------------------------------- */

struct net {
  size_t hid;
  int nw;                /* weight layers: hidden layers + 1 */
  size_t np;             /* parameters: 2 nw */
  size_t dim[MAX_W + 1]; /* layer widths: NIN, hid..., NCLS */
  size_t numel[MAX_P];
  size_t total;
  float *w;              /* every parameter, forward order */
  float *p[MAX_P];       /* into w: W1 b1 W2 b2 ... */
  float *opt1, *opt2;    /* optimizer state: momentum, or Adam's m and v */
  float *own_grad;       /* --no-reducer / --no-comm: gradients here */
  float *g[MAX_P];       /* where gradient i is written this step */
  float *wt[MAX_W];      /* wt[l]: W(l+1) transposed (l >= 1), backward */
  /* Activations for up to cap rows. */
  size_t cap;
  uint32_t *idx;         /* dataset rows of x */
  float *x;              /* the input, act[0] */
  float *act[MAX_W];     /* act[l]: layer l's input (hidden l after ReLU) */
  float *del[MAX_W];     /* del[l]: dloss / d act[l], l >= 1 */
  float *z, *dz;         /* logits and dloss / dlogits */
  struct terms t;
  /* --device-compute: each backward stage's mean CPU time over the warm-up
   * steps, then slept instead of computed; backward time of timed steps. */
  bool device;
  long real_steps;
  double stage_s[MAX_W], given_s[MAX_W], bw_s;
  double due_s;          /* device mode: the current stage's end */
  long bw_steps;
};

/* layers hidden layers of hid units: layer l maps dim[l] to dim[l + 1]. */
static void net_init(struct net *n, size_t hid, int layers, size_t cap,
                     uint64_t seed)
{
  size_t i, off = 0;
  uint64_t s = stream(seed, 5, 0);
  int l;

  n->hid = hid;
  n->nw = layers + 1;
  n->np = 2 * (size_t)n->nw;
  n->dim[0] = NIN;
  for (l = 1; l < n->nw; l++)
    n->dim[l] = hid;
  n->dim[n->nw] = NCLS;
  for (l = 0; l < n->nw; l++) {
    n->numel[2 * l] = n->dim[l] * n->dim[l + 1];
    n->numel[2 * l + 1] = n->dim[l + 1];
  }
  for (i = 0; i < n->np; i++)
    n->total += n->numel[i];
  n->w = xcalloc(n->total, sizeof *n->w);
  n->opt1 = xcalloc(n->total, sizeof *n->opt1);
  n->opt2 = xcalloc(n->total, sizeof *n->opt2);
  for (i = 0; i < n->np; i++) {
    n->p[i] = n->w + off;
    off += n->numel[i];
    /* He initialisation for the weights; biases start at zero. */
    if (i % 2 == 0)
      fill_normal(&s, n->p[i], n->numel[i],
                  sqrt(2.0 / (double)n->dim[i / 2]));
  }
  n->cap = cap;
  n->idx = xcalloc(cap, sizeof *n->idx);
  n->x = xcalloc(cap * NIN, sizeof *n->x);
  n->act[0] = n->x;
  for (l = 1; l < n->nw; l++) {
    n->wt[l] = xcalloc(n->dim[l] * n->dim[l + 1], sizeof *n->wt[l]);
    n->act[l] = xcalloc(cap * hid, sizeof *n->act[l]);
    n->del[l] = xcalloc(cap * hid, sizeof *n->del[l]);
  }
  n->z = xcalloc(cap * NCLS, sizeof *n->z);
  n->dz = xcalloc(cap * NCLS, sizeof *n->dz);
  i = hid > cap ? hid : cap;
  n->t.a = xcalloc(i, sizeof *n->t.a);
  n->t.x = xcalloc(i, sizeof *n->t.x);
}

static void net_free(struct net *n)
{
  free(n->w);
  free(n->opt1);
  free(n->opt2);
  free(n->own_grad);
  for (int l = 1; l < n->nw; l++) {
    free(n->wt[l]);
    free(n->act[l]);
    free(n->del[l]);
  }
  free(n->idx);
  free(n->x);
  free(n->z);
  free(n->dz);
  free(n->t.a);
  free(n->t.x);
}

/* Forward pass of the first rows rows of n->x: logits in n->z. */
static void forward(struct net *n, size_t rows)
{
  int l;

  for (l = 0; l < n->nw; l++) {
    bool last = l == n->nw - 1;

    layer_fwd(rows, n->dim[l], n->dim[l + 1], n->act[l], n->p[2 * l],
              n->p[2 * l + 1], last ? n->z : n->act[l + 1], &n->t);
    if (!last)
      relu(n->act[l + 1], rows * n->dim[l + 1]);
  }
}

/* Softmax cross-entropy of one row's logits z; *pred gets the argmax;
 * when d is not NULL it receives dloss/dz scaled by scale. */
static double xent(const float *z, unsigned label, float scale, float *d,
                   unsigned *pred)
{
  double e[NCLS], sum = 0.0;
  float mx = z[0];
  unsigned c, best = 0;

  for (c = 1; c < NCLS; c++)
    if (z[c] > mx) {
      mx = z[c];
      best = c;
    }
  for (c = 0; c < NCLS; c++)
    sum += (e[c] = exp((double)(z[c] - mx)));
  if (d)
    for (c = 0; c < NCLS; c++)
      d[c] = (float)(e[c] / sum - (c == label)) * scale;
  *pred = best;
  return log(sum) - (double)(z[label] - mx);
}

/* Stage k of the backward pass: computed (and timed for the warm-up
 * mean), or in device mode after the warm-up, slept for that mean.  The
 * sleeps end at absolute deadlines, each stage's due time the previous
 * one's plus its length, from the start of the pass: time the CPU spends
 * between stages (marking gradients ready, launching all-reduces) runs
 * alongside the "device", as it does beside a GPU's kernels, and a late
 * wake-up does not push back the later stages. */
static bool stage_sleep(struct net *n, int k)
{
  struct timespec ts;
  double d;

  if (!n->device || (n->real_steps < WARMUP && !(n->given_s[k] > 0)))
    return false;
  d = n->given_s[k] > 0 ? n->given_s[k] :
      n->stage_s[k] / (double)n->real_steps;
  n->due_s += d;
  ts.tv_sec = (time_t)n->due_s;
  ts.tv_nsec = (long)((n->due_s - (double)ts.tv_sec) * 1e9);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
         EINTR)
    ;
  return true;
}

static void stage_done(struct net *n, int k, double t0, bool slept)
{
  if (!slept)
    n->stage_s[k] += now_s() - t0;
}

/* Stage k's mean computed time (ms), 0 if never computed. */
static double stage_ms(const struct net *n, int k)
{
  return n->real_steps ? 1e3 * n->stage_s[k] / (double)n->real_steps : 0.0;
}

/* Layer l's bias, then weight, ready for the reducer. */
static int mark_layer(pg_reducer *red, int l)
{
  int err = pg_reducer_mark_ready(red, (size_t)(2 * l + 1));

  return err ? err : pg_reducer_mark_ready(red, (size_t)(2 * l));
}

/* Backward pass, last layer first, one stage per layer: stage k computes
 * layer l = nw - 1 - k's weight gradient (and, for k > 0, first its
 * output's gradient from layer l + 1's), then marks W(l+1) and b(l+1)
 * ready, so that the reducer can start a full bucket's all-reduce while
 * the earlier layers' stages run.  The marking order (last layer's b, W
 * first) is the reverse registration order the reducer expects, so its
 * buckets fill front to back.  late (--no-overlap): every gradient is
 * marked, in the same order, after the last stage, so the same buckets
 * are all-reduced with nothing left to hide them behind. */
static int backward(struct net *n, size_t rows, pg_reducer *red, bool late)
{
  int err = 0, k;

  n->due_s = now_s();
  for (k = 0; k < n->nw; k++) {
    int l = n->nw - 1 - k;
    double t0 = now_s();
    bool slept;

    if (!(slept = stage_sleep(n, k))) {
      const float *dout = n->dz;

      if (k > 0) {
        /* del[l + 1] = (dout W(l+2)^T) masked by act[l + 1] > 0 */
        dout = l + 1 == n->nw - 1 ? n->dz : n->del[l + 2];
        transpose(n->dim[l + 1], n->dim[l + 2], n->p[2 * (l + 1)],
                  n->wt[l + 1]);
        layer_dgrad(rows, n->dim[l + 1], n->dim[l + 2], dout, n->wt[l + 1],
                    n->act[l + 1], n->del[l + 1], &n->t);
        dout = n->del[l + 1];
      }
      layer_wgrad(rows, n->dim[l], n->dim[l + 1], n->act[l], dout,
                  n->g[2 * l], n->g[2 * l + 1], &n->t);
    }
    stage_done(n, k, t0, slept);
    if (k == n->nw - 1 && !slept)
      n->real_steps++;
    if (red && !late && (err = mark_layer(red, l)) != 0)
      return err;
  }
  for (k = 0; red && late && k < n->nw; k++)
    if ((err = mark_layer(red, n->nw - 1 - k)) != 0)
      return err;
  return 0;
}

/* torch.optim.SGD with momentum: m = mu m + g; w -= lr m. */
static void sgd(size_t n, float *restrict w, float *restrict m,
                const float *restrict g, float mu, float lr)
{
  size_t i = 0, k;

  for (; i + BLOCK <= n; i += BLOCK)
    for (k = 0; k < BLOCK; k++) {
      m[i + k] = mu * m[i + k] + g[i + k];
      w[i + k] -= lr * m[i + k];
    }
  for (; i < n; i++) {
    m[i] = mu * m[i] + g[i];
    w[i] -= lr * m[i];
  }
}

/* torch.optim.Adam (betas 0.9, 0.999, eps 1e-8); c1, c2: the bias
 * corrections 1 - beta^t. */
static void adam(size_t n, float *restrict w, float *restrict m,
                 float *restrict v, const float *restrict g, float lr,
                 float c1, float c2)
{
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  size_t i;

  for (i = 0; i < n; i++) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
  }
}

/* t: steps taken so far including this one (Adam's bias correction). */
static void optimize(struct net *n, const struct opts *o, long t)
{
  float c1 = (float)(1.0 - pow(0.9, (double)t));
  float c2 = (float)(1.0 - pow(0.999, (double)t));
  size_t i, off = 0;

  for (i = 0; i < n->np; i++) {
    if (o->optimizer == OPT_SGD)
      sgd(n->numel[i], n->p[i], n->opt1 + off, n->g[i], (float)o->momentum,
          (float)o->lr);
    else
      adam(n->numel[i], n->p[i], n->opt1 + off, n->opt2 + off, n->g[i],
           (float)o->lr, c1, c2);
    off += n->numel[i];
  }
}

/* ---- checkpoints -----------------------------------------------------------
 * latest.ckpt, all integers and floats little-endian:
 *   "MLPCKPT\0", u32 version, u32 header bytes, u64 payload bytes,
 *   u64 FNV-1a of everything after this field,
 *   u32 NIN, hidden, NCLS, optimizer, u64 seed, samples, global batch,
 *   u32 world size of the writer, u64 step (steps done), f64 lr,
 *   u32 hidden layers (version 2; version 1 files, 88-byte header, have 2),
 * then the parameters and the optimizer state (momentum; or Adam's m and
 * v), f32 each.  The sampler needs nothing more: its position is a pure
 * function of (seed, step). */

#define CKPT_MAGIC "MLPCKPT"
#define CKPT_VERSION 2u
#define CKPT_HEADER 96u
#define CKPT_MAX ((uint64_t)1 << 34)

struct ckpt_info {
  uint32_t hidden, layers, optimizer, world;
  uint64_t seed, samples, global_batch, step, nparams;
  double lr;
};

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ULL;
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

static void put_u32(unsigned char *p, uint32_t v)
{
  int i;

  for (i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
  int i;

  for (i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p)
{
  return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void put_floats(unsigned char *p, const float *f, size_t n)
{
  uint32_t u;
  size_t i;

  for (i = 0; i < n; i++) {
    memcpy(&u, &f[i], 4);
    put_u32(p + 4 * i, u);
  }
}

static void get_floats(const unsigned char *p, float *f, size_t n)
{
  uint32_t u;
  size_t i;

  for (i = 0; i < n; i++) {
    u = get_u32(p + 4 * i);
    memcpy(&f[i], &u, 4);
  }
}

static size_t nstates(int optimizer)
{
  return optimizer == OPT_ADAM ? 2 : 1;
}

/* The checkpoint as bytes (malloc'd, *len). */
static unsigned char *ckpt_encode(const struct net *n, const struct opts *o,
                                  int world, long step, size_t *len)
{
  size_t payload = n->total * 4 * (1 + nstates(o->optimizer));
  unsigned char *b = xcalloc(CKPT_HEADER + payload, 1), *q;
  uint64_t lr;

  memcpy(b, CKPT_MAGIC, 8);
  put_u32(b + 8, CKPT_VERSION);
  put_u32(b + 12, CKPT_HEADER);
  put_u64(b + 16, payload);
  put_u32(b + 32, NIN);
  put_u32(b + 36, (uint32_t)n->hid);
  put_u32(b + 40, NCLS);
  put_u32(b + 44, (uint32_t)o->optimizer);
  put_u64(b + 48, o->seed);
  put_u64(b + 56, (uint64_t)o->samples);
  put_u32(b + 64, (uint32_t)o->global_batch);
  put_u32(b + 68, (uint32_t)world);
  put_u64(b + 72, (uint64_t)step);
  memcpy(&lr, &o->lr, 8);
  put_u64(b + 80, lr);
  put_u32(b + 88, (uint32_t)n->nw - 1);
  q = b + CKPT_HEADER;
  put_floats(q, n->w, n->total);
  put_floats(q + n->total * 4, n->opt1, n->total);
  if (o->optimizer == OPT_ADAM)
    put_floats(q + n->total * 8, n->opt2, n->total);
  put_u64(b + 24, fnv1a(b + 32, CKPT_HEADER - 32 + payload));
  *len = CKPT_HEADER + payload;
  return b;
}

/* Checks a checkpoint's framing and checksum; fills *ci.  Returns 0 or
 * writes why not into why. */
static int ckpt_check(const unsigned char *b, size_t len,
                      struct ckpt_info *ci, char *why, size_t whylen)
{
  uint64_t payload, lr;

  if (len < CKPT_HEADER || memcmp(b, CKPT_MAGIC, 8) != 0) {
    snprintf(why, whylen, "not a train_mlp checkpoint (bad magic)");
    return -1;
  }
  if (get_u32(b + 8) != CKPT_VERSION || get_u32(b + 12) != CKPT_HEADER) {
    snprintf(why, whylen, "version %" PRIu32 ", expected %u",
             get_u32(b + 8), CKPT_VERSION);
    return -1;
  }
  payload = get_u64(b + 16);
  if (payload != len - CKPT_HEADER) {
    snprintf(why, whylen, "truncated: %zu bytes, header says %" PRIu64,
             len, payload + CKPT_HEADER);
    return -1;
  }
  if (fnv1a(b + 32, len - 32) != get_u64(b + 24)) {
    snprintf(why, whylen, "checksum mismatch (corrupt file)");
    return -1;
  }
  ci->hidden = get_u32(b + 36);
  ci->layers = get_u32(b + 88);
  ci->optimizer = get_u32(b + 44);
  ci->seed = get_u64(b + 48);
  ci->samples = get_u64(b + 56);
  ci->global_batch = get_u32(b + 64);
  ci->world = get_u32(b + 68);
  ci->step = get_u64(b + 72);
  lr = get_u64(b + 80);
  memcpy(&ci->lr, &lr, 8);
  if (get_u32(b + 32) != NIN || get_u32(b + 40) != NCLS ||
      ci->optimizer > OPT_ADAM) {
    snprintf(why, whylen, "written by another model");
    return -1;
  }
  return 0;
}

/* The flags that shape the model, the data or a step must match. */
static int ckpt_matches(const struct ckpt_info *ci, const struct opts *o,
                        char *why, size_t whylen)
{
  static const char *const optname[] = { "sgd", "adam" };

  if (ci->hidden != (uint64_t)o->hidden)
    snprintf(why, whylen, "--hidden %" PRIu32 " there, %ld here",
             ci->hidden, o->hidden);
  else if (ci->layers != (uint64_t)o->layers)
    snprintf(why, whylen, "--layers %" PRIu32 " there, %ld here",
             ci->layers, o->layers);
  else if (ci->optimizer != (uint32_t)o->optimizer)
    snprintf(why, whylen, "--optimizer %s there, %s here",
             optname[ci->optimizer], optname[o->optimizer]);
  else if (ci->seed != o->seed)
    snprintf(why, whylen, "--seed %" PRIu64 " there, %" PRIu64 " here",
             ci->seed, o->seed);
  else if (ci->samples != (uint64_t)o->samples)
    snprintf(why, whylen, "--samples %" PRIu64 " there, %ld here",
             ci->samples, o->samples);
  else if (ci->global_batch != (uint64_t)o->global_batch)
    snprintf(why, whylen, "--global-batch %" PRIu64 " there, %ld here",
             ci->global_batch, o->global_batch);
  else
    return 0;
  return -1;
}

static void ckpt_apply(const unsigned char *b, struct net *n, int optimizer)
{
  const unsigned char *q = b + CKPT_HEADER;

  get_floats(q, n->w, n->total);
  get_floats(q + n->total * 4, n->opt1, n->total);
  if (optimizer == OPT_ADAM)
    get_floats(q + n->total * 8, n->opt2, n->total);
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
  ssize_t k;

  while (n) {
    k = write(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int mkdirs(const char *dir)
{
  char path[4096];
  size_t i, len = strlen(dir);

  if (len >= sizeof path)
    return errno = ENAMETOOLONG, -1;
  memcpy(path, dir, len + 1);
  for (i = 1; i <= len; i++)
    if (path[i] == '/' || path[i] == '\0') {
      char c = path[i];

      path[i] = '\0';
      if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return -1;
      path[i] = c;
    }
  return 0;
}

/* Writes dir/latest.ckpt so that a crash at any moment leaves either the
 * old or the new file, complete: temporary file, fsync, rename, fsync of
 * the directory (which makes the rename itself durable). */
static int ckpt_save(const char *dir, const unsigned char *b, size_t len)
{
  char tmp[4200], path[4200], why[4400];
  int fd, dfd, e;

  snprintf(tmp, sizeof tmp, "%s/latest.ckpt.tmp", dir);
  snprintf(path, sizeof path, "%s/latest.ckpt", dir);
  if (mkdirs(dir) != 0)
    goto fail;
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    goto fail;
  if (write_all(fd, b, len) != 0 || fsync(fd) != 0) {
    e = errno;
    close(fd);
    errno = e;
    goto fail_unlink;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0)
    goto fail_unlink;
  dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
fail_unlink:
  /* A full disk must not keep a half-written file (the old checkpoint,
   * if any, stays). */
  e = errno;
  unlink(tmp);
  errno = e;
fail:
  snprintf(why, sizeof why, "%s: %s", tmp, strerror(errno));
  err_msg("cannot write the checkpoint", why);
  return -1;
}

/* Rank 0: dir/latest.ckpt's bytes; 0 and *b = NULL when there is none. */
static int ckpt_read(const char *dir, unsigned char **b, size_t *len)
{
  char path[4200], why[4400];
  struct stat st;
  size_t got = 0;
  ssize_t k;
  int fd;

  *b = NULL;
  *len = 0;
  snprintf(path, sizeof path, "%s/latest.ckpt", dir);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT)
    return 0;
  if (fd < 0 || fstat(fd, &st) != 0)
    goto fail;
  if ((uint64_t)st.st_size > CKPT_MAX || st.st_size < 1) {
    close(fd);
    snprintf(why, sizeof why, "%s: %lld bytes", path,
             (long long)st.st_size);
    err_msg("implausible checkpoint size", why);
    return -1;
  }
  *b = xcalloc((size_t)st.st_size, 1);
  while (got < (size_t)st.st_size) {
    k = read(fd, *b + got, (size_t)st.st_size - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  close(fd);
  *len = got;
  return 0;
fail:
  snprintf(why, sizeof why, "%s: %s", path, strerror(errno));
  err_msg("cannot read the checkpoint", why);
  if (fd >= 0)
    close(fd);
  return -1;
}

/* Every rank: rank 0 reads the checkpoint and broadcasts it, everyone
 * checks and applies it.  Returns the step to start at (0: fresh), or -1
 * (exit 1) / -2 (exit 2: flags differ) on every rank alike. */
static long ckpt_load(pg_group *g, const struct opts *o, struct net *n)
{
  unsigned char *b = NULL;
  size_t len = 0;
  int64_t hdr = 0;   /* bytes, 0: none, -1: rank 0 failed to read */
  struct ckpt_info ci;
  char why[256];
  int err, rank = pg_rank(g);

  if (rank == 0) {
    hdr = ckpt_read(o->ckpt_dir, &b, &len) ? -1 : (int64_t)len;
  }
  if ((err = pg_broadcast(g, &hdr, 1, PG_I64, 0)) != 0) {
    pg_fail("broadcast of the checkpoint size", err);
    free(b);
    return -1;
  }
  if (hdr <= 0)
    return hdr < 0 ? -1 : 0;
  if (rank != 0) {
    len = (size_t)hdr;
    b = xcalloc(len, 1);
  }
  if ((err = pg_broadcast(g, b, len, PG_U8, 0)) != 0) {
    pg_fail("broadcast of the checkpoint", err);
    free(b);
    return -1;
  }
  /* The same bytes everywhere, so every rank decides alike. */
  if (ckpt_check(b, len, &ci, why, sizeof why) != 0) {
    if (rank == 0)
      fprintf(stderr, "train_mlp: %s/latest.ckpt: %s; remove it to start "
              "over\n", o->ckpt_dir, why);
    free(b);
    return -1;
  }
  if (ckpt_matches(&ci, o, why, sizeof why) != 0 ||
      len != CKPT_HEADER + n->total * 4 * (1 + nstates(o->optimizer))) {
    if (rank == 0)
      fprintf(stderr, "train_mlp: %s/latest.ckpt was written for other "
              "flags (%s); use them, another --ckpt-dir, or remove it\n",
              o->ckpt_dir, why);
    free(b);
    return -2;
  }
  ckpt_apply(b, n, o->optimizer);
  free(b);
  if (rank == 0)
    printf("resumed from step %" PRIu64 " (%s/latest.ckpt, written by %"
           PRIu32 " worker%s; now %d)\n", ci.step, o->ckpt_dir, ci.world,
           ci.world == 1 ? "" : "s", pg_size(g));
  return (long)ci.step;
}

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
      err_msg("cannot find a free port", strerror(errno));
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
    pg_fail("pg_init", err);
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
    forward(n, k);
    for (r = 0; r < k; r++) {
      xent(n->z + r * NCLS, test->y[n->idx[r]], 0, NULL, &pred);
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
};

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
  if ((err = pg_reducer_prepare(R->red, true)) != 0)
    return err;
  /* After prepare: a bucket rebuild may have moved them. */
  for (i = 0; i < R->n.np; i++)
    R->n.g[i] = pg_reducer_grad(R->red, i);
  return 0;
}

/* One step on this rank's share of global batch (step % spe); *wait
 * gets the seconds spent waiting for the gradients' all-reduce after the
 * backward pass (the communication not hidden behind it). */
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
    permute(R->perm, R->train.n, R->o.seed, R->perm_epoch);
  }
  /* DistributedSampler: rank r takes rows r, r + W, r + 2W... of the
   * global batch, so the union over ranks is the same for any W. */
  for (j = 0; j < R->local; j++) {
    n->idx[j] = R->perm[base + (size_t)R->rank + j * (size_t)R->world];
    memcpy(n->x + j * NIN, R->train.x + (size_t)n->idx[j] * NIN,
           NIN * sizeof *n->x);
  }
  if ((err = grads_for_step(R)) != 0) {
    pg_fail("pg_reducer_prepare", err);
    return -1;
  }
  forward(n, R->local);
  for (j = 0; j < R->local; j++) {
    unsigned label = R->train.y[n->idx[j]];

    st->loss += xent(n->z + j * NCLS, label, scale, n->dz + j * NCLS,
                     &pred);
    st->correct += pred == label;
  }
  st->rows += (double)R->local;
  *wait = now_s();
  if ((err = backward(n, R->local, R->red, R->o.no_overlap)) != 0) {
    pg_fail("pg_reducer_mark_ready", err);
    return -1;
  }
  n->bw_s += now_s() - *wait;
  n->bw_steps++;
  *wait = now_s();
  if (R->red) {
    if ((err = pg_reducer_finish(R->red)) != 0) {
      pg_fail("pg_reducer_finish", err);
      return -1;
    }
  } else if (R->o.no_reducer) {
    for (j = 0; j < n->np; j++)
      if ((err = pg_all_reduce(R->g, n->g[j], n->g[j], n->numel[j], PG_F32,
                               PG_AVG)) != 0) {
        pg_fail("pg_all_reduce", err);
        return -1;
      }
  }
  *wait = now_s() - *wait;
  optimize(n, &R->o, step + 1);
  if (R->red && (err = pg_reducer_zero_grad(R->red)) != 0) {
    pg_fail("pg_reducer_zero_grad", err);
    return -1;
  }
  return 0;
}

/* End of an epoch (or of the run, mid-epoch): global loss and accuracy,
 * test accuracy, one line from rank 0. */
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
  /* --no-comm: rank 0's own numbers. */
  if (!R->o.no_comm &&
      (err = pg_all_reduce(R->g, v, v, 5, PG_F64, PG_SUM)) != 0) {
    pg_fail("pg_all_reduce of the epoch's statistics", err);
    return -1;
  }
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
           *test_acc, now_s() - t0, part);
  }
  memset(st, 0, sizeof *st);
  R->stats_from = step;
  return 0;
}

/* --params-out: the parameters' bytes, as in a checkpoint (little-endian
 * f32, forward order), so that runs can be compared bit for bit. */
static int params_write(const char *path, const struct net *n)
{
  unsigned char *b = xcalloc(n->total, 4);
  char why[4400];
  int fd, rc = 0;

  put_floats(b, n->w, n->total);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write_all(fd, b, n->total * 4) != 0 || close(fd) != 0) {
    snprintf(why, sizeof why, "%s: %s", path, strerror(errno));
    err_msg("cannot write --params-out", why);
    rc = -1;
  }
  free(b);
  return rc;
}

/* Checksum of the parameters, and (unless --no-comm) a check that every
 * replica holds the same bits. */
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
  if ((err = pg_all_reduce(R->g, v, v, 6, PG_F64, PG_MAX)) != 0) {
    pg_fail("pg_all_reduce of the checksums", err);
    return -1;
  }
  if (!R->o.no_comm && (v[0] != -v[2] || v[1] != -v[3])) {
    if (R->rank == 0)
      err_msg("replicas differ", "the ranks' parameters are not equal");
    return -1;
  }
  if (R->rank != 0)
    return 0;
  for (k = 0; k < R->n.nw; k++)
    snprintf(stages + strlen(stages), sizeof stages - strlen(stages),
             "%s%.3f", k ? "," : "", stage_ms(&R->n, k));
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
  return R->o.params_out ? params_write(R->o.params_out, &R->n) : 0;
}

static int run_training(struct run *R, long start, long total)
{
  const char *rc_env = getenv("TORCHELASTIC_RESTART_COUNT");
  bool first_attempt = !rc_env || !strcmp(rc_env, "0");
  struct stats st = { 0, 0, 0 };
  double t0 = now_s(), t, w, busy = 0, waited = 0, test_acc = NAN;
  long step, timed = 0, saved = start;
  unsigned char *b;
  size_t len;

  R->stats_from = start;
  for (step = start; step < total; step++) {
    if (step == R->o.die_at_step && R->rank == R->o.die_rank &&
        first_attempt) {
      fprintf(stderr, "train_mlp: rank %d: --die-at-step %ld: SIGKILL\n",
              R->rank, step);
      raise(SIGKILL);
    }
    t = now_s();
    if (train_step(R, step, &st, &w) != 0)
      return 1;
    /* Progress, for cdrun --worker-heartbeat-timeout. */
    pg_heartbeat();
    if (step - start >= WARMUP) {
      busy += now_s() - t;
      waited += w;
      timed++;
    }
    if (R->o.log_steps && (step + 1) % R->o.log_steps == 0 && R->rank == 0)
      printf("step %ld\n", step + 1);
    if (R->o.ckpt_every && (step + 1) % R->o.ckpt_every == 0) {
      saved = step + 1;
      if (R->rank == 0) {
        b = ckpt_encode(&R->n, &R->o, R->world, step + 1, &len);
        if (ckpt_save(R->o.ckpt_dir, b, len) != 0) {
          free(b);
          return 1;
        }
        free(b);
      }
    }
    if ((step + 1) % R->spe == 0 || step + 1 == total) {
      if (report(R, step + 1, &st, t0, &test_acc) != 0)
        return 1;
      t0 = now_s();
    }
  }
  /* The end is a checkpoint too: a later run with more --epochs or
   * --steps (any world size) continues from here. */
  if (R->o.ckpt_every && saved != total && R->rank == 0) {
    b = ckpt_encode(&R->n, &R->o, R->world, total, &len);
    if (ckpt_save(R->o.ckpt_dir, b, len) != 0) {
      free(b);
      return 1;
    }
    free(b);
  }
  if (start >= total) {
    double v[2];
    int err;

    evaluate(&R->n, &R->test, R->rank, R->world, &v[0], &v[1]);
    if ((err = pg_all_reduce(R->g, v, v, 2, PG_F64, PG_SUM)) != 0) {
      pg_fail("pg_all_reduce of the test accuracy", err);
      return 1;
    }
    test_acc = 100.0 * v[0] / v[1];
    if (R->rank == 0)
      printf("nothing to do: the checkpoint is at step %ld of %ld\n",
             start, total);
  }
  if (final_report(R, total > start ? total : start, test_acc,
                   timed ? 1e3 * busy / (double)timed : 0,
                   timed ? 1e3 * waited / (double)timed : 0, timed) != 0)
    return 1;
  return 0;
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
  R.o.epochs = 15;
  R.o.global_batch = 256;
  R.o.ckpt_every = 50;
  R.o.ckpt_dir = "ckpt";
  R.o.seed = 1;
  R.o.hidden = 512;
  R.o.layers = 2;
  R.o.samples = 60000;
  R.o.die_at_step = -1;
  R.o.momentum = 0.9;
  setvbuf(stdout, NULL, _IOLBF, 0);
  rc = parse_flags(argc, argv, &R.o);
  if (rc)
    return rc > 0 ? 0 : 2;
  if (init_group(&R.g) != 0)
    return 1;
  R.rank = rank_g = pg_rank(R.g);
  R.world = pg_size(R.g);
  if (R.o.global_batch % R.world != 0) {
    char buf[128];

    snprintf(buf, sizeof buf, "%ld is not divisible by WORLD_SIZE %d",
             R.o.global_batch, R.world);
    /* Every rank says it: the first to exit makes cdrun stop the others,
     * maybe before rank 0 got here. */
    err_msg("--global-batch", buf);
    pg_destroy(R.g);
    return 2;
  }
  R.local = (size_t)(R.o.global_batch / R.world);
  R.spe = R.o.samples / R.o.global_batch;   /* the last partial batch is
                                               dropped, as drop_last */
  make_data(R.o.seed, (size_t)R.o.samples, &R.train, &R.test);
  net_init(&R.n, (size_t)R.o.hidden, (int)R.o.layers,
           R.local > 256 ? R.local : 256, R.o.seed);
  R.n.device = R.o.device_compute;
  for (int k = 0; k < R.o.nbackward_ms; k++)
    R.n.given_s[k] = R.o.backward_ms[k] / 1e3;
  R.perm = xcalloc(R.train.n, sizeof *R.perm);
  R.perm_epoch = -1;
  if (R.o.no_reducer || R.o.no_comm) {
    R.n.own_grad = xcalloc(R.n.total, sizeof *R.n.own_grad);
  } else {
    for (i = 0; i < R.n.np; i++) {
      spec[i].numel = R.n.numel[i];
      spec[i].dtype = PG_F32;
    }
    if ((err = pg_reducer_create(R.g, spec, R.n.np, &ro, &R.red)) != 0) {
      pg_fail("pg_reducer_create", err);
      rc = 1;
      goto out;
    }
  }
  if (R.rank == 0) {
    char grads[64], shape[MAX_W * 8 + 16];

    if (R.red)
      snprintf(grads, sizeof grads, "reducer, %zu bucket%s%s",
               pg_reducer_num_buckets(R.red),
               pg_reducer_num_buckets(R.red) == 1 ? "" : "s",
               R.o.no_overlap ? " after backward" : "");
    else
      snprintf(grads, sizeof grads, "%s",
               R.o.no_comm ? "no communication" : "all-reduce after "
               "backward");
    snprintf(shape, sizeof shape, "%d", NIN);
    for (int l = 1; l <= R.n.nw; l++)
      snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "-%zu",
               R.n.dim[l]);
    printf("train_mlp: %d worker%s (%s), MLP %s (%zu "
           "parameters), %ld samples, global batch %ld (%zu per worker), "
           "%ld steps/epoch, %s lr %g, gradients: %s\n", R.world,
           R.world == 1 ? "" : "s", pg_backend_name(R.g), shape, R.n.total, R.o.samples, R.o.global_batch,
           R.local, R.spe, R.o.optimizer == OPT_ADAM ? "adam" : "sgd",
           R.o.lr, grads);
  }
  start = ckpt_load(R.g, &R.o, &R.n);
  if (start < 0) {
    rc = start == -2 ? 2 : 1;
    goto out;
  }
  total = R.o.epochs * R.spe;
  if (R.o.steps && R.o.steps < total)
    total = R.o.steps;
  rc = run_training(&R, start, total);
out:
  pg_reducer_destroy(R.red);
  pg_destroy(R.g);
  net_free(&R.n);
  free(R.train.x);
  free(R.train.y);
  free(R.test.x);
  free(R.test.y);
  free(R.perm);
  return rc;
}
