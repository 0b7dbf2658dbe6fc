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
 * is bounded by the group's timeout.
 *
 * O(N) store requests per generation, not O(N^2): each member counts its
 * entry in (live/g<G>/r<R>, an add), and only an entry that brings the
 * count to W(R) reads the W slots and tries to decide; every entry is
 * written before it is counted, so the one that completes a round is
 * always read by a scan.  A dead member's replacement, or a member that
 * rewrites its entry for a newer round, counts again, so an entry that a
 * scan refused (a dead process, an older round) is followed by another
 * scan once its slot is filled anew.  An entry written by a process that
 * died before it counted itself is found by the member of slot 0, which
 * scans after 1, 2, 4... slices without a decision (SCAN_EVERY_MAX at
 * most): one member, so still O(N).  The others wait for live/g<G>/done
 * with a blocking get, in slices of WAIT_SLICE, and between slices look
 * at live/next, G+1 and their round file: a constant number of requests
 * per member and slice (scripts/bench/live_form measures it).
 *
 * Note [check in]: a decision may include a member that died since it
 * wrote its entry, on another machine (where its pid cannot be checked);
 * the others would wait for it in the communicator's setup until the
 * timeout.  So after the decision every member checks in
 * (live/g<G>/in<slot>) and waits for all the others, and one verdict
 * (live/g<G>/verdict, compare-and-set again) says "go" (all checked in)
 * or "abort" (a later generation started first: the dead member's
 * replacement found G decided and went on).  Abort moves everyone to
 * G+1.
 *
 * Note [bounded store]: a long job fails many times, so the keys of
 * generations nobody reads any more go.  Once G's verdict is "go" every
 * member of G has left the generations before it (they checked in to G)
 * and keeps at most G-1's communicator (NCCL's shrink parent), so G-2
 * and older are dead: the member that wrote the "go" raises live/next to
 * G+1, then deletes live/g<K>/ and pg/gen<K>/ for every K from
 * live/kept up to G-2, and raises live/kept to G-1 (a cleaner that dies
 * half-way leaves the rest to the next one).  A fresh process starts at
 * live/next, not at 0, and a process still waiting in a generation below
 * live/next (a straggler, or a fresh one that read an older live/next)
 * moves up to it before it writes there again, so nothing waits on keys
 * that are gone; what a straggler writes in the instant between is a few
 * keys once, not a growth.
 *
 * Note [store values]: anyone with the job token can write the live
 * store, and a bug can too, so nothing read there is trusted beyond its
 * syntax and bounds.  live/next and live/kept are whole decimals in
 * [0, GEN_MAX] (far beyond any job's generations, and G+1 never
 * overflows), else -EPROTO naming the key, at once, on every rank that
 * reads it (every rank does, at every formation); a decision is checked
 * line by line (live_member.c).  What a value can make a process do is
 * bounded too: drop_old deletes DROP_MAX generations per call, whatever
 * live/kept and live/next say, so a live/next of 2^40 costs no more than
 * a few requests per generation.  And keys that vanish: a member that
 * waits for a decision looks at its own entry now and then, and an entry
 * gone while its generation is not below live/next (the only deletion a
 * member makes, Note [bounded store], raises live/next first) was
 * deleted from outside: -EPROTO naming the key, not a wait for
 * PG_TIMEOUT after PG_TIMEOUT. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "live.h"
#include "num.h"

/* How long a wait for a decision or a verdict lasts before this process
 * looks for a reason to move (a later generation, a new round). */
#define WAIT_SLICE 0.05
/* Slot 0's scans for uncounted entries: after 1, 2, 4... slices, then
 * every SCAN_EVERY_MAX. */
#define SCAN_EVERY_MAX 16
#define NEXT_KEY "live/next"
#define KEPT_KEY "live/kept"
/* Note [store values]. */
#define GEN_MAX ((int64_t)1 << 40)
#define DROP_MAX 16
/* Idle slices between two looks at this process's own entry. */
#define ENTRY_CHECK_EVERY 4

static void gkey(char *buf, size_t len, uint64_t gen, const char *what)
{
  snprintf(buf, len, "live/g%" PRIu64 "/%s", gen, what);
}

/* This process's round and slot: the round file, else round 0 of
 * RANK/WORLD_SIZE. */
static int read_view(const struct pg__live_join *j,
                     struct live_round *r, int *slot)
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

/* Writes this process's entry in gen and counts it in for its round
 * (live/g<G>/r<R>): *count, the entries of that round so far. */
