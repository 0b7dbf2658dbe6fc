/* live.h -- train_mlp's live recovery (--recovery live, under cdrun
 * --recovery=live; pg.h's "live recovery"): the state the program
 * registers with libpg, and one recovery: pg_recover until a generation
 * forms, its times, and its line.
 *
 * The state is the parameters, the optimizer's state and struct
 * live_state: after a heal every rank holds the lowest surviving rank's,
 * so ranks that did and did not finish the interrupted step agree on it,
 * and on the step to run next.
 *
 * Output: every worker says once, on stdout, when it starts (a survivor
 * never says it twice; a replacement or a joining node's worker says it
 * with the step it joined at):
 *
 *   live: rank R pid P started at step S (world W, restart K)
 *
 * and the rank that sent the heal (the lowest surviving rank) one line per
 * recovery, after the redone step, which scripts/bench/chaos parses:
 *
 *   live_recovery generation=G world=W old_world=V joined=J left=L
 *     step=S cause=peer_lost|membership attempts=A detect_ms=D
 *     rebuild_ms=B heal_ms=H redo_ms=R|-
 *
 * (one line).  detect: from the start of the collective that failed to
 * its error (membership: a node joined, seen by pg_membership_poll: that
 * poll's time); rebuild: pg_recover's time less the heal's, over every
 * attempt (a death during the recovery means another); heal: sending
 * the state; redo: running the interrupted step again (0: none was
 * interrupted; "-": another failure came first).  step: the step run
 * next. */
#ifndef MLP_LIVE_H
#define MLP_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mlp.h"

/* Registered with the model's buffers. */
struct live_state {
  int64_t step;      /* steps done: the next step to run */
  int64_t reported;  /* the step of the last epoch report */
};

struct live {
  struct live_state st;
  unsigned char *trap;   /* --die-in-heal: a buffer the heal writes */
  size_t trap_bytes;
  /* The last recovery, until its line is printed (the healing rank). */
  bool printing, redo;
  const char *cause;
  struct pg_recover_info info;
  int attempts;
  int64_t at_step;       /* the step run next */
  double detect_s, rebuild_s, t_done;
};

/* Registers n's parameters and optimizer state and L->st with g (after
 * the reducer is made).  A process that joined a running job receives
 * them here.  --die-in-heal: the first replacement of o->die_rank[0]
 * dies while it receives them.  0, or -1 after a message. */
int live_register(struct live *L, pg_group *g, struct net *n,
                  const struct opts *o);
/* After an operation failed with PG_ERR_PEER_LOST (cause "peer_lost",
 * detect_s from its start to the error), or after pg_membership_poll
 * said a generation waits ("membership"): pg_recover until it forms.
 * redo: the step was interrupted and will run again (live_step_done
 * prints the line after it).  0, or the error after a message. */
int live_recover(struct live *L, pg_group *g, const char *cause,
                 double detect_s, bool redo);
/* A step finished: the line of a recovery that waited for its redo. */
void live_step_done(struct live *L);
/* Nothing more will run: a line still waiting is printed ("-"). */
void live_flush(struct live *L);
/* This run's CDRUN_WORKER_RESTARTS (0 when unset). */
long live_restarts(void);

#endif
