/* backoff.c -- the restart backoff policy (Note [restart backoff]). */
#include "backoff.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "num.h"

double backoff_next(struct backoff *b, const struct backoff_conf *c,
                    double ran_s, const char *cause)
{
  double delay;
  int k;

  if (cause && b->same > 0 && strcmp(cause, b->cause) == 0) {
    b->same++;
  } else {
    b->same = 1;
    snprintf(b->cause, sizeof b->cause, "%s", cause ? cause : "");
    if (!cause)
      b->same = 0;      /* unknown: the same as nothing */
  }
  if (!(ran_s < c->healthy)) {
    b->fast = 0;        /* it ran long enough: no crash loop */
    return 0;
  }
  if (b->fast < 1000)
    b->fast++;
  if (b->fast < 2 || !(c->initial > 0))
    return 0;
  delay = c->initial;
  for (k = 2; k < b->fast && delay < c->max; k++)
    delay *= 2;
  return delay < c->max ? delay : c->max;
}

int backoff_conf_parse(const char *s, struct backoff_conf *c, char *err,
                       size_t errlen)
{
  double v[3] = { c->initial, c->max, c->healthy };
  char part[64];
  const char *p = s;
  size_t len;
  int i;

  for (i = 0; i < 3 && *p; i++) {
    len = strcspn(p, ":");
    if (len >= sizeof part)
      goto bad;
    memcpy(part, p, len);
    part[len] = '\0';
    if (num_parse_double(part, 0, NUM_SECONDS_MAX, &v[i]) != 0)
      goto bad;
    p += len;
    if (*p == ':' && p[1])
      p++;
    else if (*p)
      goto bad;
  }
  if (*p || !*s)
    goto bad;
  if (v[0] > 0 && v[1] < v[0])
    return err_set(err, errlen, -EINVAL, "%s=%s: the cap (%g s) is below "
                   "the first delay (%g s)", BACKOFF_ENV, s, v[1], v[0]);
  c->initial = v[0];
  c->max = v[1];
  c->healthy = v[2];
  return 0;
bad:
  return err_set(err, errlen, -EINVAL, "%s: invalid value '%s' (expected "
                 "INITIAL[:MAX[:HEALTHY]] in seconds, 0 to turn it off)",
                 BACKOFF_ENV, s);
}
