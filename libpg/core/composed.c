/* composed.c -- one operation run on the group's backend: directly, or
 * composed of other backend operations where the backend cannot take it
 * as it is: a group of one copies locally, half-precision reductions go
 * through f32 (Note [half precision]), overlapping gathers through a
 * temporary (Note [in-place gathers]), and all_to_all, gather and scatter
 * are made of point-to-point messages (Note [composed collectives]). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"

/* A group of one: every collective is a local copy. */
static int run_self(struct pg_work *w)
{
  size_t bytes = w->count * pg_dtype_size(w->dtype);

  switch (w->kind) {
  case W_ALL_REDUCE:
  case W_ALL_GATHER:
  case W_REDUCE_SCATTER:
  case W_REDUCE:
    if (w->recv && w->recv != w->send && bytes)
      memmove(w->recv, w->send, bytes);
    return 0;
  case W_BROADCAST:
  case W_BARRIER:
    return 0;
  case W_SEND:
  case W_RECV:
    return pg__fail(-EINVAL, "send/recv: peer %d is this rank", w->root);
  case W_ALL_TO_ALL:
  case W_GATHER:
  case W_SCATTER:
    break;
  }
  return -EINVAL;
}

/* Note [in-place gathers]: NCCL's in-place conventions are all_gather with
 * send == recv + rank * count and reduce_scatter with recv == send + rank *
 * count.  The CPU backends take disjoint buffers (or send == recv for
 * all_reduce/reduce), so an overlapping pair goes through a temporary of
 * count elements here. */
static int run_overlapping(pg_group *g, struct pg_work *w, double deadline)
{
  struct pg__comm *c = g->comm;
  size_t bytes = w->count * pg_dtype_size(w->dtype);
  void *tmp = malloc(bytes);
  int err;

  if (!tmp)
    return pg__fail(-ENOMEM, "out of memory for an in-place %s",
                    w->kind == W_ALL_GATHER ? "all_gather"
                                            : "reduce_scatter");
  if (w->kind == W_ALL_GATHER) {
    memcpy(tmp, w->send, bytes);
    err = c->ops->all_gather(c, tmp, w->recv, w->count, w->dtype, deadline);
  } else {
    err = c->ops->reduce_scatter(c, w->send, tmp, w->count, w->dtype, w->op,
                                 deadline);
    if (err == 0)
      memcpy(w->recv, tmp, bytes);
  }
  free(tmp);
  return err;
}

/* Note [half precision]: f16 and bf16 reductions accumulate in f32 on
 * the CPU backends: their transports add partial results as they go (a
 * ring rounds after every step), so the data is widened to f32 here, the
 * backend reduces f32, and the result is rounded once; AVG divides before
 * that rounding.  So an f16 average of 65504 over 3 ranks is 65504, not
 * +inf.  It costs a temporary and twice the bytes on the wire, for these
 * dtypes only.  MIN and MAX are exact in any precision: not widened. */
static bool widens(const struct pg_work *w)
{
  return (w->dtype == PG_F16 || w->dtype == PG_BF16) && w->count &&
         (w->op == PG_SUM || w->op == PG_AVG || w->op == PG_PROD) &&
         (w->kind == W_ALL_REDUCE || w->kind == W_REDUCE ||
          w->kind == W_REDUCE_SCATTER);
}

static void widen(pg_dtype t, float *dst, const void *src, size_t n)
{
  const uint16_t *h = src;
  size_t i;

  if (t == PG_F16)
    for (i = 0; i < n; i++)
      dst[i] = pg__f16_to_f32(h[i]);
  else
    for (i = 0; i < n; i++)
      dst[i] = pg__bf16_to_f32(h[i]);
}

static void narrow(pg_dtype t, void *dst, const float *src, size_t n)
{
  uint16_t *h = dst;
  size_t i;

  if (t == PG_F16)
    for (i = 0; i < n; i++)
      h[i] = pg__f32_to_f16(src[i]);
  else
    for (i = 0; i < n; i++)
      h[i] = pg__f32_to_bf16(src[i]);
}

