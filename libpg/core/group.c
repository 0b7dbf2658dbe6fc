/* group.c -- a group's making and its end, for pg_init and pg_destroy
 * (init.c): the options and the environment, the store (rank 0 serves
 * it), the topology (topo.c), the choice of backend, and the rebuild
 * registry (hooks.h).  The rest of a group lives beside it (group.h lists
 * where). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group.h"
#include "knobs.h"
#include "launch_env.h"
#include "num.h"

#define DEFAULT_TIMEOUT_S 300.0
#define EXIT_WAIT_MAX_S 30.0

/* ---- environment --------------------------------------------------------- */

static int env_int(const char *name, long lo, long hi, int fallback,
                   bool required, int *out)
{
  char buf[64];
  /* Set by cdrun/torchrun, else derived from srun's or mpirun's. */
  const char *v = pg__launch_env(name, buf, sizeof buf);
  long n;

  if (!v || !*v) {
    if (required)
      return pg__fail(-EINVAL, "%s is not set (run the worker under cdrun, "
                      "torchrun, srun or mpirun, or pass it in struct "
                      "pg_options)", name);
    *out = fallback;
    return 0;
  }
  if (num_parse_long(v, lo, hi, &n))
    return pg__fail(-EINVAL, "%s is '%s', expected an integer %ld..%ld",
                    name, v, lo, hi);
  *out = (int)n;
  return 0;
}

static int env_double(enum pg__knob k, double fallback, double *out)
{
  const char *name = pg__knob_name(k);
  const char *v = pg__knob(k);
  double d;

  if (!v || !*v) {
    *out = fallback;
    return 0;
  }
  if (num_parse_double(v, 0, 1e9, &d) || !(d > 0))
    return pg__fail(-EINVAL, "%s is '%s', expected seconds > 0", name, v);
  *out = d;
  return 0;
}

/* ---- creating and destroying ---------------------------------------------- */

/* A group whose setup failed with err after its thread started: torn
 * down, and its sentence kept (pg_destroy's teardown may overwrite it),
 * after "what: " when what is not NULL. */
int pg__group_setup_failed(pg_group *g, int err, const char *what)
{
  char why[512];

  snprintf(why, sizeof why, "%s", pg_last_error());
  g->comm = NULL;
  pg__group_destroy(g);
  return what ? pg__fail(err, "%s: %s", what, why)
              : pg__fail(err, "%s", why);
}

/* A group whose setup failed before its progress thread started. */
void pg__group_free_early(pg_group *g)
{
  free(g->all_ranks);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->queued);
  pthread_cond_destroy(&g->finished);
  free(g);
}

static int resolve_options(const struct pg_options *o, pg_group *g,
                           const char **addr, int *port, pg_backend *be,
                           int *local_rank)
{
  int err, lws;
  const char *b;

  g->rank = o->rank;
  g->size = o->world_size;
  if (g->size < 0 &&
      (err = env_int("WORLD_SIZE", 1, 1 << 24, 1, true, &g->size)))
    return err;
  if (g->size < 1)
    return pg__fail(-EINVAL, "world size %d, expected >= 1", g->size);
  if (g->rank < 0 &&
      (err = env_int("RANK", 0, g->size - 1, 0, true, &g->rank)))
    return err;
  if (g->rank >= g->size)
    return pg__fail(-EINVAL, "rank %d is outside the world of %d", g->rank,
                    g->size);
  *local_rank = o->local_rank;
  if (*local_rank < 0 &&
      (err = env_int("LOCAL_RANK", 0, INT_MAX, 0, false, local_rank)))
    return err;
  if (o->local_world_size < 0 &&
      (err = env_int("LOCAL_WORLD_SIZE", 1, INT_MAX, 1, false, &lws)))
    return err;
  *addr = o->master_addr ? o->master_addr
        : pg__launch_env("MASTER_ADDR", g->launch_addr,
                         sizeof g->launch_addr);
  if (g->size > 1 && (!*addr || !**addr))
    return pg__fail(-EINVAL, "MASTER_ADDR is not set (run the worker under "
                    "cdrun, torchrun or srun, pass master_addr, or for "
                    "mpirun across hosts: -x MASTER_ADDR=<rank 0's host>)");
  *port = o->master_port;
  if (*port <= 0 && g->size > 1 &&
      (err = env_int("MASTER_PORT", 1, 65535, 0, true, port)))
    return err;
  g->timeout = o->timeout;
  if (g->timeout <= 0 &&
      (err = env_double(PG_KNOB_TIMEOUT, DEFAULT_TIMEOUT_S, &g->timeout)))
    return err;
  *be = o->backend;
  b = pg__knob(PG_KNOB_BACKEND);
  if (*be == PG_BACKEND_AUTO && b) {
    if (strcmp(b, "cpu") == 0)
      *be = PG_BACKEND_CPU;
    else if (strcmp(b, "nccl") == 0)
      *be = PG_BACKEND_NCCL;
    else
      return pg__fail(-EINVAL, "PG_BACKEND is '%s', expected cpu or nccl",
                      b);
  }
  return 0;
}