static int write_entry(const struct pg__live_join *j, uint64_t gen,
                       const struct live_round *r, int slot,
                       int64_t *count)
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
  m.comm = j->comm;
  snprintf(m.boot, sizeof m.boot, "%s", j->boot ? j->boot : "");
  pg__live_member_format(&m, val, sizeof val);
  snprintf(key, sizeof key, "live/g%" PRIu64 "/m%d", gen, slot);
  err = pg_store_set(j->store, key, val, strlen(val));
  if (!err) {
    gkey(key, sizeof key, gen, "started");
    err = pg_store_set(j->store, key, "1", 1);
  }
  if (!err) {
    snprintf(key, sizeof key, "live/g%" PRIu64 "/r%" PRId64, gen, r->round);
    err = pg_store_add(j->store, key, 1, count);
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

/* The generation number in key (absent: 0), in [0, GEN_MAX] (Note
 * [store values]); an error with a sentence naming the key. */
static int read_number(pg_store *st, const char *key, int64_t *out)
{
  void *v = NULL;
  size_t len, i;
  char shown[24];
  long n;
  int err = pg_store_get(st, key, 0, &v, &len);

  *out = 0;
  if (err == -ENOENT)
    return 0;
  if (err)
    return pg__fail(err, "live store: cannot read %s: %s", key,
                    pg_strerror(err));
  err = num_parse_long_n(v, len, 0, (long)GEN_MAX, &n);
  if (!err)
    *out = n;
  for (i = 0; err && i < len && i < sizeof shown - 4; i++)
    shown[i] = ((char *)v)[i] >= ' ' && ((char *)v)[i] < 127
               ? ((char *)v)[i] : '?';
  if (err)
    snprintf(shown + i, sizeof shown - i, "%s", i < len ? "..." : "");
  free(v);
  return err ? pg__fail(-EPROTO, "live store: %s holds '%s' (%zu bytes), "
                        "not a generation number from 0 to %" PRId64
                        " (written by something other than libpg?)", key,
                        shown, len, GEN_MAX) : 0;
}

/* Raises the number in key to at least v (compare-and-set: it never
 * goes back, whoever races). */
static int raise_to(pg_store *st, const char *key, int64_t v)
{
  char cur[32], want[32];
  int64_t now;
  bool swapped = false;
  int err, tries;

  /* Bounded: a key rewritten by someone else at every turn is given up
   * (the callers' raises are best effort or retried). */
  for (tries = 0; !swapped; tries++) {
    if (tries == 64)
      return pg__fail(-EAGAIN, "live store: %s changes under every "
                      "compare-and-set", key);
    if ((err = read_number(st, key, &now)))
      return err;
    if (now >= v)
      return 0;
    snprintf(cur, sizeof cur, "%" PRId64, now);
    snprintf(want, sizeof want, "%" PRId64, v);
    err = pg_store_compare_set(st, key, cur, now ? strlen(cur) : 0, want,
                               strlen(want), NULL, NULL, &swapped);
    if (err)
      return err;
  }
  return 0;
}

/* Note [bounded store]: G went ahead, so G-2 and older go, DROP_MAX
 * generations per call at most (Note [store values]); the next cleaner
 * goes on from live/kept.  Best effort: a failure leaves the keys to the
 * next cleaner. */
static void drop_old(pg_store *st, uint64_t gen)
{
  char prefix[64];
  int64_t kept, k, last;

  if (raise_to(st, NEXT_KEY, (int64_t)gen + 1) || gen < 2 ||
      read_number(st, KEPT_KEY, &kept))
    return;
  last = (int64_t)gen - 2;
  if (last - kept >= DROP_MAX)
    last = kept + DROP_MAX - 1;
  for (k = kept; k <= last; k++) {
    snprintf(prefix, sizeof prefix, "live/g%" PRId64 "/", k);
    if (pg__store_delete_prefix(st, prefix, NULL))
      return;
    snprintf(prefix, sizeof prefix, "pg/gen%" PRId64 "/", k);
    if (pg__store_delete_prefix(st, prefix, NULL))
      return;
  }
  raise_to(st, KEPT_KEY, last + 1);
}

/* The lowest generation that may be joined (live/next), or an error. */
static int next_gen(pg_store *st, uint64_t *out)
{
  int64_t v;
  int err = read_number(st, NEXT_KEY, &v);

  *out = (uint64_t)v;
  return err;
}

/* G's decision, waiting up to wait seconds for it: 1 with *out filled
 * (this process is in it), 2 when G is abandoned or decided without this
 * process, 0 undecided. */
static int read_decision(const struct pg__live_join *j, uint64_t gen,
                         double wait, struct pg__live_formed *out)
{
  struct pg__live_member *m;
  char key[64];
  void *v = NULL;
  size_t len;
  int64_t round;
  int world, i, err;

  gkey(key, sizeof key, gen, "done");
  err = pg_store_get(j->store, key, wait, &v, &len);
  if (err == -ENOENT || err == -ETIMEDOUT)
    return 0;
  if (err)
    return pg__fail(err, "live store: cannot read %s: %s", key,
                    pg_strerror(err));
  err = pg__live_decision_parse(v, len, &m, &world, &round);
  free(v);
  if (err)
    return pg__fail(err, "live store: %s: %s", key, pg_last_error());
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
                      const struct live_round *r, int *have)
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

/* The verdict on G, waiting up to wait seconds: 0 "go", 1 "abort", 2
 * none yet, or an error. */
static int read_verdict(const struct pg__live_join *j, uint64_t gen,
                        double wait)
{
  char key[64];
  void *v = NULL;
  size_t len;
  int err, e;

  gkey(key, sizeof key, gen, "verdict");
  err = pg_store_get(j->store, key, wait, &v, &len);
  if (err == -ENOENT || err == -ETIMEDOUT)
    return 2;
  if (err)
    return err;
  e = len == 2 && memcmp(v, "go", 2) == 0 ? 0 : 1;
  free(v);
  return e;
}

/* Note [check in].  0 to go on with f, 1 when G is aborted, or an
 * error.  Each member counts itself in (live/g<G>/nin); the one that
 * brings the count to the world writes "go".  The others wait for the
 * verdict in slices, and between them look for a reason to abort: the
 * next generation started, or a member gone from this machine. */
static int check_in(const struct pg__live_join *j,
                    const struct pg__live_formed *f, double deadline)
{
  char key[64];
  uint64_t next;
  int64_t in;
  int i, e, err;
  bool swapped = false;

  snprintf(key, sizeof key, "live/g%" PRIu64 "/in%d", f->gen, f->slot);
  if ((err = pg_store_set(j->store, key, "1", 1)))
    return err;
  gkey(key, sizeof key, f->gen, "nin");
  if ((err = pg_store_add(j->store, key, 1, &in)))
    return err;
  gkey(key, sizeof key, f->gen, "verdict");
  if (in >= f->world) {
    if ((err = pg_store_compare_set(j->store, key, "", 0, "go", 2, NULL,
                                    NULL, &swapped)))
      return err;
    if (swapped)
      drop_old(j->store, f->gen);
  }
  while (pg__now() < deadline) {
    e = read_verdict(j, f->gen, WAIT_SLICE);
    if (e != 2)
      return e;
    /* Note [bounded store]: a straggler whose keys are gone moves up.
     * live/next passes G only after G's verdict is written, so the
     * verdict is read again first. */
    if ((err = next_gen(j->store, &next)))
      return err;
    if (f->gen < next) {
      e = read_verdict(j, f->gen, 0);
      return e == 2 ? 1 : e;
    }
    gkey(key, sizeof key, f->gen + 1, "started");
    if ((e = exists(j->store, key)) < 0)
      return e;
    for (i = 0; i < f->world && !e; i++)
      e = i != f->slot && gone_here(&f->m[i], j->boot);
    gkey(key, sizeof key, f->gen, "verdict");
    if (e && (err = pg_store_compare_set(j->store, key, "", 0, "abort", 5,
                                         NULL, NULL, &swapped)))
      return err;
  }
  return pg__fail(-ETIMEDOUT, "generation %" PRIu64 ": not every member "
                  "checked in within the timeout", f->gen);
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

/* Note [store values]: this process's entry in gen, written and not yet
 * decided on, is still there: 0; 1 when live/next passed gen (a cleaner
 * deleted it, legitimately: move up); -EPROTO with a sentence when it was
 * deleted from outside. */
static int entry_kept(const struct pg__live_join *j, uint64_t gen, int slot)
{
  char key[64];
  uint64_t next;
  int e;

  snprintf(key, sizeof key, "live/g%" PRIu64 "/m%d", gen, slot);
  if ((e = exists(j->store, key)) != 0)
    return e < 0 ? pg__fail(e, "live store: cannot read %s: %s", key,
                            pg_strerror(e)) : 0;
  /* Read after the entry: a cleaner raises live/next before it deletes. */
  if ((e = next_gen(j->store, &next)))
    return e;
  if (gen < next)
    return 1;
  return pg__fail(-EPROTO, "live store: %s (this process's entry in "
                  "generation %" PRIu64 ") vanished while the generation "
                  "formed: keys were deleted by something other than "
                  "libpg (a process with the job token?)", key, gen);
}

/* Note [generations]: one piece, the formation's loop, because each
 * step decides where the next goes (a later generation, a new round, a
 * decision). */
int pg__live_form(const struct pg__live_join *j, uint64_t gen,
                  struct pg__live_formed *out)
{
  struct live_round r, now_r;
  double deadline = pg__now() + j->timeout, left;
  char key[64];
  uint64_t next;
  int64_t count;
  int slot, now_slot, have = 0, err, d, idle = 0, scan_every = 1;
  int idle_entry = 0;
  bool written = false;

  memset(out, 0, sizeof *out);
  if ((err = read_view(j, &r, &slot)))
    return err;
  if ((err = next_gen(j->store, &next)))
    return err;
  if (gen < next)
    gen = next;
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
  while ((left = deadline - pg__now()) > 0) {
    /* Note [bounded store]: below live/next, gen's keys may be gone. */
    if ((err = next_gen(j->store, &next)))
      return err;
    if (gen < next) {
      gen = next;
      written = false;
    }
    if (!written) {
      if ((err = write_entry(j, gen, &r, slot, &count)))
        return err;
      written = true;
      /* The entry that completes the round decides (Note
       * [generations]). */
      if (count >= r.world && (err = try_decide(j, gen, &r, &have)))
        return pg__fail(err, "live store: deciding generation %" PRIu64
                        ": %s", gen, pg_strerror(err));
    }
    d = read_decision(j, gen, left < WAIT_SLICE ? left : WAIT_SLICE, out);
    if (d < 0)
      return d;
    if (d == 1 && (d = check_in(j, out, deadline)) <= 0) {
      if (d < 0) {
        free(out->m);
        out->m = NULL;
        return pg__fail(d, "live store: checking in to generation %"
                        PRIu64 ": %s", gen, d == -ETIMEDOUT || d == -EPROTO
                        ? pg_last_error() : pg_strerror(d));
      }
      return 0;
    }
    if (d == 1) {
      free(out->m);
      memset(out, 0, sizeof *out);
      d = 2;
    }
    if (d == 2) {
      gen++;
      written = false;
      continue;
    }
    if ((err = abandon_if_later(j, gen)) < 0)
      return pg__fail(err, "live store: %s", pg_strerror(err));
    if (++idle_entry >= ENTRY_CHECK_EVERY) {
      idle_entry = 0;
      if ((err = entry_kept(j, gen, slot)) == 1) {
        written = false;        /* moved up: live/next passed gen */
        continue;
      }
      if (err)
        return err;
    }
    if (j->round_file) {
      if ((err = read_view(j, &now_r, &now_slot)))
        return err;
      if (now_r.round != r.round || now_slot != slot) {
        r = now_r;
        slot = now_slot;
        written = false;
        continue;
      }
    }
    /* An entry written but never counted (its process died between):
     * slot 0 scans now and then, backing off. */
    if (slot == 0 && ++idle >= scan_every) {
      idle = 0;
      scan_every = scan_every * 2 < SCAN_EVERY_MAX ? scan_every * 2
                                                   : SCAN_EVERY_MAX;
      if ((err = try_decide(j, gen, &r, &have)))
        return pg__fail(err, "live store: deciding generation %" PRIu64
                        ": %s", gen, pg_strerror(err));
    }
  }
  /* Who is there, for the sentence. */
  if (written)
    try_decide(j, gen, &r, &have);
  return pg__fail(-ETIMEDOUT, "no generation formed within %g s "
                  "(generation %" PRIu64 " of round %" PRId64 ": %d of %d "
                  "members present)", j->timeout, gen, r.round, have,
                  r.world);
}

int pg__live_formed_check(pg_store *st, const struct pg__live_formed *f,
                          const char *boot)
{
  char key[64];
  int i, e;

  for (i = 0; i < f->world; i++)
    if (i != f->slot && gone_here(&f->m[i], boot))
      return pg__fail(PG_ERR_PEER_LOST, "generation %" PRIu64 ": rank %d "
                      "(pid %d) died while the group was set up", f->gen,
                      i, f->m[i].pid);
  gkey(key, sizeof key, f->gen + 1, "started");
  e = exists(st, key);
  if (e > 0)
    return pg__fail(PG_ERR_PEER_LOST, "generation %" PRIu64 ": the next "
                    "generation started while this one was set up (a member "
                    "was replaced)", f->gen);
  return 0;
}
