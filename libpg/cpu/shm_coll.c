/* shm_coll.c -- the shared-memory communicator's collectives: all_reduce,
 * reduce, reduce_scatter, broadcast, all_gather and barrier, through
 * each rank's buffers in the segment (shm.c).
 *
 * Note [phases]: collectives advance in phases.  Every rank runs the same
 * sequence of phases (it depends only on the op, count, dtype and n) and
 * publishes its own counter seq = number of phases it has entered.  A rank
 * writes data only into its own buffers, and only before publishing the
 * phase the data belongs to; a reader waits until the writer's seq reaches
 * that phase, and finishes reading before it publishes its next phase.
 * So data written in phase v is free again once every rank's seq >= v + 1;
 * each buffer remembers that number (free_at) and a writer waits for it
 * before reusing the buffer (with two buffers, alternated, it almost never
 * waits).  Counters are 32-bit (futex words) and compared modulo 2^32.
 *
 * Note [algorithms]: all_reduce up to small_max bytes: everyone copies its
 * input into its buffer, publishes, and reduces all n buffers in rank order
 * (one phase; every rank computes the same bits).  Larger: a reduce-scatter
 * + all-gather, pipelined in chunks of up to n slices (a chunk of every
 * rank fits its buffer, which stays in cache); per chunk, phase A: copy the
 * slices the other ranks reduce into my buffer; phase B: reduce my slice
 * (in rank order: the serial left fold, so every element has one writer
 * and all ranks get the same bits) into my own buffer's slice and, while
 * it is in cache, into my output; then copy the other slices out.  reduce
 * is the same with only the root reducing (small) or copying out (large);
 * reduce_scatter is phase A plus reducing straight into recv; broadcast
 * and all_gather copy through the writer's buffer, one phase per chunk. */
#include <errno.h>
#include <string.h>

#include "pg_internal.h"
#include "shm_internal.h"

static inline char *buf_of(struct shm_comm *c, int r, int b)
{
  return c->bufs + ((size_t)r * NBUF + (size_t)b) * c->buf;
}

/* ---- phases (Note [phases]) ----------------------------------------------- */

static inline void phase(struct shm_comm *c)
{
  c->seq++;
  publish(&c->rk[c->me].seq, &c->rk[c->me].waiters, c->seq);
}

static int wait_rank(struct shm_comm *c, int r, uint32_t target,
                     double deadline)
{
  return shm_wait_ge(c, &c->rk[r].seq, &c->rk[r].waiters, target, r, deadline);
}

static int wait_all(struct shm_comm *c, uint32_t target, double deadline)
{
  int r, err;

  for (r = 0; r < c->n; r++)
    if (r != c->me && (err = wait_rank(c, r, target, deadline)) != 0)
      return err;
  return 0;
}

/* The next buffer index, once every reader of its last contents is done. */
static int next_buf(struct shm_comm *c, double deadline, int *err)
{
  int b = (int)(c->chunk++ % NBUF);

  *err = wait_all(c, c->free_at[b], deadline);
  return b;
}

/* dst = srcs[0] op srcs[1] op ... in that order.  dst must not alias a
 * source other than srcs[0] or srcs[1] (the callers give disjoint ones). */
static void reduce_n(pg_dtype t, pg_op op, void *dst, const void *const *srcs,
                     int n, size_t count)
{
  int i;

  if (n == 1) {
    if (dst != srcs[0])
      memmove(dst, srcs[0], count * pg_dtype_size(t));
    return;
  }
  pg__reduce3(t, op, dst, srcs[0], srcs[1], count);
  for (i = 2; i < n; i++)
    pg__reduce(t, op, dst, srcs[i], count);
}

static bool valid(pg_dtype t, pg_op op)
{
  return (unsigned)t < PG_DTYPE_COUNT && (unsigned)op < PG_OP_COUNT;
}

/* Slices of a chunk: elements [r * s, min((r + 1) * s, c)) for rank r. */
static inline size_t slice_len(size_t c, size_t s, int r)
{
  size_t lo = (size_t)r * s;

  return lo >= c ? 0 : (c - lo < s ? c - lo : s);
}

/* Elements per slice for a chunk of c, at most smax, a multiple of 16
 * where that fits (whole vectors, whole cache lines). */
static inline size_t slice_of(size_t c, int n, size_t smax)
{
  size_t s = (c + (size_t)n - 1) / (size_t)n;

  s = (s + 15) & ~(size_t)15;
  return s < smax ? s : smax;
}

static size_t slice_max(struct shm_comm *c, size_t esz)
{
  size_t s = c->buf / ((size_t)c->n * esz);

  return s >= 16 ? s & ~(size_t)15 : s;
}
/* ---- all_reduce / reduce -------------------------------------------------------- */

/* One phase: everyone publishes its whole input; all (or only root >= 0)
 * reduce all n buffers in rank order. */
