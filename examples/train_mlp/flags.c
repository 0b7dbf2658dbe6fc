/* flags.c -- train_mlp's flags (flags.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"

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
"  --die-at-step S    the --die-rank workers SIGKILL themselves at step\n"
"                     S, first attempt only (not a replacement)\n"
"  --die-rank R[,R..] the workers that die (0)\n"
"  --die-in-heal      tests, live: the first replacement of the first\n"
"                     --die-rank dies (SIGKILL) while it receives the\n"
"                     state, in the heal\n"
"  --recovery MODE    restart: a failure ends the worker (cdrun restarts\n"
"                     the group, which resumes from the checkpoint); live:\n"
"                     the survivors recover the group and redo the step\n"
"                     (needs cdrun --recovery=live) (cdrun's mode:\n"
"                     live under cdrun --recovery=live, else restart)\n"
"  --no-live-opt-in   under cdrun --recovery=live, do not opt in: cdrun\n"
"                     then recovers the job by restarting it\n"
"  --hold-at-step S   tests: at step S every rank of the first start\n"
"                     waits until --hold-file F exists (it says so on\n"
"                     stderr); with --hold-join, then until a node joins\n"
"                     (live; at most 60 s)\n"
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

/* --backward-ms A,B,...: one time per backward stage. */
static int parse_backward_ms(const char *v, struct opts *o)
{
  const char *q = v;
  char *end;
  size_t k;
  int rc = 0;

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
  return rc;
}

/* --die-rank R[,R...]: up to MAX_DIE ranks. */
static int parse_die_rank(const char *v, struct opts *o)
{
  const char *q = v;
  char *end;
  long x;

  for (o->ndie_rank = 0;; q = end + 1) {
    errno = 0;
    x = strtol(q, &end, 10);
    if (errno || end == q || x < 0 || x > 1 << 20 ||
        (*end != ',' && *end != '\0') || o->ndie_rank == MAX_DIE)
      return bad_value("--die-rank", v, "up to 8 ranks R,R,...");
    o->die_rank[o->ndie_rank++] = x;
    if (*end == '\0')
      return 0;
  }
}

/* The flags together, once each is read; the default learning rate
 * follows the optimizer. */
static int flags_check(struct opts *o)
{
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
  if (o->die_in_heal && (!o->live || o->die_at_step < 0))
    return usage_error("--die-in-heal needs --recovery live and "
                       "--die-at-step");
  if ((o->hold_at_step >= 0) != (o->hold_file != NULL) ||
      (o->hold_join && o->hold_at_step < 0))
    return usage_error("--hold-at-step and --hold-file go together; "
                       "--hold-join needs them");
  if (o->hold_join && !o->live)
    return usage_error("--hold-join needs --recovery live");
  if (o->no_live_opt_in && !o->live)
    return usage_error("--no-live-opt-in needs --recovery live");
  if (o->lr == 0)
    o->lr = o->optimizer == OPT_ADAM ? 0.001 : 0.05;
  return 0;
}

static void flags_defaults(struct opts *o)
{
  o->epochs = 15;
  o->global_batch = 256;
  o->ckpt_every = 50;
  o->ckpt_dir = "ckpt";
  o->seed = 1;
  o->hidden = 512;
  o->layers = 2;
  o->samples = 60000;
  o->die_at_step = -1;
  o->ndie_rank = 1;
  o->hold_at_step = -1;
  /* --recovery: cdrun's, unless said. */
  o->live = getenv("CDRUN_RECOVERY") &&
            !strcmp(getenv("CDRUN_RECOVERY"), "live");
  o->momentum = 0.9;
}

int flags_parse(int argc, char **argv, struct opts *o)
{
  static const char *const takes_value[] = {
    "epochs", "global-batch", "lr", "optimizer", "ckpt-every", "ckpt-dir",
    "seed", "hidden", "samples", "steps", "die-at-step", "die-rank",
    "backward-ms", "layers", "log-steps", "params-out", "recovery",
    "hold-at-step", "hold-file",
  };
  int i;
  size_t k;

  flags_defaults(o);
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
      rc = parse_backward_ms(v, o);
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
      rc = parse_die_rank(v, o);
    } else if (!strcmp(name, "hold-at-step")) {
      rc = parse_long("--hold-at-step", v, 0, LONG_MAX, &o->hold_at_step);
    } else if (!strcmp(name, "hold-file")) {
      o->hold_file = v;
      if (!*v)
        rc = bad_value("--hold-file", v, "a file name");
    } else if (!strcmp(name, "hold-join")) {
      o->hold_join = true;
    } else if (!strcmp(name, "die-in-heal")) {
      o->die_in_heal = true;
    } else if (!strcmp(name, "no-live-opt-in")) {
      o->no_live_opt_in = true;
    } else if (!strcmp(name, "recovery")) {
      if (!strcmp(v, "live") || !strcmp(v, "restart"))
        o->live = !strcmp(v, "live");
      else
        rc = bad_value("--recovery", v, "restart or live");
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
  return flags_check(o);
}

