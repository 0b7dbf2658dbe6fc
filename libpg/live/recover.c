/* recover.c -- live recovery (pg.h, "live recovery"): live mode at
 * pg_init (attaching the live hooks, live_hooks.c, to the world),
 * pg_state_register, pg_recover, pg_membership_poll.  The generation
 * protocol is live_form.c's, the heal heal.c's, the reducers' part of it
 * theirs (through the core's rebuild registry). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "group.h"
#include "knobs.h"
#include "live.h"
#include "num.h"

/* Which ranks of formed generation f are new to the group (a
 * replacement or a joining node's worker): not members of old_gen, this
 * rank's previous generation; old_gen < 0 (a process joining a running
 * job, which knows no previous generation): the fresh processes, when
 * the generation has members that are not (at the job's first
 * generation nobody is new).  Counts them; 0 or -ENOMEM. */
static int note_new(struct pg__live *l, const struct pg__live_formed *f,
                    int64_t old_gen, int *joined)
{
  unsigned char *is_new = calloc((size_t)f->world, 1);
  bool running = false;
  int i;

  if (!is_new)
    return pg__fail(-ENOMEM, "out of memory for generation %" PRIu64,
                    f->gen);
  for (i = 0; i < f->world; i++)
    running |= !f->m[i].fresh;
  *joined = 0;
  for (i = 0; i < f->world && running; i++) {
    is_new[i] = f->m[i].fresh ||
                (old_gen >= 0 && f->m[i].from != old_gen);
    *joined += is_new[i];
  }
  free(l->is_new);
  l->is_new = is_new;
  l->is_new_n = f->world;
  return 0;
}

/* ---- live mode at pg_init ----------------------------------------------- */

/* Note [opt in]: cdrun replaces a failed worker alone only when every
 * worker of the node created its CDRUN_LIVE_OPT_IN file; the pid lets the
 * agent tell a stale file from this process's.  A second line says where
 * the process is: "joining" until pg_init has set up its first
 * generation, then "joined": a replacement still joining when a peer of
 * its node finished never can (cdrun, Note [finished job]).  Written to a
 * temporary name and renamed, so the agent never reads half a file. */
static int opt_in(const char *path, const char *state)
{
  char tmp[PATH_MAX + 32], line[64];
  int fd, n, err;

  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  n = snprintf(line, sizeof line, "%d\n%s\n", (int)getpid(), state);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, line, (size_t)n) != n || close(fd) != 0 ||
      rename(tmp, path) != 0) {
    err = -errno;
    if (fd >= 0)
      unlink(tmp);
    return pg__fail(err, "cannot opt in to live recovery: writing %s "
                    "(" WORKER_ENV_LIVE_OPT_IN "): %s", path, strerror(-err));
  }
  return 0;
}

/* "host:port" or "[v6]:port". */
static int parse_endpoint(const char *v, char *host, size_t hlen, int *port)
{
  const char *colon = strrchr(v, ':');
  const char *h = v;
  size_t n;
  long p;

  if (!colon || num_parse_long(colon + 1, 1, 65535, &p))
    return pg__fail(-EINVAL, WORKER_ENV_LIVE_STORE " is '%s', expected "
                    "host:port", v);
  n = (size_t)(colon - v);
  if (n >= 2 && v[0] == '[' && v[n - 1] == ']') {
    h = v + 1;
    n -= 2;
  }
  if (n == 0 || n >= hlen)
    return pg__fail(-EINVAL, WORKER_ENV_LIVE_STORE " is '%s', expected "
                    "host:port", v);
  memcpy(host, h, n);
  host[n] = '\0';
  *port = (int)p;
  return 0;
}

static bool local_host(const char *h)
{
  return strcmp(h, "localhost") == 0 || strncmp(h, "127.", 4) == 0 ||
         strcmp(h, "::1") == 0;
}

