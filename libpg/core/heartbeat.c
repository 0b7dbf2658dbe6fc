/* heartbeat.c -- pg_heartbeat(): tells cdrun's no-progress watchdog that
 * this worker is alive (cdrun --worker-heartbeat-timeout). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "knobs.h"
#include "pg.h"

/* The watchdog reads the file's mtime; touching it is one syscall and
 * needs no open fd.  The path is a knob (knobs.c): cdrun sets it before
 * the worker starts. */
PG_EXTERN int pg_heartbeat(void)
{
  const char *path = pg__knob(PG_KNOB_HEARTBEAT_FILE);

  if (!path)
    return 0;
  if (utimensat(AT_FDCWD, path, NULL, 0) == 0)
    return 0;
  if (errno != ENOENT)
    return -errno;
  /* The agent creates it; if it went away, make it again. */
  {
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

    if (fd < 0)
      return -errno;
    close(fd);
  }
  return 0;
}
