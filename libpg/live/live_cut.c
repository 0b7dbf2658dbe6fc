/* live_cut.c -- the cut watch: a running operation learns from the round
 * file that the rendezvous declared a member's node lost (live.h).
 *
 * Note [a node cut off]: a node that dies closes its sockets, and its
 * peers' operations fail at once (PG_ERR_PEER_LOST).  A node cut off
 * (its link down, its processes alive) closes nothing: its peers' TCP
 * waits would last until PG_TIMEOUT.  The rendezvous notices sooner: the
 * node's keepalives stop, and at the end of the keepalive window it
 * declares the node lost and the survivors' agents rewrite their round
 * file with the smaller world (launcher/live_agent.c).  So in live mode,
 * once a generation is set up, the TCP waits (tcp_stream.c, tcp_run)
 * sleep in slices of CUT_SLICE and ask this watch between them: a round
 * newer than the generation's whose world is smaller than the group ends
 * the operation with PG_ERR_PEER_LOST (every socket of the communicator
 * is then shut, so the other survivors' waits end too), and pg_recover
 * forms the next generation without the cut node.  A round of the same
 * or a larger world (a node joined; or one lost and one joined at once)
 * ends nothing: the join is taken at the step boundary
 * (pg_membership_poll), and a loss hidden by a join still waits for its
 * socket or PG_TIMEOUT.  When the link comes back, the cut node's
 * workers find their sockets shut (their operation fails), and their
 * agent, which the job went on without, re-joins: they come back as
 * members of a later generation and are healed like newcomers.  One stat
 * per slice, behind a lock (the operations of sub-groups and the hier
 * leaders' stage run on threads of their own).  The watch is the live
 * world's (struct pg__live_cut in its state, recover.c), and every
 * communicator of the world and its sub-groups gets it through the
 * core's hooks (op_watch: struct pg__setup's cut watch). */
#include <pthread.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "live.h"

void pg__live_cut_init(struct pg__live_cut *c)
{
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->lock, NULL);
}

void pg__live_cut_destroy(struct pg__live_cut *c)
{
  pthread_mutex_destroy(&c->lock);
}

void pg__live_cut_arm(struct pg__live_cut *c, const char *round_file,
                      int64_t round, int world)
{
  pthread_mutex_lock(&c->lock);
  c->path[0] = '\0';
  if (round_file && strlen(round_file) < sizeof c->path)
    snprintf(c->path, sizeof c->path, "%s", round_file);
  c->round = round;
  c->world = world;
  memset(&c->st, 0, sizeof c->st);
  memset(&c->seen, 0, sizeof c->seen);
  __atomic_store_n(&c->armed, c->path[0] != '\0', __ATOMIC_RELEASE);
  pthread_mutex_unlock(&c->lock);
}

void pg__live_cut_disarm(struct pg__live_cut *c)
{
  pthread_mutex_lock(&c->lock);
  __atomic_store_n(&c->armed, false, __ATOMIC_RELEASE);
  c->path[0] = '\0';
  pthread_mutex_unlock(&c->lock);
}

int pg__live_cut_ask(void *arg)
{
  struct pg__live_cut *c = arg;
  struct live_round r;
  struct stat st;
  int err = 0;

  pthread_mutex_lock(&c->lock);
  if (!c->armed || stat(c->path, &st) != 0)
    goto out;
  if (st.st_ino != c->st.st_ino ||
      st.st_mtim.tv_sec != c->st.st_mtim.tv_sec ||
      st.st_mtim.tv_nsec != c->st.st_mtim.tv_nsec ||
      st.st_size != c->st.st_size) {
    /* A file being replaced reads whole or not at all (rename). */
    if (pg__live_round_read(c->path, &r) != 0)
      goto out;
    c->st = st;
    c->seen = r;
  }
  if (c->seen.round > c->round && c->seen.world < c->world)
    err = pg__fail(PG_ERR_PEER_LOST, "the rendezvous went on without a "
                   "member's node (round %" PRId64 ": world %d, the "
                   "group's %d): lost or cut off", c->seen.round,
                   c->seen.world, c->world);
out:
  pthread_mutex_unlock(&c->lock);
  return err;
}
