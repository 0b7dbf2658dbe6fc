/* monotime.c -- see monotime.h. */
#include "monotime.h"

#include <time.h>

double monotime_now(void)
{
  struct timespec ts;

  /* CLOCK_MONOTONIC cannot fail with a valid pointer. */
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