static int connect_store(pg_group *g, const struct pg_options *o)
{
  const char *ep = pg__knob(PG_KNOB_LIVE_STORE);
  const char *tok = o->job_token ? o->job_token
                                 : pg__knob(PG_KNOB_JOB_TOKEN);
  char host[256];
  int port = 0, err;

  if (!ep)
    return pg__fail(-EINVAL, WORKER_ENV_RECOVERY "=" WORKER_RECOVERY_LIVE
                    " but " WORKER_ENV_LIVE_STORE " is "
                    "not set (cdrun --recovery=live sets both)");
  if ((err = parse_endpoint(ep, host, sizeof host, &port)))
    return err;
  if ((err = pg__token_from(tok ? tok : "", &g->token)))
    return err;
  if (!g->token.len)
    pg__token_warn_missing(local_host(host));
  err = pg_store_connect_auth(host, port, g->timeout, tok ? tok : "",
                              &g->store);
  if (err)
    return pg__fail(err, "cannot reach the live store at %s: %s", ep,
                    pg_last_error()[0] ? pg_last_error()
                                       : pg_strerror(err));
  return 0;
}

/* Note [setup watch]: a member may die after it checked in (Note [check
 * in]) and before the communicator is set up; the others would wait for
 * its keys until the timeout.  So while the group is set up, the store
 * exchanges (and the TCP mesh's accepts and connects, for a member that
 * published its endpoint and died) wait in slices and ask, between
 * them, whether a member is gone from this machine or the next
 * generation started (its replacement went ahead): either ends the
 * setup with PG_ERR_PEER_LOST, and the next generation follows.  Sub-groups are made under the same
 * watch (Note [live sub-groups]). */

void pg__live_test_kill(const char *where, uint64_t gen, int rank)
{
  const char *v = pg__knob(PG_KNOB_TEST_LIVE_KILL);
  unsigned long long kg;
  char w[16];
  int kr, used = 0;

  if (v && sscanf(v, "%15[a-z]:%llu:%d%n", w, &kg, &kr, &used) == 3 &&
      v[used] == '\0' && strcmp(w, where) == 0 && kg == gen && kr == rank)
    raise(SIGKILL);
}

int pg__live_watch_formed(void *arg)
{
  struct watch *w = arg;

  return pg__live_formed_check(w->store, w->f, w->boot);
}

static int rebuild_comm(pg_group *g, const struct pg__live_formed *f,
                        uint64_t old_gen);

/* Makes g the member it is of f (rebuild_comm), watched (Note [setup
 * watch]). */
static int rebuild(pg_group *g, const struct pg__live_formed *f,
                   uint64_t old_gen)
{
  struct pg__live *l = PG__LIVE_WORLD(g);
  struct watch w = { g->store, f, l->boot };
  int err;

  pg__live_test_kill("setup", f->gen, f->slot);
  pg__setup_watch(pg__live_watch_formed, &w);
  err = rebuild_comm(g, f, old_gen);
  pg__setup_watch(NULL, NULL);
  if (!err)     /* Note [a node cut off] */
    pg__live_cut_arm(&l->cut, l->round_file, l->round, g->size);
  return err;
}

/* f becomes the generation g is a member of (f->m is taken). */
static void keep_formed(pg_group *g, struct pg__live_formed *f)
{
  struct pg__live *l = PG__LIVE_WORLD(g);

  free(l->formed.m);
  l->formed = *f;
  f->m = NULL;
  l->sub_watch = (struct watch){ g->store, &l->formed, l->boot };
}

/* Makes g the member it is of f: rank, world, namespace, topology and a
 * communicator (the backend's shrink when members only left, else a new
 * one through the store).  Collective over f. */
