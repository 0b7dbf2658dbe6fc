/* timer_heap.c -- deadlines in one binary min-heap (timer_heap.h). */
#include "timer_heap.h"

#include <errno.h>
#include <stdlib.h>

static void heap_put(struct timer_heap *h, size_t i, struct timer_heap_node *t)
{
  h->a[i] = t;
  t->idx = i;
}

static void heap_up(struct timer_heap *h, size_t i)
{
  struct timer_heap_node *t = h->a[i];

  while (i) {
    size_t p = (i - 1) / 2;

    if (!(t->at < h->a[p]->at))
      break;
    heap_put(h, i, h->a[p]);
    i = p;
  }
  heap_put(h, i, t);
}

static void heap_down(struct timer_heap *h, size_t i)
{
  struct timer_heap_node *t = h->a[i];

  for (;;) {
    size_t c = 2 * i + 1;

    if (c >= h->n)
      break;
    if (c + 1 < h->n && h->a[c + 1]->at < h->a[c]->at)
      c++;
    if (!(h->a[c]->at < t->at))
      break;
    heap_put(h, i, h->a[c]);
    i = c;
  }
  heap_put(h, i, t);
}

void timer_heap_node_init(struct timer_heap_node *t, int kind)
{
  t->at = 0;
  t->idx = TIMER_HEAP_IDLE;
  t->kind = kind;
}

bool timer_heap_armed(const struct timer_heap_node *t)
{
  return t->idx != TIMER_HEAP_IDLE;
}

void timer_heap_set(struct timer_heap *h, struct timer_heap_node *t, double at)
{
  double old = t->at;

  t->at = at;
  if (!timer_heap_armed(t)) {
    heap_put(h, h->n++, t);
    heap_up(h, t->idx);
  } else if (at < old) {
    heap_up(h, t->idx);
  } else {
    heap_down(h, t->idx);
  }
}

void timer_heap_clear(struct timer_heap *h, struct timer_heap_node *t)
{
  size_t i = t->idx;
  struct timer_heap_node *last;

  if (i == TIMER_HEAP_IDLE)
    return;
  t->idx = TIMER_HEAP_IDLE;
  last = h->a[--h->n];
  if (i < h->n) {
    heap_put(h, i, last);
    heap_up(h, i);
    heap_down(h, last->idx);
  }
}

struct timer_heap_node *timer_heap_top(const struct timer_heap *h)
{
  return h->n ? h->a[0] : NULL;
}

int timer_heap_reserve(struct timer_heap *h, size_t k)
{
  if (h->reserved + k > h->cap) {
    size_t cap = h->cap ? h->cap : 64;
    struct timer_heap_node **a;

    while (cap < h->reserved + k)
      cap *= 2;
    a = realloc(h->a, cap * sizeof(*a));
    if (!a)
      return -ENOMEM;
    h->a = a;
    h->cap = cap;
  }
  h->reserved += k;
  return 0;
}

void timer_heap_unreserve(struct timer_heap *h, size_t k)
{
  h->reserved -= k;
}

void timer_heap_free(struct timer_heap *h)
{
  free(h->a);
  h->a = NULL;
  h->n = h->cap = h->reserved = 0;
}
