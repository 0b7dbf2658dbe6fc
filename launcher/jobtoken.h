/* jobtoken.h -- the job token: a secret cdrun gives every worker of a job
 * as CDRUN_JOB_TOKEN, so that libpg's store and TCP mesh serve only
 * processes that know it (man/libpg.3, proto/SECURITY.md).
 *
 * Note [job token]: every worker of a round, on every node, must get the
 * same token, and each agent learns only O(1) facts from the rendezvous.
 * So the token is computed, not exchanged: HMAC-SHA256 under a key the
 * job's agents share, over the facts they share (the run id, MASTER_ADDR
 * and MASTER_PORT), as 64 hex digits.  The key is, in order:
 *   1. the agent's own $CDRUN_JOB_TOKEN, set by the operator to the same
 *      secret on every node;
 *   2. the rendezvous shared secret (--rdzv_conf secret_file=...);
 *   3. none, on a one-node round: then the token is 32 fresh random
 *      bytes instead, known to this agent's workers only;
 *   4. none, on a multi-node round without a secret: a fixed public key.
 *      That token keeps out scanners and processes of other jobs or
 *      rendezvous, but anyone who knows the run id and the master
 *      endpoint can compute it; the agent says so once.
 * The round is not in it: the static back end counts rounds per node. */
#ifndef CDRUN_JOBTOKEN_H
#define CDRUN_JOBTOKEN_H

#include <stdbool.h>
#include <stddef.h>

#include "rdzv.h"

#define JOBTOKEN_VAR "CDRUN_JOB_TOKEN"
#define JOBTOKEN_HEX 64

/* The token for round as (key: secret, keylen 0 for none; run_id the
 * job's id) into out.  *guessable: it came from case 4 above.  0 or
 * -EIO. */
int jobtoken_make(const unsigned char *secret, size_t keylen,
                  const char *run_id, const struct rdzv_assignment *as,
                  char out[JOBTOKEN_HEX + 1], bool *guessable);

#endif
