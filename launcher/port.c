/* port.c -- see Note [port reservation] in port.h. */
#include "port.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int port_reserve(int *port)
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
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
    err = -errno;
    close(fd);
    return err;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}
