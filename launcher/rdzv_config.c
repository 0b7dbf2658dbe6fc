/* rdzv_config.c -- picks and configures the rendezvous back end. */
#include "rdzv_config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint.h"
#include "err.h"
#include "etcd_rdzv_state.h"
#include "num.h"
#include "rdzv_etcd.h"
#include "rdzv_rules.h"

#define C10D_DEFAULT_PORT 29400
#define STATIC_DEFAULT_PORT 29500
#define ETCD_DEFAULT_PORT 2379

/* num.h's one rule for numbers. */
static int parse_double(const char *v, double lo, double hi, double *out)
{
  return num_parse_double(v, lo, hi, out);
}

static int load_secret(struct rdzv_config *c, const char *path, char *err,
                       size_t errlen)
{
  char why[512];

  if (rdzv_auth_secret_load(path, &c->secret, why, sizeof why) == 0)
    return 0;
  return err_invalid(err, errlen, "--rdzv_conf: %s", why);
}

/* The password file's first line (the file stays the only place the
 * password is written). */
static int read_password(const char *path, char *out, size_t size,
                         char *err, size_t errlen)
{
  FILE *f = fopen(path, "r");
  size_t n;

  if (!f) {
    return err_invalid(err, errlen,
                       "--rdzv_conf password_file=%s: cannot read it: "
                       "%s", path, strerror(errno));
  }
  if (!fgets(out, (int)size, f))
    out[0] = '\0';
  fclose(f);
  n = strcspn(out, "\r\n");
  out[n] = '\0';
  if (!out[0]) {
    return err_invalid(err, errlen,
                       "--rdzv_conf password_file=%s: empty", path);
  }
  return 0;
}

/* The etcd back end's --rdzv_conf keys (torchrun's protocol, cacert,
 * cert, key; and user/password_file).  Returns 0 when taken, 1 when key
 * is not one of them, -EINVAL with err set when its value is bad. */
static int etcd_conf_entry(struct rdzv_config *c, const char *key,
                           const char *val, char *err, size_t errlen)
{
  struct rdzv_etcd_config *e = &c->etcd;
  char *dst = NULL;
  size_t size = 0;

  if (strcmp(key, "protocol") == 0) {
    if (strcmp(val, "https") == 0)
      e->https = true;
    else if (strcmp(val, "http") == 0)
      e->https = false;
    else {
      return err_invalid(err, errlen,
                         "--rdzv_conf: invalid value '%s' for protocol "
                         "(expected http or https)", val);
    }
    return 0;
  }
  if (strcmp(key, "password") == 0) {
    return err_invalid(err, errlen, "--rdzv_conf: password=... is refused: "
                       "a password on the command line is visible to every "
                       "user of the machine; use password_file=PATH");
  }
  if (strcmp(key, "password_file") == 0)
    return read_password(val, e->password, sizeof e->password, err,
                         errlen);
  if (strcmp(key, "cacert") == 0 || strcmp(key, "ca_cert") == 0) {
    dst = e->cacert;
    size = sizeof e->cacert;
  } else if (strcmp(key, "cert") == 0 || strcmp(key, "ssl_cert") == 0) {
    dst = e->cert;
    size = sizeof e->cert;
  } else if (strcmp(key, "key") == 0 || strcmp(key, "ssl_cert_key") == 0) {
    dst = e->key;
    size = sizeof e->key;
  } else if (strcmp(key, "user") == 0 || strcmp(key, "username") == 0) {
    dst = e->user;
    size = sizeof e->user;
  } else if (strcmp(key, "etcd_prefix") == 0) {
    if (val[0] != '/') {
      return err_invalid(err, errlen,
                         "--rdzv_conf: etcd_prefix must start with '/'");
    }
    dst = e->prefix;
    size = sizeof e->prefix;
  } else {
    return 1;
  }
  snprintf(dst, size, "%s", val);
  return 0;
}

/* --rdzv_endpoint for etcd: a comma-separated list of members, each
 * host[:port] (default 2379), normalised to host:port. */