static int run_widened(pg_group *g, struct pg_work *w, double deadline)
{
  struct pg__comm *c = g->comm;
  size_t nin = w->kind == W_REDUCE_SCATTER ? w->count * (size_t)g->size
                                           : w->count;
  /* reduce_scatter's output gets its own block after the input. */
  size_t nout = w->kind == W_REDUCE_SCATTER ? w->count : 0;
  float *in = malloc((nin + nout) * sizeof *in), *out;
  int err;

  if (!in)
    return pg__fail(-ENOMEM, "out of memory widening %zu %s elements to "
                    "f32", nin, w->dtype == PG_F16 ? "f16" : "bf16");
  widen(w->dtype, in, w->send, nin);
  out = in;
  switch (w->kind) {
  case W_ALL_REDUCE:
    err = c->ops->all_reduce(c, in, in, w->count, PG_F32, w->op, deadline);
    break;
  case W_REDUCE:
    err = c->ops->reduce(c, in, in, w->count, PG_F32, w->op, w->root,
                         deadline);
    break;
  default:  /* W_REDUCE_SCATTER */
    out = in + nin;
    err = c->ops->reduce_scatter(c, in, out, w->count, PG_F32, w->op,
                                 deadline);
    break;
  }
  if (!err && w->recv && (w->kind != W_REDUCE || g->rank == w->root))
    narrow(w->dtype, w->recv, out, w->count);
  free(in);
  return err;
}

/* Note [composed collectives]: all_to_all, gather and scatter are made of
 * point-to-point messages (tag COMPOSED_TAG) on every backend.  The CPU
 * backends exchange pairwise: at step s every rank sends to rank + s and
 * receives from rank - s; a send waiting for room drains what arrives
 * meanwhile (shm and TCP), so the cycle of sends cannot deadlock, and a
 * rank holds at most one step's blocks in flight.  NCCL issues every send
 * and receive (its own block included: NCCL sends to itself inside a
 * group) in one ncclGroupStart/End, as torch's alltoall does. */
struct blocks {
  size_t *scount, *sdispl, *rcount, *rdispl;  /* [n] elements */
};

static void blocks_free(struct blocks *b)
{
  free(b->scount);
}

/* Every rank's block of the send and receive buffers, in elements. */
static int blocks_of(const pg_group *g, const struct pg_work *w,
                     struct blocks *b)
{
  size_t n = (size_t)g->size, i, so = 0, ro = 0;

  b->scount = malloc(4 * n * sizeof *b->scount);
  if (!b->scount)
    return pg__fail(-ENOMEM, "out of memory for %zu ranks' blocks", n);
  b->sdispl = b->scount + n;
  b->rcount = b->sdispl + n;
  b->rdispl = b->rcount + n;
  for (i = 0; i < n; i++) {
    b->scount[i] = w->send_counts ? w->send_counts[i] : w->count;
    b->rcount[i] = w->recv_counts ? w->recv_counts[i] : w->count;
    b->sdispl[i] = w->send_displs ? w->send_displs[i] : so;
    b->rdispl[i] = w->recv_displs ? w->recv_displs[i] : ro;
    so = b->sdispl[i] + b->scount[i];
    ro = b->rdispl[i] + b->rcount[i];
  }
  return 0;
}

static int send_block(pg_group *g, const char *base, size_t off,
                      size_t count, size_t es, int peer, double deadline)
{
  return g->comm->ops->send(g->comm, base + off * es, count * es, peer,
                            COMPOSED_TAG, deadline);
}

static int recv_block(pg_group *g, char *base, size_t off, size_t count,
                      size_t es, int peer, double deadline)
{
  return g->comm->ops->recv(g->comm, base + off * es, count * es, peer,
                            COMPOSED_TAG, deadline);
}

static int run_all_to_all(pg_group *g, const struct pg_work *w,
                          const struct blocks *b, bool grouped,
                          double deadline)
{
  size_t es = pg_dtype_size(w->dtype);
  int n = g->size, me = g->rank, s, to, from, err = 0;

  if (!grouped && b->scount[me] && w->recv)
    memmove((char *)w->recv + b->rdispl[me] * es,
            (const char *)w->send + b->sdispl[me] * es, b->scount[me] * es);
  for (s = grouped ? 0 : 1; s < n && !err; s++) {
    to = (me + s) % n;
    from = (me - s + n) % n;
    err = send_block(g, w->send, b->sdispl[to], b->scount[to], es, to,
                     deadline);
    if (!err)
      err = recv_block(g, w->recv, b->rdispl[from], b->rcount[from], es,
                       from, deadline);
  }
  return err;
}

/* gather (to_root) or scatter: the root's buffer holds n blocks of
 * count; its own block is copied unless it is in place. */
