/* mlp.h -- what train_mlp's files share: the model's limits, the flags
 * (struct opts), the network's state (struct net), and how the program
 * reports errors (mlp.c).  train_mlp.c is the program (the group,
 * training loop, main); flags.c its flags, data.c its data, model.c the
 * network, ckpt.c its checkpoints. */
#ifndef MLP_H
#define MLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
#define MAX_DIE 8        /* --die-rank: ranks */

enum { OPT_SGD, OPT_ADAM };

struct opts {
  long epochs, global_batch, hidden, layers, samples, ckpt_every, steps;
  long die_at_step;
  long die_rank[MAX_DIE];  /* --die-rank R[,R...] */
  int ndie_rank;
  bool die_in_heal;        /* --die-in-heal */
  bool live;               /* --recovery live */
  bool no_live_opt_in;     /* --no-live-opt-in */
  long hold_at_step;       /* --hold-at-step (-1: none) */
  const char *hold_file;   /* --hold-file */
  bool hold_join;          /* --hold-join */
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

/* Gathered terms of one output row: coefficients and input rows. */
struct terms {
  size_t m;
  float *a;
  const float **x;
};

/* The network: parameters, optimizer state, gradients' places and the
 * activations of one step (model.c's model_init). */
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
  double op_t0;          /* when the last reducer call started (live.h) */
};

/* ---- mlp.c ----------------------------------------------------------------
 * This process's rank once the group exists (-1 before), for messages. */
extern int mlp_rank;
/* "train_mlp: rank R: what: detail" on stderr (no ": detail" when detail
 * is ""). */
void mlp_err_msg(const char *what, const char *detail);
/* mlp_err_msg with libpg's sentence for err (pg_last_error). */
void mlp_pg_fail(const char *what, int err);
/* CLOCK_MONOTONIC seconds. */
double mlp_now_s(void);
/* calloc that exits 1 with a message when out of memory. */
void *mlp_xcalloc(size_t n, size_t size);

#endif
