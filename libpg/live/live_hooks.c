/* live_hooks.c -- what a live world attaches to the core (core/hooks.h,
 * Note [floors]): the error a peer's loss turns into, stale sub-groups
 * and the record of every sub-group (Note [live sub-groups]), the op and
 * cut watches of its communicators, the reducers' questions, the world's
 * end; and the public questions pg_live, pg_joined_running,
 * pg_rank_is_new.  recover.c attaches the table at pg_init. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "live.h"

/* ---- the error of a lost peer ------------------------------------------- */

/* The world group of a live g, or NULL. */
struct pg__live *pg__live_of(const pg_group *g)
{
  if (!g)
    return NULL;
  return g->is_sub ? PG__LIVE_WORLD(g->world) : PG__LIVE_WORLD(g);
}

/* A sub-group made in an older generation of its live world: true. */
static bool stale(const pg_group *g)
{
  return g && g->is_sub && PG__LIVE_WORLD(g->world) &&
         PG__LIVE_WORLD(g->world)->gen != g->gen;
}

/* Whether err says a peer is gone (or could not keep up). */
bool pg__live_peer_caused(int err)
{
  switch (err) {
  case -ECONNRESET: case -EPIPE: case -ETIMEDOUT: case -ECONNABORTED:
  case -ECONNREFUSED: case -ENOTCONN: case -EHOSTUNREACH: case -ENETRESET:
  case PG_EPEERFAIL: case PG_ERR_PEER_LOST:
    return true;
  default:
    return false;
  }
}

/* Hook op_err: err, or PG_ERR_PEER_LOST when err says a peer is gone
 * (ECONNRESET, EPIPE, ETIMEDOUT, PG_EPEERFAIL, ...); the sentence is
 * kept. */
int pg__live_peer_err(const pg_group *g, int err)
{
  if (!err || err == PG_ERR_PEER_LOST || !pg__live_of(g) ||
      !pg__live_peer_caused(err))
    return err;
  return pg__fail(PG_ERR_PEER_LOST, "%s", pg_last_error());
}

/* Hook free: the world's destroy, its communicator closed. */
static void hook_free(pg_group *g)
{
  struct pg__live *l = PG__LIVE_WORLD(g);
  size_t i;

  if (!l)
    return;
  g->hooks = NULL;
  g->upper = NULL;
  pg__live_cut_disarm(&l->cut);
  pg__live_cut_destroy(&l->cut);
  /* Sub-groups destroyed after their world (which pg.h forbids) at least
   * find no world to leave. */
  pthread_mutex_lock(&l->subs_mu);
  for (i = 0; i < l->nsubs; i++)
    l->subs[i]->world = NULL;
  pthread_mutex_unlock(&l->subs_mu);
  pthread_mutex_destroy(&l->subs_mu);
  free(l->subs);
  free(l->snap);
  free(l->formed.m);
  free(l->bufs);
  free(l->is_new);
  free(l);
}

/* ---- sub-groups --------------------------------------------------------- */

