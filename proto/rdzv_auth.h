/* rdzv_auth.h -- the shared-secret handshake of the rendezvous protocol
 * (proto/PROTOCOL.md §4.3): loading the secret file, HMAC-SHA256 proofs
 * from OpenSSL's libcrypto, and the two sides' steps as pure functions
 * over decoded messages (no I/O), so the daemon, the agent, the status
 * query and the load client run the same code.
 *
 * Client C and server S share a secret K; each picks a fresh random
 * nonce (Nc, Ns).  C -> S hello{Nc}; S -> C challenge{Ns};
 * C -> S auth{HMAC(K, "cdrun-rdzv-2 client" | Nc | Ns)};
 * S -> C auth_ok{HMAC(K, "cdrun-rdzv-2 server" | Nc | Ns)}.  The labels
 * bind the direction (no reflection), both nonces bind the session (no
 * replay); K never travels; tags are compared in constant time. */
#ifndef RDZV_AUTH_H
#define RDZV_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "rdzv_proto.h"

#define RA_MIN_SECRET 16            /* bytes */
#define RA_MAX_SECRET 1024
/* Before the handshake succeeds a peer may send only handshake frames: at
 * most this many body bytes each (a hello is about 100). */
#define RA_PREAUTH_MAX_FRAME 256

struct ra_secret {
  unsigned char key[RA_MAX_SECRET];
  size_t len;                       /* 0: no secret configured */
};

enum ra_side { RA_CLIENT, RA_SERVER };

/* Reads the secret from path: the file's bytes, less one trailing newline
 * ("\n" or "\r\n").  Refuses (with a sentence naming path in err) a file
 * that is not a regular file, is accessible by group or others (as ssh
 * does: "chmod 600"), is owned by another user (root excepted), or holds
 * fewer than RA_MIN_SECRET or more than RA_MAX_SECRET bytes.  Returns 0 or
 * a negative errno. */
int ra_secret_load(const char *path, struct ra_secret *out, char *err,
                   size_t errlen);

/* Wipes the key (OPENSSL_cleanse). */
void ra_secret_clear(struct ra_secret *s);

/* Fills out with RP_AUTH_BYTES from the CSPRNG; 0 or -EIO. */
int ra_nonce(unsigned char out[RP_AUTH_BYTES]);

/* HMAC-SHA256(key, msg) into out (32 bytes).  0 or -EIO. */
int ra_hmac(const void *key, size_t keylen, const void *msg, size_t msglen,
            unsigned char out[RP_AUTH_BYTES]);

/* The proof of side: HMAC-SHA256(K, label(side) | nc | ns).  0 or -EIO. */
int ra_mac(const struct ra_secret *k, enum ra_side side,
           const unsigned char nc[RP_AUTH_BYTES],
           const unsigned char ns[RP_AUTH_BYTES],
           unsigned char out[RP_AUTH_BYTES]);

/* True when mac is side's proof for (nc, ns), compared in constant time
 * (CRYPTO_memcmp). */
bool ra_verify(const struct ra_secret *k, enum ra_side side,
               const unsigned char nc[RP_AUTH_BYTES],
               const unsigned char ns[RP_AUTH_BYTES],
               const unsigned char mac[RP_AUTH_BYTES]);

/* ---- the server's side, one per connection ---- */

enum ra_server_state {
  RA_S_HELLO = 0,     /* a fresh connection */
  RA_S_PROOF,         /* challenge sent, waiting for auth */
  RA_S_DONE,          /* authenticated (or no secret and no hello) */
};

struct ra_server {
  enum ra_server_state state;
  /* Set by the caller while it feeds frames it had read with the hello:
   * an auth among those was sent before the challenge could be seen, so
   * it cannot hold the proof, and is refused as such (not as a wrong
   * secret). */
  bool read_with_hello;
  unsigned char nc[RP_AUTH_BYTES], ns[RP_AUTH_BYTES];
};

enum ra_verdict {
  RA_PASS,            /* not a handshake message: hand it on */
  RA_REPLY,           /* send *reply, read on */
  RA_REFUSE,          /* send *reply (an error auth), log why, close */
};

/* Feeds one decoded message m from the peer; k NULL or empty: this server
 * has no secret.  With a secret nothing passes before the handshake has
 * succeeded; without one a hello is refused (the peer expects a secret).
 * why gets a line for the log on RA_REFUSE. */
enum ra_verdict ra_server_step(struct ra_server *st,
                               const struct ra_secret *k,
                               const struct rp_msg *m, struct rp_msg *reply,
                               char *why, size_t whylen);

/* True while a frame of body length n must be refused before it is read:
 * the server has a secret and the handshake is not done. */
bool ra_server_frame_too_big(const struct ra_server *st,
                             const struct ra_secret *k, size_t n);

/* ---- the client's side ---- */

enum ra_client_state {
  RA_C_CHALLENGE = 0, /* hello sent, waiting for the challenge */
  RA_C_OK,            /* auth sent, waiting for auth_ok */
  RA_C_DONE,
};

struct ra_client {
  enum ra_client_state state;
  unsigned char nc[RP_AUTH_BYTES], ns[RP_AUTH_BYTES];
};

/* Starts a handshake: fills *hello.  0 or -EIO. */
int ra_client_hello(struct ra_client *st, struct rp_msg *hello);

/* Feeds the server's answer m.  Returns 1 with *reply to send (the auth),
 * 0 once authenticated (nothing to send), or -EACCES with the reason in
 * err (the server refused us, or failed to prove it knows the secret). */
int ra_client_step(struct ra_client *st, const struct ra_secret *k,
                   const struct rp_msg *m, struct rp_msg *reply, char *err,
                   size_t errlen);

/* The one-line refusal every client prints (and tests look for). */
#define RA_REFUSED "rendezvous refused: authentication failed"

/* Blocking handshake on a connected socket fd (for the status query and
 * the benchmark clients): 0, or -EACCES / -EIO / -ETIMEDOUT with a
 * sentence in err.  timeout_ms bounds each wait for the server. */
int ra_handshake_fd(int fd, const struct ra_secret *k, int timeout_ms,
                    char *err, size_t errlen);

#endif
