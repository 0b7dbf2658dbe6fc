/* hashtab.c -- an open-addressing hash table of pointers (hashtab.h). */
#include "hashtab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void *hashtab_find(const struct hashtab *t, uint64_t h, const void *key,
                     bool (*eq)(const void *item, const void *key))
{
  size_t mask, i;

  if (!t->cap)
    return NULL;
  mask = t->cap - 1;
  for (i = h & mask; t->s[i].item; i = (i + 1) & mask)
    if (t->s[i].h == h && eq(t->s[i].item, key))
      return t->s[i].item;
  return NULL;
}

static void hashtab_place(struct hashtab_slot *s, size_t cap, uint64_t h,
                          void *item)
{
  size_t mask = cap - 1, i = h & mask;

  while (s[i].item)
    i = (i + 1) & mask;
  s[i].h = h;
  s[i].item = item;
}

int hashtab_insert(struct hashtab *t, uint64_t h, void *item)
{
  if ((t->n + 1) * 4 > t->cap * 3) {
    size_t cap = t->cap ? t->cap * 2 : 16, i;
    struct hashtab_slot *s = calloc(cap, sizeof(*s));

    if (!s)
      return -ENOMEM;
    for (i = 0; i < t->cap; i++)
      if (t->s[i].item)
        hashtab_place(s, cap, t->s[i].h, t->s[i].item);
    free(t->s);
    t->s = s;
    t->cap = cap;
  }
  hashtab_place(t->s, t->cap, h, item);
  t->n++;
  return 0;
}

/* Removes the item (by identity), shifting later members of its probe run
 * back so that lookups never need tombstones. */
void hashtab_remove(struct hashtab *t, uint64_t h, const void *item)
{
  size_t mask, i, j, k;

  if (!t->cap)
    return;
  mask = t->cap - 1;
  for (i = h & mask; t->s[i].item != item; i = (i + 1) & mask)
    if (!t->s[i].item)
      return;
  for (j = i;;) {
    j = (j + 1) & mask;
    if (!t->s[j].item)
      break;
    k = t->s[j].h & mask;
    /* s[j] stays when its home slot k lies cyclically in (i, j]. */
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
      continue;
    t->s[i] = t->s[j];
    i = j;
  }
  t->s[i].item = NULL;
  t->n--;
}

uint64_t hashtab_mix64(uint64_t x)
{
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* FNV-1a, seeded per registry so that ids chosen by strangers cannot be
 * lined up on one probe run ahead of time. */
uint64_t hashtab_hash_bytes(uint64_t seed, const void *p, size_t n)
{
  const unsigned char *b = p;
  uint64_t h = 0xcbf29ce484222325ULL ^ seed;
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ULL;
  return hashtab_mix64(h);
}

uint64_t hashtab_hash_str(uint64_t seed, const char *s)
{
  return hashtab_hash_bytes(seed, s, strlen(s));
}

uint64_t hashtab_hash_ptr(uint64_t seed, const void *p)
{
  return hashtab_mix64((uint64_t)(uintptr_t)p ^ seed);
}
