/* admit.c -- a full listener's choice of the connection to close
 * (admit.h).
 *
 * Note [admission under a flood]: a stranger with TCP reach can open
 * connections faster than a listener can prove them.  A listener keeps a
 * fixed table of connections that have not proved themselves yet, each
 * with a short deadline; when the table is full and another connection
 * waits, it closes one of the table, never the new one unread (which
 * would lose every legitimate peer behind a flood) and never one picked
 * blindly (the old PEND_MAX rule closed slot 0, which after a swap with
 * the last was the connection accepted a moment before).  It closes:
 *   1. one past its deadline, else
 *   2. the oldest connection of the source (peer address) that holds the
 *      most slots.
 * Only a connection that has sent nothing is a candidate: one whose hello
 * was read and answered is a peer computing its proof, and the store and
 * the mesh never close it for a newcomer (before, the store did, and a
 * flood on the live store reset legitimate handshakes that the client
 * then had to make again).
 * So a flood from one address displaces only itself, and a legitimate
 * peer from another address keeps its slot for its whole deadline; a
 * flood from the legitimate peer's own address (a stranger on the same
 * host) still leaves each connection the time the flood takes to fill
 * the table, and a peer whose connection was closed before its hello was
 * answered connects again within its operation's deadline (the senders
 * of cpu/hier_p2p.c and the mesh connectors of cpu/tcp_setup.c do).  A
 * listener accepts at most half its table per pass, so that every new
 * connection is read at least once before it can be displaced. */
#include <netinet/in.h>
#include <string.h>

#include "admit.h"

uint64_t pg__admit_source(const struct sockaddr *sa, socklen_t len)
{
  const uint8_t *b;
  size_t n, i;
  uint64_t h = 1469598103934665603ull;

  if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
    b = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
    n = 4;
  } else if (sa->sa_family == AF_INET6 &&
             len >= sizeof(struct sockaddr_in6)) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

    b = a->s6_addr;
    n = 8;
    if (IN6_IS_ADDR_V4MAPPED(a)) {
      b += 12;
      n = 4;
    }
  } else {
    return 0;       /* AF_UNIX and the like: one source */
  }
  for (i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static const struct pg__unproven *at(const void *slots, size_t stride,
                                     size_t off, int i)
{
  return (const struct pg__unproven *)((const char *)slots +
                                       (size_t)i * stride + off);
}

/* Open addressing over BUCKETS: with more slots than that, sources
 * share counts by hash, which only makes the choice coarser. */
#define BUCKETS 1024

int pg__admit_victim(const void *slots, size_t stride, size_t off, int n,
                     double now)
{
  uint64_t key[BUCKETS];
  int count[BUCKETS], oldest[BUCKETS];
  int i, best = -1;
  size_t b;

  for (i = 0; i < n; i++) {
    const struct pg__unproven *u = at(slots, stride, off, i);

    if (u->until <= now &&
        (best < 0 || u->until < at(slots, stride, off, best)->until))
      best = i;
  }
  if (best >= 0)
    return best;
  memset(count, 0, sizeof count);
  for (i = 0; i < n; i++) {
    const struct pg__unproven *u = at(slots, stride, off, i);
    int probes = 0;

    b = (size_t)(u->src % BUCKETS);
    while (count[b] && key[b] != u->src && ++probes < BUCKETS)
      b = (b + 1) % BUCKETS;
    if (!count[b]) {
      key[b] = u->src;
      oldest[b] = i;
    } else if (u->since < at(slots, stride, off, oldest[b])->since) {
      oldest[b] = i;
    }
    count[b]++;
  }
  for (b = 0; b < BUCKETS; b++) {
    if (!count[b])
      continue;
    if (best < 0 || count[b] > count[best] ||
        (count[b] == count[best] &&
         at(slots, stride, off, oldest[b])->since <
         at(slots, stride, off, oldest[best])->since))
      best = (int)b;
  }
  return oldest[best];
}
