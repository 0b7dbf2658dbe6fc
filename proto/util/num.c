/* num.c -- see num.h. */
#include "num.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int num_parse_long_n(const char *s, size_t n, long lo, long hi, long *out)
{
  char buf[32], *end;
  size_t i = 0;
  long v;

  if (n > 0 && (s[0] == '-' || s[0] == '+'))
    i = 1;
  if (i == n)
    return -EINVAL;
  for (; i < n; i++)
    if (s[i] < '0' || s[i] > '9')
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

int num_parse_i64_n(const char *s, size_t n, int64_t lo, int64_t hi,
                    int64_t *out)
{
  bool negative = n > 0 && s[0] == '-';
  size_t i = n > 0 && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  uint64_t magnitude = 0;
  /* INT64_MIN's magnitude is one more than INT64_MAX's. */
  uint64_t most = (uint64_t)INT64_MAX + negative;
  int64_t v;

  if (i == n)
    return -EINVAL;
  for (size_t k = i; k < n; k++)
    if (s[k] < '0' || s[k] > '9')
      return -EINVAL;
  for (; i < n; i++) {
    unsigned digit = (unsigned)(s[i] - '0');

    if (magnitude > (most - digit) / 10)
      return -ERANGE;
    magnitude = magnitude * 10 + digit;
  }
  v = negative && magnitude ? -(int64_t)(magnitude - 1) - 1
                            : (int64_t)magnitude;
  if (v < lo || v > hi)
    return -ERANGE;
  *out = v;
  return 0;
}

int num_parse_long(const char *s, long lo, long hi, long *out)
{
  return num_parse_long_n(s, strlen(s), lo, hi, out);
}

int num_parse_size(const char *s, size_t lo, size_t hi, size_t *out)
{
  size_t n = strspn(s, "0123456789");
  unsigned shift = 0;
  long v;
  int rc;

  if (n == 0)
    return -EINVAL;
  switch (s[n]) {
  case '\0':
    break;
  case 'K': case 'k':
    shift = 10;
    break;
  case 'M': case 'm':
    shift = 20;
    break;
  case 'G': case 'g':
    shift = 30;
    break;
  default:
    return -EINVAL;
  }
  if (shift && s[n + 1])
    return -EINVAL;
  rc = num_parse_long_n(s, n, 0, LONG_MAX, &v);
  if (rc)
    return rc;
  if ((unsigned long)v > (SIZE_MAX >> shift))
    return -ERANGE;
  if (((size_t)v << shift) < lo || ((size_t)v << shift) > hi)
    return -ERANGE;
  *out = (size_t)v << shift;
  return 0;
}

int num_parse_count(const char *s, size_t lo, size_t hi, size_t *out)
{
  size_t n = strlen(s);
  unsigned long long v;
  char *end;

  if (n == 0 || strspn(s, "0123456789") != n)
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

int num_parse_double(const char *s, double lo, double hi, double *out)
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
