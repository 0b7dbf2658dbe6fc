/* reducer.c -- DDP-style gradient reducer: bucket memory and overlap. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "knobs.h"
#include "num.h"
#include "pg_internal.h"

#define DEFAULT_CAP ((size_t)25 << 20)
#define DEFAULT_FIRST_CAP ((size_t)1 << 20)
#define MAX_CAP_MB (1024.0 * 1024.0)   /* 1 TiB: surely a typo beyond */

/* Note [bucket launch order]: every rank must issue the same collectives
 * in the same order, but gradients become ready in a different order on
 * each rank (threads, unused parameters, plain timing).  Launching a
 * bucket the moment its last gradient arrives would let rank 0 start
 * bucket 2 while rank 1 starts bucket 1, and the two all-reduces would
 * pair up wrongly (garbage, or a hang until the timeout).  So, as DDP's
 * mark_bucket_ready does, buckets are launched strictly in index order:
 * a cursor next_bucket points at the first bucket not yet launched, and
 * a bucket that fills early waits until every bucket before it is full.
 * Bucket numbering follows the expected ready order (reverse
 * registration, later the recorded order), so in the common case each
 * bucket launches as soon as it is full. */

struct bucket {
  void *buf;            /* pg__mem_alloc: device memory under NCCL */
  size_t bytes;
  size_t count;         /* elements, all of one dtype */
  pg_dtype dtype;
  size_t nparams;
  size_t pending;       /* parameters not yet ready this iteration */
  pg_work *work;        /* launched and not yet waited for by finish */
};

/* Where every parameter's gradient lives. */
struct layout {
  size_t nb;
  struct bucket *b;
  size_t *bucket_of;    /* [n] */
  size_t *offset;       /* [n] bytes into its bucket */
};

struct pg_reducer {
  pg_group *g;
  pthread_mutex_t mu;   /* mark_ready may run on another thread */
  size_t n;
  struct pg_param_spec *p;
  size_t cap, first_cap;
  bool no_rebuild;
  struct layout L;

  /* The iteration between prepare and finish. */
  bool active;
  bool sync;
  unsigned char *ready;  /* [n] */
  /* [n]: marked ready in a no_sync iteration since the last synchronized
   * finish or zero_grad: its slot holds an accumulated gradient, which a
   * synchronized iteration that does not use it must keep (as DDP keeps a
   * defined .grad), not zero. */
  unsigned char *accumulated;
  size_t nmarked;
  size_t next_bucket;    /* Note [bucket launch order] */
  int err;               /* first launch error of this iteration */

  /* Gradient-ready order of the first synchronized iteration. */
  size_t *order;         /* [n] */
  size_t norder;
  bool recording, have_order, rebuilt;
  int broken;            /* a rebuild failed: layouts may differ between
                            ranks, so nothing may be communicated */
  bool stale;            /* pg_recover interrupted the gradients: zeroed
                            before any use (Note [reducer after
                            recovery]) */
};

static const char *const dtype_names[] = {
  "f32", "f64", "f16", "bf16", "i32", "i64", "u8",
};

static const char *dtype_name(int64_t t)
{
  return t >= 0 && t < PG_DTYPE_COUNT ? dtype_names[t] : "?";
}

/* ---- layouts ----------------------------------------------------------- */

static void layout_free(pg_group *g, struct layout *L)
{
  size_t b;

  for (b = 0; L->b && b < L->nb; b++)
    if (L->b[b].buf)
      pg__mem_free(g, L->b[b].buf);
  free(L->b);
  free(L->bucket_of);
  free(L->offset);
  memset(L, 0, sizeof *L);
}

/* Assigns buckets walking order (NULL: reverse registration order) and
 * allocates zeroed bucket memory.  Within a bucket, parameters sit in the
 * order they are walked, so a bucket's gradients fill it front to back. */
static int layout_build(struct pg_reducer *r, const size_t *order,
                        struct layout *L)
{
  size_t n = r->n, k, i, add;
  struct bucket *b;
  int err;

