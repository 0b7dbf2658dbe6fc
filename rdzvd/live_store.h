/* live_store.h -- a job's live store in live recovery (man/cdrun.1,
 * LIVE RECOVERY): a libpg store with the job token, for the job's life,
 * so that it outlives every worker; workers find it in CDRUN_LIVE_STORE.
 * rdzvd serves one per live job (live_stores.h, Note [live store in
 * rdzvd]); with another back end the agent of node rank 0 serves it on
 * MASTER_PORT + LIVE_STORE_PORT_OFFSET (launcher/live_agent.c, Note [live
 * store port] in proto/worker/worker_contract.h).
 *
 * Neither binary links libpg: restart mode never pays for it (launch
 * time, RSS).  live_store_start loads libpg.so with dlopen the first
 * time, from <the directory of the binary>/../lib/libpg.so (an installed
 * or built tree), else wherever the dynamic loader finds libpg.so.0.  The
 * server runs on libpg's own thread. */
#ifndef CDRUN_LIVE_STORE_H
#define CDRUN_LIVE_STORE_H

#include <stddef.h>

/* LIVE_STORE_PORT_OFFSET, the port node rank 0's agent serves it on, is
 * the worker contract's: Note [live store port] in worker_contract.h. */
#include "worker_contract.h"

struct live_store;

/* Serves the store on addr (NULL or "": every address) at *port (0: any
 * free one, then *port is the one bound) with token (the workers'
 * CDRUN_JOB_TOKEN; "" for none).  Returns 0 and *out, or a negative errno
 * with the reason in err: -ENOENT when libpg cannot be loaded, libpg's
 * error when it cannot serve (-EADDRINUSE...). */
int live_store_start(const char *addr, int *port, const char *token,
                     struct live_store **out, char *err, size_t errlen);

/* Stops serving and frees s; NULL is a no-op. */
void live_store_stop(struct live_store *s);

#endif
