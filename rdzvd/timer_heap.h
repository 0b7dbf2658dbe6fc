/* timer_heap.h -- deadlines in one binary min-heap, in the manner of
 * libuv's heap-inl.h: each timer is embedded in its owner and knows its
 * heap index, so arming, moving and cancelling are O(log n) and nothing
 * dangles when an owner goes.  Room is reserved when an owner is created
 * (th_reserve, one slot per embedded timer), so arming never allocates
 * and cannot fail. */
#ifndef RDZVD_TIMER_HEAP_H
#define RDZVD_TIMER_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TH_IDLE SIZE_MAX

struct th_timer {
  double at;
  size_t idx;                   /* heap index, TH_IDLE when not armed */
  int kind;                     /* the owner's: which timer this is */
};

struct timer_heap {
  struct th_timer **a;
  size_t n, cap;
  size_t reserved;              /* embedded timers alive: cap >= */
};

void th_init(struct th_timer *t, int kind);
bool th_armed(const struct th_timer *t);
/* Arms t for at, or moves it there. */
void th_set(struct timer_heap *h, struct th_timer *t, double at);
/* Disarms t (a no-op when it is not armed). */
void th_clear(struct timer_heap *h, struct th_timer *t);
/* The earliest armed timer, or NULL. */
struct th_timer *th_top(const struct timer_heap *h);
/* Makes room for k more embedded timers: 0 or -ENOMEM. */
int th_reserve(struct timer_heap *h, size_t k);
/* k embedded timers (disarmed) went with their owner. */
void th_unreserve(struct timer_heap *h, size_t k);
void th_free(struct timer_heap *h);

#endif