/* The number of hosts among the members. */
static int member_hosts(const pg_group *g)
{
  int i, j, k = 0;

  for (i = 0; i < g->size; i++) {
    for (j = 0; j < i; j++)
      if (g->wtopo->host_of[g->all_ranks[j]] ==
          g->wtopo->host_of[g->all_ranks[i]])
        break;
    k += j == i;
  }
  return k;
}

void pg__group_fill_setup(pg_group *g, const char *ns, struct pg__setup *s)
{
  const struct pg__hooks *h;

  memset(s, 0, sizeof *s);
  s->store = g->store;
  s->topo = g->wtopo;
  s->ranks = g->all_ranks;
  s->n = g->size;
  s->me = g->rank;
  s->timeout = g->timeout;
  s->device = g->device;
  s->local_rank = g->local_rank;
  s->ns = ns;
  s->master_addr = g->master_addr[0] ? g->master_addr : NULL;
  s->token = &g->token;
  if ((h = pg__hooks_of(g)))
    h->op_watch(g, s);
}

int pg__group_create_comm(pg_group *g, pg_backend be, int device,
                          int local_rank)
{
  struct pg__setup s;
  char ns[300] = "";
  int i, nhosts;

  if (!g->all_ranks) {
    g->all_ranks = calloc((size_t)g->size, sizeof *g->all_ranks);
    if (!g->all_ranks)
      return -ENOMEM;
    for (i = 0; i < g->size; i++)
      g->all_ranks[i] = i;
  }
  if (!g->wtopo)
    g->wtopo = &g->topo;
  g->be = be;
  g->device = device;
  g->local_rank = local_rank;
  nhosts = g->wtopo->host_of ? member_hosts(g) : 1;
  pg__group_fill_setup(g, ns, &s);
  if (be == PG_BACKEND_NCCL) {
    snprintf(ns, sizeof ns, "%snccl/", g->ns);
    snprintf(g->backend, sizeof g->backend, "nccl");
    if (g->split_from) {
      pg_group *p = g->split_from;
      int err;

      pthread_mutex_lock(&p->mu);
      err = p->comm->ops->split(p->comm, g->split_color, g->split_key, &s,
                                &g->comm);
      pthread_mutex_unlock(&p->mu);
      return err;
    }
    return pg__nccl_create(&s, &g->comm);
  }
  if (nhosts == 1) {
    snprintf(ns, sizeof ns, "%sshm/", g->ns);
    snprintf(g->backend, sizeof g->backend, "cpu-shm");
    return pg__shm_create(&s, &g->comm);
  }
  if (nhosts == g->size) {
    snprintf(ns, sizeof ns, "%stcp/", g->ns);
    snprintf(g->backend, sizeof g->backend, "cpu-tcp");
    return pg__tcp_create(&s, &g->comm);
  }
  snprintf(ns, sizeof ns, "%shier/", g->ns);
  snprintf(g->backend, sizeof g->backend, "cpu-hier");
  return pg__hier_create(&s, &g->comm);
}

