/* rdzv_etcd.h -- the etcd back end of the agent (--rdzv_backend=etcd or
 * etcd-v3): the rendezvous of rdzvd's semantics kept in an etcd v3
 * cluster, with compare-and-swap transactions for atomicity, one lease per
 * agent for liveness and a watch for push.  See proto/ETCD.md. */
#ifndef CDRUN_RDZV_ETCD_H
#define CDRUN_RDZV_ETCD_H

#include <stdbool.h>

#include "rdzv.h"
#include "rdzv_proto.h"

struct rdzv_etcd_opts {
  const char *endpoints;      /* "host:port,host:port" */
  bool https;
  const char *cacert, *cert, *key;
  const char *user;           /* NULL: no authentication */
  const char *password;
  const char *prefix;         /* key prefix, default "/cdrun/rdzv/" */
  const char *id;             /* rdzv_id */
  struct rdzv_proto_conf conf;
  const char *local_addr;     /* "" or --local_addr */
  int nproc;
  int master_port;            /* this node's reserved port */
};

/* Creates the back end; libcurl is initialised and etcd contacted only at
 * the first join.  Returns 0 or a negative libuv error. */
int rdzv_etcd_create(uv_loop_t *loop, const struct rdzv_etcd_opts *o,
                     const struct rdzv_callbacks *cb, struct rdzv **out);

#endif
