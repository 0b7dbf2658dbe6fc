/* port.c -- see Note [port reservation] in port.h. */
#include "port.h"

#include <errno.h>
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
