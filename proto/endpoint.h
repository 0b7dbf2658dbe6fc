/* endpoint.h -- "host[:port]" and "[ipv6]:port" endpoints, as torchrun's
 * --rdzv_endpoint takes them. */
#ifndef RDZV_ENDPOINT_H
#define RDZV_ENDPOINT_H

#include <stddef.h>

/* Splits ep into host (without brackets) and port; a missing port gives
 * default_port.  A bare IPv6 address ("::1") has no port.  Returns 0, or
 * -EINVAL for an empty host, an unclosed bracket or a port outside
 * 0..65535. */
int endpoint_parse(const char *ep, int default_port, char *host,
                   size_t hostlen, int *port);

#endif
