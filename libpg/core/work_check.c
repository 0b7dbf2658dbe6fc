/* work_check.c -- an operation's arguments, checked on the caller's
 * thread before it is queued, so a bad argument is an error at the call
 * and never reaches a backend. */
#include <errno.h>
#include <stdint.h>

#include "group.h"

static int check_all_to_all(pg_group *g, const struct pg_work *w)
{
  size_t n = (size_t)g->size, es = pg_dtype_size(w->dtype), i, sn = 0,
         rn = 0, lim = SIZE_MAX / 8 / n;

  if (!w->send_counts != !w->recv_counts)
    return pg__fail(-EINVAL, "all_to_all_v: send_counts and recv_counts "
                    "are both required");
  if (!w->send_counts) {
    if (w->count && (!w->send || !w->recv))
      return pg__fail(-EINVAL, "all_to_all: NULL buffer with count %zu",
                      w->count);
    if (pg__group_overlap(w->send, w->count * n * es, w->recv,
                          w->count * n * es))
      return pg__fail(-EINVAL, "all_to_all: the send and receive buffers "
                      "overlap (it cannot run in place)");
    return 0;
  }
  for (i = 0; i < n; i++) {
    if (w->send_counts[i] > lim || w->recv_counts[i] > lim ||
        (w->send_displs && w->send_displs[i] > lim) ||
        (w->recv_displs && w->recv_displs[i] > lim))
      return pg__fail(-EINVAL, "all_to_all_v: rank %zu's count or "
                      "displacement is too large", i);
    sn += w->send_counts[i];
    rn += w->recv_counts[i];
  }
  if ((sn && !w->send) || (rn && !w->recv))
    return pg__fail(-EINVAL, "all_to_all_v: NULL %s buffer with %zu "
                    "elements", sn && !w->send ? "send" : "receive",
                    sn && !w->send ? sn : rn);
  if (w->send_counts[g->rank] != w->recv_counts[g->rank])
    return pg__fail(-EINVAL, "all_to_all_v: this rank (%d) sends itself "
                    "%zu elements but expects %zu", g->rank,
                    w->send_counts[g->rank], w->recv_counts[g->rank]);
  return 0;
}

/* gather: recv on the root holds n blocks; scatter: send does.  In
 * place: the root's own block is the other buffer. */
static int check_rooted(pg_group *g, const struct pg_work *w)
{
  const char *what = w->kind == W_GATHER ? "gather" : "scatter";
  size_t bytes = w->count * pg_dtype_size(w->dtype);
  bool root = g->rank == w->root;

  if (w->root < 0 || w->root >= g->size)
    return pg__fail(-EINVAL, "%s: root %d is not a rank of this group of "
                    "%d", what, w->root, g->size);
  if (!w->count)
    return 0;
  if (w->kind == W_GATHER ? !w->send || (root && !w->recv)
                          : !w->recv || (root && !w->send))
    return pg__fail(-EINVAL, "%s: NULL buffer with count %zu", what,
                    w->count);
  if (root && w->kind == W_GATHER &&
      (const char *)w->send != (const char *)w->recv +
                               (size_t)w->root * bytes &&
      pg__group_overlap(w->send, bytes, w->recv, bytes * (size_t)g->size))
    return pg__fail(-EINVAL, "gather: the buffers overlap (in place, send "
                    "is recv + root * count)");
  if (root && w->kind == W_SCATTER &&
      (const char *)w->recv != (const char *)w->send +
                               (size_t)w->root * bytes &&
      pg__group_overlap(w->recv, bytes, w->send, bytes * (size_t)g->size))
    return pg__fail(-EINVAL, "scatter: the buffers overlap (in place, recv "
                    "is send + root * count)");
  return 0;
}

int pg__work_check(pg_group *g, const struct pg_work *w)
{
  if (!g)
    return pg__fail(-EINVAL, "the group is NULL");
  if ((unsigned)w->dtype >= PG_DTYPE_COUNT)
    return pg__fail(-EINVAL, "invalid dtype %d", (int)w->dtype);
  if ((unsigned)w->op >= PG_OP_COUNT)
    return pg__fail(-EINVAL, "invalid reduction op %d", (int)w->op);
  if (w->count > SIZE_MAX / 8 / (size_t)g->size)
    return pg__fail(-EINVAL, "count %zu is too large", w->count);
  if (w->count && (w->kind == W_ALL_REDUCE || w->kind == W_ALL_GATHER ||
                   w->kind == W_REDUCE_SCATTER) && (!w->send || !w->recv))
    return pg__fail(-EINVAL, "NULL buffer with count %zu", w->count);
  if ((w->kind == W_BROADCAST || w->kind == W_REDUCE) &&
      (w->root < 0 || w->root >= g->size))
    return pg__fail(-EINVAL, "root %d is not a rank of this group of %d",
                    w->root, g->size);
  if (w->kind == W_REDUCE && w->count && !w->send)
    return pg__fail(-EINVAL, "reduce: NULL send buffer");
  if (w->kind == W_REDUCE && w->count && g->rank == w->root && !w->recv)
    return pg__fail(-EINVAL, "reduce: NULL receive buffer on the root");
  if ((w->kind == W_SEND || w->kind == W_RECV) &&
      (w->root < 0 || w->root >= g->size || w->root == g->rank))
    return pg__fail(-EINVAL, "peer %d is not another rank of this group "
                    "of %d", w->root, g->size);
  if (w->kind == W_BROADCAST && w->count && !w->recv)
    return pg__fail(-EINVAL, "broadcast: NULL buffer");
  if ((w->kind == W_SEND || w->kind == W_RECV) && w->tag == COMPOSED_TAG)
    return pg__fail(-EINVAL, "tag %d is reserved for libpg's own use",
                    w->tag);
  if (w->kind == W_ALL_TO_ALL)
    return check_all_to_all(g, w);
  if (w->kind == W_GATHER || w->kind == W_SCATTER)
    return check_rooted(g, w);
  return 0;
}