static int reduce_small(struct shm_comm *c, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_op op, int root,
                        double deadline)
{
  size_t bytes = count * pg_dtype_size(t);
  const void *srcs[c->n];
  int b, r, err;

  b = next_buf(c, deadline, &err);
  if (err)
    return err;
  memcpy(buf_of(c, c->me, b), send, bytes);
  phase(c);
  c->free_at[b] = c->seq + 1;
  if (root >= 0 && root != c->me)
    return 0;
  if ((err = wait_all(c, c->seq, deadline)) != 0)
    return err;
  for (r = 0; r < c->n; r++)
    srcs[r] = buf_of(c, r, b);
  reduce_n(t, op, recv, srcs, c->n, count);
  if (op == PG_AVG)
    pg__avg_finish(t, recv, count, c->n);
  return 0;
}

/* Chunked reduce-scatter + all-gather (root < 0) or + gather to root. */
static int reduce_large(struct shm_comm *c, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_op op, int root,
                        double deadline)
{
  size_t esz = pg_dtype_size(t), smax = slice_max(c, esz);
  size_t chunk = smax * (size_t)c->n, off, cn, s, lo, m;
  const char *in = send;
  char *out = recv;
  const void *srcs[c->n];
  int b, r, err, me = c->me;

  for (off = 0; off < count; off += cn) {
    char *mine;

    cn = count - off < chunk ? count - off : chunk;
    s = slice_of(cn, c->n, smax);
    b = next_buf(c, deadline, &err);
    if (err)
      return err;
    mine = buf_of(c, me, b);
    /* Phase A: the slices the others reduce. */
    for (r = 0; r < c->n; r++)
      if (r != me && (m = slice_len(cn, s, r)) != 0)
        memcpy(mine + (size_t)r * s * esz, in + (off + (size_t)r * s) * esz,
               m * esz);
    phase(c);
    if ((err = wait_all(c, c->seq, deadline)) != 0)
      return err;
    /* Phase B: my slice, in rank order, into my own buffer (and, while
     * it is still in cache, into my output). */
    lo = (size_t)me * s;
    if ((m = slice_len(cn, s, me)) != 0) {
      for (r = 0; r < c->n; r++)
        srcs[r] = r == me ? in + (off + lo) * esz : buf_of(c, r, b) + lo * esz;
      reduce_n(t, op, mine + lo * esz, srcs, c->n, m);
      if (op == PG_AVG)
        pg__avg_finish(t, mine + lo * esz, m, c->n);
      if (root < 0 || root == me)
        memcpy(out + (off + lo) * esz, mine + lo * esz, m * esz);
    }
    phase(c);
    c->free_at[b] = c->seq + 1;
    if (root >= 0 && root != me)
      continue;
    if ((err = wait_all(c, c->seq, deadline)) != 0)
      return err;
    for (r = 0; r < c->n; r++)
      if (r != me && (m = slice_len(cn, s, r)) != 0)
        memcpy(out + (off + (size_t)r * s) * esz,
               buf_of(c, r, b) + (size_t)r * s * esz, m * esz);
  }
  return 0;
}

int shm_all_reduce(struct pg__comm *pc, const void *send, void *recv,
                   size_t count, pg_dtype t, pg_op op, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  size_t bytes = count * pg_dtype_size(t);
  int err;

  if (!valid(t, op))
    return pg__fail(-EINVAL, "shm: all_reduce: bad dtype or op");
  if ((err = shm_ok_before(c)) != 0 || count == 0)
    return err;
  c->what = "all_reduce";
  if (c->n == 1) {
    if (recv != send)
      memmove(recv, send, bytes);
    return 0;
  }
  if (bytes <= c->small_max)
    return reduce_small(c, send, recv, count, t, op, -1, deadline);
  return reduce_large(c, send, recv, count, t, op, -1, deadline);
}

int shm_reduce(struct pg__comm *pc, const void *send, void *recv,
               size_t count, pg_dtype t, pg_op op, int root,
               double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  size_t bytes = count * pg_dtype_size(t);
  int err;

  if (!valid(t, op) || root < 0 || root >= c->n)
    return pg__fail(-EINVAL, "shm: reduce: bad dtype, op or root %d", root);
  if ((err = shm_ok_before(c)) != 0 || count == 0)
    return err;
  c->what = "reduce";
  if (c->n == 1) {
    if (recv != send)
      memmove(recv, send, bytes);
    return 0;
  }
  if (bytes <= c->small_max)
    return reduce_small(c, send, recv, count, t, op, root, deadline);
  return reduce_large(c, send, recv, count, t, op, root, deadline);
}

/* ---- reduce_scatter ------------------------------------------------------------ */

