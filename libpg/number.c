/* number.c -- see number.h (Note [libpg's own copies]). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "number.h"

/* Whether s[0..n) is decimal digits after at most one sign (signed). */
static bool all_digits(const char *s, size_t n, bool signed_)
{
  size_t i = 0;

  if (signed_ && n > 0 && (s[0] == '-' || s[0] == '+'))
    i = 1;
  if (i == n)
    return false;
  for (; i < n; i++)
    if (s[i] < '0' || s[i] > '9')
      return false;
  return true;
}

int pg__number_long_n(const char *s, size_t n, long lo, long hi, long *out)
{
  char buf[32], *end;
  long v;

  if (!all_digits(s, n, true))
    return -EINVAL;
  if (n >= sizeof buf)
    return -ERANGE;     /* digits enough to overflow any long */
  memcpy(buf, s, n);
  buf[n] = '\0';
  errno = 0;
  v = strtol(buf, &end, 10);
  if (errno || v < lo || v > hi)
    return -ERANGE;
  *out = v;
  return 0;
}

int pg__number_long(const char *s, long lo, long hi, long *out)
{
  return pg__number_long_n(s, strlen(s), lo, hi, out);
}

int pg__number_size(const char *s, size_t lo, size_t hi, size_t *out)
{
  size_t n = strlen(s);
  unsigned long long v;
  char *end;

  if (!all_digits(s, n, false))
    return -EINVAL;
  if (n > 20)
    return -ERANGE;     /* digits enough to overflow any size */
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno || v > SIZE_MAX || v < lo || v > hi)
    return -ERANGE;
  *out = (size_t)v;
  return 0;
}

int pg__number_double(const char *s, double lo, double hi, double *out)
{
  char *end;
  double v;

  /* strtod would also take inf, nan, hex and leading blanks. */
  if (!*s || strspn(s, "0123456789.eE+-") != strlen(s))
    return -EINVAL;
  errno = 0;
  v = strtod(s, &end);
  if (*end || end == s)
    return -EINVAL;
  if (errno == ERANGE && fabs(v) < 1)
    v = 0;              /* underflow: as good as zero */
  else if (errno || !isfinite(v))
    return -ERANGE;
  if (!(v >= lo && v <= hi))
    return -ERANGE;
  *out = v;
  return 0;
}
