/* backoff.h -- how long to wait before restarting a worker group that
 * keeps failing fast (a crash loop: a full disk, a missing file). */
#ifndef CDRUN_BACKOFF_H
#define CDRUN_BACKOFF_H

#include <stddef.h>

/* The environment variable that sets struct backoff_conf. */
#define BACKOFF_ENV "CDRUN_RESTART_BACKOFF"

/* Note [restart backoff]: a failure is fast when its attempt ran less than
 * healthy seconds.  The first fast failure restarts at once (torchrun
 * never waits); each further fast failure in a row waits twice as long as
 * the one before, from initial up to max.  An attempt that ran healthy
 * seconds or more resets it: the next failure restarts at once again.
 * initial 0 turns the backoff off. */
struct backoff_conf {
  double initial;       /* seconds before the second fast restart */
  double max;           /* the cap */
  double healthy;       /* an attempt this long was no crash loop */
};

#define BACKOFF_CONF_DEFAULT { 1.0, 60.0, 60.0 }

/* The failures seen so far; zero it to start. */
struct backoff {
  int fast;             /* fast failures in a row */
  int same;             /* failures in a row with the same cause */
  char cause[256];      /* the last failure's cause */
};

/* Records a failure of an attempt that ran ran_s seconds with the given
 * cause (a short text, compared whole; NULL: unknown, never the same as
 * another) and returns the seconds to wait before the next attempt.  A
 * pure function of *b, *c and its arguments. */
double backoff_next(struct backoff *b, const struct backoff_conf *c,
                    double ran_s, const char *cause);

/* Parses "INITIAL[:MAX[:HEALTHY]]" (seconds; "0": off) into *c, whose
 * other fields keep their values.  Returns 0, or -EINVAL with a one-line
 * message in err. */
int backoff_conf_parse(const char *s, struct backoff_conf *c, char *err,
                       size_t errlen);

#endif
