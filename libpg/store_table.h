/* store_table.h -- the store server's keys: a chained hash table of
 * entries, hashed with a random seed (keys are chosen by whoever connects
 * to the port, and must not be lined up on one chain ahead of time).  The
 * server (store_server.c) hangs its waiting requests on the entries. */
#ifndef PG_STORE_TABLE_H
#define PG_STORE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "pg_internal.h"

struct st_reg;               /* a waiting request's hold on a key */

/* A key.  Entries stay while absent keys have waiters, so a waiter
 * always has something to hang on. */
struct st_entry {
  struct st_entry *next;     /* hash chain */
  uint64_t hash;
  bool present;
  uint8_t *val;
  size_t vlen;
  LIST_HEAD(, st_reg) waiters;
  size_t klen;
  uint8_t key[];
};

struct st_table {
  struct st_entry **buckets;
  size_t nbuckets, nentries;
  size_t key_bytes;          /* the keys of every entry, for budgets */
  uint64_t seed;
};

/* An empty table: 0 or -ENOMEM. */
PG__HIDDEN int stt_init(struct st_table *t, uint64_t seed);
/* The entry for k (present or not), or NULL. */
PG__HIDDEN struct st_entry *stt_find(const struct st_table *t,
                                     const uint8_t *k, size_t n);
/* The entry for k, created absent if needed; NULL when out of memory. */
PG__HIDDEN struct st_entry *stt_get(struct st_table *t, const uint8_t *k,
                                    size_t n);
/* Frees e when nothing needs it: absent and nobody waiting. */
PG__HIDDEN void stt_release(struct st_table *t, struct st_entry *e);
/* Every entry and the buckets. */
PG__HIDDEN void stt_free(struct st_table *t);

#endif
