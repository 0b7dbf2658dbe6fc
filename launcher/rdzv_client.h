/* rdzv_client.h -- the rdzvd back end of the agent (--rdzv_backend=c10d or
 * rdzvd): one TCP connection to rdzvd, server push, keepalives; and the
 * embedded server when this node hosts the rendezvous itself. */
#ifndef CDRUN_RDZV_CLIENT_H
#define CDRUN_RDZV_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "rdzv.h"
#include "rdzv_auth.h"
#include "rdzv_proto.h"

enum rdzv_host_mode {
  RDZV_HOST_AUTO,     /* host if the endpoint is this machine and nothing
                         listens there yet */
  RDZV_HOST_ALWAYS,   /* is_host=1 */
  RDZV_HOST_NEVER,    /* is_host=0 */
};

struct rdzv_client_opts {
  const char *host;           /* endpoint host */
  int port;                   /* endpoint port */
  const char *id;             /* rdzv_id */
  struct rdzv_proto_conf conf;
  const char *local_addr;     /* "" or --local_addr */
  int nproc;
  int master_port;            /* this node's reserved port */
  enum rdzv_host_mode host_mode;
  /* NULL or empty: no shared secret.  Otherwise the client proves it
   * knows it (and checks the server's proof) before its join, and an
   * embedded server demands it of every node (copied). */
  const struct rdzv_auth_secret *secret;
  /* Note [reconnect]: seconds to keep the workers running and reconnect
   * after losing the server; 0: fail at once, as before soft state. */
  double reconnect_timeout;
};

#define RDZV_DEFAULT_RECONNECT_TIMEOUT 60.0
#define RDZV_RECONNECT_BACKOFF_CAP 5.0   /* seconds between attempts, at
                                            most; rdzvd's resume grace
                                            defaults to twice this */

/* Creates the back end; nothing is sent before the first join.  Returns 0
 * or a negative libuv error. */
int rdzv_client_create(uv_loop_t *loop, const struct rdzv_client_opts *o,
                       const struct rdzv_callbacks *cb, struct rdzv **out);

/* True when host names this machine: a loopback address, the host name,
 * or an address of one of its interfaces. */
bool rdzv_endpoint_is_local(const char *host);

/* The address an embedded host listens on for endpoint host, which
 * resolved to addr: a literal address as given; "localhost" (or another
 * name for loopback) as the loopback address it resolved to, so that a
 * loopback endpoint stays reachable from this machine only; a name that
 * resolves to an interface address as that address.  A host name that
 * this machine alone maps to loopback (Debian's 127.0.1.1) names the
 * host to the other nodes, which reach it by its real address: "" then,
 * every address.  Writes the numeric address (or "") to out. */
void rdzv_host_bind_addr(const char *host, const struct sockaddr *addr,
                         char *out, size_t outlen);

#endif