/* addr is "localhost" or a loopback address (127.0.0.0/8, ::1): every
 * rank runs here.  Other names are not resolved for this: a hostname
 * that /etc/hosts maps to 127.0.1.1 here may be another address for the
 * other hosts. */
static bool is_loopback(const char *addr)
{
  struct addrinfo hints, *res, *ai;
  bool all = true;

  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  if (!addr || strcmp(addr, "localhost") != 0)
    hints.ai_flags = AI_NUMERICHOST;
  if (!addr || getaddrinfo(addr, NULL, &hints, &res) != 0)
    return false;
  for (ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET)
      all &= (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr)
              >> 24) == 127;
    else if (ai->ai_family == AF_INET6)
      all &= IN6_IS_ADDR_LOOPBACK(
          &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    else
      all = false;
  }
  freeaddrinfo(res);
  return all;
}

/* Note [store lifetime]: rank 0's store server must outlive every other
 * rank's last use of it, so pg_destroy ends with each rank checking in and
 * rank 0 waiting (bounded) for all of them before it stops serving. */
static void exit_barrier(pg_group *g)
{
  char key[64];
  char **keys;
  int i;

  /* Live mode: the store is cdrun's and outlives every worker. */
  if (!g->store || g->size == 1 || g->is_sub ||
      (g->hooks && g->hooks->keeps_store))
    return;
  snprintf(key, sizeof key, "pg/exit/%d", g->rank);
  pg_store_set(g->store, key, "1", 1);
  if (g->rank != 0)
    return;
  keys = calloc((size_t)g->size, sizeof *keys);
  if (!keys)
    return;
  for (i = 0; i < g->size; i++) {
    snprintf(key, sizeof key, "pg/exit/%d", i);
    keys[i] = strdup(key);
  }
  pg_store_wait(g->store, (const char *const *)keys, (size_t)g->size,
                g->timeout < EXIT_WAIT_MAX_S ? g->timeout : EXIT_WAIT_MAX_S);
  for (i = 0; i < g->size; i++)
    free(keys[i]);
  free(keys);
}

void pg__group_destroy(pg_group *g)
{
  const struct pg__hooks *h;

  if (!g)
    return;
  pthread_mutex_lock(&g->mu);
  g->stop = true;
  pthread_cond_broadcast(&g->queued);
  pthread_mutex_unlock(&g->mu);
  pthread_join(g->thread, NULL);
  h = pg__hooks_of(g);
  if (g->is_sub && h)
    h->sub_remove(g);
  if (g->comm)
    g->comm->ops->destroy(g->comm);
  exit_barrier(g);
  pg_store_close(g->user_store);
  if (g->store && !g->is_sub)
    pg_store_close(g->store);
  if (g->server)
    pg_store_server_stop(g->server);
  pg__topo_free(&g->topo);
  if (!g->is_sub && h)
    h->free(g);
  free(g->rebuild);
  free(g->all_ranks);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->queued);
  pthread_cond_destroy(&g->finished);
  free(g);
}

/* The world's store: rank 0 serves it on port, every rank connects.
 * Note [job token]: the store and the TCP mesh serve only those who
 * prove the token; a loopback group's store listens on loopback only,
 * token or not. */
static int store_open(pg_group *g, const struct pg_options *o,
                      const char *addr, int port)
{
  const char *tok;
  bool loopback;
  int err;

  tok = o->job_token ? o->job_token : pg__knob(PG_KNOB_JOB_TOKEN);
  if ((err = pg__token_from(tok ? tok : "", &g->token)))
    return err;
  loopback = is_loopback(addr);
  if (!g->token.len)
    pg__token_warn_missing(loopback);
  if (g->rank == 0) {
    int p = port;

    err = pg_store_server_start_auth(loopback ? addr : NULL, &p,
                                     tok ? tok : "", &g->server);
    if (err)
      return pg__fail(err, "rank 0 cannot serve the store on port %d: %s",
                      port, pg_strerror(err));
  }
  err = pg_store_connect_auth(g->rank == 0 && !loopback ? "127.0.0.1"
                              : addr, port, g->timeout, tok ? tok : "",
                              &g->store);
  if (err)
    return pg__fail(err, "cannot reach the store at %s:%d: %s", addr, port,
                    pg_last_error()[0] ? pg_last_error()
                                       : pg_strerror(err));
  return 0;
}

