/* live_round.c -- the round file cdrun's agent rewrites (temp + rename)
 * at every round of its node, first start included (live.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "live.h"

/* The grammar and its one parser are the worker contract's
 * (proto/worker/round_file.h): cdrun's agent writes what this reads. */
int pg__live_round_parse(const char *text, size_t len, const char *what,
                         struct live_round *out)
{
  char why[ROUND_FILE_MAX + 128];   /* the longest names the field */

  if (round_file_parse(text, len, out, why, sizeof why))
    return pg__fail(-EINVAL, "%s: %s", what, why);
  return 0;
}

int pg__live_round_read(const char *path, struct live_round *out)
{
  char buf[ROUND_FILE_MAX], what[300];
  ssize_t n;
  size_t got = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC), err;

  if (fd < 0) {
    err = -errno;
    return pg__fail(err, "cannot open the round file %s ("
                    WORKER_ENV_LIVE_ROUND_FILE "): %s", path, strerror(-err));
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

int pg__live_round_slot(const struct live_round *r, int local_rank,
                        int *slot)
{
  if (local_rank < 0 || local_rank >= r->local_world)
    return pg__fail(-EINVAL, "LOCAL_RANK %d is outside the round file's "
                    "local_world %d", local_rank, r->local_world);
  *slot = r->rank_offset + local_rank;
  return 0;
}
