/* live.h -- live recovery's parts (pg.h, "live recovery"; nothing here is
 * installed):
 *
 *   live_round.c   the round file cdrun rewrites at every round of a node
 *                  (CDRUN_LIVE_ROUND_FILE): reading it, with the worker
 *                  contract's parser (proto/worker/round_file.h)
 *   live_member.c  a member's entry and a generation's decision as text in
 *                  the store, and when a generation is complete (pure)
 *   live_form.c    forming a generation over the live store (Note
 *                  [generations])
 *   live_cut.c     the cut watch (Note [a node cut off])
 *   recover.c      live mode at pg_init, pg_recover, pg_membership_poll,
 *                  pg_state_register
 *   live_hooks.c   the hooks (core/hooks.h) a live world attaches: the
 *                  error a peer's loss turns into, stale sub-groups, the
 *                  watches (Note [live sub-groups])
 *   heal.c         the heal (Note [heal])
 *
 * The top floor of libpg (Note [floors], core/hooks.h): it uses the core
 * and, through the core's rebuild registry, the reducers; nothing below
 * calls it but init.c.
 *
 * A live group's members are its slots 0..world-1 in the round it formed
 * for; a process is told apart from the one it replaced by a random
 * incarnation id. */
#ifndef PG_LIVE_H
#define PG_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "pg_internal.h"
#include "round_file.h"
#include "worker_contract.h"

/* ---- live_round.c ---------------------------------------------------------
 * One line "round=<R> world=<W> rank_offset=<O> local_world=<L>\n" (the
 * grammar: round_file.h, struct live_round); a process's slot in round R
 * is O + its LOCAL_RANK. */

/* Parses text[0..len) (round_file_parse).  0, or -EINVAL with a sentence
 * naming the problem (what names the file). */
PG__HIDDEN int pg__live_round_parse(const char *text, size_t len,
                                    const char *what,
                                    struct live_round *out);
/* Reads and parses the file.  0, or an error with a sentence. */
PG__HIDDEN int pg__live_round_read(const char *path,
                                   struct live_round *out);
/* This process's slot in r: rank_offset + local_rank, checked against
 * the world.  0, or -EINVAL with a sentence. */
PG__HIDDEN int pg__live_round_slot(const struct live_round *r,
                                   int local_rank, int *slot);

/* ---- live_member.c --------------------------------------------------------
 * A member's entry in generation G (live/g<G>/m<slot>). */
#define PG__LIVE_BOOT_MAX 64
struct pg__live_member {
  uint64_t inc;        /* incarnation id: random per process */
  int64_t round;       /* the round it read */
  int world, slot;
  int old_rank;        /* its rank in generation from, -1 when fresh */
  int64_t from;        /* its previous generation, -1 when fresh */
  int pid;
  bool fresh;          /* a new process: reducers and state not yet
                          registered (its pg_state_register heals) */
  bool valid;          /* its state may be the heal's source */
  bool comm;           /* it holds generation from's communicator, one
                          the backend can shrink (Note [shrink]) */
  char boot[PG__LIVE_BOOT_MAX];  /* its kernel's boot id ("" unknown) */
};

/* Text forms: one line, no newline; buf of PG__LIVE_MEMBER_MAX bytes. */
#define PG__LIVE_MEMBER_MAX 256
PG__HIDDEN void pg__live_member_format(const struct pg__live_member *m,
                                       char *buf, size_t len);
/* 0, or -EPROTO with a sentence. */
PG__HIDDEN int pg__live_member_parse(const char *text, size_t len,
                                     struct pg__live_member *m);

/* Whether slots 0..world-1 form round's generation: every present[i],
 * with m[i] of that round and world, at slot i, and no incarnation twice. */
PG__HIDDEN bool pg__live_complete(const struct pg__live_member *m,
                                  const bool *present, int world,
                                  int64_t round);

/* A generation's decision (live/g<G>/done): "abandoned", or the round,
 * world and every member's entry, one per line.  format returns a
 * malloc'd string (NULL: out of memory); parse gives *world == 0 for
 * "abandoned" and a malloc'd *m otherwise.  0, or -EPROTO/-ENOMEM. */
#define PG__LIVE_ABANDONED "abandoned"
PG__HIDDEN char *pg__live_decision_format(const struct pg__live_member *m,
                                          int world, int64_t round);
