/* store_table.c -- the store server's keys (store_table.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashtab.h"
#include "store_table.h"

#define STORE_TABLE_FIRST_BUCKETS 1024

/* Seeded, as rdzvd's registries hash (proto/util/hashtab.h). */
static uint64_t store_table_hash(const struct store_table *t,
                                 const uint8_t *k, size_t n)
{
  return hashtab_hash_bytes(t->seed, k, n);
}

int store_table_init(struct store_table *t, uint64_t seed)
{
  memset(t, 0, sizeof *t);
  t->seed = seed;
  t->nbuckets = STORE_TABLE_FIRST_BUCKETS;
  t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
  return t->buckets ? 0 : -ENOMEM;
}

struct store_entry *store_table_find(const struct store_table *t,
                                     const uint8_t *k, size_t n)
{
  uint64_t h = store_table_hash(t, k, n);
  struct store_entry *e = t->buckets[h & (t->nbuckets - 1)];

  for (; e; e = e->next)
    if (e->hash == h && e->klen == n && (n == 0 || !memcmp(e->key, k, n)))
      return e;
  return NULL;
}

static void grow(struct store_table *t)
{
  size_t n = t->nbuckets * 2, i;
  struct store_entry **b = calloc(n, sizeof *b), *e, *next;

  if (!b)
    return;             /* longer chains, still correct */
  for (i = 0; i < t->nbuckets; i++)
    for (e = t->buckets[i]; e; e = next) {
      next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
    }
  free(t->buckets);
  t->buckets = b;
  t->nbuckets = n;
}

struct store_entry *store_table_get(struct store_table *t, const uint8_t *k,
                                    size_t n)
{
  struct store_entry *e = store_table_find(t, k, n), **slot;

  if (e)
    return e;
  e = calloc(1, sizeof *e + n);
  if (!e)
    return NULL;
  e->hash = store_table_hash(t, k, n);
  e->klen = n;
  LIST_INIT(&e->waiters);
  if (n)
    memcpy(e->key, k, n);
  if (t->nentries >= t->nbuckets)
    grow(t);
  slot = &t->buckets[e->hash & (t->nbuckets - 1)];
  e->next = *slot;
  *slot = e;
  t->nentries++;
  t->key_bytes += n;
  return e;
}

void store_table_release(struct store_table *t, struct store_entry *e)
{
  struct store_entry **pp;

  if (e->present || !LIST_EMPTY(&e->waiters))
    return;
  pp = &t->buckets[e->hash & (t->nbuckets - 1)];
  while (*pp != e)
    pp = &(*pp)->next;
  *pp = e->next;
  t->nentries--;
  t->key_bytes -= e->klen;
  free(e->val);
  free(e);
}

void store_table_free(struct store_table *t)
{
  struct store_entry *e, *next;
  size_t i;

  for (i = 0; t->buckets && i < t->nbuckets; i++)
    for (e = t->buckets[i]; e; e = next) {
      next = e->next;
      free(e->val);
      free(e);
    }
  free(t->buckets);
  t->buckets = NULL;
}
