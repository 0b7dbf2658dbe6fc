/* shm_ring.c -- the shared-memory communicator's point to point: send
 * and recv through a byte ring per ordered pair of ranks in the segment
 * (shm.c).
 *
 * Each message has a header (tag and length); a message that does not
 * match the tag asked for is moved into a private queue; a message larger
 * than the ring streams through it.  A send waiting for room drains every
 * incoming ring into that queue meanwhile (as the TCP backend does), so
 * ranks that send each other large messages before receiving, in a pair
 * or a cycle, do not wait on each other. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"
#include "shm_internal.h"

#define MSG_MAGIC 0x6d736731u

struct msg_hdr {
  uint64_t len;
  int32_t tag;
  uint32_t magic;
};

static inline struct shm_ring *ring_ctl(struct shm_comm *c, int s, int d)
{
  return &c->rc[(size_t)s * (size_t)c->n + (size_t)d];
}

static inline char *ring_data(struct shm_comm *c, int s, int d)
{
  return c->rings + ((size_t)s * (size_t)c->n + (size_t)d) * c->ring;
}

/* ---- send / recv ------------------------------------------------------------------ */

/* Copies len bytes into ring s->d at position pos (wrapping). */
static void ring_put(struct shm_comm *c, char *ring, uint32_t pos,
                     const char *src, size_t len)
{
  size_t at = pos & (c->ring - 1), first = c->ring - at;

  if (first > len)
    first = len;
  memcpy(ring + at, src, first);
  if (len > first)
    memcpy(ring, src + first, len - first);
}

static void ring_get(struct shm_comm *c, const char *ring, uint32_t pos,
                     char *dst, size_t len)
{
  size_t at = pos & (c->ring - 1), first = c->ring - at;

  if (!dst)
    return;
  if (first > len)
    first = len;
  memcpy(dst, ring + at, first);
  if (len > first)
    memcpy(dst + first, ring, len - first);
}

static void queue_unexpected(struct shm_comm *c, int peer,
                             struct unexpected *u)
{
  struct unexpected **pu;

  for (pu = &c->uq[peer]; *pu; pu = &(*pu)->next)
    ;
  *pu = u;
}

/* Moves what peer has written to this rank so far into the unexpected
 * queue, without waiting (a message may be moved in several calls).
 * Returns 1 if it moved anything, 0 if not, or an error. */
static int drain_peer(struct shm_comm *c, int peer)
{
  struct shm_ring *rc = ring_ctl(c, peer, c->me);
  const char *ring = ring_data(c, peer, c->me);
  uint32_t head = c->rx_head[peer], avail;
  struct unexpected *u;
  struct msg_hdr h;
  size_t m;

  for (;;) {
    avail = load_acq(&rc->tail) - head;
    u = c->part[peer];
    if (!u) {
      if (avail < sizeof h)
        break;
      ring_get(c, ring, head, (char *)&h, sizeof h);
      if (h.magic != MSG_MAGIC) {
        pg__fail(-EPROTO, "shm: garbage in the ring from rank %d", peer);
        return shm_poison(c, -EPROTO);
      }
      u = malloc(sizeof *u + h.len);
      if (!u) {
        pg__fail(-ENOMEM, "shm: no memory to queue a %" PRIu64 "-byte "
                 "message from rank %d", h.len, peer);
        return shm_poison(c, -ENOMEM);
      }
      u->next = NULL;
      u->tag = h.tag;
      u->len = h.len;
      c->part[peer] = u;
      c->part_got[peer] = 0;
      head += (uint32_t)sizeof h;
      avail -= (uint32_t)sizeof h;
    }
    m = u->len - c->part_got[peer];
    if (m > avail)
      m = avail;
    ring_get(c, ring, head, u->data + c->part_got[peer], m);
    head += (uint32_t)m;
    c->part_got[peer] += m;
    if (c->part_got[peer] < u->len)
      break;
    c->part[peer] = NULL;
    queue_unexpected(c, peer, u);
  }
  if (head == c->rx_head[peer])
    return 0;
  c->rx_head[peer] = head;
  publish(&rc->head, &rc->head_waiters, head);
  return 1;
}

int shm_drain_all(struct shm_comm *c)
{
  int r, moved = 0, err;

  for (r = 0; r < c->n; r++) {
    if (r == c->me)
      continue;
    if ((err = drain_peer(c, r)) < 0)
      return err;
    moved |= err;
  }
  return moved;
}

