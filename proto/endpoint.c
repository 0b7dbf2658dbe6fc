/* endpoint.c -- endpoint parsing shared by cdrun and rdzvd. */
#include "endpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "num.h"

int endpoint_parse(const char *ep, int default_port, char *host,
                   size_t hostlen, int *port)
{
  const char *colon, *end;
  size_t n;
  long p;

  *port = default_port;
  if (ep[0] == '[') {
    end = strchr(ep, ']');
    if (!end || (end[1] && end[1] != ':'))
      return -EINVAL;
    n = (size_t)(end - ep - 1);
    colon = end[1] == ':' ? end + 1 : NULL;
    ep++;
  } else {
    colon = strrchr(ep, ':');
    if (colon && strchr(ep, ':') != colon)
      colon = NULL;     /* a bare IPv6 address: no port */
    n = colon ? (size_t)(colon - ep) : strlen(ep);
  }
  if (n == 0 || n >= hostlen)
    return -EINVAL;
  memcpy(host, ep, n);
  host[n] = '\0';
  if (colon) {
    if (num_parse_long(colon + 1, 0, 65535, &p))
      return -EINVAL;
    *port = (int)p;
  }
  return 0;
}
