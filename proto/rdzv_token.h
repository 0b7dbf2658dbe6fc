/* rdzv_token.h -- node credentials: the tokens a rendezvous server issues
 * to the nodes of a job, and checks when a node speaks for itself from a
 * connection that is not the one it joined on (RESUME).
 *
 * Note [node tokens]
 *
 * A node is whoever holds the token the server gave it, never whoever
 * names its host and pid.  A token is HMAC-SHA256 under the server's token
 * key over what it vouches for:
 * Every token also binds the job's incarnation: a number the server draws
 * when it creates the job (a rerun of the same job id is another
 * incarnation) and, with a token key file, keeps across its lives beside
 * the file (rdzvd/job_ledger.h), so that a token of an earlier run proves
 * nothing about this one.
 *   - gathering: job id, host, pid, the node's incarnation (a number the
 *     server draws for each node it creates, so that one who joins under
 *     another node's name gets a token of its own), the round gathered
 *     for and the job's restart count (sent in WAITING); the token is the
 *     incarnation (8 bytes) and 24 bytes of the MAC;
 *   - running: job id, host, pid and the whole assignment of the round
 *     (round, restart count, group rank and size, rank offset, world size,
 *     master address and port) (sent in ROUND).
 * A node re-presents the last one it got.  A server that still knows the
 * node compares it with what it issued; one that does not (it restarted)
 * recomputes it from the claim, which it can only do when its key lasts:
 * a token key file that only the server reads (rdzvd --token-key-file;
 * key = HMAC(file, "cdrun-rdzv-token-key-1")).  Then a rank of a round is
 * claimed only by the node that was given it, and only with its latest
 * assignment: the server keeps the job's incarnation and the last round
 * (and restart count) it issued beside the key file, and a token of an
 * older round is stale (Note [fresh tokens] in rdzvd/rdzv_resume.c).  The key is never derived
 * from the shared secret: every client holds that, so any of them could
 * compute every token.  Without a key file the key is random per server
 * life, and a restarted server cannot tell a true claim from a forged one
 * (proto/SECURITY.md).
 *
 * The key's HMAC inner and outer states are computed once, so a token
 * costs two SHA-256 compressions and two context copies, no allocation. */
#ifndef RDZV_TOKEN_H
#define RDZV_TOKEN_H

#include <stdbool.h>
#include <stdint.h>

#include "rdzv_auth.h"
#include "rdzv_proto.h"

struct rdzv_token_key;

/* A key from file (rdzv_token_key_file's bytes), or a random one when
 * file is NULL.  NULL when out of memory or the CSPRNG failed. */
struct rdzv_token_key *rdzv_token_key_new(const struct rdzv_auth_secret *file);
void rdzv_token_key_free(struct rdzv_token_key *k);

/* True when the key outlives this server (it came from a key file): a
 * token an earlier server life issued can be verified. */
bool rdzv_token_key_lasting(const struct rdzv_token_key *k);

/* Reads the token key file at path into out, creating it first (32
 * random bytes as 64 hex digits, mode 600, O_EXCL) when it does not
 * exist.  The file is checked as a secret file (rdzv_auth_secret_load: regular,
 * never a FIFO that would block or a symbolic link,
 * not accessible by group or others, owned by this user or root).
 * Returns 0, or a negative errno with a sentence naming path in err. */
int rdzv_token_key_file(const char *path, struct rdzv_auth_secret *out,
                        char *err, size_t errlen);

/* A new node's incarnation: unique within this key's life, and drawn
 * from a random start so that lives do not repeat each other's. */
uint64_t rdzv_token_incarnation(struct rdzv_token_key *k);

/* The gathering token of (job of job_incarnation, host, pid, the node's
 * incarnation) for round and restart_count; the running token of (job of
 * job_incarnation, host, pid) for the assignment rd (its own token field
 * is ignored).  0 or -EIO. */
int rdzv_token_gathering(const struct rdzv_token_key *k, const char *job,
                         uint64_t job_incarnation, const char *host,
                         int64_t pid, uint64_t incarnation, int round,
                         int restart_count,
                         unsigned char out[RDZV_PROTO_TOKEN_BYTES]);

/* True when token is the gathering token of (job of job_incarnation,
 * host, pid) for round and restart_count under k, for the node
 * incarnation it names. */
bool rdzv_token_gathering_ok(const struct rdzv_token_key *k, const char *job,
                             uint64_t job_incarnation, const char *host,
                             int64_t pid, int round, int restart_count,
                             const unsigned char token[RDZV_PROTO_TOKEN_BYTES]);
int rdzv_token_running(const struct rdzv_token_key *k, const char *job,
                       uint64_t job_incarnation, const char *host,
                       int64_t pid, const struct rdzv_proto_round *rd,
                       unsigned char out[RDZV_PROTO_TOKEN_BYTES]);

/* The job token of job's rounds (its incarnation job_incarnation: a
 * rerun, or a rerun in a later server life, gets another) with master
 * endpoint master_addr:master_port and restart_count restarts: what a
 * round's participants
 * give their workers as CDRUN_JOB_TOKEN (launcher/jobtoken.h, Note [job
 * token]).  Under the server's own key, so only a participant learns it;
 * the same for every participant of the round, and for the rounds that
 * follow while the master endpoint and the restart count stay (a node
 * lost or joining: live recovery's workers go on with it, and a
 * newcomer's join them); another after a restart or a move of the
 * master.  0 or -EIO. */
int rdzv_token_job(const struct rdzv_token_key *k, const char *job,
                   uint64_t job_incarnation, const char *master_addr,
                   int master_port, int restart_count,
                   unsigned char out[RDZV_PROTO_TOKEN_BYTES]);

/* Constant-time equality of two tokens; an all-zero token (none) equals
 * nothing. */
bool rdzv_token_equal(const unsigned char a[RDZV_PROTO_TOKEN_BYTES],
                      const unsigned char b[RDZV_PROTO_TOKEN_BYTES]);

#endif