static int rebuild_comm(pg_group *g, const struct pg__live_formed *f,
                        uint64_t old_gen)
{
  struct pg__live *l = PG__LIVE_WORLD(g);
  struct pg__comm *old = g->comm, *shrunk = NULL;
  struct pg__setup s;
  int *excluded = NULL, nex = 0, i, err, last, old_size = g->size;
  bool shrink = pg__live_shrinks(f->m, f->world, (int64_t)old_gen,
                                 old_size);
  char ns[300];

  g->rank = f->slot;
  g->size = f->world;
  l->gen = f->gen;
  l->round = f->round;
  snprintf(g->ns, sizeof g->ns, "pg/gen%" PRIu64 "/", f->gen);
  g->children = 0;
  free(g->all_ranks);
  g->all_ranks = NULL;
  pg__topo_free(&g->topo);
  g->wtopo = &g->topo;
  if (g->size == 1 && g->be != PG_BACKEND_NCCL) {
    if (old)
      old->ops->destroy(old);
    g->comm = NULL;
    snprintf(g->backend, sizeof g->backend, "self");
    g->topo.rank = 0;
    g->topo.size = 1;
    g->topo.nhosts = 1;
    return 0;
  }
  if ((err = pg__topo_build(g, l->host_id, l->boot)))
    return err;
  if (shrink) {
    /* Note [shrink]: the survivors, in their old order, are the new
     * communicator; the backend drops the others' positions.  Every
     * member decides alike from f (pg__live_shrinks): each says in its
     * entry whether it holds the old communicator (can_shrink), so after
     * a shrink that failed on some member (which then holds none) all
     * make a new one, never a second shrink of the same parent beside a
     * create (nccl.c, nccl_shrink). */
    excluded = calloc((size_t)old_size, sizeof *excluded);
    g->all_ranks = calloc((size_t)g->size, sizeof *g->all_ranks);
    if (!excluded || !g->all_ranks) {
      free(excluded);
      return pg__fail(-ENOMEM, "out of memory shrinking the group");
    }
    for (i = 0; i < g->size; i++)
      g->all_ranks[i] = i;
    for (i = 0, last = 0; i < old_size; i++) {
      while (last < f->world && f->m[last].old_rank < i)
        last++;
      if (last == f->world || f->m[last].old_rank != i)
        excluded[nex++] = i;
    }
    snprintf(ns, sizeof ns, "%snccl/", g->ns);
    pg__group_fill_setup(g, ns, &s);
    err = old->ops->shrink(old, excluded, nex, &s, &shrunk);
    free(excluded);
    /* The parent goes either way: after a failed shrink the next
     * recovery makes a new communicator (PG_ERR_PEER_LOST: the caller
     * recovers again). */
    old->ops->destroy(old);
    if (err && shrunk)
      shrunk->ops->destroy(shrunk);
    g->comm = err ? NULL : shrunk;
    return err ? pg__fail(PG_ERR_PEER_LOST, "generation %" PRIu64 ": the "
                          "shrink failed (%s): the next generation makes a "
                          "new communicator", f->gen, pg_last_error())
               : 0;
  }
  if (old)
    old->ops->destroy(old);
  g->comm = NULL;
  return pg__group_create_comm(g, g->be, g->device, g->local_rank);
}

/* Whether g holds a communicator its backend can shrink (Note
 * [shrink]). */
static bool can_shrink(const pg_group *g)
{
  return g->comm && g->comm->ops->shrink && g->be == PG_BACKEND_NCCL;
}

static void fill_join(pg_group *g, struct pg__live_join *j, bool fresh)
{
  struct pg__live *l = PG__LIVE_WORLD(g);

  *j = (struct pg__live_join){
    .store = g->store, .local_rank = g->local_rank,
    .round_file = l->round_file[0] ? l->round_file : NULL,
    .env_world = l->env_world, .env_rank = l->env_rank, .inc = l->inc,
    .boot = l->boot, .fresh = fresh, .valid = l->valid && !fresh,
    .comm = can_shrink(g), .old_rank = fresh ? -1 : g->rank,
    .from = fresh ? -1 : (int64_t)l->gen, .timeout = g->timeout,
  };
}

static int live_setup(pg_group *g, const struct pg_options *o)
{
  struct pg__live *l = PG__LIVE_WORLD(g);
  struct pg__live_formed f;
  struct pg__live_join j;
  const char *v, *hid;
  double deadline = pg__now() + g->timeout;
  uint64_t gen = 0;
  int err, i;

  if ((v = pg__knob(PG_KNOB_LIVE_OPT_IN)) && (err = opt_in(v, "joining")))
    return err;
  if ((v = pg__knob(PG_KNOB_LIVE_ROUND_FILE)))
    snprintf(l->round_file, sizeof l->round_file, "%s", v);
  l->env_rank = g->rank;
  l->env_world = g->size;
  pg__nonce((uint8_t *)&l->inc, sizeof l->inc);
  pg__topo_boot_id(l->boot, sizeof l->boot);
  hid = o->host_id ? o->host_id : pg__knob(PG_KNOB_HOST_ID);
  if (hid && *hid)
    snprintf(l->host_id, sizeof l->host_id, "%s", hid);
  else
    pg__topo_default_host_id(l->boot, l->host_id, sizeof l->host_id);
  if ((err = connect_store(g, o)))
    return err;
  l->fresh = true;
  /* A generation that fails while it is set up (another member died)
   * is followed by the next one, within the timeout, as in pg_recover. */
  for (;;) {
    fill_join(g, &j, true);
    j.timeout = deadline - pg__now();
    if (j.timeout <= 0)
      return pg__fail(-ETIMEDOUT, "no generation could be set up within "
                      "%g s", g->timeout);
    if ((err = pg__live_form(&j, gen, &f)))
      return err;
    l->joined_running = false;
    for (i = 0; i < f.world; i++)
      l->joined_running |= !f.m[i].fresh;
    l->heal_source = pg__live_heal_source(f.m, f.world);
    /* Joining a running job: a heal even with no source (heal.c says
     * the state is lost). */
    l->heal_pending = l->heal_source >= 0 || l->joined_running;
    /* Nothing to heal from: this rank starts the job's state itself. */
    l->valid = !l->heal_pending && !l->joined_running;
    l->round_seen = f.round;
    err = rebuild(g, &f, 0);
    if (!err)
      err = note_new(l, &f, -1, &i);
    gen = f.gen + 1;
    keep_formed(g, &f);
    if (!err && (v = pg__knob(PG_KNOB_LIVE_OPT_IN)))
      err = opt_in(v, "joined");
    if (!err || !pg__live_peer_caused(err))
      return err;
    if (g->comm)
      g->comm->ops->destroy(g->comm);
    g->comm = NULL;
  }
}

