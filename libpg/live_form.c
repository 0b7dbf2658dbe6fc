/* live_form.c -- forming a generation over the live store (live.h).
 *
 * Note [generations]: generation G is one membership of the job.  Each
 * process that wants to belong to G writes its entry live/g<G>/m<slot>
 * (its incarnation, the round it read, whether it is fresh and whether
 * its state is valid) and marks live/g<G>/started.  Any member that sees
 * every slot 0..W-1 of its round filled with entries of that round
 * writes the decision live/g<G>/done with compare-and-set from absent:
 * the first one wins, and every member reads the same decision, finding
 * itself by its incarnation.  A later entry (a member that read a newer
 * round file and wrote again) cannot change a decision made.
 *
 * A fresh process joins the lowest generation not yet decided; survivors
 * join the one after theirs.  A member of G that sees G+1 started moves
 * there, after it marks G "abandoned" by the same compare-and-set (so
 * that no decision of G can include a member that left it: either the
 * decision or the abandonment wins).  A member missing from G's decision
 * moves on too.  Entries of processes that are gone from this machine
 * (same boot id, no such pid) do not count, so a generation does not
 * form with a member that died before it finished forming.  Every wait
 * is bounded by the group's timeout; polling is cheap (one get per slot)
 * and backs off to POLL_MAX. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "live.h"

#define POLL_MIN 0.001
#define POLL_MAX 0.020

static void gkey(char *buf, size_t len, uint64_t gen, const char *what)
{
  snprintf(buf, len, "live/g%" PRIu64 "/%s", gen, what);
}

static void nap(double s)
{
  struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

  nanosleep(&ts, NULL);
}

/* This process's round and slot: the round file, else round 0 of
 * RANK/WORLD_SIZE. */
static int read_view(const struct pg__live_join *j,
                     struct pg__live_round *r, int *slot)
{
  int err;

  if (!j->round_file) {
    r->round = 0;
    r->world = j->env_world;
    r->rank_offset = 0;
    r->local_world = j->env_world;
    *slot = j->env_rank;
    return 0;
  }
  err = pg__live_round_read(j->round_file, r);
  return err ? err : pg__live_round_slot(r, j->local_rank, slot);
}

static int write_entry(const struct pg__live_join *j, uint64_t gen,
                       const struct pg__live_round *r, int slot)
{
  struct pg__live_member m;
  char key[64], val[PG__LIVE_MEMBER_MAX];
  int err;

  memset(&m, 0, sizeof m);
  m.inc = j->inc;
  m.round = r->round;
  m.world = r->world;
  m.slot = slot;
  m.old_rank = j->old_rank;
  m.from = j->from;
  m.pid = (int)getpid();
  m.fresh = j->fresh;
  m.valid = j->valid;
  snprintf(m.boot, sizeof m.boot, "%s", j->boot ? j->boot : "");
  pg__live_member_format(&m, val, sizeof val);
  snprintf(key, sizeof key, "live/g%" PRIu64 "/m%d", gen, slot);
  err = pg_store_set(j->store, key, val, strlen(val));
  if (!err) {
    gkey(key, sizeof key, gen, "started");
    err = pg_store_set(j->store, key, "1", 1);
  }
  return err ? pg__fail(err, "live store: cannot write %s: %s", key,
                        pg_strerror(err)) : 0;
}

/* Whether key exists: 1, 0, or an error. */
static int exists(pg_store *st, const char *key)
{
  void *v = NULL;
  size_t len;
  int err = pg_store_get(st, key, 0, &v, &len);

  free(v);
  return err == 0 ? 1 : err == -ENOENT ? 0 : err;
}

/* G's decision, if any: 1 with *out filled (this process is in it), 2
 * when G is abandoned or decided without this process, 0 undecided. */
static int read_decision(const struct pg__live_join *j, uint64_t gen,
                         struct pg__live_formed *out)
{
  struct pg__live_member *m;
  char key[64];
  void *v = NULL;
  size_t len;
  int64_t round;
  int world, i, err;

  gkey(key, sizeof key, gen, "done");
  err = pg_store_get(j->store, key, 0, &v, &len);
  if (err == -ENOENT)
    return 0;
  if (err)
    return pg__fail(err, "live store: cannot read %s: %s", key,
                    pg_strerror(err));
  err = pg__live_decision_parse(v, len, &m, &world, &round);
  free(v);
  if (err)
    return err;
  for (i = 0; i < world && m[i].inc != j->inc; i++)
    ;
  if (i == world) {
    free(m);
    return 2;
  }
  out->gen = gen;
  out->round = round;
  out->world = world;
  out->slot = i;
  out->m = m;
  return 1;
}

