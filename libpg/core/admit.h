/* admit.h -- which unproven connection a full listener closes to make
 * room for a new one (Note [admission under a flood]).  Used by every
 * libpg listener: the store, the TCP mesh and lazy point-to-point. */
#ifndef PG_ADMIT_H
#define PG_ADMIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "pg_internal.h"

/* What a listener knows of a connection that has not proved itself. */
struct pg__unproven {
  uint64_t src;     /* pg__admit_source of its peer address */
  double since;     /* accepted then */
  double until;     /* closed then, proven or not */
};

/* The source a peer address counts against: its IPv4 address, or its
 * IPv6 /64 (one host can hold a whole /64); v4-mapped IPv6 is IPv4. */
PG__HIDDEN uint64_t pg__admit_source(const struct sockaddr *sa,
                                     socklen_t len);

/* The slot to close of n (n >= 1) full slots, each a struct pg__unproven
 * at byte offset off of an element of stride bytes, at time now: one
 * past its deadline if any (the earliest), else the oldest of the source
 * that holds the most slots. */
PG__HIDDEN int pg__admit_victim(const void *slots, size_t stride,
                                size_t off, int n, double now);

#endif
