/* live_handshake.c -- the opt-in check and the round file
 * (live_handshake.h). */
#include "live_handshake.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool live_handshake_opted_in(const char *path)
{
  struct stat st;

  return path && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int live_handshake_round_line(const struct live_round *r, char *buf,
                              size_t len)
{
  int n = snprintf(buf, len, "round=%d world=%d rank_offset=%d "
                   "local_world=%d\n", r->round, r->world, r->rank_offset,
                   r->local_world);

  return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

int live_handshake_write_round(const char *path, const struct live_round *r)
{
  char tmp[4096], line[128];
  int fd, n, err = 0;

  n = live_handshake_round_line(r, line, sizeof line);
  if (n < 0)
    return n;
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
    return -ENAMETOOLONG;
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  if (write(fd, line, (size_t)n) != n)
    err = errno ? -errno : -EIO;
  if (close(fd) < 0 && !err)
    err = -errno;
  if (!err && rename(tmp, path) < 0)
    err = -errno;
  if (err)
    unlink(tmp);
  return err;
}

int live_handshake_parse_round(const char *line, struct live_round *r)
{
  struct live_round v;
  int end = -1;

  if (sscanf(line, "round=%d world=%d rank_offset=%d local_world=%d\n%n",
             &v.round, &v.world, &v.rank_offset, &v.local_world, &end) != 4
      || end < 0 || line[end] != '\0' || v.round < 0 || v.world < 1 ||
      v.rank_offset < 0 || v.local_world < 1 ||
      v.rank_offset > v.world - v.local_world)
    return -EINVAL;
  *r = v;
  return 0;
}