static int run_rooted(pg_group *g, const struct pg_work *w, bool grouped,
                      double deadline)
{
  size_t es = pg_dtype_size(w->dtype), bytes = w->count * es;
  bool gather = w->kind == W_GATHER;
  int r, err = 0;

  if (g->rank != w->root)
    return gather ? send_block(g, w->send, 0, w->count, es, w->root,
                               deadline)
                  : recv_block(g, w->recv, 0, w->count, es, w->root,
                               deadline);
  for (r = 0; r < g->size && !err; r++) {
    const char *src = gather ? w->send
                             : (const char *)w->send + (size_t)r * bytes;
    char *dst = gather ? (char *)w->recv + (size_t)r * bytes : w->recv;

    if (r == w->root) {
      if (src == dst || !bytes)
        continue;  /* in place */
      if (!grouped) {
        memmove(dst, src, bytes);
        continue;
      }
      /* NCCL: to itself, inside the group. */
      err = send_block(g, src, 0, w->count, es, r, deadline);
      if (!err)
        err = recv_block(g, dst, 0, w->count, es, r, deadline);
      continue;
    }
    err = gather ? recv_block(g, dst, 0, w->count, es, r, deadline)
                 : send_block(g, src, 0, w->count, es, r, deadline);
  }
  return err;
}

static int run_composed(pg_group *g, struct pg_work *w, double deadline)
{
  struct pg__comm *c = g->comm;
  bool grouped = c && pg__group_stream_ordered(g);
  struct blocks b = { 0 };
  int err, e;

  if (w->kind == W_ALL_TO_ALL && (err = blocks_of(g, w, &b)))
    return err;
  if (!c) {
    /* A group of one: its own block. */
    size_t es = pg_dtype_size(w->dtype);
    size_t n = w->kind == W_ALL_TO_ALL ? b.scount[0] : w->count;
    const char *src = (const char *)w->send +
                      (w->kind == W_ALL_TO_ALL ? b.sdispl[0] : 0) * es;
    char *dst = (char *)w->recv +
                (w->kind == W_ALL_TO_ALL ? b.rdispl[0] : 0) * es;

    if (n && src != dst)
      memmove(dst, src, n * es);
    blocks_free(&b);
    return 0;
  }
  if (grouped && (err = c->ops->group_start(c))) {
    blocks_free(&b);
    return err;
  }
  err = w->kind == W_ALL_TO_ALL ? run_all_to_all(g, w, &b, grouped, deadline)
                                : run_rooted(g, w, grouped, deadline);
  if (grouped) {
    e = c->ops->group_end(c);
    if (!err)
      err = e;
  }
  blocks_free(&b);
  return err;
}

int pg__composed_run(pg_group *g, struct pg_work *w)
{
  struct pg__comm *c = g->comm;
  double deadline = pg__now() + g->timeout;
  size_t bytes = w->count * pg_dtype_size(w->dtype);
  size_t all = bytes * (size_t)g->size;

  if (w->kind == W_ALL_TO_ALL || w->kind == W_GATHER ||
      w->kind == W_SCATTER)
    return run_composed(g, w, deadline);
  if (!c)
    return run_self(w);
  if (!c->ops->half_reductions && widens(w))
    return run_widened(g, w, deadline);
  if (!c->ops->in_place_gathers &&
      ((w->kind == W_ALL_GATHER &&
        pg__group_overlap(w->send, bytes, w->recv, all)) ||
       (w->kind == W_REDUCE_SCATTER &&
        pg__group_overlap(w->send, all, w->recv, bytes))))
    return run_overlapping(g, w, deadline);
  switch (w->kind) {
  case W_ALL_REDUCE:
    return c->ops->all_reduce(c, w->send, w->recv, w->count, w->dtype,
                              w->op, deadline);
  case W_BROADCAST:
    return c->ops->broadcast(c, w->recv, w->count, w->dtype, w->root,
                             deadline);
  case W_REDUCE:
    return c->ops->reduce(c, w->send, w->recv, w->count, w->dtype, w->op,
                          w->root, deadline);
  case W_ALL_GATHER:
    return c->ops->all_gather(c, w->send, w->recv, w->count, w->dtype,
                              deadline);
  case W_REDUCE_SCATTER:
    return c->ops->reduce_scatter(c, w->send, w->recv, w->count, w->dtype,
                                  w->op, deadline);
  case W_BARRIER:
    return c->ops->barrier(c, deadline);
  case W_SEND:
    return c->ops->send(c, w->send, bytes, w->root, w->tag, deadline);
  case W_RECV:
    return c->ops->recv(c, w->recv, bytes, w->root, w->tag, deadline);
  case W_ALL_TO_ALL:
  case W_GATHER:
  case W_SCATTER:
    break;
  }
  return -EINVAL;
}