int pg__live_init(pg_group *g, const struct pg_options *o, bool *handled)
{
  const char *mode = pg__knob(PG_KNOB_RECOVERY);
  struct pg__live *l;

  *handled = false;
  if (!mode || strcmp(mode, WORKER_RECOVERY_RESTART) == 0)
    return 0;
  if (strcmp(mode, WORKER_RECOVERY_LIVE) != 0)
    return pg__fail(-EINVAL, WORKER_ENV_RECOVERY " is '%s', expected "
                    WORKER_RECOVERY_RESTART " or " WORKER_RECOVERY_LIVE,
                    mode);
  *handled = true;
  l = calloc(1, sizeof *l);
  if (!l)
    return pg__fail(-ENOMEM, "out of memory for live recovery");
  pthread_mutex_init(&l->subs_mu, NULL);
  pg__live_cut_init(&l->cut);
  /* Attached before anything can fail: a failed setup's pg_destroy frees
   * l through the hooks (and keeps the store's exit barrier out). */
  g->upper = l;
  g->hooks = &pg__live_hooks;
  return live_setup(g, o);
}

/* ---- state -------------------------------------------------------------- */

/* The registered state, for heal.c (the reducers are in the core's
 * rebuild registry). */
void pg__live_registered(pg_group *g, const struct pg_state_buf **bufs,
                         size_t *nbufs)
{
  struct pg__live *l = PG__LIVE_WORLD(g);

  *bufs = l->bufs;
  *nbufs = l->nbufs;
}

int pg_state_register(pg_group *g, const struct pg_state_buf *b, size_t n)
{
  struct pg__live *l;
  size_t i;
  bool valid;
  int err;

  if (!g || (n && !b))
    return pg__fail(-EINVAL, "pg_state_register: NULL group or buffers");
  if (g->is_sub)
    return pg__fail(-EINVAL, "pg_state_register: a sub-group (register "
                    "the state with the world group)");
  for (i = 0; i < n; i++)
    if (b[i].bytes && !b[i].ptr)
      return pg__fail(-EINVAL, "pg_state_register: buffer %zu is NULL "
                      "with %zu bytes", i, b[i].bytes);
  l = PG__LIVE_WORLD(g);
  if (!l)
    return 0;
  if (l->registered)
    return pg__fail(-EINVAL, "pg_state_register: called twice");
  l->bufs = malloc((n ? n : 1) * sizeof *l->bufs);
  if (!l->bufs)
    return pg__fail(-ENOMEM, "out of memory registering the state");
  if (n)
    memcpy(l->bufs, b, n * sizeof *b);
  l->nbufs = n;
  l->registered = true;
  l->fresh = false;
  if (!l->heal_pending)
    return 0;
  l->heal_pending = false;
  valid = false;
  err = pg__live_heal(g, l->heal_source, &valid);
  l->valid = valid;
  if (err) {
    err = pg__live_peer_err(g, err);
    pthread_mutex_lock(&g->mu);
    if (!g->failed)
      g->failed = err;
    pthread_mutex_unlock(&g->mu);
  }
  return err;
}

