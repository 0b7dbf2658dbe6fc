/* hier_p2p.h -- point-to-point between ranks of a hierarchical comm that
 * live on different hosts, over connections made on first use. */
#ifndef PG_HIER_P2P_H
#define PG_HIER_P2P_H

#include <stddef.h>

#include "pg_internal.h"

struct hier_p2p;

/* Listens and publishes this rank's endpoint under s->ns "p2p/ep/<me>";
 * not collective (nothing waits for the others).  Positions below are
 * positions in s->ranks. */
int pg__hier_p2p_create(const struct pg__setup *s, struct hier_p2p **out);
int pg__hier_p2p_send(struct hier_p2p *p, const void *buf, size_t bytes,
                      int peer, int tag, double deadline);
int pg__hier_p2p_recv(struct hier_p2p *p, void *buf, size_t bytes,
                      int peer, int tag, double deadline);
void pg__hier_p2p_destroy(struct hier_p2p *p);

#endif
