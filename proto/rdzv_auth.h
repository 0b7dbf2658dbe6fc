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

#define RDZV_AUTH_MIN_SECRET 16            /* bytes */
#define RDZV_AUTH_MAX_SECRET 1024
/* Before the handshake succeeds a peer may send only handshake frames: at
 * most this many body bytes each (a hello is about 100). */
#define RDZV_AUTH_PREAUTH_MAX_FRAME 256

struct rdzv_auth_secret {
  unsigned char key[RDZV_AUTH_MAX_SECRET];
  size_t len;                       /* 0: no secret configured */
};

enum rdzv_auth_side { RDZV_AUTH_CLIENT, RDZV_AUTH_SERVER };

/* Reads the secret from path: the file's bytes, less one trailing newline
 * ("\n" or "\r\n").  Refuses (with a sentence naming path in err) a file
 * that is not a regular file, is accessible by group or others (as ssh does:
 * "chmod 600"), is owned by another user (root excepted), or holds fewer
 * than RDZV_AUTH_MIN_SECRET or more than RDZV_AUTH_MAX_SECRET bytes. Returns
 * 0 or a negative errno.  Never blocks on what is not a regular file (a
 * FIFO). */
int rdzv_auth_secret_load(const char *path, struct rdzv_auth_secret *out,
                          char *err, size_t errlen);
/* The same, with extra open(2) flags: O_NOFOLLOW refuses a symbolic link
 * ("a symbolic link"), for a file the daemon made itself (its token key
 * file); a secret file may be one (Kubernetes mounts them so). */
int rdzv_auth_secret_load_flags(const char *path, int flags,
                                struct rdzv_auth_secret *out, char *err,
                                size_t errlen);

/* Wipes the key (OPENSSL_cleanse). */
void rdzv_auth_secret_clear(struct rdzv_auth_secret *s);

/* Fills out with RDZV_PROTO_AUTH_BYTES from the CSPRNG; 0 or -EIO. */
int rdzv_auth_nonce(unsigned char out[RDZV_PROTO_AUTH_BYTES]);

/* HMAC-SHA256(key, msg) into out (32 bytes).  0 or -EIO. */
int rdzv_auth_hmac(const void *key, size_t keylen, const void *msg,
                   size_t msglen, unsigned char out[RDZV_PROTO_AUTH_BYTES]);

/* The proof of side: HMAC-SHA256(K, label(side) | nc | ns).  0 or -EIO. */
int rdzv_auth_mac(const struct rdzv_auth_secret *k, enum rdzv_auth_side side,
           const unsigned char nc[RDZV_PROTO_AUTH_BYTES],
           const unsigned char ns[RDZV_PROTO_AUTH_BYTES],
           unsigned char out[RDZV_PROTO_AUTH_BYTES]);

/* True when mac is side's proof for (nc, ns), compared in constant time
 * (CRYPTO_memcmp). */
bool rdzv_auth_verify(const struct rdzv_auth_secret *k,
                      enum rdzv_auth_side side,
                      const unsigned char nc[RDZV_PROTO_AUTH_BYTES],
                      const unsigned char ns[RDZV_PROTO_AUTH_BYTES],
                      const unsigned char mac[RDZV_PROTO_AUTH_BYTES]);

/* ---- the server's side, one per connection ---- */

enum rdzv_auth_server_state {
  RDZV_AUTH_S_HELLO = 0, /* a fresh connection */
  RDZV_AUTH_S_PROOF,     /* challenge sent, waiting for auth */
  RDZV_AUTH_S_DONE,      /* authenticated (or no secret and no hello) */
};

struct rdzv_auth_server {
  enum rdzv_auth_server_state state;
  /* Set by the caller while it feeds frames it had read with the hello:
   * an auth among those was sent before the challenge could be seen, so
   * it cannot hold the proof, and is refused as such (not as a wrong
   * secret). */
  bool read_with_hello;
  unsigned char nc[RDZV_PROTO_AUTH_BYTES], ns[RDZV_PROTO_AUTH_BYTES];
};

enum rdzv_auth_verdict {
  RDZV_AUTH_PASS,   /* not a handshake message: hand it on */
  RDZV_AUTH_REPLY,  /* send *reply, read on */
  RDZV_AUTH_REFUSE, /* send *reply (an error auth), log why, close */
};

/* Feeds one decoded message m from the peer; k NULL or empty: this server
 * has no secret.  With a secret nothing passes before the handshake has
 * succeeded; without one a hello is refused (the peer expects a secret).
 * why gets a line for the log on RDZV_AUTH_REFUSE. */
enum rdzv_auth_verdict rdzv_auth_server_step(struct rdzv_auth_server *st,
                                             const struct rdzv_auth_secret *k,
                                             const struct rdzv_proto_msg *m,
                                             struct rdzv_proto_msg *reply,
                                             char *why, size_t whylen);

/* True while a frame of body length n must be refused before it is read:
 * the server has a secret and the handshake is not done. */
bool rdzv_auth_server_frame_too_big(const struct rdzv_auth_server *st,
                             const struct rdzv_auth_secret *k, size_t n);

/* ---- the client's side ---- */

enum rdzv_auth_client_state {
  RDZV_AUTH_C_CHALLENGE = 0, /* hello sent, waiting for the challenge */
  RDZV_AUTH_C_OK,            /* auth sent, waiting for auth_ok */
  RDZV_AUTH_C_DONE,
};

struct rdzv_auth_client {
  enum rdzv_auth_client_state state;
  unsigned char nc[RDZV_PROTO_AUTH_BYTES], ns[RDZV_PROTO_AUTH_BYTES];
};

/* Starts a handshake: fills *hello.  0 or -EIO. */
int rdzv_auth_client_hello(struct rdzv_auth_client *st,
                           struct rdzv_proto_msg *hello);

/* Feeds the server's answer m.  Returns 1 with *reply to send (the auth),
 * 0 once authenticated (nothing to send), or -EACCES with the reason in
 * err (the server refused us, or failed to prove it knows the secret). */
int rdzv_auth_client_step(struct rdzv_auth_client *st,
                          const struct rdzv_auth_secret *k,
                          const struct rdzv_proto_msg *m,
                          struct rdzv_proto_msg *reply, char *err,
                          size_t errlen);

/* The one-line refusal every client prints (and tests look for). */
#define RDZV_AUTH_REFUSED "rendezvous refused: authentication failed"

/* Blocking handshake on a connected socket fd (for the status query and
 * the benchmark clients): 0, or -EACCES / -EIO / -ETIMEDOUT with a
 * sentence in err.  timeout_ms bounds each wait for the server. */
int rdzv_auth_handshake_fd(int fd, const struct rdzv_auth_secret *k,
                           int timeout_ms, char *err, size_t errlen);

#endif