/* ---- pg_recover --------------------------------------------------------- */

/* Waits for queued work (which fails fast once the group failed) and
 * holds the queue for the caller. */
static void queue_hold(pg_group *g)
{
  pthread_mutex_lock(&g->mu);
  while (g->head || g->busy)
    pthread_cond_wait(&g->finished, &g->mu);
  g->busy = true;
  pthread_mutex_unlock(&g->mu);
}

static void queue_release(pg_group *g, int failed)
{
  pthread_mutex_lock(&g->mu);
  g->failed = failed;
  g->busy = false;
  pthread_cond_broadcast(&g->finished);
  if (g->head)
    pthread_cond_signal(&g->queued);
  pthread_mutex_unlock(&g->mu);
}


/* Closes g's communicator (revoked first where the backend can), with
 * its queue held: at once when nothing runs or waits on it (wait false,
 * returns whether it did), else once that ends.  The queue is released
 * with failed. */
static bool close_comm(pg_group *g, bool wait, int failed)
{
  pthread_mutex_lock(&g->mu);
  if (!wait && (g->head || g->busy)) {
    pthread_mutex_unlock(&g->mu);
    return false;
  }
  pthread_mutex_unlock(&g->mu);
  queue_hold(g);
  if (g->comm) {
    if (g->comm->ops->revoke)
      g->comm->ops->revoke(g->comm);
    g->comm->ops->destroy(g->comm);
    g->comm = NULL;
  }
  queue_release(g, failed);
  return true;
}

/* Note [live sub-groups]: every sub-group's communicator closed, and
 * the world's too when it is not shrunk (can_shrink): first those that
 * nothing uses now, then the others once their operation ends, so that
 * an operation of this rank that waits on a peer is not what keeps that
 * peer waiting on this rank in another group.  The sub-groups stay
 * failed (PG_ERR_PEER_LOST until the world's generation moves on, then
 * PG_ESTALE_GROUP).  On a copy of the list: a sub-group's failing
 * operation takes subs_mu (pg__live_lost). */
static void close_family(pg_group *g, struct pg__live *l, bool world)
{
  size_t n, i;
  int failed;

  pthread_mutex_lock(&l->subs_mu);
  n = l->nsubs;
  if (n)
    memcpy(l->snap, l->subs, n * sizeof *l->snap);
  pthread_mutex_unlock(&l->subs_mu);
  for (i = 0; i < n; i++)
    pg__live_mark_lost(l->snap[i]);
  for (i = 0; i < n; i++)
    close_comm(l->snap[i], false, PG_ERR_PEER_LOST);
  if (world) {
    pthread_mutex_lock(&g->mu);
    failed = g->failed;
    pthread_mutex_unlock(&g->mu);
    close_comm(g, false, failed);
  }
  for (i = 0; i < n; i++)
    close_comm(l->snap[i], true, PG_ERR_PEER_LOST);
}

static int fill_info(struct pg__live *l, const struct pg__live_formed *f,
                     uint64_t old_gen, int old_rank, int old_world,
                     struct pg_recover_info *info)
{
  memset(info, 0, sizeof *info);
  info->generation = f->gen;
  info->rank = f->slot;
  info->world = f->world;
  info->old_rank = old_rank;
  info->old_world = old_world;
  info->left = old_world > f->world ? old_world - f->world : 0;
  return note_new(l, f, (int64_t)old_gen, &info->joined);
}

/* Note [recover]: the communicators go first, the sub-groups' and the
 * old one (Note [live sub-groups]: those nothing uses at once, then the
 * others; a TCP peer blocked on this rank learns of the failure from the
 * closed connection, a shm peer from the left word), unless the backend
 * shrinks the old one (NCCL: revoked, so nothing waits on it).  The
 * reducers abandon their iteration.  Then the next generation forms
 * (live_form.c), the communicator is rebuilt and the state healed.  A
 * failure after the generation formed leaves the group failed with
 * PG_ERR_PEER_LOST, so the caller recovers again into the generation
 * after. */