  memset(L, 0, sizeof *L);
  L->bucket_of = calloc(n ? n : 1, sizeof *L->bucket_of);
  L->offset = calloc(n ? n : 1, sizeof *L->offset);
  if (!L->bucket_of || !L->offset) {
    err = pg__fail(-ENOMEM, "out of memory for the reducer's layout");
    goto fail;
  }
  err = pg_bucket_assign(r->p, n, order, r->first_cap, r->cap,
                         L->bucket_of, &L->nb);
  if (err)
    goto fail;
  L->b = calloc(L->nb ? L->nb : 1, sizeof *L->b);
  if (!L->b) {
    err = pg__fail(-ENOMEM, "out of memory for %zu buckets", L->nb);
    goto fail;
  }
  for (k = 0; k < n; k++) {
    i = order ? order[k] : n - 1 - k;
    b = &L->b[L->bucket_of[i]];
    add = r->p[i].numel * pg_dtype_size(r->p[i].dtype);
    if (add > SIZE_MAX - b->bytes) {
      err = pg__fail(-EINVAL, "bucket %zu would exceed SIZE_MAX bytes",
                     L->bucket_of[i]);
      goto fail;
    }
    b->dtype = r->p[i].dtype;
    L->offset[i] = b->bytes;
    b->bytes += add;
    b->count += r->p[i].numel;
    b->nparams++;
  }
  for (k = 0; k < L->nb; k++) {
    b = &L->b[k];
    b->buf = pg__mem_alloc(r->g, b->bytes);
    if (!b->buf) {
      err = pg__fail(-ENOMEM, "out of memory for bucket %zu (%zu bytes)",
                     k, b->bytes);
      goto fail;
    }
    err = pg__mem_zero(r->g, b->buf, b->bytes);
    if (err)
      goto fail;
  }
  return 0;

fail:
  layout_free(r->g, L);
  return err;
}

static void *slot(const struct layout *L, size_t i)
{
  return (char *)L->b[L->bucket_of[i]].buf + L->offset[i];
}

/* ---- collectives on staged memory ----------------------------------------
 * Collective buffers must be the backend's memory (device memory under
 * NCCL), so small host arrays go through pg__mem_alloc'd copies. */

static int gather_i64(pg_group *g, const int64_t *mine, size_t k,
                      int64_t *all)
{
  size_t w = (size_t)pg_size(g), bytes = k * sizeof *mine;
  char *m = pg__mem_alloc(g, bytes * (w + 1));
  int err;

  if (!m)
    return pg__fail(-ENOMEM, "out of memory for an all_gather");
  /* The send block sits after the w receive blocks: not in place. */
  err = pg__mem_copy(g, m + bytes * w, mine, bytes);
  if (!err)
    err = pg_all_gather(g, m + bytes * w, m, k, PG_I64);
  if (!err)
    err = pg__mem_copy(g, all, m, bytes * w);
  pg__mem_free(g, m);
  return err;
}

static int bcast_i64(pg_group *g, int64_t *buf, size_t k, int root)
{
  size_t bytes = k * sizeof *buf;
  void *m = pg__mem_alloc(g, bytes);
  int err;

  if (!m)
    return pg__fail(-ENOMEM, "out of memory for a broadcast");
  err = pg__mem_copy(g, m, buf, bytes);
  if (!err)
    err = pg_broadcast(g, m, k, PG_I64, root);
  if (!err)
    err = pg__mem_copy(g, buf, m, bytes);
  pg__mem_free(g, m);
  return err;
}

/* ---- create: the parameter lists must agree ------------------------------ */

enum { H_N, H_VALID, H_HASH, H_CAP, H_FIRST_CAP, H_NO_REBUILD, H_LEN };

static uint64_t spec_hash(const struct pg_param_spec *p, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ULL, v;
  size_t i, j;

  for (i = 0; i < n; i++) {
    for (j = 0; j < 2; j++) {
      v = j ? (uint64_t)p[i].dtype : (uint64_t)p[i].numel;
      for (int s = 0; s < 64; s += 8)
        h = (h ^ ((v >> s) & 0xff)) * 0x100000001b3ULL;
    }
  }
  return h;
}

/* A cap from options or the environment ("0.25" MiB, as DDP's
 * int(bucket_cap_mb * 1024 * 1024)). */
static int resolve_cap(size_t opt, enum pg__knob k, size_t fallback,
                       size_t *out)
{
  const char *env = pg__knob_name(k), *v = pg__knob(k);
  double mb;

  *out = opt ? opt : fallback;
  if (opt || !v || !*v)
    return 0;
  if (num_parse_double(v, 0, MAX_CAP_MB, &mb) || mb <= 0)
    return pg__fail(-EINVAL, "%s is '%s', expected a positive number of "
                    "MiB", env, v);
  *out = (size_t)(mb * 1024.0 * 1024.0);
  return 0;
}

