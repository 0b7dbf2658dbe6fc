/* subgroup.c -- pg_new_group and pg_split (Note [sub-groups]). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"

/* Note [sub-groups]: pg_new_group and pg_split are called by every rank
 * of the parent in the same order, so each rank's count of the parent's
 * children names a child alike everywhere: "<parent's ns>g<k>/".  The
 * child's backend keys and its user's store view live under that name,
 * so groups never collide in the store.  A child is a group like the
 * world (its own communicator over its members -- shared memory, TCP or
 * hierarchical by where they live, or a new NCCL communicator -- its own
 * progress thread and queue), so two groups run collectives at once from
 * two threads.  It borrows the world's store connection and topology:
 * destroy children before the world group.  In live mode a child is
 * made under the setup watch and recorded with its world, whose
 * pg_recover closes it (Note [live sub-groups] in live/live_hooks.c). */

/* Whether the parent's children are split from its communicator (NCCL's
 * ncclCommSplit, which every parent rank must call, members or not). */
static bool splits(const pg_group *parent)
{
  return parent->comm && parent->comm->ops->split;
}

/* A parent rank outside the new group takes part in the split. */
static int split_nonmember(pg_group *parent)
{
  struct pg__comm *none = NULL;
  int err;

  if (!splits(parent))
    return 0;
  pthread_mutex_lock(&parent->mu);
  err = parent->comm->ops->split(parent->comm, -1, 0, NULL, &none);
  pthread_mutex_unlock(&parent->mu);
  return err;
}

/* The member at position me of n (members: parent ranks) of a new
 * child named ns. */
static int child_create(pg_group *parent, const int *members, int n, int me,
                        int color, int key, const char *ns, pg_group **out)
{
  const struct pg__hooks *h;
  char view[300], what[300];
  pg_group *g = calloc(1, sizeof *g);
  int i, err;

  if (!g)
    return pg__fail(-ENOMEM, "out of memory for a sub-group");
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->queued, NULL);
  pthread_cond_init(&g->finished, NULL);
  g->is_sub = true;
  g->rank = me;
  g->size = n;
  g->timeout = parent->timeout;
  g->store = parent->store;
  g->wtopo = parent->wtopo;
  g->world = parent->is_sub ? parent->world : parent;
  memcpy(g->master_addr, parent->master_addr, sizeof g->master_addr);
  g->token = parent->token;
  snprintf(g->ns, sizeof g->ns, "%s", ns);
  g->all_ranks = calloc((size_t)n, sizeof *g->all_ranks);
  if (!g->all_ranks) {
    err = pg__fail(-ENOMEM, "out of memory for a sub-group");
    goto fail_early;
  }
  for (i = 0; i < n; i++)
    g->all_ranks[i] = parent->all_ranks ? parent->all_ranks[members[i]]
                                        : members[i];
  if (pthread_create(&g->thread, NULL, pg__work_progress_main, g) != 0) {
    err = pg__fail(-EAGAIN, "cannot start a sub-group's progress thread");
    goto fail_early;
  }
  snprintf(view, sizeof view, "%su/", ns);
  if (g->store && (err = pg_store_prefix(g->store, view, &g->user_store)))
    goto fail;
  g->be = parent->be;
  g->device = parent->device;
  g->local_rank = parent->local_rank;
  if (splits(parent)) {
    g->split_from = parent;
    g->split_color = color;
    g->split_key = key;
  }
  if (n == 1 && g->be != PG_BACKEND_NCCL)
    snprintf(g->backend, sizeof g->backend, "self");
  else if ((err = pg__group_create_comm(g, g->be, g->device, g->local_rank)))
    goto fail;
  if ((h = pg__hooks_of(g)) && (err = h->sub_add(g)))
    goto fail;
  *out = g;
  return 0;

fail:
  snprintf(what, sizeof what, "sub-group %s", ns);
  return pg__group_setup_failed(g, err, what);
fail_early:
  pg__group_free_early(g);
  return err;
}

/* The next child's namespace. */
static void child_ns(pg_group *parent, char *ns, size_t len)
{
  snprintf(ns, len, "%sg%d/", parent->ns, ++parent->children);
}

static int cmp_int(const void *a, const void *b)
{
  int x = *(const int *)a, y = *(const int *)b;

  return (x > y) - (x < y);
}

