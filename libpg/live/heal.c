/* heal.c -- the heal: every registered buffer, and every entry of the
 * core's rebuild registry (each reducer's bucket layout, core/hooks.h),
 * sent from one surviving rank to every rank of a new generation
 * (live.h).  What an entry's state is and how it is taken is the entry's
 * own (the reducer's, ddp/reducer.c): the heal carries it.
 *
 * Note [heal]: collective over the generation, in this order: a header
 * (how many reducers and buffers, their sizes) so that a mismatch is
 * -EPROTO rather than garbage; each reducer's layout; every rank's hash
 * of its state (an all-gather); then each buffer, broadcast in chunks of
 * HEAL_CHUNK bytes (each chunk a pipelined broadcast of the backend).
 * Every rank receives into its live buffers, so a heal cut short by a
 * death leaves a mix; the hashes say which ranks are still valid anyway
 * (those whose state was the source's before the heal: they received
 * the bytes they had), and only valid ranks can be a later heal's
 * source.  Survivors that did and did not finish the interrupted step
 * agree again afterwards, on the source's state, and every member's
 * reducers (the source's too) take the source's layout with zeroed
 * gradients (Note [reducer after recovery], reducer.c).
 *
 * Note [state lost]: a generation none of whose members holds a valid
 * state (the last valid ones died, one during a heal, the others before)
 * has nothing to heal from.  Going on would be silently wrong: the
 * survivors' half-received states differ, a newcomer made its reducers
 * alone and their layouts were never agreed, so their all-reduces pair
 * up wrongly.  So every member fails (-ENODATA, a sentence): pg_recover
 * on the survivors, pg_state_register on the newcomers (a newcomer to a
 * running job always takes part in the heal).  The program exits, cdrun
 * replaces every member, and a generation of fresh processes only starts
 * as the job did (pg_joined_running false), as restart mode would. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "knobs.h"
#include "live.h"

#define HEAL_CHUNK ((size_t)4 << 20)
#define HASH_BOUNCE ((size_t)1 << 20)

/* Broadcasts k int64s from root through the backend's memory. */
static int bcast_i64(pg_group *g, int64_t *v, size_t k, int root)
{
  void *m = pg__mem_alloc(g, (k ? k : 1) * sizeof *v);
  int err;

  if (!m)
    return pg__fail(-ENOMEM, "out of memory for the heal");
  err = pg__mem_copy(g, m, v, k * sizeof *v);
  if (!err)
    err = pg_broadcast(g, m, k, PG_I64, root);
  if (!err)
    err = pg__mem_copy(g, v, m, k * sizeof *v);
  pg__mem_free(g, m);
  return err;
}

/* FNV-1a over every registered buffer, read through host memory. */
static int state_hash(pg_group *g, const struct pg_state_buf *b, size_t n,
                      uint64_t *out)
{
  uint64_t h = 0xcbf29ce484222325ull;
  unsigned char *bounce = malloc(HASH_BOUNCE);
  size_t i, off, len, k;
  int err = 0;

  if (!bounce)
    return pg__fail(-ENOMEM, "out of memory hashing the state");
  for (i = 0; i < n && !err; i++)
    for (off = 0; off < b[i].bytes && !err; off += len) {
      len = b[i].bytes - off < HASH_BOUNCE ? b[i].bytes - off : HASH_BOUNCE;
      err = pg__mem_copy(g, bounce, (char *)b[i].ptr + off, len);
      for (k = 0; k < len && !err; k++)
        h = (h ^ bounce[k]) * 0x100000001b3ull;
    }
  free(bounce);
  *out = h;
  return err;
}


/* The header: counts, then each buffer's size and reducer's parameters;
 * every rank checks the source's against its own. */