int pg_recover(pg_group *g, struct pg_recover_info *info)
{
  struct pg_recover_info local;
  struct pg__live_formed f;
  struct pg__live_join j;
  struct pg__live *l = g ? PG__LIVE_WORLD(g) : NULL;
  const struct pg__rebuild *rb;
  size_t k, nrb;
  double t0 = pg__now(), t1;
  uint64_t old_gen;
  int old_rank, old_world, err, i;
  bool valid;

  if (!info)
    info = &local;
  memset(info, 0, sizeof *info);
  info->heal_source = -1;
  if (!g || g->is_sub || !l)
    return pg__fail(-ENOTSUP, "pg_recover: %s", !g ? "NULL group"
                    : g->is_sub ? "a sub-group (recover the world group, "
                    "then make the sub-group again)"
                    : "the group is not in live mode (" WORKER_ENV_RECOVERY
                      "=" WORKER_RECOVERY_LIVE ")");
  close_family(g, l, !can_shrink(g));
  rb = pg__rebuild_list(g, &nrb);
  for (k = 0; k < nrb; k++)
    rb[k].ops->abandon(rb[k].obj);
  queue_hold(g);
  if (can_shrink(g)) {
    if (g->comm->ops->revoke && g->failed)
      g->comm->ops->revoke(g->comm);
  } else if (g->comm) {
    g->comm->ops->destroy(g->comm);
    g->comm = NULL;
  }
  old_gen = l->gen;
  old_rank = g->rank;
  old_world = g->size;
  /* Taking part in a heal from now on, whether or not registered. */
  l->fresh = false;
  l->heal_pending = false;
  fill_join(g, &j, false);
  err = pg__live_form(&j, l->gen + 1, &f);
  if (err) {
    /* No generation (a timeout, the store gone): said as it is. */
    queue_release(g, PG_ERR_PEER_LOST);
    return err;
  }
  l->round_seen = f.round > l->round_seen ? f.round : l->round_seen;
  err = rebuild(g, &f, old_gen);
  i = fill_info(l, &f, old_gen, old_rank, old_world, info);
  if (!err)
    err = i;
  l->heal_source = pg__live_heal_source(f.m, f.world);
  info->heal_source = l->heal_source;
  keep_formed(g, &f);
  t1 = pg__now();
  info->rebuild_s = t1 - t0;
  if (err) {
    err = pg__fail(pg__live_peer_caused(err) ? PG_ERR_PEER_LOST : err,
                   "generation %" PRIu64 ": rebuilding the communicator "
                   "failed: %s", l->gen, pg_last_error());
    queue_release(g, err);
    return err;
  }
  queue_release(g, 0);
  valid = l->valid;
  err = pg__live_heal(g, l->heal_source, &valid);
  l->valid = valid;
  info->heal_s = pg__now() - t1;
  if (err) {
    err = pg__live_peer_err(g, err);
    queue_hold(g);
    queue_release(g, err);
  }
  return err;
}

/* ---- pg_membership_poll ------------------------------------------------- */

/* The newest round this process's round file shows (stat first: a file
 * not replaced since the last read is not read again). */
static int64_t round_now(struct pg__live *l)
{
  struct live_round r;
  struct stat st;

  if (!l->round_file[0] || stat(l->round_file, &st) != 0)
    return l->round_seen;
  if (st.st_ino == l->round_st.st_ino &&
      st.st_mtim.tv_sec == l->round_st.st_mtim.tv_sec &&
      st.st_mtim.tv_nsec == l->round_st.st_mtim.tv_nsec &&
      st.st_size == l->round_st.st_size)
    return l->round_seen;
  if (pg__live_round_read(l->round_file, &r) == 0) {
    l->round_st = st;
    if (r.round > l->round_seen)
      l->round_seen = r.round;
  }
  return l->round_seen;
}

int pg_membership_poll(pg_group *g, bool *pending)
{
  struct pg__live *l;
  int64_t newest;
  void *m;
  int err;

  if (!g || !pending)
    return pg__fail(-EINVAL, "pg_membership_poll: NULL argument");
  *pending = false;
  l = g->is_sub ? NULL : PG__LIVE_WORLD(g);
  if (!l)
    return 0;
  newest = round_now(l);
  m = pg__mem_alloc(g, sizeof newest);
  if (!m)
    return pg__fail(-ENOMEM, "out of memory polling the membership");
  err = pg__mem_copy(g, m, &newest, sizeof newest);
  if (!err)
    err = pg_all_reduce(g, m, m, 1, PG_I64, PG_MAX);
  if (!err)
    err = pg__mem_copy(g, &newest, m, sizeof newest);
  pg__mem_free(g, m);
  if (!err)
    *pending = newest > l->round;
  return err;
}
