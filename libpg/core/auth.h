/* auth.h -- the job token (CDRUN_JOB_TOKEN): the secret cdrun gives every
 * worker of a job, and the challenge-response proofs of it that the store
 * (store_server.c, store_client.c) and the TCP mesh (cpu/tcp_setup.c,
 * cpu/hier_p2p.c) ask of each connection.
 *
 * Both sides pick a fresh random nonce; each proves the token with
 * HMAC-SHA256(token, label | context | nonce_a | nonce_b), the label
 * naming the protocol and the side (so a proof cannot be reflected back)
 * and both nonces binding the connection (so it cannot be replayed).  The
 * token never travels. */
#ifndef PG_AUTH_H
#define PG_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pg_internal.h"
#include "sha256.h"
#include "worker_contract.h"

#define PG_TOKEN_VAR WORKER_ENV_JOB_TOKEN  /* worker_contract.h */
#define PG_TOKEN_MIN 16
#define PG_TOKEN_MAX 1024
#define PG_NONCE_BYTES 32
#define PG_MAC_BYTES SHA256_BYTES

struct pg__token {
  size_t len;               /* 0: none */
  uint8_t key[PG_TOKEN_MAX];
};

/* t from text: NULL means $CDRUN_JOB_TOKEN (unset or empty: none), ""
 * none.  0, or -EINVAL with a sentence for a token shorter than
 * PG_TOKEN_MIN or longer than PG_TOKEN_MAX bytes. */
PG__HIDDEN int pg__token_from(const char *text, struct pg__token *t);

/* n random bytes (the kernel's CSPRNG). */
PG__HIDDEN void pg__nonce(uint8_t *out, size_t n);

/* HMAC-SHA256(t, label | ctx | a | b). */
PG__HIDDEN void pg__auth_mac(const struct pg__token *t, const char *label,
                             const void *ctx, size_t ctxlen,
                             const uint8_t a[PG_NONCE_BYTES],
                             const uint8_t b[PG_NONCE_BYTES],
                             uint8_t out[PG_MAC_BYTES]);

/* mac is the proof for these inputs (constant-time compare). */
PG__HIDDEN bool pg__auth_check(const struct pg__token *t, const char *label,
                               const void *ctx, size_t ctxlen,
                               const uint8_t a[PG_NONCE_BYTES],
                               const uint8_t b[PG_NONCE_BYTES],
                               const uint8_t mac[PG_MAC_BYTES]);

/* Prints, once per process, that this worker runs without a job token:
 * loopback says whether the group's store is reachable from this host
 * only. */
PG__HIDDEN void pg__token_warn_missing(bool loopback);

#endif
