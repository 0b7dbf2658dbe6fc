/* round_file.c -- the round file's one writer and one parser
 * (round_file.h).  Compiled into cdrun's proto layer and, hidden, into
 * libpg (Note [libpg's own copies] in the Makefile). */
#include "round_file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "num.h"

enum { F_ROUND, F_WORLD, F_OFFSET, F_LOCAL, F_COUNT };

static const char *const field_names[F_COUNT] = {
  "round", "world", "rank_offset", "local_world",
};

/* The sentence into err, and -EINVAL.  Not err.h's err_set: libpg, which
 * compiles this file too, links nothing of libuv's. */
static int refuse(char *err, size_t errlen, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

static int refuse(char *err, size_t errlen, const char *fmt, ...)
{
  va_list ap;

  if (err && errlen) {
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -EINVAL;
}

int round_file_line(const struct live_round *r, char *buf, size_t len)
{
  int n = snprintf(buf, len, "%s=%lld %s=%d %s=%d %s=%d\n",
                   field_names[F_ROUND], (long long)r->round,
                   field_names[F_WORLD], r->world,
                   field_names[F_OFFSET], r->rank_offset,
                   field_names[F_LOCAL], r->local_world);

  return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

int round_file_parse(const char *text, size_t len, struct live_round *out,
                     char *err, size_t errlen)
{
  static const long lo[F_COUNT] = { 0, 1, 0, 1 };
  static const long hi[F_COUNT] = { (1L << 62), 1 << 24, (1 << 24) - 1,
                                    1 << 24 };
  long v[F_COUNT];
  bool seen[F_COUNT] = { false };
  size_t i = 0, end, eq;
  int f;

  if (len >= ROUND_FILE_MAX)
    return refuse(err, errlen, "over %d bytes", ROUND_FILE_MAX - 1);
  if (len && text[len - 1] == '\n')
    len--;
  if (memchr(text, '\n', len) || memchr(text, '\0', len))
    return refuse(err, errlen, "expected one line");
  while (i < len) {
    for (end = i; end < len && text[end] != ' '; end++)
      ;
    for (eq = i; eq < end && text[eq] != '='; eq++)
      ;
    for (f = 0; f < F_COUNT; f++)
      if (strlen(field_names[f]) == eq - i &&
          memcmp(text + i, field_names[f], eq - i) == 0)
        break;
    if (eq == end || f == F_COUNT)
      return refuse(err, errlen, "'%.*s' is not one of round=, "
                    "world=, rank_offset=, local_world=",
                    (int)(end - i), text + i);
    if (seen[f])
      return refuse(err, errlen, "%s= twice", field_names[f]);
    if (num_parse_long_n(text + eq + 1, end - eq - 1, lo[f], hi[f], &v[f]))
      return refuse(err, errlen, "%s is '%.*s', expected an integer "
                    "%ld..%ld", field_names[f], (int)(end - eq - 1),
                    text + eq + 1, lo[f], hi[f]);
    seen[f] = true;
    i = end + (end < len);
  }
  for (f = 0; f < F_COUNT; f++)
    if (!seen[f])
      return refuse(err, errlen, "%s= is missing", field_names[f]);
  if (v[F_OFFSET] + v[F_LOCAL] > v[F_WORLD])
    return refuse(err, errlen, "rank_offset %ld + local_world %ld is "
                  "more than the world of %ld", v[F_OFFSET],
                  v[F_LOCAL], v[F_WORLD]);
  out->round = v[F_ROUND];
  out->world = (int)v[F_WORLD];
  out->rank_offset = (int)v[F_OFFSET];
  out->local_world = (int)v[F_LOCAL];
  return 0;
}