int shm_reduce_scatter(struct pg__comm *pc, const void *send,
                       void *recv, size_t count, pg_dtype t, pg_op op,
                       double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  size_t esz = pg_dtype_size(t), cap, off, m;
  const char *in = send;
  char *out = recv;
  const void *srcs[c->n];
  int b, r, err, me = c->me;

  if (!valid(t, op))
    return pg__fail(-EINVAL, "shm: reduce_scatter: bad dtype or op");
  if ((err = shm_ok_before(c)) != 0 || count == 0)
    return err;
  c->what = "reduce_scatter";
  if (c->n == 1) {
    if (recv != send)
      memmove(recv, send, count * esz);
    return 0;
  }
  cap = c->buf / ((size_t)c->n * esz);
  for (off = 0; off < count; off += m) {
    char *mine, *dst = out + off * esz;
    bool overlap;

    m = count - off < cap ? count - off : cap;
    b = next_buf(c, deadline, &err);
    if (err)
      return err;
    mine = buf_of(c, me, b);
    for (r = 0; r < c->n; r++)
      if (r != me)
        memcpy(mine + (size_t)r * cap * esz,
               in + ((size_t)r * count + off) * esz, m * esz);
    phase(c);
    c->free_at[b] = c->seq + 1;
    if ((err = wait_all(c, c->seq, deadline)) != 0)
      return err;
    for (r = 0; r < c->n; r++)
      srcs[r] = r == me ? in + ((size_t)me * count + off) * esz
                        : buf_of(c, r, b) + (size_t)me * cap * esz;
    /* recv overlapping send: accumulate in my own (unused) slice. */
    overlap = (uintptr_t)out < (uintptr_t)in + (size_t)c->n * count * esz &&
              (uintptr_t)in < (uintptr_t)out + count * esz;
    if (overlap) {
      char *acc = mine + (size_t)me * cap * esz;

      reduce_n(t, op, acc, srcs, c->n, m);
      memcpy(dst, acc, m * esz);
    } else
      reduce_n(t, op, dst, srcs, c->n, m);
    if (op == PG_AVG)
      pg__avg_finish(t, dst, m, c->n);
  }
  return 0;
}

/* ---- broadcast / all_gather ---------------------------------------------------- */

int shm_broadcast(struct pg__comm *pc, void *buf, size_t count,
                  pg_dtype t, int root, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  size_t bytes = count * pg_dtype_size(t), off, m;
  char *p = buf;
  int b, err;

  if ((unsigned)t >= PG_DTYPE_COUNT || root < 0 || root >= c->n)
    return pg__fail(-EINVAL, "shm: broadcast: bad dtype or root %d", root);
  if ((err = shm_ok_before(c)) != 0 || count == 0 || c->n == 1)
    return err;
  c->what = "broadcast";
  for (off = 0; off < bytes; off += m) {
    m = bytes - off < c->buf ? bytes - off : c->buf;
    if (c->me == root) {
      b = next_buf(c, deadline, &err);
      if (err)
        return err;
      memcpy(buf_of(c, root, b), p + off, m);
      phase(c);
      c->free_at[b] = c->seq + 1;
    } else {
      b = (int)(c->chunk++ % NBUF);
      phase(c);
      if ((err = wait_rank(c, root, c->seq, deadline)) != 0)
        return err;
      memcpy(p + off, buf_of(c, root, b), m);
    }
  }
  return 0;
}

int shm_all_gather(struct pg__comm *pc, const void *send, void *recv,
                   size_t count, pg_dtype t, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  size_t bytes = count * pg_dtype_size(t), off, m;
  const char *in = send;
  char *out = recv;
  int b, r, err;

  if ((unsigned)t >= PG_DTYPE_COUNT)
    return pg__fail(-EINVAL, "shm: all_gather: bad dtype");
  if ((err = shm_ok_before(c)) != 0 || count == 0)
    return err;
  c->what = "all_gather";
  for (off = 0; off < bytes; off += m) {
    char *own = out + (size_t)c->me * bytes + off;

    m = bytes - off < c->buf ? bytes - off : c->buf;
    if (c->n > 1) {
      b = next_buf(c, deadline, &err);
      if (err)
        return err;
      memcpy(buf_of(c, c->me, b), in + off, m);
      phase(c);
      c->free_at[b] = c->seq + 1;
    } else
      b = 0;
    if (own != in + off)
      memmove(own, in + off, m);
    for (r = 0; r < c->n; r++) {
      if (r == c->me)
        continue;
      if ((err = wait_rank(c, r, c->seq, deadline)) != 0)
        return err;
      memcpy(out + (size_t)r * bytes + off, buf_of(c, r, b), m);
    }
  }
  return 0;
}

int shm_barrier(struct pg__comm *pc, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  int err;

  if ((err = shm_ok_before(c)) != 0 || c->n == 1)
    return err;
  c->what = "barrier";
  phase(c);
  return wait_all(c, c->seq, deadline);
}
