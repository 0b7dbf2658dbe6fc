/* rdzv_config.h -- from cdrun's rendezvous flags (--standalone, --nnodes,
 * --rdzv_backend, --rdzv_endpoint, --rdzv_id, --rdzv_conf, --node_rank,
 * --master_addr/--master_port, --local_addr) to a rendezvous back end. */
#ifndef CDRUN_RDZV_CONFIG_H
#define CDRUN_RDZV_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "args.h"
#include "rdzv_auth.h"
#include "rdzv.h"
#include "rdzv_client.h"
#include "rdzv_proto.h"

enum rdzv_backend_kind {
  BACKEND_STATIC,     /* --standalone, or --rdzv_backend=static */
  BACKEND_RDZVD,      /* --rdzv_backend=c10d or rdzvd */
  BACKEND_ETCD,       /* --rdzv_backend=etcd or etcd-v3 */
};

/* --rdzv_backend=etcd: the members and how to talk to them. */
struct rdzv_etcd_config {
  char endpoints[1024];               /* "host:port,host:port" */
  bool https;                         /* --rdzv_conf protocol=https */
  char cacert[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];
  char user[256];                     /* user=NAME */
  char password[256];                 /* read from password_file=PATH */
  char prefix[256];                   /* etcd_prefix=, default
                                         /cdrun/rdzv/ */
};

struct rdzv_config {
  enum rdzv_backend_kind backend;
  /* static */
  int node_rank;
  int nnodes;
  char master_addr[RDZV_PROTO_MAX_ADDR + 1];
  int master_port;                    /* 0: reserve a free one */
  /* rdzvd */
  char host[RDZV_PROTO_MAX_ADDR + 1];         /* endpoint */
  int port;
  char id[RDZV_PROTO_MAX_ID + 1];
  struct rdzv_proto_conf conf;
  enum rdzv_host_mode host_mode;
  char local_addr[RDZV_PROTO_MAX_ADDR + 1];
  /* --rdzv_conf=secret_file=PATH, else $CDRUN_RDZV_SECRET_FILE: loaded
   * and checked at resolve time; len 0: none. */
  struct rdzv_auth_secret secret;
  /* etcd (also uses id, conf, local_addr) */
  struct rdzv_etcd_config etcd;
  /* --rdzv_conf=reconnect_timeout=S (seconds; 0: fail at once when the
   * rendezvous connection is lost). */
  double reconnect_timeout;
  /* --rdzv_conf=lost_node_grace=S: in a fixed-size job whose nodes a
   * launcher started (a Slurm step, --hostfile), how long the others wait
   * for a lost node before the job ends (agent.h). */
  double lost_node_grace;
};

#define RDZV_DEFAULT_LOST_NODE_GRACE 30.0

/* Resolves a's rendezvous flags.  run_id is the job id to use (a random
 * one for --standalone).  Returns 0, or -EINVAL with a one-line message
 * naming the flag in err.  The shared secret comes from --rdzv_conf's
 * secret_file, else from the environment's CDRUN_RDZV_SECRET_FILE.
 * Unknown --rdzv_conf keys are reported in warn
 * (empty when none), not refused: torchrun passes them to plugins. */
int rdzv_config_resolve(const struct cdrun_args *a, const char *run_id,
                        struct rdzv_config *out, char *err, size_t errlen,
                        char *warn, size_t warnlen);

/* Creates the back end.  offered_port is this node's reserved port, which
 * the rdzvd back end offers as MASTER_PORT should this node get rank 0. */
int rdzv_config_create(const struct rdzv_config *c, int nproc,
                       int offered_port, uv_loop_t *loop,
                       const struct rdzv_callbacks *cb, struct rdzv **out);

#endif
