/* port.c -- see Note [port reservation] in port.h. */
#include "port.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A socket bound to INADDR_ANY:port (0: any), SO_REUSEADDR; its port in
 * *out.  The fd or a negative errno. */
static int bind_reserved(int port, int *out)
{
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  int fd, one = 1, err;

  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  sa.sin_port = htons((uint16_t)port);
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
    err = -errno;
    close(fd);
    return err;
  }
  *out = ntohs(sa.sin_port);
  return fd;
}

int port_reserve(int *port)
{
  return bind_reserved(0, port);
}

int port_reserve_at(int port)
{
  int got;

  if (port < 1 || port > 65535)
    return -EINVAL;
  return bind_reserved(port, &got);
}

/* ---- Note [taken master port] ---- */

#define MAX_LISTEN_INODES 16

/* Adds the inodes of sockets listening on port in one /proc/net file. */
static int listeners_in(const char *path, int port, unsigned long *inodes,
                        int *n)
{
  char line[512];
  FILE *f = fopen(path, "re");

  if (!f)
    return errno == ENOENT ? 0 : -errno;
  while (fgets(line, sizeof line, f)) {
    char local[64];
    unsigned st, lport;
    unsigned long inode;
    char *colon;

    /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
    if (sscanf(line, " %*s %63s %*s %x %*s %*s %*s %*u %*u %lu", local, &st,
               &inode) != 3)
      continue;                 /* the header */
    colon = strrchr(local, ':');
    if (!colon || sscanf(colon + 1, "%x", &lport) != 1)
      continue;
    if (st == 0x0A && (int)lport == port && *n < MAX_LISTEN_INODES)
      inodes[(*n)++] = inode;
  }
  fclose(f);
  return 0;
}

/* The process holding one of inodes: its pid, or 0. */
static long inode_holder(const unsigned long *inodes, int n)
{
  DIR *proc = opendir("/proc"), *fds;
  struct dirent *p, *e;
  char path[64], link[64], want[40];
  long found = 0;
  int i;

  if (!proc)
    return 0;
  while (!found && (p = readdir(proc))) {
    char *end;
    long pid = strtol(p->d_name, &end, 10);

    if (*end || pid <= 0)
      continue;
    snprintf(path, sizeof path, "/proc/%ld/fd", pid);
    if (!(fds = opendir(path)))
      continue;                 /* gone, or not ours to read */
    while (!found && (e = readdir(fds))) {
      char fdpath[96];
      ssize_t k;

      snprintf(fdpath, sizeof fdpath, "%s/%s", path, e->d_name);
      k = readlink(fdpath, link, sizeof link - 1);
      if (k <= 0)
        continue;
      link[k] = '\0';
      for (i = 0; i < n && !found; i++) {
        snprintf(want, sizeof want, "socket:[%lu]", inodes[i]);
        if (strcmp(link, want) == 0)
          found = pid;
      }
    }
    closedir(fds);
  }
  closedir(proc);
  return found;
}

int port_listener(int port, long *pid, char *comm, size_t commlen)
{
  unsigned long inodes[MAX_LISTEN_INODES];
  char path[64];
  int n = 0, err;
  FILE *f;

  *pid = 0;
  if (commlen)
    comm[0] = '\0';
  err = listeners_in("/proc/net/tcp", port, inodes, &n);
  if (!err)
    err = listeners_in("/proc/net/tcp6", port, inodes, &n);
  if (err)
    return err;
  if (!n)
    return 0;
  *pid = inode_holder(inodes, n);
  if (*pid && commlen) {
    snprintf(path, sizeof path, "/proc/%ld/comm", *pid);
    if ((f = fopen(path, "re"))) {
      if (fgets(comm, (int)commlen, f))
        comm[strcspn(comm, "\n")] = '\0';
      fclose(f);
    }
  }
  return 1;
}
