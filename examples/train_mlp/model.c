/* model.c -- train_mlp's network (model.h): the kernels, then the
 * model's passes and optimizers. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "model.h"

/* ---- kernels ---------------------------------------------------------------
 * Note [vectorizing]: gcc 12 at -O2 vectorizes only loops whose vector
 * code replaces the scalar loop entirely, so the kernels run an inner
 * loop of constant trip count BLOCK over restrict pointers and finish the
 * rest with a scalar loop (as libpg/core/reduce.c does).
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

/* The activations (and gathered terms) of up to cap rows, zeroed. */
static void rows_alloc(struct net *n, size_t cap)
{
  size_t i = n->hid > cap ? n->hid : cap;

  n->cap = cap;
  n->idx = mlp_xcalloc(cap, sizeof *n->idx);
  n->x = mlp_xcalloc(cap * NIN, sizeof *n->x);
  n->act[0] = n->x;
  for (int l = 1; l < n->nw; l++) {
    n->act[l] = mlp_xcalloc(cap * n->hid, sizeof *n->act[l]);
    n->del[l] = mlp_xcalloc(cap * n->hid, sizeof *n->del[l]);
  }
  n->z = mlp_xcalloc(cap * NCLS, sizeof *n->z);
  n->dz = mlp_xcalloc(cap * NCLS, sizeof *n->dz);
  n->t.a = mlp_xcalloc(i, sizeof *n->t.a);
  n->t.x = mlp_xcalloc(i, sizeof *n->t.x);
}

/* layers hidden layers of hid units: layer l maps dim[l] to dim[l + 1]. */
void model_init(struct net *n, size_t hid, int layers, size_t cap,
                     uint64_t seed)
{
  size_t i, off = 0;
  uint64_t s = data_stream(seed, 5, 0);
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
  n->w = mlp_xcalloc(n->total, sizeof *n->w);
  n->opt1 = mlp_xcalloc(n->total, sizeof *n->opt1);
  n->opt2 = mlp_xcalloc(n->total, sizeof *n->opt2);
  for (i = 0; i < n->np; i++) {
    n->p[i] = n->w + off;
    off += n->numel[i];
    /* He initialisation for the weights; biases start at zero. */
    if (i % 2 == 0)
      data_fill_normal(&s, n->p[i], n->numel[i],
                  sqrt(2.0 / (double)n->dim[i / 2]));
  }
  for (l = 1; l < n->nw; l++)
    n->wt[l] = mlp_xcalloc(n->dim[l] * n->dim[l + 1], sizeof *n->wt[l]);
  rows_alloc(n, cap);
}

/* Frees the activations of n->cap rows. */
static void rows_free(struct net *n)
{
  for (int l = 1; l < n->nw; l++) {
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

void model_reserve(struct net *n, size_t rows)
{
  if (rows <= n->cap)
    return;
  rows_free(n);
  rows_alloc(n, rows);
}

void model_free(struct net *n)
{
  free(n->w);
  free(n->opt1);
  free(n->opt2);
  free(n->own_grad);
  for (int l = 1; l < n->nw; l++)
    free(n->wt[l]);
  rows_free(n);
}

/* Forward pass of the first rows rows of n->x: logits in n->z. */
void model_forward(struct net *n, size_t rows)
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
double model_xent(const float *z, unsigned label, float scale, float *d,
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
    n->stage_s[k] += mlp_now_s() - t0;
}

/* Stage k's mean computed time (ms), 0 if never computed. */
double model_stage_ms(const struct net *n, int k)
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
int model_backward(struct net *n, size_t rows, pg_reducer *red, bool late)
{
  int err = 0, k;

  n->due_s = mlp_now_s();
  for (k = 0; k < n->nw; k++) {
    int l = n->nw - 1 - k;
    double t0 = mlp_now_s();
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
    n->op_t0 = mlp_now_s();
    if (red && !late && (err = mark_layer(red, l)) != 0)
      return err;
  }
  n->op_t0 = mlp_now_s();
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
void model_optimize(struct net *n, const struct opts *o, long t)
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