static int check_local(const struct pg_param_spec *p, size_t n,
                       const struct pg_reducer_options *o, size_t *cap,
                       size_t *first_cap)
{
  size_t i;
  int err;

  if (n && !p)
    return pg__fail(-EINVAL, "pg_reducer_create: %zu parameters, NULL "
                    "list", n);
  for (i = 0; i < n; i++) {
    if ((unsigned)p[i].dtype >= PG_DTYPE_COUNT)
      return pg__fail(-EINVAL, "parameter %zu: invalid dtype %d", i,
                      (int)p[i].dtype);
    if (p[i].numel > SIZE_MAX / 16)
      return pg__fail(-EINVAL, "parameter %zu: %zu elements is too large",
                      i, p[i].numel);
  }
  err = resolve_cap(o->bucket_cap, PG_KNOB_BUCKET_CAP_MB, DEFAULT_CAP, cap);
  if (!err)
    err = resolve_cap(o->first_bucket_cap, PG_KNOB_FIRST_BUCKET_CAP_MB,
                      DEFAULT_FIRST_CAP, first_cap);
  return err;
}

/* The hashes differ, so some parameter does: rank 0's list goes to every
 * rank, each finds its first difference, and all agree on the smallest
 * (lowest rank on a tie), so every rank prints the same sentence. */
static int name_difference(pg_group *g, const struct pg_param_spec *p,
                           size_t n)
{
  size_t w = (size_t)pg_size(g), i, best = n;
  int64_t *ref = malloc((n ? n : 1) * 2 * sizeof *ref);
  int64_t mine[3], *all = malloc(w * 3 * sizeof *all);
  int err, who = -1;

  if (!ref || !all) {
    err = pg__fail(-ENOMEM, "out of memory comparing parameter lists");
    goto out;
  }
  for (i = 0; i < n; i++) {
    ref[2 * i] = (int64_t)p[i].numel;
    ref[2 * i + 1] = (int64_t)p[i].dtype;
  }
  err = bcast_i64(g, ref, 2 * n, 0);
  if (err)
    goto out;
  for (i = 0; i < n; i++)
    if (ref[2 * i] != (int64_t)p[i].numel ||
        ref[2 * i + 1] != (int64_t)p[i].dtype)
      break;
  mine[0] = (int64_t)i;
  mine[1] = i < n ? (int64_t)p[i].numel : 0;
  mine[2] = i < n ? (int64_t)p[i].dtype : 0;
  err = gather_i64(g, mine, 3, all);
  if (err)
    goto out;
  for (i = 0; i < w; i++)
    if ((size_t)all[3 * i] < best) {
      best = (size_t)all[3 * i];
      who = (int)i;
    }
  if (who < 0)    /* cannot happen: the hashes differed */
    err = pg__fail(-EINVAL, "the ranks' parameter lists differ");
  else
    err = pg__fail(-EINVAL, "parameter %zu: rank %d has %lld x %s, rank 0 "
                   "has %lld x %s", best, who, (long long)all[3 * who + 1],
                   dtype_name(all[3 * who + 2]), (long long)ref[2 * best],
                   dtype_name(ref[2 * best + 1]));
out:
  free(ref);
  free(all);
  return err;
}

/* Note [reducer made during a death]: in live mode, a member that dies
 * while the reducers are made (after pg_init, before pg_state_register)
 * cuts the check of the parameter lists short on the others.  Failing
 * there would leave the program nothing to do: pg_recover heals the
 * reducers and state registered, and its replacement makes its reducers
 * alone and heals in pg_state_register.  So the reducer is made anyway
 * (its own arguments were checked) and the group stays failed: the
 * program registers its state, its first collective returns
 * PG_ERR_PEER_LOST, and pg_recover heals as after any death, checking
 * each reducer's parameters against the healing rank's (-EPROTO when
 * they differ).  Every survivor ends the same way, whether or not its
 * all_gather completed before the death. */

/* Collective: every rank takes the same branches, since every rank sees
 * every rank's header, so an invalid argument on one rank fails all of
 * them instead of leaving the others in an all_gather. */
