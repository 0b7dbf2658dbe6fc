/* api.c -- the public operations of pg.h: each describes one pg_work and
 * submits it (work.c); the synchronous forms are the async ones without a
 * handle.  And the group's accessors. */
#include <errno.h>

#include "group.h"

#define WORK(kind_, send_, recv_, count_, dtype_, op_, root_, tag_)        \
  (struct pg_work){ .kind = (kind_), .send = (send_), .recv = (recv_),    \
                    .count = (count_), .dtype = (dtype_), .op = (op_),    \
                    .root = (root_), .tag = (tag_) }

int pg_all_reduce_async(pg_group *g, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_op op, pg_work **w)
{
  struct pg_work p = WORK(W_ALL_REDUCE, send, recv, count, t, op, 0, 0);

  return pg__work_submit(g, &p, w);
}

int pg_broadcast_async(pg_group *g, void *buf, size_t count, pg_dtype t,
                       int root, pg_work **w)
{
  struct pg_work p = WORK(W_BROADCAST, buf, buf, count, t, PG_SUM, root, 0);

  return pg__work_submit(g, &p, w);
}

int pg_reduce_async(pg_group *g, const void *send, void *recv, size_t count,
                    pg_dtype t, pg_op op, int root, pg_work **w)
{
  struct pg_work p = WORK(W_REDUCE, send, recv, count, t, op, root, 0);

  return pg__work_submit(g, &p, w);
}

int pg_all_gather_async(pg_group *g, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_work **w)
{
  struct pg_work p = WORK(W_ALL_GATHER, send, recv, count, t, PG_SUM, 0, 0);

  return pg__work_submit(g, &p, w);
}

int pg_reduce_scatter_async(pg_group *g, const void *send, void *recv,
                            size_t count, pg_dtype t, pg_op op, pg_work **w)
{
  struct pg_work p = WORK(W_REDUCE_SCATTER, send, recv, count, t, op, 0, 0);

  return pg__work_submit(g, &p, w);
}

int pg_barrier_async(pg_group *g, pg_work **w)
{
  struct pg_work p = WORK(W_BARRIER, NULL, NULL, 0, PG_U8, PG_SUM, 0, 0);

  return pg__work_submit(g, &p, w);
}

int pg_send_async(pg_group *g, const void *buf, size_t count, pg_dtype t,
                  int peer, int tag, pg_work **w)
{
  struct pg_work p = WORK(W_SEND, buf, NULL, count, t, PG_SUM, peer, tag);

  return pg__work_submit(g, &p, w);
}

int pg_recv_async(pg_group *g, void *buf, size_t count, pg_dtype t,
                  int peer, int tag, pg_work **w)
{
  struct pg_work p = WORK(W_RECV, NULL, buf, count, t, PG_SUM, peer, tag);

  return pg__work_submit(g, &p, w);
}

int pg_all_reduce(pg_group *g, const void *send, void *recv, size_t count,
                  pg_dtype t, pg_op op)
{
  return pg_all_reduce_async(g, send, recv, count, t, op, NULL);
}

int pg_broadcast(pg_group *g, void *buf, size_t count, pg_dtype t, int root)
{
  return pg_broadcast_async(g, buf, count, t, root, NULL);
}

int pg_reduce(pg_group *g, const void *send, void *recv, size_t count,
              pg_dtype t, pg_op op, int root)
{
  return pg_reduce_async(g, send, recv, count, t, op, root, NULL);
}

int pg_all_gather(pg_group *g, const void *send, void *recv, size_t count,
                  pg_dtype t)
{
  return pg_all_gather_async(g, send, recv, count, t, NULL);
}

int pg_reduce_scatter(pg_group *g, const void *send, void *recv,
                      size_t count, pg_dtype t, pg_op op)
{
  return pg_reduce_scatter_async(g, send, recv, count, t, op, NULL);
}

int pg_barrier(pg_group *g)
{
  return pg_barrier_async(g, NULL);
}

int pg_send(pg_group *g, const void *buf, size_t count, pg_dtype t, int peer,
            int tag)
{
  return pg_send_async(g, buf, count, t, peer, tag, NULL);
}

int pg_recv(pg_group *g, void *buf, size_t count, pg_dtype t, int peer,
            int tag)
{
  return pg_recv_async(g, buf, count, t, peer, tag, NULL);
}

int pg_all_to_all_async(pg_group *g, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_work **w)
{
  struct pg_work p = WORK(W_ALL_TO_ALL, send, recv, count, t, PG_SUM, 0, 0);

  return pg__work_submit(g, &p, w);
}

int pg_all_to_all_v_async(pg_group *g, const void *send,
                          const size_t *send_counts,
                          const size_t *send_displs, void *recv,
                          const size_t *recv_counts,
                          const size_t *recv_displs, pg_dtype t,
                          pg_work **w)
{
  struct pg_work p = WORK(W_ALL_TO_ALL, send, recv, 0, t, PG_SUM, 0, 0);

  if (!send_counts || !recv_counts)
    return pg__fail(-EINVAL, "all_to_all_v: NULL counts");
  p.send_counts = send_counts;
  p.send_displs = send_displs;
  p.recv_counts = recv_counts;
  p.recv_displs = recv_displs;
  return pg__work_submit(g, &p, w);
}

int pg_gather_async(pg_group *g, const void *send, void *recv, size_t count,
                    pg_dtype t, int root, pg_work **w)
{
  struct pg_work p = WORK(W_GATHER, send, recv, count, t, PG_SUM, root, 0);

  return pg__work_submit(g, &p, w);
}

int pg_scatter_async(pg_group *g, const void *send, void *recv,
                     size_t count, pg_dtype t, int root, pg_work **w)
{
  struct pg_work p = WORK(W_SCATTER, send, recv, count, t, PG_SUM, root, 0);

  return pg__work_submit(g, &p, w);
}

int pg_all_to_all(pg_group *g, const void *send, void *recv, size_t count,
                  pg_dtype t)
{
  return pg_all_to_all_async(g, send, recv, count, t, NULL);
}

int pg_all_to_all_v(pg_group *g, const void *send, const size_t *send_counts,
                    const size_t *send_displs, void *recv,
                    const size_t *recv_counts, const size_t *recv_displs,
                    pg_dtype t)
{
  return pg_all_to_all_v_async(g, send, send_counts, send_displs, recv,
                               recv_counts, recv_displs, t, NULL);
}

int pg_gather(pg_group *g, const void *send, void *recv, size_t count,
              pg_dtype t, int root)
{
  return pg_gather_async(g, send, recv, count, t, root, NULL);
}

int pg_scatter(pg_group *g, const void *send, void *recv, size_t count,
               pg_dtype t, int root)
{
  return pg_scatter_async(g, send, recv, count, t, root, NULL);
}

int pg_rank(const pg_group *g)
{
  return g->rank;
}

int pg_size(const pg_group *g)
{
  return g->size;
}

const char *pg_backend_name(const pg_group *g)
{
  return g->backend;
}

pg_store *pg_group_store(pg_group *g)
{
  return g->user_store ? g->user_store : g->store;
}