/* Note [live sub-groups]: a member's death must reach every survivor of
 * every group it was in, as PG_ERR_PEER_LOST within the failure
 * detector's time.  A survivor that waits in a sub-group on a peer that
 * is alive (it saw the death elsewhere and entered pg_recover) learns of
 * nothing from that peer's pid or sockets, so four things carry the
 * death on:
 *  - an operation of any group of a live world that fails with
 *    PG_ERR_PEER_LOST marks the world and all its sub-groups failed
 *    (pg__live_lost): their queued and later operations fail at once;
 *  - pg_recover first closes every sub-group's communicator and the
 *    world's: those that nothing uses at once, then the others once
 *    their operation ends (so that an operation of this rank waiting on
 *    a peer is not what keeps that peer waiting on this rank in another
 *    group).  The peers waiting on this rank learn of it at once (shared
 *    memory: the rank's left word; TCP: the closed connection), fail,
 *    recover in turn and close theirs.  A death so spreads one closed
 *    communicator at a time through every group that its peers share
 *    with others;
 *  - sub-groups are made under the setup watch (Note [setup watch]): a
 *    member of the world that dies during pg_new_group or pg_split, or a
 *    next generation that starts meanwhile, fails the creation with
 *    PG_ERR_PEER_LOST instead of the timeout;
 *  - a wait that no closed communicator can end (a hierarchical comm's
 *    receive from a rank on another host that never connected: Note
 *    [lazy p2p]) asks the op watch (struct pg__setup's) between slices:
 *    the next generation started, PG_ERR_PEER_LOST.
 * The recovery does not rebuild sub-groups (their members may be gone
 * and the ranks renumbered): the program makes them again after
 * pg_recover, and a PG_ERR_PEER_LOST from that is one more loss: recover
 * again, then make them again (libpg(3), LIVE RECOVERY). */

/* Hook sub_add: sub is recorded, with the generation it is made in (an
 * op of it in a later one fails with PG_ESTALE_GROUP). */
static int hook_sub_add(pg_group *sub)
{
  struct pg__live *l = pg__live_of(sub);
  pg_group **a, **b;
  size_t cap;

  if (!l)
    return 0;
  sub->gen = l->gen;
  pthread_mutex_lock(&l->subs_mu);
  if (l->nsubs == l->cap) {
    cap = l->cap ? 2 * l->cap : 8;
    a = realloc(l->subs, cap * sizeof *a);
    if (a)
      l->subs = a;
    b = a ? realloc(l->snap, cap * sizeof *b) : NULL;
    if (b)
      l->snap = b;
    if (!a || !b) {
      pthread_mutex_unlock(&l->subs_mu);
      return pg__fail(-ENOMEM, "out of memory recording a sub-group");
    }
    l->cap = cap;
  }
  l->subs[l->nsubs++] = sub;
  pthread_mutex_unlock(&l->subs_mu);
  return 0;
}

/* Hook sub_remove: forgotten at its pg_destroy. */
static void hook_sub_remove(pg_group *sub)
{
  struct pg__live *l = pg__live_of(sub);
  size_t i;

  if (!l)
    return;
  pthread_mutex_lock(&l->subs_mu);
  for (i = 0; i < l->nsubs; i++)
    if (l->subs[i] == sub) {
      l->subs[i] = l->subs[--l->nsubs];
      break;
    }
  pthread_mutex_unlock(&l->subs_mu);
}

void pg__live_mark_lost(pg_group *g)
{
  pthread_mutex_lock(&g->mu);
  if (!g->failed)
    g->failed = PG_ERR_PEER_LOST;
  pthread_mutex_unlock(&g->mu);
}

/* Hook lost: the world and every sub-group are marked failed, so that
 * their queued and later operations fail at once. */
void pg__live_lost(pg_group *g)
{
  struct pg__live *l = pg__live_of(g);
  pg_group *w = g->is_sub ? g->world : g;
  size_t i;

  if (!l || !w)
    return;
  pthread_mutex_lock(&l->subs_mu);
  pg__live_mark_lost(w);
  for (i = 0; i < l->nsubs; i++)
    pg__live_mark_lost(l->subs[i]);
  pthread_mutex_unlock(&l->subs_mu);
}

/* Hook setup_watch: the watch over g's world's generation on this
 * thread while a sub-group is made. */
static void hook_setup_watch(pg_group *g, bool on)
{
  struct pg__live *l = pg__live_of(g);

  if (l && l->formed.m)
    pg__setup_watch(on ? pg__live_watch_formed : NULL,
                    on ? &l->sub_watch : NULL);
}

/* An op's watch (hook_op_watch): only whether the next generation
 * started (a member recovers, or a dead one's replacement came), not
 * whether a member is gone, which one that finished and exited also is.
 * l->formed changes only in pg_init and pg_recover, when no op runs. */