int pg__group_start(const struct pg_options *o, struct pg__group_init *in,
                    pg_group **out)
{
  pg_group *g;
  int err;

  *out = NULL;
  memset(in, 0, sizeof *in);
  in->be = PG_BACKEND_AUTO;
  g = calloc(1, sizeof *g);
  if (!g)
    return pg__fail(-ENOMEM, "out of memory");
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->queued, NULL);
  pthread_cond_init(&g->finished, NULL);
  snprintf(g->ns, sizeof g->ns, "pg/");
  err = resolve_options(o, g, &in->addr, &in->port, &in->be,
                        &in->local_rank);
  if (err)
    goto fail_early;
  if (in->addr)
    snprintf(g->master_addr, sizeof g->master_addr, "%s", in->addr);
  if (pthread_create(&g->thread, NULL, pg__work_progress_main, g) != 0) {
    err = pg__fail(-EAGAIN, "cannot start the progress thread");
    goto fail_early;
  }
  if (in->be == PG_BACKEND_NCCL && !pg__nccl_built()) {
    err = pg__fail(-ENOTSUP, "PG_BACKEND=nccl: libpg was built without "
                   "NCCL (no CUDA/NCCL found at build time)");
    return pg__group_setup_failed(g, err, NULL);
  }
  g->be = in->be;
  g->device = o->device;
  g->local_rank = in->local_rank;
  *out = g;
  return 0;

fail_early:
  pg__group_free_early(g);
  return err;
}

int pg__group_setup(pg_group *g, const struct pg_options *o,
                    const struct pg__group_init *in)
{
  char host_id[512], boot[64];
  const char *hid;
  int err;

  if (g->size == 1 && in->be != PG_BACKEND_NCCL) {
    snprintf(g->backend, sizeof g->backend, "self");
    return 0;
  }
  if (g->size == 1) {
    /* NCCL with one rank: device buffers need the real backend, and a
     * single member needs no store. */
    g->topo.rank = 0;
    g->topo.size = 1;
    g->topo.nhosts = 1;
    return pg__group_create_comm(g, in->be, o->device, in->local_rank);
  }

  err = store_open(g, o, in->addr, in->port);
  if (err)
    return err;
  pg__topo_boot_id(boot, sizeof boot);
  hid = o->host_id ? o->host_id : pg__knob(PG_KNOB_HOST_ID);
  if (!hid || !*hid) {
    pg__topo_default_host_id(boot, host_id, sizeof host_id);
    hid = host_id;
  }
  err = pg__topo_build(g, hid, boot);
  if (err)
    return err;
  return pg__group_create_comm(g, in->be, o->device, in->local_rank);
}

/* ---- the rebuild registry (hooks.h) ------------------------------------- */

int pg__rebuild_add(pg_group *g, const struct pg__rebuild_ops *ops,
                    void *obj)
{
  struct pg__rebuild *r;

  if (g->is_sub)
    return 0;
  r = realloc(g->rebuild, (g->nrebuild + 1) * sizeof *r);
  if (!r)
    return pg__fail(-ENOMEM, "out of memory recording a reducer");
  g->rebuild = r;
  g->rebuild[g->nrebuild++] = (struct pg__rebuild){ ops, obj };
  return 0;
}

void pg__rebuild_remove(pg_group *g, void *obj)
{
  size_t i;

  for (i = 0; g && i < g->nrebuild; i++)
    if (g->rebuild[i].obj == obj) {
      memmove(g->rebuild + i, g->rebuild + i + 1,
              (g->nrebuild - i - 1) * sizeof *g->rebuild);
      g->nrebuild--;
      return;
    }
}

const struct pg__rebuild *pg__rebuild_list(const pg_group *g, size_t *n)
{
  *n = g->nrebuild;
  return g->rebuild;
}