/* A member whose process is verifiably gone (on this machine). */
static bool gone_here(const struct pg__live_member *m, const char *boot)
{
  return boot && boot[0] && strcmp(m->boot, boot) == 0 && m->pid > 0 &&
         m->pid != (int)getpid() && kill(m->pid, 0) < 0 && errno == ESRCH;
}

/* Decides G when every slot of r is filled; the store's compare-and-set
 * picks one decision among racing members. */
static int try_decide(const struct pg__live_join *j, uint64_t gen,
                      const struct pg__live_round *r, int *have)
{
  struct pg__live_member *m = calloc((size_t)r->world, sizeof *m);
  bool *present = calloc((size_t)r->world, sizeof *present);
  char key[64], *d = NULL;
  void *v;
  size_t len;
  int i, err = 0;
  bool swapped;

  *have = 0;
  if (!m || !present) {
    err = pg__fail(-ENOMEM, "out of memory forming a generation");
    goto out;
  }
  for (i = 0; i < r->world && !err; i++) {
    snprintf(key, sizeof key, "live/g%" PRIu64 "/m%d", gen, i);
    v = NULL;
    err = pg_store_get(j->store, key, 0, &v, &len);
    if (err == -ENOENT) {
      err = 0;
      continue;
    }
    if (!err && pg__live_member_parse(v, len, &m[i]) == 0)
      present[i] = !gone_here(&m[i], j->boot);
    free(v);
    *have += present[i];
  }
  if (err || !pg__live_complete(m, present, r->world, r->round))
    goto out;
  d = pg__live_decision_format(m, r->world, r->round);
  if (!d) {
    err = pg__fail(-ENOMEM, "out of memory forming a generation");
    goto out;
  }
  gkey(key, sizeof key, gen, "done");
  err = pg_store_compare_set(j->store, key, "", 0, d, strlen(d), NULL,
                             NULL, &swapped);
out:
  free(d);
  free(m);
  free(present);
  return err;
}

/* A later generation started: G is abandoned unless already decided. */
static int abandon_if_later(const struct pg__live_join *j, uint64_t gen)
{
  char key[64];
  bool swapped;
  int e;

  gkey(key, sizeof key, gen + 1, "started");
  e = exists(j->store, key);
  if (e <= 0)
    return e;
  gkey(key, sizeof key, gen, "done");
  return pg_store_compare_set(j->store, key, "", 0, PG__LIVE_ABANDONED,
                              strlen(PG__LIVE_ABANDONED), NULL, NULL,
                              &swapped);
}

int pg__live_form(const struct pg__live_join *j, uint64_t gen,
                  struct pg__live_formed *out)
{
  struct pg__live_round r, now_r;
  double deadline = pg__now() + j->timeout, poll = POLL_MIN;
  char key[64];
  int slot, now_slot, have = 0, err, d;

  memset(out, 0, sizeof *out);
  if ((err = read_view(j, &r, &slot)))
    return err;
  /* A fresh process: the lowest generation from gen on not decided. */
  for (;;) {
    gkey(key, sizeof key, gen, "done");
    d = j->fresh ? exists(j->store, key) : 0;
    if (d < 0)
      return pg__fail(d, "live store: cannot read %s: %s", key,
                      pg_strerror(d));
    if (!d)
      break;
    gen++;
  }
  if ((err = write_entry(j, gen, &r, slot)))
    return err;
  while (pg__now() < deadline) {
    d = read_decision(j, gen, out);
    if (d < 0)
      return d;
    if (d == 1)
      return 0;
    if (d == 2) {
      gen++;
      if ((err = write_entry(j, gen, &r, slot)))
        return err;
      continue;
    }
    if ((err = abandon_if_later(j, gen)) < 0)
      return pg__fail(err, "live store: %s", pg_strerror(err));
    if (j->round_file) {
      if ((err = read_view(j, &now_r, &now_slot)))
        return err;
      if (now_r.round != r.round || now_slot != slot) {
        r = now_r;
        slot = now_slot;
        if ((err = write_entry(j, gen, &r, slot)))
          return err;
      }
    }
    if ((err = try_decide(j, gen, &r, &have)))
      return pg__fail(err, "live store: deciding generation %" PRIu64
                      ": %s", gen, pg_strerror(err));
    nap(poll);
    poll = poll * 2 < POLL_MAX ? poll * 2 : POLL_MAX;
  }
  return pg__fail(-ETIMEDOUT, "no generation formed within %g s "
                  "(generation %" PRIu64 " of round %" PRId64 ": %d of %d "
                  "members present)", j->timeout, gen, r.round, have,
                  r.world);
}
