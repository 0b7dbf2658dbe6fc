/* monotime.h -- the one clock for deadlines and durations: seconds on the
 * monotonic clock (CLOCK_MONOTONIC, as libuv's uv_hrtime), from an
 * arbitrary origin.  Never goes back, never jumps with the wall clock;
 * only differences between two readings mean anything. */
#ifndef UTIL_MONOTIME_H
#define UTIL_MONOTIME_H

/* Now, in seconds (nanosecond resolution). */
double monotime_now(void);

#endif