int pg_new_group(pg_group *parent, const int *ranks, int n, pg_group **out)
{
  const struct pg__hooks *h;
  char ns[256];
  int *m, i, me = -1, err;

  if (!out)
    return pg__fail(-EINVAL, "pg_new_group: no place for the group");
  *out = NULL;
  if (!parent || !ranks || n < 1 || n > parent->size)
    return pg__fail(-EINVAL, "pg_new_group: %d ranks of a group of %d",
                    n, parent ? parent->size : 0);
  h = pg__hooks_of(parent);
  if (h && (err = h->refuse(parent, "pg_new_group")))
    return err;
  m = malloc((size_t)n * sizeof *m);
  if (!m)
    return pg__fail(-ENOMEM, "pg_new_group: out of memory");
  memcpy(m, ranks, (size_t)n * sizeof *m);
  qsort(m, (size_t)n, sizeof *m, cmp_int);   /* as torch's new_group */
  for (i = 0; i < n; i++) {
    if (m[i] < 0 || m[i] >= parent->size || (i && m[i] == m[i - 1])) {
      err = pg__fail(-EINVAL, "pg_new_group: rank %d is %s", m[i],
                     m[i] < 0 || m[i] >= parent->size
                       ? "not in the parent group" : "listed twice");
      free(m);
      return err;
    }
    if (m[i] == parent->rank)
      me = i;
  }
  child_ns(parent, ns, sizeof ns);
  /* Members by parent rank: NCCL orders a split by key, then rank. */
  if (h)
    h->setup_watch(parent, true);
  err = me < 0 ? split_nonmember(parent)
               : child_create(parent, m, n, me, 0, parent->rank, ns, out);
  if (h)
    h->setup_watch(parent, false);
  free(m);
  return pg__group_op_err(parent, err);
}

struct split_entry {
  int color, key, rank;
};

static int cmp_split(const void *a, const void *b)
{
  const struct split_entry *x = a, *y = b;

  if (x->key != y->key)
    return (x->key > y->key) - (x->key < y->key);
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Every parent rank's (color, key), all-gathered over the store under
 * the child's namespace. */
static int split_exchange(pg_group *parent, const char *ns, int color,
                          int key, struct split_entry *e)
{
  int n = parent->size, i, err = -ENOMEM;
  char mine[64];
  void **vals = calloc((size_t)n, sizeof *vals);
  size_t *lens = calloc((size_t)n, sizeof *lens);

  if (vals && lens) {
    snprintf(mine, sizeof mine, "%d %d", color, key);
    err = pg__store_allgather(parent->store, ns, "split/", parent->rank, n,
                              mine, strlen(mine), parent->timeout, vals,
                              lens);
  }
  for (i = 0; !err && i < n; i++) {
    char txt[64];

    snprintf(txt, sizeof txt, "%.*s", (int)(lens[i] < 63 ? lens[i] : 63),
             (const char *)vals[i]);
    e[i].rank = i;
    if (sscanf(txt, "%d %d", &e[i].color, &e[i].key) != 2)
      err = pg__fail(-EPROTO, "pg_split: rank %d published '%s'", i, txt);
  }
  if (err == -ENOMEM)
    pg__fail(err, "pg_split: out of memory");
  pg__free_vals(vals, n);
  free(vals);
  free(lens);
  return err;
}

int pg_split(pg_group *parent, int color, int key, pg_group **out)
{
  const struct pg__hooks *h;
  struct split_entry *e;
  char ns[256], cns[300];
  int *m, n = 0, i, me = -1, err;

  if (!out)
    return pg__fail(-EINVAL, "pg_split: no place for the group");
  *out = NULL;
  if (!parent)
    return pg__fail(-EINVAL, "pg_split: NULL parent");
  h = pg__hooks_of(parent);
  if (h && (err = h->refuse(parent, "pg_split")))
    return err;
  child_ns(parent, ns, sizeof ns);
  e = calloc((size_t)parent->size, sizeof *e);
  m = calloc((size_t)parent->size, sizeof *m);
  if (!e || !m) {
    free(e);
    free(m);
    return pg__fail(-ENOMEM, "pg_split: out of memory");
  }
  if (h)
    h->setup_watch(parent, true);
  if (parent->size == 1) {
    e[0] = (struct split_entry){ color, key, 0 };
    err = 0;
  } else {
    err = split_exchange(parent, ns, color, key, e);
  }
  if (!err && color >= 0) {
    qsort(e, (size_t)parent->size, sizeof *e, cmp_split);
    for (i = 0; i < parent->size; i++)
      if (e[i].color == color) {
        if (e[i].rank == parent->rank)
          me = n;
        m[n++] = e[i].rank;
      }
    /* One child per color, each under its own name. */
    snprintf(cns, sizeof cns, "%sc%d/", ns, color);
    err = child_create(parent, m, n, me, color, key, cns, out);
  } else if (!err) {
    err = split_nonmember(parent);
  }
  if (h)
    h->setup_watch(parent, false);
  free(e);
  free(m);
  return pg__group_op_err(parent, err);
}
