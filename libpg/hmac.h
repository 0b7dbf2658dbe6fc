/* hmac.h -- SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), small and
 * self-contained so that libpg links no crypto library: the store's and
 * the TCP mesh's job-token proofs (auth.h) are its only users. */
#ifndef PG_HMAC_H
#define PG_HMAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pg_internal.h"

#define PG_SHA256_BYTES 32

struct pg__sha256 {
  uint32_t h[8];
  uint64_t total;           /* bytes hashed so far */
  uint8_t block[64];
  size_t used;              /* bytes waiting in block */
};

PG__HIDDEN void pg__sha256_init(struct pg__sha256 *s);
PG__HIDDEN void pg__sha256_update(struct pg__sha256 *s, const void *p,
                                  size_t n);
PG__HIDDEN void pg__sha256_final(struct pg__sha256 *s,
                                 uint8_t out[PG_SHA256_BYTES]);

/* HMAC-SHA256 of the concatenation of the n pieces parts[i] (lens[i]
 * bytes each) under key. */
PG__HIDDEN void pg__hmac_sha256(const void *key, size_t keylen,
                                const void *const *parts,
                                const size_t *lens, size_t n,
                                uint8_t out[PG_SHA256_BYTES]);

/* a == b over n bytes, in time that does not depend on where they
 * differ. */
PG__HIDDEN bool pg__ct_equal(const void *a, const void *b, size_t n);

#endif
