/* nccl_none.c -- the NCCL backend of a libpg built without CUDA/NCCL. */
#include <errno.h>
#include <stddef.h>

#include "pg_internal.h"

bool pg__nccl_built(void)
{
  return false;
}

int pg__nccl_create(const struct pg__setup *s, struct pg__comm **out)
{
  (void)s;
  *out = NULL;
  return pg__fail(-ENOTSUP, "libpg was built without NCCL (no CUDA/NCCL "
                  "found under CUDA_HOME at build time)");
}
