/* timer_heap.h -- deadlines in one binary min-heap, in the manner of
 * libuv's heap-inl.h: each timer is embedded in its owner and knows its
 * heap index, so arming, moving and cancelling are O(log n) and nothing
 * dangles when an owner goes.  Room is reserved when an owner is created
 * (timer_heap_reserve, one slot per embedded timer), so arming never allocates
 * and cannot fail. */
#ifndef UTIL_TIMER_HEAP_H
#define UTIL_TIMER_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TIMER_HEAP_IDLE SIZE_MAX

struct timer_heap_node {
  double at;
  size_t idx;                   /* heap index; TIMER_HEAP_IDLE: not
                                   armed */
  int kind;                     /* the owner's: which timer this is */
};

struct timer_heap {
  struct timer_heap_node **a;
  size_t n, cap;
  size_t reserved;              /* embedded timers alive: cap >= */
};

void timer_heap_node_init(struct timer_heap_node *t, int kind);
bool timer_heap_armed(const struct timer_heap_node *t);
/* Arms t for at, or moves it there. */
void timer_heap_set(struct timer_heap *h, struct timer_heap_node *t,
                    double at);
/* Disarms t (a no-op when it is not armed). */
void timer_heap_clear(struct timer_heap *h, struct timer_heap_node *t);
/* The earliest armed timer, or NULL. */
struct timer_heap_node *timer_heap_top(const struct timer_heap *h);
/* Makes room for k more embedded timers: 0 or -ENOMEM. */
int timer_heap_reserve(struct timer_heap *h, size_t k);
/* k embedded timers (disarmed) went with their owner. */
void timer_heap_unreserve(struct timer_heap *h, size_t k);
void timer_heap_free(struct timer_heap *h);

#endif
