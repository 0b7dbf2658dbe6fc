/* tcp_setup.h -- tcp_setup.c's pieces that other TCP users share (the
 * hierarchical communicator's connections made on first use): endpoints,
 * connects, and the hello each connection starts with. */
#ifndef PG_TCP_SETUP_H
#define PG_TCP_SETUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "tcp_internal.h"

/* FNV-1a of a store namespace: the hello's proof of the comm. */
uint64_t tcp_fnv1a(const char *s);
/* A non-blocking socket listening on every address (or an error, with
 * pg__fail's sentence); ep gets "host port" for the others, the host being
 * the address that routes to master_addr (NULL: the hostname's), *bufsz
 * the socket buffer size to ask for (0: autotuning). */
int tcp_listen_ep(const char *master_addr, char *ep, size_t eplen,
                  int *bufsz);
/* "host port" -> a connected non-blocking socket, retrying refusals until
 * the deadline; or a negative errno (no sentence). */
int tcp_connect_ep(const char *ep, int bufsz, double deadline);
/* All of buf written or read on a non-blocking socket by the deadline. */
int tcp_io_full(int fd, void *buf, size_t len, bool wr, double deadline);
/* A hello from `from` to `to` with a fresh nonce and no proof. */
void tcp_hello_init(struct hello *h, uint64_t hash, int from, int to,
                    int n);
bool tcp_hello_ok(const struct hello *h, uint64_t hash, int to, int n);
/* Note [mesh hello].  The acceptor's answer to asked (its nonce and its
 * proof); the connector's check of it; the connector's proof for the
 * exchange and the acceptor's check of that.  t may be empty (no token:
 * the proofs then only show the peer speaks the protocol). */
void tcp_hello_answer(const struct pg__token *t, const struct hello *asked,
                      struct hello *answer);
bool tcp_answer_ok(const struct pg__token *t, const struct hello *sent,
                   const struct hello *answer);
void tcp_proof(const struct pg__token *t, const struct hello *sent,
               const struct hello *answer, uint8_t out[32]);
bool tcp_proof_ok(const struct pg__token *t, const struct hello *asked,
                  const struct hello *answer, const uint8_t proof[32]);
/* Lazy p2p's hello: h's mac set over the receiver's challenge (a nonce
 * it sent on this connection), and checked. */
void tcp_hello_sign(const struct pg__token *t, struct hello *h,
                    const uint8_t challenge[32]);
bool tcp_hello_signed(const struct pg__token *t, const struct hello *h,
                      const uint8_t challenge[32]);

#endif
