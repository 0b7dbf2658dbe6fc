/* hooks.h -- the core's one seam upward: the hooks table a mode stacked
 * on the core (live recovery, libpg/live/) attaches to a world group, and
 * the rebuild registry (nothing here is installed).
 *
 * Note [floors]: libpg is three floors and its backends.  The core
 * (libpg/core/: the group, its work queue, sub-groups, the store, the
 * kernels; libpg/cpu/ and libpg/nccl/ beside it) knows nothing above it;
 * ddp (libpg/ddp/: the reducer and its buckets) is built on the core;
 * live (libpg/live/: the round file, members, forming, pg_recover, the
 * heal) on both; init.c (pg_init, pg_destroy) on all three.  The Makefile
 * gives each floor the -I of its own and the lower floors only, and
 * scripts/check-layers.sh checks with nm that no floor's objects use a
 * symbol only a higher floor defines.  What the core must ask of the
 * floors above it (how an operation's error reads, whether a sub-group is
 * stale, what to watch while waiting, what to forget at a destroy) it
 * asks through the hooks of its world group; what a membership change
 * must rebuild, a higher floor finds in the rebuild registry, where the
 * reducer put it.  A world group without hooks (g->hooks NULL: restart
 * mode, every group made without CDRUN_RECOVERY=live) is a plain group:
 * every hook below is then as if it returned err, 0, false or nothing. */
#ifndef PG_HOOKS_H
#define PG_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pg_internal.h"

struct pg__hooks {
  /* The error an operation of g (the world or one of its sub-groups)
   * ends with, from the backend's err (nonzero): err, or another code
   * with the sentence kept (live: PG_ERR_PEER_LOST for a peer's loss). */
  int (*op_err)(const pg_group *g, int err);
  /* An operation of g failed with PG_ERR_PEER_LOST: the group's family
   * (the world and its sub-groups) is marked failed. */
  void (*lost)(pg_group *g);
  /* 0, or the error (with its sentence) that g refuses an operation with
   * before it is queued (what NULL), or refuses to be the parent of a
   * sub-group with (what: "pg_new_group", "pg_split").  Live: a stale
   * sub-group, a world without a communicator. */
  int (*refuse)(const pg_group *g, const char *what);
  /* Fills s's op watch and cut watch (struct pg__setup) for a
   * communicator of g. */
  void (*op_watch)(pg_group *g, struct pg__setup *s);
  /* Sets (on) or clears the setup watch on this thread while a sub-group
   * of g is made. */
  void (*setup_watch)(pg_group *g, bool on);
  /* A sub-group of the world was made (0 or an error with a sentence),
   * or is being destroyed. */
  int (*sub_add)(pg_group *sub);
  void (*sub_remove)(pg_group *sub);
  /* Whether a collective setup made on g (a reducer's check of its
   * parameters) is skipped: this process joined a running job, and what
   * it set up comes with the heal. */
  bool (*alone)(const pg_group *g);
  /* Whether a peer's loss during such a setup may be put off until the
   * first operation (Note [reducer made during a death], reducer.c). */
  bool (*defer_loss)(const pg_group *g);
  /* The world's destroy, after its communicator's: the mode's state
   * (g->upper) freed. */
  void (*free)(pg_group *g);
  /* The store outlives the world (no exit barrier at its destroy). */
  bool keeps_store;
};

/* ---- the rebuild registry ----------------------------------------------
 * Things made on a world group that a membership change must bring to
 * the same state on every member (a reducer's bucket layout), registered
 * at their creation and forgotten at their destroy, in creation order.
 * The core keeps the list and calls nothing in it; the floor that changes
 * the membership (live: pg_recover and the heal) walks it. */
struct pg__rebuild_ops {
  /* How many parameters obj has (the heal's header checks them). */
  size_t (*params)(const void *obj);
  /* How many int64s its state on the wire takes. */
  size_t (*wire_len)(const void *obj);
  /* Ends what obj was doing (in-flight work waited for and dropped): the
   * communicator is about to be closed. */
  void (*abandon)(void *obj);
  /* obj's state to the wire, and a state from the wire taken (on every
   * member, the source's included).  set: 0 or an error with a
   * sentence. */
  void (*get)(void *obj, int64_t *wire);
  int (*set)(void *obj, const int64_t *wire);
};

struct pg__rebuild {
  const struct pg__rebuild_ops *ops;
  void *obj;
};

/* Records obj on g (a world group; nothing for a sub-group): 0, or
 * -ENOMEM with a sentence. */
PG__HIDDEN int pg__rebuild_add(pg_group *g, const struct pg__rebuild_ops *ops,
                               void *obj);
/* Forgets obj (nothing when it is not recorded). */
PG__HIDDEN void pg__rebuild_remove(pg_group *g, void *obj);
/* The registry of g: *n entries in creation order. */
PG__HIDDEN const struct pg__rebuild *pg__rebuild_list(const pg_group *g,
                                                      size_t *n);

#endif
