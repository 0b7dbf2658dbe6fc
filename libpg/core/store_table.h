/* store_table.h -- the store server's keys: a chained hash table of
 * entries, hashed with a random seed (keys are chosen by whoever connects
 * to the port, and must not be lined up on one chain ahead of time).  The
 * server (store_server.c) hangs its waiting requests on the entries.
 *
 * Note [libpg's own copies] (Makefile): the hash is proto/util's
 * (hashtab_hash_bytes); the table is not proto/util's open-addressing one
 * because the store's differs in shape: entries outlive their value while
 * requests wait on them, a count of key bytes feeds the budgets, and
 * DELETE_PREFIX walks the chains freeing entries as it goes, which
 * backward-shift deletion would reorder under the walk. */
#ifndef PG_STORE_TABLE_H
#define PG_STORE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "pg_internal.h"

struct store_reg;               /* a waiting request's hold on a key */

/* A key.  Entries stay while absent keys have waiters, so a waiter
 * always has something to hang on. */
struct store_entry {
  struct store_entry *next;     /* hash chain */
  uint64_t hash;
  bool present;
  uint8_t *val;
  size_t vlen;
  LIST_HEAD(, store_reg) waiters;
  size_t klen;
  uint8_t key[];
};

struct store_table {
  struct store_entry **buckets;
  size_t nbuckets, nentries;
  size_t key_bytes;          /* the keys of every entry, for budgets */
  uint64_t seed;
};

/* An empty table: 0 or -ENOMEM. */
PG__HIDDEN int store_table_init(struct store_table *t, uint64_t seed);
/* The entry for k (present or not), or NULL. */
PG__HIDDEN struct store_entry *store_table_find(const struct store_table *t,
                                                const uint8_t *k, size_t n);
/* The entry for k, created absent if needed; NULL when out of memory. */
PG__HIDDEN struct store_entry *store_table_get(struct store_table *t,
                                               const uint8_t *k, size_t n);
/* Frees e when nothing needs it: absent and nobody waiting. */
PG__HIDDEN void store_table_release(struct store_table *t,
                                    struct store_entry *e);
/* Every entry and the buckets. */
PG__HIDDEN void store_table_free(struct store_table *t);

#endif
