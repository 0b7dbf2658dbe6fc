/* pidfd.c -- a pidfd for another process of this machine (pg_internal.h):
 * shared memory and the NCCL watchdog poll their peers' with it. */
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pg_internal.h"

int pg__pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);

  if (fd >= 0)
    fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
#else
  (void)pid;
  return -1;
#endif
}