static int op_watch(void *arg)
{
  pg_group *w = arg;
  struct pg__live *l = PG__LIVE_WORLD(w);
  struct pg__live_formed next_only = { .gen = l->formed.gen };

  if (!l->formed.m || !pg__live_formed_check(w->store, &next_only, l->boot))
    return 0;
  return pg__fail(PG_ERR_PEER_LOST, "generation %" PRIu64 ": the next "
                  "generation started (a member recovers, or one was "
                  "replaced) while this rank waited", l->formed.gen);
}

/* Hook op_watch: the op watch and the cut watch (Note [a node cut off])
 * of a communicator of g. */
static void hook_op_watch(pg_group *g, struct pg__setup *s)
{
  pg_group *w = g->is_sub ? g->world : g;
  struct pg__live *l = PG__LIVE_WORLD(w);

  if (l) {
    s->watch = op_watch;
    s->watch_arg = w;
    s->cut_armed = &l->cut.armed;
    s->cut_ask = pg__live_cut_ask;
    s->cut_arg = &l->cut;
  }
}
uint64_t pg__live_generation(const pg_group *g)
{
  struct pg__live *l = pg__live_of(g);

  return l ? l->gen : 0;
}

/* Hook alone: a reducer made by a fresh process that joined a running
 * job is made alone (the survivors made theirs long ago); its layout
 * comes with the heal. */
static bool hook_alone(const pg_group *g)
{
  const struct pg__live *l = g->is_sub ? NULL : PG__LIVE_WORLD(g);

  return l && l->joined_running && l->fresh;
}

/* Hook defer_loss: a live world group whose state is not registered yet
 * (nor recovered): where the recipe makes the reducers (Note [reducer
 * made during a death], reducer.c). */
static bool hook_defer_loss(const pg_group *g)
{
  const struct pg__live *l = g->is_sub ? NULL : PG__LIVE_WORLD(g);

  return l && l->fresh;
}

/* Hook refuse: a stale sub-group refuses everything; a world that lost a
 * member and has no communicator refuses operations. */
static int hook_refuse(const pg_group *g, const char *what)
{
  if (stale(g))
    return what ? pg__fail(PG_ESTALE_GROUP, "%s: the parent is a "
                           "sub-group of an earlier live generation", what)
                : pg__fail(PG_ESTALE_GROUP, "this sub-group was made in "
                           "live generation %llu; the group is in "
                           "generation %llu now: destroy the sub-group and "
                           "make it again", (unsigned long long)g->gen,
                           (unsigned long long)pg__live_generation(g));
  if (!what && !g->comm && g->size > 1 && pg__live_of(g))
    return pg__fail(PG_ERR_PEER_LOST, "the group lost a member and has no "
                    "communicator: call pg_recover");
  return 0;
}

bool pg_live(const pg_group *g)
{
  return pg__live_of(g) != NULL;
}

bool pg_joined_running(const pg_group *g)
{
  struct pg__live *l = pg__live_of(g);

  return l && l->joined_running;
}

bool pg_rank_is_new(const pg_group *g, int rank)
{
  const struct pg__live *l = g && !g->is_sub ? PG__LIVE_WORLD(g) : NULL;

  return l && l->is_new && rank >= 0 && rank < l->is_new_n &&
         l->is_new[rank];
}

/* Note [floors] (core/hooks.h): what the core asks of a live world. */
const struct pg__hooks pg__live_hooks = {
  .op_err = pg__live_peer_err,
  .lost = pg__live_lost,
  .refuse = hook_refuse,
  .op_watch = hook_op_watch,
  .setup_watch = hook_setup_watch,
  .sub_add = hook_sub_add,
  .sub_remove = hook_sub_remove,
  .alone = hook_alone,
  .defer_loss = hook_defer_loss,
  .free = hook_free,
  .keeps_store = true,
};