static int heal_header(pg_group *g, int source,
                       const struct pg_state_buf *b, size_t nb,
                       const struct pg__rebuild *r, size_t nr)
{
  int64_t counts[2] = { (int64_t)nr, (int64_t)nb }, *sizes;
  size_t i;
  int err;

  if ((err = bcast_i64(g, counts, 2, source)))
    return err;
  if (counts[0] != (int64_t)nr || counts[1] != (int64_t)nb)
    return pg__fail(-EPROTO, "the heal: rank %d has %lld reducers and "
                    "%lld state buffers, this rank %zu and %zu", source,
                    (long long)counts[0], (long long)counts[1], nr, nb);
  sizes = malloc((nb + nr + 1) * sizeof *sizes);
  if (!sizes)
    return pg__fail(-ENOMEM, "out of memory for the heal");
  for (i = 0; i < nb; i++)
    sizes[i] = (int64_t)b[i].bytes;
  for (i = 0; i < nr; i++)
    sizes[nb + i] = (int64_t)r[i].ops->params(r[i].obj);
  err = bcast_i64(g, sizes, nb + nr, source);
  for (i = 0; i < nb + nr && !err; i++)
    if (sizes[i] != (int64_t)(i < nb ? b[i].bytes
                                     : r[i - nb].ops->params(r[i - nb].obj)))
      err = pg__fail(-EPROTO, "the heal: rank %d's %s %zu has %lld %s, "
                     "this rank's %zu", source, i < nb ? "state buffer"
                     : "reducer", i < nb ? i : i - nb, (long long)sizes[i],
                     i < nb ? "bytes" : "parameters",
                     i < nb ? b[i].bytes
                            : r[i - nb].ops->params(r[i - nb].obj));
  free(sizes);
  return err;
}

static int heal_reducers(pg_group *g, int source,
                         const struct pg__rebuild *r, size_t nr)
{
  size_t i, k;
  int64_t *wire;
  int err = 0;

  for (i = 0; i < nr && !err; i++) {
    k = r[i].ops->wire_len(r[i].obj);
    wire = malloc(k * sizeof *wire);
    if (!wire)
      return pg__fail(-ENOMEM, "out of memory for the heal");
    r[i].ops->get(r[i].obj, wire);
    err = bcast_i64(g, wire, k, source);
    /* The source too: its gradients are zeroed like everyone's (Note
     * [reducer after recovery], reducer.c). */
    if (!err)
      err = r[i].ops->set(r[i].obj, wire);
    free(wire);
  }
  return err;
}

int pg__live_heal(pg_group *g, int source, bool *valid)
{
  const struct pg_state_buf *b;
  const struct pg__rebuild *r;
  uint64_t mine, *all = NULL;
  size_t nb, nr, i, off, len;
  bool still_valid;
  int err, chunks = 0;

  /* Note [state lost]: every member read the same decision, so all fail
   * here alike, without a word on the wire. */
  if (source < 0) {
    *valid = false;
    return pg__fail(-ENODATA, "generation %" PRIu64 ": the live state is "
                    "lost: no member holds a valid state (every one that "
                    "did died, one of them during a heal); exit, and the "
                    "job starts over as at its start (pg_joined_running "
                    "false) or from its own checkpoint",
                    pg__live_generation(g));
  }

  pg__live_registered(g, &b, &nb);
  r = pg__rebuild_list(g, &nr);
  if ((err = heal_header(g, source, b, nb, r, nr)) ||
      (err = heal_reducers(g, source, r, nr)))
    return err;
  all = malloc((size_t)g->size * sizeof *all);
  if (!all)
    return pg__fail(-ENOMEM, "out of memory for the heal");
  err = state_hash(g, b, nb, &mine);
  if (!err) {
    void *m = pg__mem_alloc(g, (size_t)(g->size + 1) * sizeof mine);

    err = m ? pg__mem_copy(g, (uint64_t *)m + g->size, &mine, sizeof mine)
            : pg__fail(-ENOMEM, "out of memory for the heal");
    if (!err)
      err = pg_all_gather(g, (uint64_t *)m + g->size, m, 1, PG_I64);
    if (!err)
      err = pg__mem_copy(g, all, m, (size_t)g->size * sizeof mine);
    pg__mem_free(g, m);
  }
  if (err) {
    free(all);
    return err;
  }
  still_valid = g->rank == source || all[source] == mine;
  free(all);
  for (i = 0; i < nb && !err; i++)
    for (off = 0; off < b[i].bytes && !err; off += len) {
      len = b[i].bytes - off < HEAL_CHUNK ? b[i].bytes - off : HEAL_CHUNK;
      err = pg_broadcast(g, (char *)b[i].ptr + off, len, PG_U8, source);
      if (!err && chunks++ == 0)
        pg__live_test_kill("heal", pg__live_generation(g), g->rank);
    }
  *valid = err ? still_valid : true;
  return err;
}
