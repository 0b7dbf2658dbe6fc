/* store_wire.h -- the store's wire codec, shared by its server
 * (store_server.c) and client (store_client.c): the protocol's constants,
 * a byte queue to build frames and a reader to parse them. */

/* Wire protocol, version 2.  Every integer is little-endian.
 *
 * Handshake: on connect the client sends 'p' 'g' 's' VERSION and a fresh
 * random 32-byte nonce Nc.  On a wrong magic or version the server
 * answers its own 4 bytes ('p' 'g' 's' and its version) and closes;
 * otherwise 'p' 'g' 's' VERSION, u8 auth and its own nonce Ns.  auth 0
 * (the server has no job token): the handshake is over.  auth 1: the
 * client sends HMAC-SHA256(token, "pg-store-2 client\0" | Nc | Ns) (32
 * bytes); the server answers u8 0 and HMAC-SHA256(token, "pg-store-2
 * server\0" | Nc | Ns), or u8 10 (AUTH_FAILED) and 32 zero bytes and
 * closes.  The client checks the server's proof too, and refuses a
 * server without a token when it has one.  Before the handshake is over
 * the server reads nothing else (auth.h, Note [store budget] in
 * store_server.c).
 *
 * Request:  u32 length | u8 op | u32 request_id | fields
 * Reply:    u32 length | u32 request_id | u8 status | fields (if OK)
 * length counts the bytes after itself.  A byte string ("bytes") is
 * u32 n | n bytes; keys are 0..4096 bytes, values 0..64 MiB.
 *
 *   op  name       request fields                  reply fields (OK)
 *    1  SET        key, value: bytes               -
 *    2  GET        key: bytes, u32 timeout_ms      value: bytes
 *    3  ADD        key: bytes, i64 delta           i64 new value
 *    4  CAS        key, expected, desired: bytes   u8 swapped, u8 present,
 *                                                  value: bytes (after)
 *    5  WAIT       u32 timeout_ms, u32 n, n keys   -
 *    6  DELETE     key: bytes                      u8 existed
 *    7  NUM_KEYS   -                               i64 count
 *    8  DEL_PREFIX prefix: bytes                   i64 keys deleted
 *
 * timeout_ms: 0 = answer at once (GET: NOT_FOUND, WAIT: TIMEOUT when a
 * key is missing), 0xffffffff = no limit.  Waits are answered by the
 * server when the keys appear or at the deadline, so the client needs no
 * cancel message.  ADD keeps the value as decimal ASCII (absent = 0).
 * CAS: an empty expected value matches an absent key (and an empty one);
 * "present" says whether the key exists after the operation.  WAIT takes
 * at most 65536 keys.  DEL_PREFIX deletes every present key that starts
 * with prefix (live recovery drops the keys of generations nobody reads
 * any more, Note [bounded store] in live_form.c).
 *
 * Status: 0 OK, 1 NOT_FOUND, 2 TIMEOUT, 3 NOT_NUMBER, 4 TOO_LARGE,
 * 5 MALFORMED, 6 NO_MEMORY, 7 UNKNOWN_OP, 8 OVERFLOW, 9 OVER_BUDGET (the
 * server's memory budget: the request's bytes were read and dropped), 10
 * AUTH_FAILED (handshake only; OVER_BUDGET too, answering a proof the
 * budget has no room for: Note [store budget]).  TOO_LARGE and OVER_BUDGET carry a
 * sentence (bytes) naming the limit.  A frame that cannot
 * be parsed (length out of range, fields that do not add up to it) gets
 * MALFORMED (request id 0 if unknown) and the server closes the
 * connection; anything else wrong gets its status and the connection
 * stays.  The server answers each connection's requests in order and
 * reads no further request while one waits; the client sends one request
 * at a time (a mutex serialises threads). */

#ifndef PG_STORE_WIRE_H
#define PG_STORE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "pg_internal.h"

#define ST_VERSION 2
#define ST_MAX_KEY 4096u
#define ST_MAX_VALUE (64u << 20)
#define ST_MAX_WAIT_KEYS 65536u
/* The client's hello: magic, version and Nc; the server's adds auth. */
#define ST_HELLO_BYTES (4 + PG_NONCE_BYTES)
#define ST_AUTH_NONE 0
#define ST_AUTH_TOKEN 1
#define ST_LABEL_CLIENT "pg-store-2 client"
#define ST_LABEL_SERVER "pg-store-2 server"
/* The budgets' defaults (knobs.c, Note [store budget]). */
#define ST_DEFAULT_MAX_BYTES ((size_t)1 << 30)
#define ST_DEFAULT_MAX_CONN ((size_t)256 << 20)
/* The largest request (CAS) and reply (GET / CAS): checked before any
 * buffer is sized for a frame. */
#define ST_MAX_FRAME (2 * (ST_MAX_VALUE + 4) + ST_MAX_KEY + 16)
#define ST_MAX_REPLY (ST_MAX_VALUE + 16)
#define ST_NO_LIMIT 0xffffffffu

enum {
  ST_SET = 1, ST_GET, ST_ADD, ST_CAS, ST_WAIT, ST_DELETE, ST_NUM_KEYS,
  ST_DEL_PREFIX
};
enum {
  ST_OK = 0, ST_NOT_FOUND, ST_TIMEOUT, ST_NOT_NUMBER, ST_TOO_LARGE,
  ST_MALFORMED, ST_NO_MEMORY, ST_UNKNOWN_OP, ST_OVERFLOW, ST_OVER_BUDGET,
  ST_AUTH_FAILED
};

/* The handshake: 'p' 'g' 's' and the version. */
PG__HIDDEN extern const uint8_t stw_hello[4];

/* A byte queue: data lives in p[off, len).  Appends that fail set oom, so
 * a message is built without a check per field. */
struct buf {
  uint8_t *p;
  size_t off, len, cap;
  bool oom;
};

/* A reader over one frame; running past the end sets bad. */
struct rd {
  const uint8_t *p;
  size_t n;
  bool bad;
};

PG__HIDDEN void stw_put_u32(uint8_t *p, uint32_t v);
PG__HIDDEN void stw_put_u64(uint8_t *p, uint64_t v);
PG__HIDDEN uint32_t stw_get_u32(const uint8_t *p);
PG__HIDDEN uint64_t stw_get_u64(const uint8_t *p);
PG__HIDDEN bool stw_buf_reserve(struct buf *b, size_t extra);
PG__HIDDEN void stw_buf_put(struct buf *b, const void *data, size_t n);
PG__HIDDEN void stw_buf_u8(struct buf *b, uint8_t v);
PG__HIDDEN void stw_buf_u32(struct buf *b, uint32_t v);
PG__HIDDEN void stw_buf_u64(struct buf *b, uint64_t v);
PG__HIDDEN void stw_buf_bytes(struct buf *b, const void *data, size_t n);
PG__HIDDEN size_t stw_buf_used(const struct buf *b);
PG__HIDDEN void stw_buf_clear(struct buf *b);
PG__HIDDEN void stw_buf_free(struct buf *b);
PG__HIDDEN const uint8_t *stw_rd_take(struct rd *r, size_t n);
PG__HIDDEN uint8_t stw_rd_u8(struct rd *r);
PG__HIDDEN uint32_t stw_rd_u32(struct rd *r);
PG__HIDDEN uint64_t stw_rd_u64(struct rd *r);
PG__HIDDEN const uint8_t *stw_rd_bytes(struct rd *r, size_t *n);
PG__HIDDEN bool stw_rd_done(const struct rd *r);
PG__HIDDEN bool stw_parse_i64(const uint8_t *p, size_t n, int64_t *out);

#endif