PG__HIDDEN int pg__live_decision_parse(const char *text, size_t len,
                                       struct pg__live_member **m,
                                       int *world, int64_t *round);
/* Note [shrink] (recover.c): whether m[0..world) can shrink generation
 * old_gen's communicator of old_world members: some left, none joined,
 * the survivors keep their order, and every one holds that communicator
 * (a member whose shrink failed holds none: then all make a new one,
 * rather than some shrinking while others create). */
PG__HIDDEN bool pg__live_shrinks(const struct pg__live_member *m, int world,
                                 int64_t old_gen, int old_world);
/* The heal's source: the lowest slot whose state is valid, or -1. */
PG__HIDDEN int pg__live_heal_source(const struct pg__live_member *m,
                                    int world);

/* ---- live_form.c -----------------------------------------------------------
 * Note [generations] there.  What one process brings to a formation, and
 * what it learns. */
struct pg__live_join {
  pg_store *store;
  const char *round_file;  /* NULL: round 0 of world/rank below */
  int local_rank;
  int env_world, env_rank; /* RANK/WORLD_SIZE, used without a round file */
  uint64_t inc;
  const char *boot;
  bool fresh, valid, comm;
  int old_rank;
  int64_t from;            /* -1: fresh */
  double timeout;
};

struct pg__live_formed {
  uint64_t gen;
  int64_t round;
  int world, slot;
  struct pg__live_member *m;   /* [world], malloc'd */
};

/* Joins generation gen or a later one (a fresh process: the lowest that
 * is not decided from gen on) and waits until one is decided with this
 * process in it.  0 and *out, -ETIMEDOUT after j->timeout, or a store
 * error; each with a sentence. */
PG__HIDDEN int pg__live_form(const struct pg__live_join *j, uint64_t gen,
                             struct pg__live_formed *out);

/* While f is set up: PG_ERR_PEER_LOST (with a sentence) when a member
 * other than this one is verifiably gone from this machine, or when a
 * later generation started (a replacement went ahead); else 0.  One
 * store read. */
PG__HIDDEN int pg__live_formed_check(pg_store *st,
                                     const struct pg__live_formed *f,
                                     const char *boot);

/* ---- live_cut.c ------------------------------------------------------------
 * The cut watch of a live world (Note [a node cut off]): armed with the
 * round file, the round and the world of the generation set up; ask
 * (struct pg__setup's cut_ask, arg: the watch) is 0, or PG_ERR_PEER_LOST
 * with its sentence once the round file shows a newer round of a smaller
 * world.  armed is read without the lock (a hint; struct pg__setup's
 * cut_armed points at it). */
struct pg__live_cut {
  pthread_mutex_t lock;
  bool armed;
  char path[PATH_MAX];
  int64_t round;
  int world;
  struct stat st;                       /* the file when last read */
  struct live_round seen;
};
PG__HIDDEN void pg__live_cut_init(struct pg__live_cut *c);
PG__HIDDEN void pg__live_cut_destroy(struct pg__live_cut *c);
PG__HIDDEN void pg__live_cut_arm(struct pg__live_cut *c,
                                 const char *round_file, int64_t round,
                                 int world);
PG__HIDDEN void pg__live_cut_disarm(struct pg__live_cut *c);
PG__HIDDEN int pg__live_cut_ask(void *arg);

/* ---- recover.c and live_hooks.c: a live world's state ---------------------
 * g->upper of a world group whose hooks are pg__live_hooks. */
/* Note [setup watch] (recover.c): what a watch looks at. */
struct watch {
  pg_store *store;
  const struct pg__live_formed *f;
  const char *boot;
};

