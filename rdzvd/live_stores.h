/* live_stores.h -- rdzvd's live stores: one libpg store (live_store.h)
 * per job that asks for live recovery, served by the daemon for the
 * job's life (the state machine's rdzv_live_host calls).
 *
 * Note [live store in rdzvd]: live recovery keeps the job's membership
 * (generations, check-ins, verdicts: libpg's Note [generations]) and the
 * workers' set-up exchange in a libpg store that must outlive every
 * worker.  Served by node 0's agent, it died with node 0, and every
 * survivor restarted.  With rdzvd it lives in the daemon, which already
 * holds the job's rounds and outlives every node:
 *  - a JOIN says conf.live; each round of the job carries
 *    live_store_port, a store on the daemon's address (--host) at a port
 *    of its own, served with the round's job token;
 *  - that token leaves the master endpoint out (rdzv_round.c,
 *    rdzv_round_complete), so it stays when node 0 is lost, and the store with
 *    it: only a restart (a new restart count) gives a new token, and a
 *    new store;
 *  - the agents give the workers CDRUN_LIVE_STORE = the rendezvous
 *    endpoint's host : live_store_port and keep them running when a
 *    round moves the master endpoint (launcher/live_agent.c): losing node
 *    0 costs what losing any node does.
 * Soft state, as the rest, but not rebuilt from the agents: a restarted
 * rdzvd has no store for a live job it rebuilds from RESUMEs, and its
 * workers' next recovery could not reach the old one (each replacement
 * would wait PG_TIMEOUT for it).  So once the rebuilt round is whole
 * rdzvd starts a new round (rdzv_resume.c, rebuild_done; no restart
 * counted) with a new store, and the agents restart their workers in it:
 * a restart of rdzvd costs a live job a restart of its workers (rdzvd(8),
 * cdrun(1)).  At most
 * LIVE_STORES_MAX at once (a thread and a listener each); beyond, a live
 * job is served as any other and its agents fall back to node 0's
 * store. */
#ifndef RDZVD_LIVE_STORES_H
#define RDZVD_LIVE_STORES_H

#include "rdzv_state.h"

#define LIVE_STORES_MAX 256

struct live_stores;

/* The registry, serving on host (NULL or "": every address); log (may be
 * NULL) gets one line per store started, stopped or refused.  NULL when
 * out of memory. */
struct live_stores *live_stores_create(const char *host,
                                       void (*log)(void *ctx,
                                                   const char *line),
                                       void *log_ctx);

/* The calls for rdzv_state_set_live_host (via the server's options). */
struct rdzv_live_host live_stores_host(struct live_stores *s);

/* Stops every store and frees s; NULL is a no-op. */
void live_stores_destroy(struct live_stores *s);

#endif