static int verify_params(pg_group *g, const struct pg_param_spec *p,
                         size_t n, int local_err, size_t cap,
                         size_t first_cap, bool no_rebuild)
{
  size_t w = (size_t)pg_size(g), i;
  int64_t hdr[H_LEN], *all = malloc(w * H_LEN * sizeof *all), *h0, *hi;
  int err = 0;

  if (!all)
    return pg__fail(-ENOMEM, "out of memory comparing parameter lists");
  hdr[H_N] = (int64_t)n;
  hdr[H_VALID] = local_err == 0;
  hdr[H_HASH] = local_err ? 0 : (int64_t)spec_hash(p, n);
  hdr[H_CAP] = (int64_t)cap;
  hdr[H_FIRST_CAP] = (int64_t)first_cap;
  hdr[H_NO_REBUILD] = no_rebuild;
  err = gather_i64(g, hdr, H_LEN, all);
  if (err)
    goto out;
  h0 = all;
  for (i = 0; i < w && !err; i++) {
    hi = all + i * H_LEN;
    if (!hi[H_VALID])
      err = pg__fail(-EINVAL, "rank %zu: invalid reducer arguments (see "
                     "that rank's error)", i);
    else if (hi[H_N] != h0[H_N])
      err = pg__fail(-EINVAL, "rank %zu has %lld parameters, rank 0 has "
                     "%lld", i, (long long)hi[H_N], (long long)h0[H_N]);
    else if (hi[H_CAP] != h0[H_CAP] || hi[H_FIRST_CAP] != h0[H_FIRST_CAP])
      err = pg__fail(-EINVAL, "rank %zu has bucket caps %lld/%lld bytes, "
                     "rank 0 has %lld/%lld (PG_BUCKET_CAP_MB or "
                     "PG_FIRST_BUCKET_CAP_MB differ?)", i,
                     (long long)hi[H_CAP], (long long)hi[H_FIRST_CAP],
                     (long long)h0[H_CAP], (long long)h0[H_FIRST_CAP]);
    else if (hi[H_NO_REBUILD] != h0[H_NO_REBUILD])
      err = pg__fail(-EINVAL, "rank %zu has no_rebuild %s, rank 0 has %s",
                     i, hi[H_NO_REBUILD] ? "true" : "false",
                     h0[H_NO_REBUILD] ? "true" : "false");
  }
  if (err)
    goto out;
  for (i = 1; i < w; i++)
    if (all[i * H_LEN + H_HASH] != h0[H_HASH])
      break;
  if (i < w)
    err = name_difference(g, p, n);
out:
  free(all);
  return err;
}

static const struct pg__rebuild_ops reducer_rebuild;

int pg_reducer_create(pg_group *g, const struct pg_param_spec *p, size_t n,
                      const struct pg_reducer_options *o, pg_reducer **out)
{
  struct pg_reducer_options defaults = PG_REDUCER_OPTIONS_INIT;
  const struct pg__hooks *h;
  struct pg_reducer *r;
  size_t cap = 0, first_cap = 0;
  char why[512] = "";
  int local_err, err;

  if (!g || !out)
    return pg__fail(-EINVAL, "pg_reducer_create: NULL group or result");
  *out = NULL;
  if (!o)
    o = &defaults;
  local_err = check_local(p, n, o, &cap, &first_cap);
  if (local_err)
    snprintf(why, sizeof why, "%s", pg_last_error());
  /* A fresh process in a running live job makes its reducer alone: the
   * heal checks it against the survivors' and sends their layout. */
  h = pg__hooks_of(g);
  err = h && h->alone(g) ? 0
        : verify_params(g, p, n, local_err, cap, first_cap, o->no_rebuild);
  if (local_err)
    return pg__fail(local_err, "%s", why);
  if (err == PG_ERR_PEER_LOST && h && h->defer_loss(g)) {
    /* Note [reducer made during a death] */
    h->lost(g);
    err = 0;
  }
  if (err)
    return err;

  r = calloc(1, sizeof *r);
  if (!r)
    return pg__fail(-ENOMEM, "out of memory for the reducer");
  r->g = g;
  r->n = n;
  r->cap = cap;
  r->first_cap = first_cap;
  r->no_rebuild = o->no_rebuild;
  r->p = malloc((n ? n : 1) * sizeof *r->p);
  r->ready = calloc(n ? n : 1, 1);
  r->accumulated = calloc(n ? n : 1, 1);
  r->order = malloc((n ? n : 1) * sizeof *r->order);
  if (!r->p || !r->ready || !r->accumulated || !r->order) {
    err = pg__fail(-ENOMEM, "out of memory for the reducer");
    goto fail;
  }
  if (n)
    memcpy(r->p, p, n * sizeof *p);
  err = layout_build(r, NULL, &r->L);
  if (err)
    goto fail;
  if ((err = pg__rebuild_add(g, &reducer_rebuild, r))) {
    layout_free(g, &r->L);
    goto fail;
  }
  pthread_mutex_init(&r->mu, NULL);
  *out = r;
  return 0;

fail:
  free(r->p);
  free(r->ready);
  free(r->accumulated);
  free(r->order);
  free(r);
  return err;
}

