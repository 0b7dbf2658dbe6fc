/* rdzv_client.h -- the rdzvd back end of the agent (--rdzv_backend=c10d or
 * rdzvd): one TCP connection to rdzvd, server push, keepalives; and the
 * embedded server when this node hosts the rendezvous itself. */
#ifndef CDRUN_RDZV_CLIENT_H
#define CDRUN_RDZV_CLIENT_H

#include <stdbool.h>

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
  struct rp_conf conf;
  const char *local_addr;     /* "" or --local_addr */
  int nproc;
  int master_port;            /* this node's reserved port */
  enum rdzv_host_mode host_mode;
  /* NULL or empty: no shared secret.  Otherwise the client proves it
   * knows it (and checks the server's proof) before its join, and an
   * embedded server demands it of every node (copied). */
  const struct ra_secret *secret;
};

/* Creates the back end; nothing is sent before the first join.  Returns 0
 * or a negative libuv error. */
int rdzv_client_create(uv_loop_t *loop, const struct rdzv_client_opts *o,
                       const struct rdzv_callbacks *cb, struct rdzv **out);

/* True when host names this machine: a loopback address, the host name,
 * or an address of one of its interfaces. */
bool rdzv_endpoint_is_local(const char *host);

#endif
