/* hashtab.h -- an open-addressing hash table of pointers: linear
 * probing, backward-shift deletion (no tombstones), each slot keeping its
 * item's hash.  The caller owns the items and supplies the hash and the
 * key comparison; the table owns only its slots (free t->s). */
#ifndef UTIL_HASHTAB_H
#define UTIL_HASHTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Open addressing with linear probing; each slot keeps its item's hash so
 * that growing and backward-shift deletion never recompute it.  An empty
 * slot has item == NULL.  The capacity is a power of two. */
struct hashtab_slot {
  uint64_t h;
  void *item;
};

struct hashtab {
  struct hashtab_slot *s;
  size_t cap;
  size_t n;
};

/* The item whose hash is h and for which eq(item, key), or NULL. */
void *hashtab_find(const struct hashtab *t, uint64_t h, const void *key,
              bool (*eq)(const void *item, const void *key));
/* Adds an item known to be absent.  Returns 0 or -ENOMEM. */
int hashtab_insert(struct hashtab *t, uint64_t h, void *item);
/* Removes the item (by identity); absent items are ignored. */
void hashtab_remove(struct hashtab *t, uint64_t h, const void *item);

/* Hashes, seeded so that keys chosen by strangers cannot be lined up on
 * one probe run ahead of time. */
uint64_t hashtab_mix64(uint64_t x);
uint64_t hashtab_hash_str(uint64_t seed, const char *s);
uint64_t hashtab_hash_bytes(uint64_t seed, const void *p, size_t n);
uint64_t hashtab_hash_ptr(uint64_t seed, const void *p);

#endif
