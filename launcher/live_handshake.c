/* live_handshake.c -- the opt-in check and the round file
 * (live_handshake.h). */
#include "live_handshake.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

bool live_handshake_opted_in(const char *path)
{
  struct stat st;

  return path && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int live_handshake_write_round(const char *path, const struct live_round *r)
{
  char tmp[4096], line[ROUND_FILE_MAX];
  int fd, n, err = 0;

  n = round_file_line(r, line, sizeof line);
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