static int etcd_endpoints(struct rdzv_config *c, const char *list,
                          char *err, size_t errlen)
{
  char one[RDZV_PROTO_MAX_ADDR + 16], host[RDZV_PROTO_MAX_ADDR + 1];
  const char *p = list;
  size_t len, used = 0;
  int port;

  if (!list[0]) {
    return err_invalid(err, errlen,
                       "--rdzv_backend=etcd needs --rdzv_endpoint="
                       "HOST[:PORT][,HOST[:PORT]...] (the etcd members)");
  }
  while (*p) {
    len = strcspn(p, ",");
    if (len == 0 || len >= sizeof one)
      goto bad;
    snprintf(one, sizeof one, "%.*s", (int)len, p);
    if (strncmp(one, "http://", 7) == 0 || strncmp(one, "https://", 8) == 0) {
      c->etcd.https = one[4] == 's';
      memmove(one, strstr(one, "//") + 2, strlen(strstr(one, "//") + 2) + 1);
    }
    if (endpoint_parse(one, ETCD_DEFAULT_PORT, host, sizeof host, &port))
      goto bad;
    used += (size_t)snprintf(c->etcd.endpoints + used,
                             sizeof c->etcd.endpoints - used,
                             strchr(host, ':') ? "%s[%s]:%d" : "%s%s:%d",
                             used ? "," : "", host, port);
    if (used >= sizeof c->etcd.endpoints)
      goto bad;
    p += len;
    if (*p == ',')
      p++;
  }
  return 0;
bad:
  return err_invalid(err, errlen,
                     "--rdzv_endpoint: invalid etcd member list '%s' "
                     "(expected host[:port][,host[:port]...])", list);
}

/* One --rdzv_conf entry. */
static int conf_entry(struct rdzv_config *c, const char *key,
                      const char *val, char *err, size_t errlen, char *warn,
                      size_t warnlen)
{
  double d;
  int rc;

  if (strcmp(key, "join_timeout") == 0 || strcmp(key, "timeout") == 0) {
    if (parse_double(val, RDZV_PROTO_MIN_JOIN_TIMEOUT, NUM_SECONDS_MAX,
                     &c->conf.join_timeout))
      goto bad;
  } else if (strcmp(key, "last_call_timeout") == 0) {
    if (parse_double(val, 0, NUM_SECONDS_MAX, &c->conf.last_call_timeout))
      goto bad;
  } else if (strcmp(key, "close_timeout") == 0) {
    if (parse_double(val, 0, NUM_SECONDS_MAX, &c->conf.close_timeout))
      goto bad;
  } else if (strcmp(key, "keepalive_interval") == 0 ||
             strcmp(key, "keep_alive_interval") == 0 ||
             strcmp(key, "heartbeat") == 0) {
    /* keep_alive_interval: torch's c10d name for the same thing. */
    if (parse_double(val, RDZV_PROTO_MIN_KEEPALIVE, 3600,
                     &c->conf.keepalive_interval))
      goto bad;
  } else if (strcmp(key, "keepalive_misses") == 0 ||
             strcmp(key, "keep_alive_max_attempt") == 0) {
    if (parse_double(val, 1, 1000, &d) || d != floor(d))
      goto bad;
    c->conf.keepalive_misses = (int)d;
  } else if (strcmp(key, "lost_node_grace") == 0) {
    if (parse_double(val, 0, 1e7, &c->lost_node_grace))
      goto bad;
  } else if (strcmp(key, "reconnect_timeout") == 0) {
    /* Soft state: how long to keep workers running without the
     * rendezvous server while reconnecting; 0: fail at once. */
    if (parse_double(val, 0, 1e7, &c->reconnect_timeout))
      goto bad;
  } else if (strcmp(key, "is_host") == 0) {
    if (strcmp(val, "1") == 0 || strcmp(val, "true") == 0 ||
        strcmp(val, "True") == 0)
      c->host_mode = RDZV_HOST_ALWAYS;
    else if (strcmp(val, "0") == 0 || strcmp(val, "false") == 0 ||
             strcmp(val, "False") == 0)
      c->host_mode = RDZV_HOST_NEVER;
    else
      goto bad;
  } else if (strcmp(key, "secret_file") == 0) {
    if (load_secret(c, val, err, errlen))
      return -EINVAL;
  } else if ((rc = etcd_conf_entry(c, key, val, err, errlen)) != 1) {
    return rc;
  } else if (strcmp(key, "read_timeout") == 0 ||
             strcmp(key, "store_type") == 0 || strcmp(key, "rank") == 0) {
    /* torchrun's TCPStore knobs: nothing to configure here. */
  } else {
    size_t n = strlen(warn);

    snprintf(warn + n, warnlen - n, "%s'%s'", n ? ", " : "", key);
  }
  return 0;
bad:
  return err_invalid(err, errlen,
                     "--rdzv_conf: invalid value '%s' for %s", val, key);
}

