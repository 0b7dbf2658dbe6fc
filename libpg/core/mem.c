/* mem.c -- the group's memory functions (pg_internal.h): the comm's
 * mem_* where it has them (device memory under NCCL), else host memory,
 * 64-byte aligned. */
#include <stdlib.h>
#include <string.h>

#include "group.h"

void *pg__mem_alloc(pg_group *g, size_t bytes)
{
  struct pg__comm *c = g->comm;
  void *p = NULL;

  if (c && c->ops->mem_alloc)
    return c->ops->mem_alloc(c, bytes);
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
    return NULL;
  return p;
}

void pg__mem_free(pg_group *g, void *p)
{
  struct pg__comm *c = g->comm;

  if (c && c->ops->mem_free)
    c->ops->mem_free(c, p);
  else
    free(p);
}

int pg__mem_zero(pg_group *g, void *p, size_t bytes)
{
  struct pg__comm *c = g->comm;

  if (c && c->ops->mem_zero)
    return c->ops->mem_zero(c, p, bytes);
  memset(p, 0, bytes);
  return 0;
}

int pg__mem_copy(pg_group *g, void *dst, const void *src, size_t bytes)
{
  struct pg__comm *c = g->comm;

  if (c && c->ops->mem_copy)
    return c->ops->mem_copy(c, dst, src, bytes);
  memmove(dst, src, bytes);
  return 0;
}
