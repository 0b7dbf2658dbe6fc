/* exchange.c -- an all-gather over the store, for setting backends up. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

int pg__store_allgather(pg_store *st, const char *ns, const char *prefix,
                        int me, int n, const void *value, size_t len,
                        double timeout, void **vals, size_t *lens)
{
  char full[4096];
  int i, err;

  for (i = 0; i < n; i++)
    vals[i] = NULL;
  snprintf(full, sizeof full, "%s%s%d", ns, prefix, me);
  err = pg_store_set(st, full, value, len);
  if (err)
    return pg__fail(err, "store: cannot publish '%s': %s", full,
                    pg_strerror(err));
  for (i = 0; i < n; i++) {
    snprintf(full, sizeof full, "%s%s%d", ns, prefix, i);
    err = pg_store_get(st, full, timeout, &vals[i], &lens[i]);
    if (err) {
      pg__free_vals(vals, i);
      return pg__fail(err, "store: waiting for '%s': %s", full,
                      pg_strerror(err));
    }
  }
  return 0;
}

void pg__free_vals(void **vals, int n)
{
  int i;

  for (i = 0; vals && i < n; i++) {
    free(vals[i]);
    vals[i] = NULL;
  }
}