static int parse_conf(struct rdzv_config *c, const char *conf, char *err,
                      size_t errlen, char *warn, size_t warnlen)
{
  char key[64], val[256];
  const char *p = conf, *eq;
  double window;
  size_t len;

  while (*p) {
    len = strcspn(p, ",");
    eq = memchr(p, '=', len);
    if (!eq || eq == p || (size_t)(eq - p) >= sizeof key ||
        len - (size_t)(eq - p) - 1 >= sizeof val) {
      return err_invalid(err, errlen,
                         "--rdzv_conf: invalid entry '%.*s' (expected "
                         "key=value)", (int)len, p);
    }
    snprintf(key, sizeof key, "%.*s", (int)(eq - p), p);
    snprintf(val, sizeof val, "%.*s", (int)(len - (size_t)(eq - p) - 1),
             eq + 1);
    if (conf_entry(c, key, val, err, errlen, warn, warnlen))
      return -EINVAL;
    p += len;
    if (*p == ',')
      p++;
  }
  window = rdzv_rules_keepalive_window(c->conf.keepalive_interval,
                                       c->conf.keepalive_misses);
  if (window < RDZV_PROTO_MIN_KEEPALIVE_WINDOW) {
    return err_invalid(err, errlen, "--rdzv_conf: keepalive_interval x "
                       "keepalive_misses is %g s; it must be at least %g s",
                       window, RDZV_PROTO_MIN_KEEPALIVE_WINDOW);
  }
  return 0;
}

/* --rdzv_backend=etcd (etcd-v3): the members, the job id as a key, TLS
 * and login options that go together. */
static int resolve_etcd(const struct cdrun_args *a, const char *run_id,
                        struct rdzv_config *c, char *err, size_t errlen)
{
  c->backend = BACKEND_ETCD;
  if (a->nnodes_max > ETCD_RDZV_MAX_NODES)
    return err_invalid(err, errlen, "--nnodes=%d:%d: at most %d nodes per "
                       "job with the etcd back end", a->nnodes_min,
                       a->nnodes_max, ETCD_RDZV_MAX_NODES);
  if (etcd_endpoints(c, a->rdzv_endpoint, err, errlen))
    return -EINVAL;
  if (strlen(run_id) > RDZV_PROTO_MAX_ID || !run_id[0] || strchr(run_id, '/'))
    return err_invalid(err, errlen, "--rdzv_id: must be 1..%d characters, "
                       "no '/'", RDZV_PROTO_MAX_ID);
  if (!c->etcd.https && (c->etcd.cacert[0] || c->etcd.cert[0] ||
                         c->etcd.key[0]))
    return err_invalid(err, errlen, "--rdzv_conf: cacert, cert and key need "
                       "protocol=https");
  if (!c->etcd.cert[0] != !c->etcd.key[0])
    return err_invalid(err, errlen, "--rdzv_conf: cert and key go together "
                       "(the client certificate and its private key)");
  if (!c->etcd.user[0] != !c->etcd.password[0])
    return err_invalid(err, errlen, "--rdzv_conf: user=NAME and "
                       "password_file=PATH go together");
  return 0;
}

