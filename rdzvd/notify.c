/* notify.c -- see notify.h.  The protocol is sd_notify(3)'s: the
 * service manager reads whole datagrams, so one sendto() is one message;
 * a leading '@' names a socket in the abstract namespace, whose address
 * length then counts no trailing NUL. */
#include "notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int notify_send(const char *state)
{
  const char *name = getenv("NOTIFY_SOCKET");
  struct sockaddr_un sa;
  socklen_t salen;
  size_t n, len = strlen(state);
  ssize_t sent;
  int fd, err = 0;

  if (!name || !*name)
    return 0;
  /* vsock (vsock:CID:PORT) is for VMs; rdzvd runs on hosts. */
  if (name[0] != '/' && name[0] != '@')
    return -EAFNOSUPPORT;
  n = strlen(name);
  if (n >= sizeof sa.sun_path)
    return -ENAMETOOLONG;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, name, n);
  if (name[0] == '@')
    sa.sun_path[0] = '\0';
  salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                      (name[0] == '/'));
  fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  sent = sendto(fd, state, len, MSG_NOSIGNAL, (struct sockaddr *)&sa,
                salen);
  if (sent < 0)
    err = -errno;
  else if ((size_t)sent != len)
    err = -EMSGSIZE;
  close(fd);
  return err ? err : 1;
}