int shm_send(struct pg__comm *pc, const void *buf, size_t bytes,
             int peer, int tag, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  struct shm_ring *rc;
  struct msg_hdr h = { bytes, tag, MSG_MAGIC };
  const char *parts[2] = { (const char *)&h, buf };
  size_t left[2] = { sizeof h, bytes };
  char *ring;
  uint32_t tail;
  int part = 0, err;

  if (peer < 0 || peer >= c->n || peer == c->me)
    return pg__fail(-EINVAL, "shm: send: bad peer %d", peer);
  if ((err = shm_ok_before(c)) != 0)
    return err;
  c->what = "send";
  rc = ring_ctl(c, c->me, peer);
  ring = ring_data(c, c->me, peer);
  tail = c->tx_tail[peer];
  while (part < 2) {
    size_t want = left[0] + left[1], space, m;

    if (want > c->ring / 2)
      want = c->ring / 2;
    /* Room for want bytes: head >= tail + want - ring. */
    c->draining = true;
    err = shm_wait_ge(c, &rc->head, &rc->head_waiters,
                  tail + (uint32_t)want - (uint32_t)c->ring, peer, deadline);
    c->draining = false;
    if (err)
      return err;
    space = c->ring - (uint32_t)(tail - load_acq(&rc->head));
    while (part < 2 && space > 0) {
      m = left[part] < space ? left[part] : space;
      ring_put(c, ring, tail, parts[part], m);
      tail += (uint32_t)m;
      parts[part] += m;
      left[part] -= m;
      space -= m;
      if (left[part] == 0)
        part++;
    }
    c->tx_tail[peer] = tail;
    publish(&rc->tail, &rc->tail_waiters, tail);
  }
  return 0;
}

/* Reads len bytes from peer's ring into dst (NULL: discard). */
static int ring_read(struct shm_comm *c, int peer, char *dst, size_t len,
                     double deadline)
{
  struct shm_ring *rc = ring_ctl(c, peer, c->me);
  const char *ring = ring_data(c, peer, c->me);
  uint32_t head = c->rx_head[peer];
  int err;

  while (len > 0) {
    size_t avail, m;

    err = shm_wait_ge(c, &rc->tail, &rc->tail_waiters, head + 1, peer, deadline);
    if (err)
      return err;
    avail = (uint32_t)(load_acq(&rc->tail) - head);
    m = avail < len ? avail : len;
    ring_get(c, ring, head, dst, m);
    if (dst)
      dst += m;
    len -= m;
    head += (uint32_t)m;
    c->rx_head[peer] = head;
    publish(&rc->head, &rc->head_waiters, head);
  }
  return 0;
}

int shm_recv(struct pg__comm *pc, void *buf, size_t bytes, int peer,
             int tag, double deadline)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  struct unexpected **pu, *u;
  struct msg_hdr h;
  int err;

  if (peer < 0 || peer >= c->n || peer == c->me)
    return pg__fail(-EINVAL, "shm: recv: bad peer %d", peer);
  if ((err = shm_ok_before(c)) != 0)
    return err;
  c->what = "recv";
  if ((u = c->part[peer]) != NULL) {
    /* A send drained part of this message: read the rest first. */
    err = ring_read(c, peer, u->data + c->part_got[peer],
                    u->len - c->part_got[peer], deadline);
    if (err)
      return err;
    c->part[peer] = NULL;
    queue_unexpected(c, peer, u);
  }
  for (pu = &c->uq[peer]; (u = *pu) != NULL; pu = &u->next)
    if (u->tag == tag) {
      *pu = u->next;
      if (u->len != bytes) {
        err = pg__fail(-EMSGSIZE, "shm: recv from rank %d, tag %d: %zu bytes "
                       "sent, %zu expected", peer, tag, u->len, bytes);
        free(u);
        return err;
      }
      memcpy(buf, u->data, bytes);
      free(u);
      return 0;
    }
  for (;;) {
    if ((err = ring_read(c, peer, (char *)&h, sizeof h, deadline)) != 0)
      return err;
    if (h.magic != MSG_MAGIC) {
      pg__fail(-EPROTO, "shm: garbage in the ring from rank %d", peer);
      return shm_poison(c, -EPROTO);
    }
    if (h.tag == tag) {
      if (h.len != bytes) {
        err = ring_read(c, peer, NULL, h.len, deadline);
        if (err)
          return err;
        return pg__fail(-EMSGSIZE, "shm: recv from rank %d, tag %d: %" PRIu64
                        " bytes sent, %zu expected", peer, tag, h.len, bytes);
      }
      return ring_read(c, peer, buf, bytes, deadline);
    }
    u = malloc(sizeof *u + h.len);
    if (!u) {
      pg__fail(-ENOMEM, "shm: no memory to queue a %" PRIu64 "-byte message "
               "from rank %d", h.len, peer);
      return shm_poison(c, -ENOMEM);
    }
    u->next = NULL;
    u->tag = h.tag;
    u->len = h.len;
    if ((err = ring_read(c, peer, u->data, h.len, deadline)) != 0) {
      free(u);
      return err;
    }
    queue_unexpected(c, peer, u);
  }
}
