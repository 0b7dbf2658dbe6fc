/* jobtoken.h -- the job token: a secret cdrun gives every worker of a job
 * as CDRUN_JOB_TOKEN, so that libpg's store and TCP mesh serve only
 * processes that know it (man/libpg.3, proto/SECURITY.md).
 *
 * Note [job token]: every worker of a round, on every node, must get the
 * same token.  In order:
 *   0. the rendezvous serves the job's live store (Note [live store in
 *      rdzvd], rdzvd/live_stores.h): its token, taken as is, whatever
 *      else is set (the store knows no other); for a live job it leaves
 *      the master endpoint out, so it stays when node 0 is lost;
 *   1. the agent's own $CDRUN_JOB_TOKEN, set by the operator to the same
 *      secret on every node, keys an HMAC over the run id, MASTER_ADDR
 *      and MASTER_PORT (below);
 *   2. the rendezvous issued one with the round (rdzvd and a hosting
 *      cdrun do: an HMAC under the server's own key over the job, the
 *      master endpoint and the restart count, given to the round's
 *      participants only): taken as is.  It stays through membership
 *      rounds (a node lost or joining) while the master endpoint does:
 *      live recovery's workers go on with it, and a newcomer's get it;
 *   3. otherwise the same HMAC as 1 under the rendezvous shared secret
 *      (--rdzv_conf secret_file=...: the etcd and static back ends);
 *   4. none, on a one-node round: 32 fresh random bytes, known to this
 *      agent's workers only (not in live mode on a back end that can
 *      add nodes: Note [live token on one node], live_agent.c);
 *   5. none, on a multi-node round: a fixed public key.  That token keeps
 *      out scanners and processes of other jobs or rendezvous, but anyone
 *      who knows the run id and the master endpoint can compute it; the
 *      agent says so once.
 * 1, 3 and 5 leave the round out: the static back end counts rounds per
 * node.  They bind the assignment's run nonce where the back end has one
 * (the static back end: Note [static run nonce], static_barrier.h), so
 * that a rerun of the same run id and master endpoint gets another token
 * and a former run's workers open nothing of the new one. */
#ifndef CDRUN_JOBTOKEN_H
#define CDRUN_JOBTOKEN_H

#include <stdbool.h>
#include <stddef.h>

#include "rdzv.h"
#include "worker_contract.h"

#define JOBTOKEN_VAR WORKER_ENV_JOB_TOKEN   /* worker_contract.h */
#define JOBTOKEN_HEX 64
#define JOBTOKEN_NONCE_HEX 32   /* a run nonce (rdzv.h's run_nonce) */

/* A new run nonce into out: 16 random bytes as hex (Note [static run
 * nonce], static_barrier.h).  It need not be secret, only new: the clock
 * stands in if the kernel's generator fails. */
void jobtoken_run_nonce(char out[JOBTOKEN_NONCE_HEX + 1]);

/* The token for round as (key: secret, keylen 0 for none; run_id the
 * job's id) into out.  private_ok: a one-node round may have a token of
 * its own (case 4); false when a node joining later must get the same
 * (Note [live token on one node]).  *guessable: it came from case 5.  0
 * or -EIO. */
int jobtoken_make(const unsigned char *secret, size_t keylen,
                  const char *run_id, const struct rdzv_assignment *as,
                  bool private_ok, char out[JOBTOKEN_HEX + 1],
                  bool *guessable);

#endif
