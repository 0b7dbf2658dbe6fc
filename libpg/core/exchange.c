/* exchange.c -- an all-gather over the store, for setting backends up. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

#define WATCH_SLICE 0.05

static __thread pg__setup_watch_fn watch_fn;
static __thread void *watch_arg;
static __thread bool watch_err;

void pg__setup_watch(pg__setup_watch_fn fn, void *arg)
{
  watch_fn = fn;
  watch_arg = arg;
}

bool pg__setup_watched(void)
{
  return watch_fn != NULL;
}

int pg__setup_watch_ask(void)
{
  return watch_fn ? watch_fn(watch_arg) : 0;
}

/* 0 while this rank's own key is still in the store, else -EPROTO with
 * a sentence: something deleted it (a hostile or broken client of the
 * live store), so the others' keys may never come either. */
static int still_there(pg_store *st, const char *mine)
{
  void *v = NULL;
  size_t len;
  int err = pg_store_get(st, mine, 0, &v, &len);

  free(v);
  if (err == -ENOENT)
    return pg__fail(-EPROTO, "store: this rank's key '%s' vanished while "
                    "it waited for the others' (deleted from outside)",
                    mine);
  return err;
}

/* pg_store_get, in slices when a watch is set, asking between them the
 * watch and whether this rank's own key (mine) is still there
 * (watch_err: one of them said no). */
static int watched_get(pg_store *st, const char *key, const char *mine,
                       double timeout, void **val, size_t *len)
{
  double deadline = pg__now() + timeout, left;
  int err;

  watch_err = false;
  if (!watch_fn)
    return pg_store_get(st, key, timeout, val, len);
  for (;;) {
    left = deadline - pg__now();
    err = pg_store_get(st, key, left < WATCH_SLICE ? (left > 0 ? left : 0)
                                                   : WATCH_SLICE, val, len);
    if (err != -ETIMEDOUT || left <= WATCH_SLICE)
      return err;
    if ((err = watch_fn(watch_arg)) != 0 ||
        (err = still_there(st, mine)) != 0) {
      watch_err = true;
      return err;
    }
  }
}

int pg__store_allgather(pg_store *st, const char *ns, const char *prefix,
                        int me, int n, const void *value, size_t len,
                        double timeout, void **vals, size_t *lens)
{
  char full[4096], mine[4096];
  int i, err;

  for (i = 0; i < n; i++)
    vals[i] = NULL;
  snprintf(mine, sizeof mine, "%s%s%d", ns, prefix, me);
  err = pg_store_set(st, mine, value, len);
  if (err)
    return pg__fail(err, "store: cannot publish '%s': %s", mine,
                    pg_strerror(err));
  for (i = 0; i < n; i++) {
    snprintf(full, sizeof full, "%s%s%d", ns, prefix, i);
    err = watched_get(st, full, mine, timeout, &vals[i], &lens[i]);
    if (err && watch_err) {
      pg__free_vals(vals, i);
      return err;
    }
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
