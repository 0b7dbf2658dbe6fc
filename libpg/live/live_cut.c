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
 * leaders' stage run on threads of their own); process-wide, as the live
 * world is. */
#include <pthread.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "live.h"

static pthread_mutex_t cut_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cut_armed;                  /* read without the lock: a hint */
static char cut_path[PATH_MAX];
static int64_t cut_round;
static int cut_world;
static struct stat cut_st;              /* the file when last read */
static struct pg__live_round cut_seen;

void pg__live_cut_arm(const char *round_file, int64_t round, int world)
{
  pthread_mutex_lock(&cut_lock);
  cut_path[0] = '\0';
  if (round_file && strlen(round_file) < sizeof cut_path)
    snprintf(cut_path, sizeof cut_path, "%s", round_file);
  cut_round = round;
  cut_world = world;
  memset(&cut_st, 0, sizeof cut_st);
  memset(&cut_seen, 0, sizeof cut_seen);
  __atomic_store_n(&cut_armed, cut_path[0] != '\0', __ATOMIC_RELEASE);
  pthread_mutex_unlock(&cut_lock);
}

void pg__live_cut_disarm(void)
{
  pthread_mutex_lock(&cut_lock);
  __atomic_store_n(&cut_armed, false, __ATOMIC_RELEASE);
  cut_path[0] = '\0';
  pthread_mutex_unlock(&cut_lock);
}

bool pg__live_cut_armed(void)
{
  return __atomic_load_n(&cut_armed, __ATOMIC_ACQUIRE);
}

int pg__live_cut_ask(void)
{
  struct pg__live_round r;
  struct stat st;
  int err = 0;

  pthread_mutex_lock(&cut_lock);
  if (!cut_armed || stat(cut_path, &st) != 0)
    goto out;
  if (st.st_ino != cut_st.st_ino ||
      st.st_mtim.tv_sec != cut_st.st_mtim.tv_sec ||
      st.st_mtim.tv_nsec != cut_st.st_mtim.tv_nsec ||
      st.st_size != cut_st.st_size) {
    /* A file being replaced reads whole or not at all (rename). */
    if (pg__live_round_read(cut_path, &r) != 0)
      goto out;
    cut_st = st;
    cut_seen = r;
  }
  if (cut_seen.round > cut_round && cut_seen.world < cut_world)
    err = pg__fail(PG_ERR_PEER_LOST, "the rendezvous went on without a "
                   "member's node (round %" PRId64 ": world %d, the "
                   "group's %d): lost or cut off", cut_seen.round,
                   cut_seen.world, cut_world);
out:
  pthread_mutex_unlock(&cut_lock);
  return err;
}
