/* live_round.c -- the round file cdrun's agent rewrites (temp + rename)
 * at every round of its node, first start included (live.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "live.h"
#include "num.h"

#define ROUND_FILE_MAX 512

enum { F_ROUND, F_WORLD, F_OFFSET, F_LOCAL, F_COUNT };

static const char *const field_names[F_COUNT] = {
  "round", "world", "rank_offset", "local_world",
};

int pg__live_round_parse(const char *text, size_t len, const char *what,
                         struct pg__live_round *out)
{
  static const long lo[F_COUNT] = { 0, 1, 0, 1 };
  static const long hi[F_COUNT] = { (1L << 62), 1 << 24, (1 << 24) - 1,
                                    1 << 24 };
  long v[F_COUNT];
  bool seen[F_COUNT] = { false };
  size_t i = 0, end, eq;
  int f;

  if (len && text[len - 1] == '\n')
    len--;
  if (memchr(text, '\n', len) || memchr(text, '\0', len))
    return pg__fail(-EINVAL, "%s: expected one line", what);
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
      return pg__fail(-EINVAL, "%s: '%.*s' is not one of round=, world=, "
                      "rank_offset=, local_world=", what, (int)(end - i),
                      text + i);
    if (seen[f])
      return pg__fail(-EINVAL, "%s: %s= twice", what, field_names[f]);
    if (num_parse_long_n(text + eq + 1, end - eq - 1, lo[f], hi[f], &v[f]))
      return pg__fail(-EINVAL, "%s: %s is '%.*s', expected an integer "
                      "%ld..%ld", what, field_names[f],
                      (int)(end - eq - 1), text + eq + 1, lo[f], hi[f]);
    seen[f] = true;
    i = end + (end < len);
  }
  for (f = 0; f < F_COUNT; f++)
    if (!seen[f])
      return pg__fail(-EINVAL, "%s: %s= is missing", what, field_names[f]);
  if (v[F_OFFSET] + v[F_LOCAL] > v[F_WORLD])
    return pg__fail(-EINVAL, "%s: rank_offset %ld + local_world %ld is "
                    "more than the world of %ld", what, v[F_OFFSET],
                    v[F_LOCAL], v[F_WORLD]);
  out->round = v[F_ROUND];
  out->world = (int)v[F_WORLD];
  out->rank_offset = (int)v[F_OFFSET];
  out->local_world = (int)v[F_LOCAL];
  return 0;
}

int pg__live_round_read(const char *path, struct pg__live_round *out)
{
  char buf[ROUND_FILE_MAX], what[300];
  ssize_t n;
  size_t got = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC), err;

  if (fd < 0) {
    err = -errno;
    return pg__fail(err, "cannot open the round file %s "
                    "(CDRUN_LIVE_ROUND_FILE): %s", path, strerror(-err));
  }
  while (got < sizeof buf && (n = read(fd, buf + got, sizeof buf - got))) {
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      err = -errno;
      close(fd);
      return pg__fail(err, "cannot read the round file %s: %s", path,
                      strerror(-err));
    }
    got += (size_t)n;
  }
  close(fd);
  if (got == sizeof buf)
    return pg__fail(-EINVAL, "the round file %s is over %d bytes", path,
                    ROUND_FILE_MAX - 1);
  snprintf(what, sizeof what, "the round file %s", path);
  return pg__live_round_parse(buf, got, what, out);
}

int pg__live_round_slot(const struct pg__live_round *r, int local_rank,
                        int *slot)
{
  if (local_rank < 0 || local_rank >= r->local_world)
    return pg__fail(-EINVAL, "LOCAL_RANK %d is outside the round file's "
                    "local_world %d", local_rank, r->local_world);
  *slot = r->rank_offset + local_rank;
  return 0;
}