/* ---- iterations ------------------------------------------------------ */

/* Waits for every launched bucket; returns the first error. */
static int wait_all(struct pg_reducer *r)
{
  size_t b;
  int err = 0, e;

  for (b = 0; b < r->L.nb; b++) {
    if (!r->L.b[b].work)
      continue;
    /* No limit: the group's timeout bounds each operation. */
    e = pg_work_wait(r->L.b[b].work, -1);
    pg_work_free(r->L.b[b].work);
    r->L.b[b].work = NULL;
    if (e && !err)
      err = pg__fail(e, "bucket %zu's all-reduce failed: %s", b,
                     pg_strerror(e));
  }
  return err;
}

void pg_reducer_destroy(pg_reducer *r)
{
  if (!r)
    return;
  pthread_mutex_lock(&r->mu);
  wait_all(r);
  pthread_mutex_unlock(&r->mu);
  pg__rebuild_remove(r->g, r);
  layout_free(r->g, &r->L);
  free(r->p);
  free(r->ready);
  free(r->accumulated);
  free(r->order);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* Zeroes every bucket and forgets no_sync accumulations. */
static int zero_locked(struct pg_reducer *r)
{
  size_t b;
  int err = 0;

  for (b = 0; b < r->L.nb && !err; b++)
    err = pg__mem_zero(r->g, r->L.b[b].buf, r->L.b[b].bytes);
  if (!err)
    memset(r->accumulated, 0, r->n ? r->n : 1);
  return err;
}

/* Note [reducer after recovery] below: the zeroing pg_recover owes,
 * before the gradients are seen or used.  A failure breaks the reducer
 * (its gradients are no longer the contract's). */
static int settle_locked(struct pg_reducer *r)
{
  int err;

  if (!r->stale)
    return 0;
  if ((err = zero_locked(r)) != 0) {
    r->broken = err;
    return pg__fail(err, "zeroing the gradients after a recovery failed: "
                    "%s", pg_last_error());
  }
  r->stale = false;
  return 0;
}

void *pg_reducer_grad(pg_reducer *r, size_t i)
{
  void *g = NULL;

  if (!r)
    return NULL;
  pthread_mutex_lock(&r->mu);
  if (i < r->n && settle_locked(r) == 0)
    g = slot(&r->L, i);
  pthread_mutex_unlock(&r->mu);
  return g;
}

static bool in_flight(const struct pg_reducer *r)
{
  size_t b;

  for (b = 0; b < r->L.nb; b++)
    if (r->L.b[b].work)
      return true;
  return false;
}

int pg_reducer_zero_grad(pg_reducer *r)
{
  int err = 0;

  if (!r)
    return pg__fail(-EINVAL, "pg_reducer_zero_grad: NULL reducer");
  pthread_mutex_lock(&r->mu);
  if (in_flight(r))
    err = pg__fail(-EBUSY, "pg_reducer_zero_grad: all-reduces in flight "
                   "(call pg_reducer_finish first)");
  if (!err)
    err = zero_locked(r);
  if (!err)
    r->stale = false;
  pthread_mutex_unlock(&r->mu);
  return err;
}

/* Rebuilds the buckets in the recorded ready order (rank 0's, broadcast so
 * that every rank builds the same layout), keeping gradient contents.
 * rebuilt says what L is, and only that: the heal sends it and a member
 * with the same layout keeps its own (Note [reducer heal]), so a rebuild
 * cut short by a death (its broadcast) must not claim it; broken keeps
 * it from being tried again before the heal. */
static int rebuild(struct pg_reducer *r)
{
  size_t n = r->n, i, es;
  int64_t *wire = malloc((n ? n : 1) * sizeof *wire);
  struct layout nl;
  int err;

  if (!wire)
    return pg__fail(-ENOMEM, "out of memory rebuilding buckets");
  for (i = 0; i < n; i++)
    wire[i] = (int64_t)r->order[i];
  err = bcast_i64(r->g, wire, n, 0);
  for (i = 0; i < n && !err; i++) {
    if (wire[i] < 0 || (uint64_t)wire[i] >= n)
      err = pg__fail(-EPROTO, "rank 0's ready order names parameter %lld "
                     "of %zu", (long long)wire[i], n);
    else
      r->order[i] = (size_t)wire[i];
  }
  free(wire);
  if (!err)
    err = layout_build(r, r->order, &nl);
  if (err)
    return err;
  for (i = 0; i < n && !err; i++) {
    es = pg_dtype_size(r->p[i].dtype);
    if (r->p[i].numel)
      err = pg__mem_copy(r->g, slot(&nl, i), slot(&r->L, i),
                         r->p[i].numel * es);
  }
  if (err) {
    layout_free(r->g, &nl);
    return err;
  }
  layout_free(r->g, &r->L);
  r->L = nl;
  r->rebuilt = true;
  return 0;
}

int pg_reducer_prepare(pg_reducer *r, bool sync)
{
  size_t b;
  int err = 0;

  if (!r)
    return pg__fail(-EINVAL, "pg_reducer_prepare: NULL reducer");
  pthread_mutex_lock(&r->mu);
  if (r->broken) {
    err = pg__fail(r->broken, "the reducer failed to rebuild its buckets; "
                   "destroy it");
    goto out;
  }
  if (r->active && r->sync && r->nmarked) {
    err = pg__fail(-EBUSY, "the previous synchronized iteration was not "
                   "finished (call pg_reducer_finish)");
    goto out;
  }
  if ((err = settle_locked(r)))
    goto out;
  if (r->have_order && !r->rebuilt && !r->no_rebuild) {
    err = rebuild(r);
    if (err) {
      r->broken = err;
      goto out;
    }
  }
  memset(r->ready, 0, r->n ? r->n : 1);
  for (b = 0; b < r->L.nb; b++)
    r->L.b[b].pending = r->L.b[b].nparams;
  r->nmarked = 0;
  r->next_bucket = 0;
  r->err = 0;
  r->sync = sync;
  r->active = true;
  r->recording = sync && !r->have_order && !r->rebuilt && !r->no_rebuild;
  r->norder = 0;
out:
  pthread_mutex_unlock(&r->mu);
  return err;
}

/* Launches every consecutive full bucket from the cursor (Note [bucket
 * launch order]). */
static int launch_ready(struct pg_reducer *r)
{
  struct bucket *b;
  int err;

  while (r->next_bucket < r->L.nb &&
         r->L.b[r->next_bucket].pending == 0) {
    b = &r->L.b[r->next_bucket];
    if (b->count) {
      err = pg_all_reduce_async(r->g, b->buf, b->buf, b->count, b->dtype,
                                PG_AVG, &b->work);
      if (err) {
        /* Launching a later bucket would break the order on this rank;
         * stop here and let finish report it. */
        if (!r->err)
          r->err = err;
        r->next_bucket = r->L.nb;
        return err;
      }
    }
    r->next_bucket++;
  }
  return 0;
}

static int mark_locked(struct pg_reducer *r, size_t i)
{
  r->ready[i] = 1;
  r->nmarked++;
  if (!r->sync) {
    r->accumulated[i] = 1;
    return 0;
  }
  if (r->recording && r->norder < r->n)
    r->order[r->norder++] = i;
  r->L.b[r->L.bucket_of[i]].pending--;
  return launch_ready(r);
}

int pg_reducer_mark_ready(pg_reducer *r, size_t i)
{
  int err;

  if (!r)
    return pg__fail(-EINVAL, "pg_reducer_mark_ready: NULL reducer");
  pthread_mutex_lock(&r->mu);
  if (r->broken)
    err = pg__fail(r->broken, "the reducer failed to rebuild its buckets; "
                   "destroy it");
  else if (!r->active)
    err = pg__fail(-EINVAL, "pg_reducer_mark_ready(%zu) outside an "
                   "iteration (call pg_reducer_prepare first)", i);
  else if (i >= r->n)
    err = pg__fail(-EINVAL, "pg_reducer_mark_ready: parameter %zu of %zu",
                   i, r->n);
  else if (r->ready[i])
    err = pg__fail(-EALREADY, "parameter %zu was already marked ready in "
                   "this iteration", i);
  else
    err = mark_locked(r, i);
  pthread_mutex_unlock(&r->mu);
  return err;
}

/* Holds the mutex while waiting: mark_ready must not race with finish
 * anyway (the backward pass is over), and this keeps a late mark_ready
 * from touching buckets being reduced. */
int pg_reducer_finish(pg_reducer *r)
{
  size_t i;
  int err = 0, e;

  if (!r)
    return pg__fail(-EINVAL, "pg_reducer_finish: NULL reducer");
  pthread_mutex_lock(&r->mu);
  if (r->broken) {
    err = pg__fail(r->broken, "the reducer failed to rebuild its buckets; "
                   "destroy it");
    goto out;
  }
  if (!r->active) {
    err = pg__fail(-EINVAL, "pg_reducer_finish without pg_reducer_prepare");
    goto out;
  }
  r->active = false;
  if (!r->sync)
    goto out;
  /* Unused parameters contribute zeros, so the ranks that did use them
   * get the average over all ranks and nobody waits for a bucket that
   * never fills; one that accumulated a gradient under no_sync
   * contributes that gradient. */
  for (i = 0; i < r->n; i++) {
    if (r->ready[i])
      continue;
    e = r->accumulated[i] ? 0 :
        pg__mem_zero(r->g, slot(&r->L, i),
                     r->p[i].numel * pg_dtype_size(r->p[i].dtype));
    if (e && !r->err)
      r->err = e;
    mark_locked(r, i);
  }
  memset(r->accumulated, 0, r->n ? r->n : 1);
  err = wait_all(r);
  if (r->err)
    err = pg__fail(r->err, "launching an all-reduce failed: %s",
                   pg_strerror(r->err));
  if (r->recording) {
    r->recording = false;
    r->have_order = err == 0 && r->norder == r->n;
  }
out:
  pthread_mutex_unlock(&r->mu);
  return err;
}

/* ---- the rebuild registry (core/hooks.h) ---------------------------------
 * What a membership change (live recovery's pg_recover and heal) does to
 * a reducer, through the registry the reducer put itself in at its
 * create: the layout a heal sends (spec hash, whether rebuilt, the
 * order) and adopting one; the reducer owns all of its state, and the
 * heal only carries it.  The wire: SYNC_HDR + n int64s. */
#define SYNC_HDR 4

static size_t reducer_params(const void *obj)
{
  const struct pg_reducer *r = obj;

  return r->n;
}

static size_t reducer_wire_len(const void *obj)
{
  const struct pg_reducer *r = obj;

  return SYNC_HDR + r->n;
}

/* Note [reducer after recovery]: the contract, in the words of pg.h and
 * libpg(3):
 *
 *   After pg_recover returns, every reducer is between iterations and
 *   every gradient is zero, on every rank (the heal's source included),
 *   whatever phase the failure interrupted: gradients written, added up
 *   under no_sync, being reduced, or averaged and not yet used.  The
 *   interrupted step, with its no_sync iterations, is redone from the
 *   healed state.
 *
 * So a program that adds its gradients (+=) and zeroes them after the
 * optimizer (libpg(3)'s EXAMPLE) and one that zeroes or overwrites them
 * at every step both redo the step exactly as the fault-free run did it:
 * bitwise, in a world of the same size.  Keeping any rank's gradients
 * would add them twice on that rank, and the heal would then spread that
 * rank's parameters to all (issue 30: the source kept its partial
 * gradients, every other rank got zeroed ones).
 *
 * Enforced in two places, neither of them a memory operation while the
 * communicator may be broken (a device memset can queue behind a
 * collective that never ends until the revoke): abandon, at the start of
 * pg_recover on every survivor, marks the gradients stale; the heal's
 * set (reducer_sync_set), on every member, zeroes them; where no heal
 * runs (nobody's state was valid, a failed pg_recover), the first use of
 * the reducer does (settle_locked).  A fresh process's reducer starts zero. */
static void reducer_abandon(void *obj)
{
  struct pg_reducer *r = obj;

  pthread_mutex_lock(&r->mu);
  wait_all(r);
  r->active = false;
  r->recording = false;
  r->norder = 0;
  r->err = 0;
  r->stale = true;
  pthread_mutex_unlock(&r->mu);
}

enum { S_N, S_HASH, S_REBUILT, S_HAVE_ORDER };

static void reducer_sync_get(void *obj, int64_t *wire)
{
  struct pg_reducer *r = obj;
  size_t i;

  pthread_mutex_lock(&r->mu);
  wire[S_N] = (int64_t)r->n;
  wire[S_HASH] = (int64_t)spec_hash(r->p, r->n);
  wire[S_REBUILT] = r->rebuilt;
  wire[S_HAVE_ORDER] = r->have_order;
  for (i = 0; i < r->n; i++)
    wire[SYNC_HDR + i] = (int64_t)r->order[i];
  pthread_mutex_unlock(&r->mu);
}

/* Whether the layout wire describes is r's own: same rebuilt state and,
 * when rebuilt, the same order (the caps were agreed at create). */
static bool same_layout(const struct pg_reducer *r, const int64_t *wire)
{
  size_t i;

  if ((wire[S_REBUILT] != 0) != r->rebuilt)
    return false;
  for (i = 0; i < r->n && r->rebuilt; i++)
    if (wire[SYNC_HDR + i] != (int64_t)r->order[i])
      return false;
  return true;
}

/* Note [reducer heal]: on every member, the source included: the
 * interrupted iteration is abandoned, the buckets become the source's
 * (its recorded order, rebuilt or not yet; a member that has that layout
 * already keeps its bucket memory, so addresses do not move) and the
 * gradients zero (Note [reducer after recovery]), so that every rank
 * issues the same all-reduces from the next prepare on. */
static int reducer_sync_set(void *obj, const int64_t *wire)
{
  struct pg_reducer *r = obj;
  const int64_t *order = wire + SYNC_HDR;
  struct layout nl;
  bool keep;
  size_t i;
  int err = 0;

  pthread_mutex_lock(&r->mu);
  if (wire[S_N] != (int64_t)r->n ||
      wire[S_HASH] != (int64_t)spec_hash(r->p, r->n)) {
    err = pg__fail(-EPROTO, "the heal: the healing rank's reducer has "
                   "other parameters (%lld) than this rank's (%zu)",
                   (long long)wire[S_N], r->n);
    goto out;
  }
  for (i = 0; i < r->n && (wire[S_REBUILT] || wire[S_HAVE_ORDER]); i++)
    if (order[i] < 0 || (uint64_t)order[i] >= r->n) {
      err = pg__fail(-EPROTO, "the heal: the reducer order names "
                     "parameter %lld of %zu", (long long)order[i], r->n);
      goto out;
    }
  keep = same_layout(r, wire);
  for (i = 0; i < r->n && (wire[S_REBUILT] || wire[S_HAVE_ORDER]); i++)
    r->order[i] = (size_t)order[i];
  if (keep) {
    if ((err = zero_locked(r)))
      goto out;
  } else {
    if ((err = layout_build(r, wire[S_REBUILT] ? r->order : NULL, &nl)))
      goto out;
    layout_free(r->g, &r->L);
    r->L = nl;
  }
  r->stale = false;
  r->rebuilt = wire[S_REBUILT] != 0;
  r->have_order = wire[S_HAVE_ORDER] != 0;
  r->broken = 0;
  r->active = false;
  r->recording = false;
  r->norder = 0;
  memset(r->accumulated, 0, r->n ? r->n : 1);
out:
  pthread_mutex_unlock(&r->mu);
  return err;
}

static const struct pg__rebuild_ops reducer_rebuild = {
  reducer_params, reducer_wire_len, reducer_abandon, reducer_sync_get,
  reducer_sync_set,
};

size_t pg_reducer_num_buckets(const pg_reducer *r)
{
  pthread_mutex_t *mu;
  size_t nb;

  if (!r)
    return 0;
  mu = (pthread_mutex_t *)&r->mu;
  pthread_mutex_lock(mu);
  nb = r->L.nb;
  pthread_mutex_unlock(mu);
  return nb;
}

size_t pg_reducer_bucket_of(const pg_reducer *r, size_t i)
{
  pthread_mutex_t *mu;
  size_t b = SIZE_MAX;

  if (!r)
    return b;
  mu = (pthread_mutex_t *)&r->mu;
  pthread_mutex_lock(mu);
  if (i < r->n)
    b = r->L.bucket_of[i];
  pthread_mutex_unlock(mu);
  return b;
}