struct pg__live {
  char round_file[PATH_MAX];    /* "" : none (round 0 of RANK/WORLD_SIZE) */
  char host_id[512], boot[PG__LIVE_BOOT_MAX];
  uint64_t inc;                 /* this process's incarnation */
  uint64_t gen;                 /* the generation of g->comm */
  int64_t round;                /* the round it formed for */
  int env_rank, env_world;
  bool fresh;                   /* a new process that has not yet taken
                                   part in a heal (pg_state_register or
                                   pg_recover): a newcomer to the job */
  bool valid;                   /* this rank's state is the job's */
  bool joined_running;
  bool heal_pending;            /* pg_state_register heals from source */
  int heal_source;
  struct stat round_st;         /* the round file when last read */
  int64_t round_seen;
  struct pg_state_buf *bufs;    /* pg_state_register's */
  size_t nbufs;
  bool registered;
  /* [is_new_n]: whether each rank of generation gen was not a member of
   * the one before (pg_rank_is_new); NULL: none is. */
  unsigned char *is_new;
  int is_new_n;
  /* The generation g->comm was made for, as it formed (f.m NULL before
   * the first), and the watch over it that sub-group creation sets
   * (Note [live sub-groups]). */
  struct pg__live_formed formed;
  struct watch sub_watch;
  /* Note [live sub-groups]: every sub-group made from this world, at any
   * depth, until its pg_destroy; snap has room for as many (pg_recover
   * works on a copy, without the lock).  subs_mu is taken before any
   * group's mu, never after. */
  pthread_mutex_t subs_mu;
  pg_group **subs, **snap;
  size_t nsubs, cap;
  /* Note [a node cut off] (live_cut.c): the world's cut watch. */
  struct pg__live_cut cut;
};

/* The hooks a live world attaches (live_hooks.c), and the live state of
 * a world group w (NULL: not a live world). */
extern PG__HIDDEN const struct pg__hooks pg__live_hooks;
#define PG__LIVE_WORLD(w) \
  ((w) && (w)->hooks == &pg__live_hooks ? (struct pg__live *)(w)->upper \
                                       : NULL)
/* The live state of g's world (g a world or a sub-group), or NULL. */
PG__HIDDEN struct pg__live *pg__live_of(const pg_group *g);
/* Whether err says a peer is gone (or could not keep up). */
PG__HIDDEN bool pg__live_peer_caused(int err);
/* The hook op_err: err, or PG_ERR_PEER_LOST (the sentence kept) when g
 * is live and err says a peer is gone. */
PG__HIDDEN int pg__live_peer_err(const pg_group *g, int err);
/* g marked failed (PG_ERR_PEER_LOST) unless it already failed. */
PG__HIDDEN void pg__live_mark_lost(pg_group *g);
/* A setup watch (arg: a struct watch): 0, or PG_ERR_PEER_LOST once a
 * member is gone or the next generation started (Note [setup watch]). */
PG__HIDDEN int pg__live_watch_formed(void *arg);

/* ---- recover.c ---------------------------------------------------------- */
/* Live mode at pg_init (CDRUN_RECOVERY=live), called by init.c: opts in,
 * attaches the live hooks (core/hooks.h) to g, connects to the live
 * store, forms the first generation this process belongs to and sets up
 * its communicator.  *handled = false when not live (nothing done).  0
 * or an error with a sentence. */
PG__HIDDEN int pg__live_init(pg_group *g, const struct pg_options *o,
                             bool *handled);
/* The test hook PG_TEST_LIVE_KILL="<where>:<generation>:<rank>": that
 * rank of that generation dies (SIGKILL) at that point ("heal": after
 * its first chunk of the heal; "setup": before it sets the communicator
 * up), so that tests kill a process there without a timing window. */
PG__HIDDEN void pg__live_test_kill(const char *where, uint64_t gen,
                                   int rank);
/* What the heal sends besides the rebuild registry's entries: the
 * registered buffers of g (a live world). */
PG__HIDDEN void pg__live_registered(pg_group *g,
                                    const struct pg_state_buf **bufs,
                                    size_t *nbufs);
/* An operation of g (a live world or its sub-group) failed with
 * PG_ERR_PEER_LOST: the world and every sub-group are marked failed, so
 * that their queued and later operations fail at once (the hook lost;
 * the unit tests call it to stand for a death). */
PG__HIDDEN void pg__live_lost(pg_group *g);
/* The current generation of g's world. */
PG__HIDDEN uint64_t pg__live_generation(const pg_group *g);

/* ---- heal.c ---------------------------------------------------------------
 * The heal (Note [heal]): collective over the generation, from source:
 * the registered buffers, and every entry of the rebuild registry (the
 * reducers' layouts).  *valid (in: this rank's state was valid; out: it
 * still is, even when the heal failed half-way).  0 or an error
 * (PG_ERR_PEER_LOST). */
PG__HIDDEN int pg__live_heal(pg_group *g, int source, bool *valid);

#endif