/* --rdzv_backend=c10d (rdzvd): where the rendezvous server is. */
static int resolve_rdzvd(const struct cdrun_args *a, const char *be,
                         const char *run_id, struct rdzv_config *c,
                         char *err, size_t errlen)
{
  c->backend = BACKEND_RDZVD;
  if (a->nnodes_max > RDZV_PROTO_MAX_NODES)
    return err_invalid(err, errlen,
                       "--nnodes=%d:%d: at most %d nodes per "
                       "job",
                       a->nnodes_min, a->nnodes_max, RDZV_PROTO_MAX_NODES);
  if (!a->rdzv_endpoint[0])
    return err_invalid(err, errlen, "--rdzv_backend=%s needs "
                       "--rdzv_endpoint=HOST[:PORT] (where rdzvd runs, or "
                       "the host that serves the rendezvous)", be);
  if (endpoint_parse(a->rdzv_endpoint, C10D_DEFAULT_PORT, c->host,
                     sizeof c->host, &c->port))
    return err_invalid(err, errlen, "--rdzv_endpoint: invalid value '%s' "
                       "(expected host[:port] or [ipv6]:port)",
                       a->rdzv_endpoint);
  if (strlen(run_id) > RDZV_PROTO_MAX_ID || !run_id[0])
    return err_invalid(err, errlen, "--rdzv_id: must be 1..%d characters",
                       RDZV_PROTO_MAX_ID);
  /* Note [live store in rdzvd]: rdzvd serves the live store. */
  c->conf.live = a->recovery && strcmp(a->recovery, "live") == 0;
  return 0;
}

/* --rdzv_backend=static (and --standalone): a fixed number of nodes that
 * meet at MASTER_ADDR:MASTER_PORT without a rendezvous. */
static int resolve_static(const struct cdrun_args *a, struct rdzv_config *c,
                          char *err, size_t errlen)
{
  c->backend = BACKEND_STATIC;
  if (a->standalone) {
    c->node_rank = 0;
    c->nnodes = 1;
  } else {
    if (a->nnodes_min != a->nnodes_max)
      return err_invalid(err, errlen, "--nnodes=%d:%d: the static back end "
                         "needs a fixed number of nodes (elastic jobs need "
                         "--rdzv_backend=c10d)", a->nnodes_min,
                         a->nnodes_max);
    c->nnodes = a->nnodes_max;
    c->node_rank = a->node_rank;
    if (c->node_rank >= c->nnodes)
      return err_invalid(err, errlen, "--node_rank=%d is out of range for "
                         "--nnodes=%d (node ranks are 0..nnodes-1)",
                         c->node_rank, c->nnodes);
  }
  snprintf(c->master_addr, sizeof c->master_addr, "%s",
           a->master_addr ? a->master_addr
                          : a->local_addr ? a->local_addr : "127.0.0.1");
  c->master_port = a->master_port;
  /* Several static nodes must agree on a port without talking: torchrun's
   * default.  One node picks a free one. */
  if (c->master_port == 0 && c->nnodes > 1)
    c->master_port = STATIC_DEFAULT_PORT;
  /* torchrun's static back end takes MASTER_ADDR:PORT from an endpoint. */
  if (!a->standalone && a->rdzv_endpoint[0]) {
    int port;

    if (endpoint_parse(a->rdzv_endpoint, 0, c->master_addr,
                       sizeof c->master_addr, &port))
      return err_invalid(err, errlen, "--rdzv_endpoint: invalid value '%s' "
                         "(expected host[:port] or [ipv6]:port)",
                         a->rdzv_endpoint);
    if (port)
      c->master_port = port;
  }
  return 0;
}

