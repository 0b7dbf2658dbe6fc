/* sha256.h -- SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), small and
 * self-contained, for the rendezvous handshake (rdzv_auth.h) and the node
 * tokens (rdzv_token.h).
 *
 * Why not libcrypto: it was 1.4 MB of a cdrun's 4.1 MB peak RSS, loaded
 * at every launch for a few HMACs.  libpg compiles this file in for its
 * job-token proofs (libpg/core/auth.h; Note [libpg's own copies] in the
 * Makefile), hidden: libpg.so exports none of these names.
 *
 * On x86-64 with the SHA extensions the blocks go through them (Note
 * [SHA-NI] in sha256.c); CDRUN_SHA256_PORTABLE=1 in the environment
 * takes the portable code instead.
 *
 * Nothing here allocates or fails.  A struct sha256 may be copied: a copy
 * of the state after a key's pad block is how HMACs under one key skip
 * hashing the key again (rdzv_token.c). */
#ifndef CDRUN_SHA256_H
#define CDRUN_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32
#define SHA256_BLOCK_BYTES 64

struct sha256 {
  uint32_t h[8];
  uint64_t total;               /* bytes hashed so far */
  uint8_t block[SHA256_BLOCK_BYTES];
  size_t used;                  /* bytes waiting in block */
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *p, size_t n);
/* Writes the digest and wipes s. */
void sha256_final(struct sha256 *s, uint8_t out[SHA256_BYTES]);

/* HMAC-SHA256(key, msg) into out. */
void sha256_hmac(const void *key, size_t keylen, const void *msg,
                 size_t msglen, uint8_t out[SHA256_BYTES]);
/* HMAC-SHA256 under key of the concatenation of the n pieces parts[i]
 * (lens[i] bytes each) into out. */
void sha256_hmac_parts(const void *key, size_t keylen,
                       const void *const *parts, const size_t *lens,
                       size_t n, uint8_t out[SHA256_BYTES]);

/* a == b over n bytes, in a time that does not depend on where they
 * differ. */
bool sha256_equal_ct(const void *a, const void *b, size_t n);

#endif