int rdzv_config_resolve(const struct cdrun_args *a, const char *run_id,
                        struct rdzv_config *c, char *err, size_t errlen,
                        char *warn, size_t warnlen)
{
  const char *be = a->rdzv_backend;

  memset(c, 0, sizeof *c);
  warn[0] = '\0';
  rdzv_proto_conf_default(&c->conf);
  c->conf.min_nodes = a->nnodes_min;
  c->conf.max_nodes = a->nnodes_max;
  c->conf.max_restarts = a->max_restarts;
  c->host_mode = RDZV_HOST_AUTO;
  c->reconnect_timeout = RDZV_DEFAULT_RECONNECT_TIMEOUT;
  c->lost_node_grace = RDZV_DEFAULT_LOST_NODE_GRACE;
  snprintf(c->id, sizeof c->id, "%s", run_id);
  if (a->local_addr)
    snprintf(c->local_addr, sizeof c->local_addr, "%s", a->local_addr);
  if (parse_conf(c, a->rdzv_conf, err, errlen, warn, warnlen))
    return -EINVAL;
  if (c->secret.len == 0) {
    const char *path = getenv("CDRUN_RDZV_SECRET_FILE");

    if (path && *path && load_secret(c, path, err, errlen))
      return -EINVAL;
  }

  if (a->standalone) {
    /* torchrun: c10d on localhost with a random id; one node. */
    if (a->nnodes_max > 1)
      return err_invalid(err, errlen, "--standalone runs one node; "
                         "--nnodes=%d:%d needs --rdzv_backend=c10d "
                         "--rdzv_endpoint=HOST:PORT", a->nnodes_min,
                         a->nnodes_max);
    be = "static";
  }
  if (strcmp(be, "etcd-v2") == 0)
    return err_invalid(err, errlen, "--rdzv_backend=etcd-v2: not supported: "
                       "it speaks etcd's v2 API, which etcd 3.4 serves only "
                       "with --enable-v2 and 3.6 removed; use "
                       "--rdzv_backend=etcd (the v3 API, any etcd >= 3.4) or "
                       "c10d");
  if (strcmp(be, "etcd") == 0 || strcmp(be, "etcd-v3") == 0)
    return resolve_etcd(a, run_id, c, err, errlen);
  if (strcmp(be, "c10d") == 0 || strcmp(be, "rdzvd") == 0)
    return resolve_rdzvd(a, be, run_id, c, err, errlen);
  if (strcmp(be, "static") != 0)
    return err_invalid(err, errlen, "--rdzv_backend: unknown back end '%s' "
                       "(expected static, c10d, rdzvd, etcd or etcd-v3)", be);
  return resolve_static(a, c, err, errlen);
}

int rdzv_config_create(const struct rdzv_config *c, int nproc,
                       int offered_port, uv_loop_t *loop,
                       const struct rdzv_callbacks *cb, struct rdzv **out)
{
  struct rdzv_client_opts o;
  struct rdzv_etcd_opts eo;

  if (c->backend == BACKEND_ETCD) {
    memset(&eo, 0, sizeof eo);
    eo.endpoints = c->etcd.endpoints;
    eo.https = c->etcd.https;
    eo.cacert = c->etcd.cacert;
    eo.cert = c->etcd.cert;
    eo.key = c->etcd.key;
    eo.user = c->etcd.user[0] ? c->etcd.user : NULL;
    eo.password = c->etcd.password;
    eo.prefix = c->etcd.prefix;
    eo.id = c->id;
    eo.conf = c->conf;
    eo.local_addr = c->local_addr;
    eo.nproc = nproc;
    eo.master_port = offered_port;
    return rdzv_etcd_create(loop, &eo, cb, out);
  }
  if (c->backend == BACKEND_STATIC)
    return rdzv_local_create(loop, c->node_rank, c->nnodes, nproc,
                             c->conf.max_restarts, c->master_addr,
                             c->master_port ? c->master_port : offered_port,
                             c->conf.join_timeout,
                             c->conf.keepalive_interval,
                             c->conf.keepalive_misses, cb, out);
  memset(&o, 0, sizeof o);
  o.host = c->host;
  o.port = c->port;
  o.id = c->id;
  o.conf = c->conf;
  o.local_addr = c->local_addr;
  o.nproc = nproc;
  o.master_port = offered_port;
  o.host_mode = c->host_mode;
  o.secret = &c->secret;
  o.reconnect_timeout = c->reconnect_timeout;
  return rdzv_client_create(loop, &o, cb, out);
}
