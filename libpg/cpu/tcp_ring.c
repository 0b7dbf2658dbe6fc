/* tcp_ring.c -- the TCP communicator's bandwidth algorithms: the segmented
 * ring (all-reduce, all-gather, reduce-scatter) and the pipelined chains
 * (broadcast, reduce). */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp_internal.h"

/* ---- rings ---------------------------------------------------------------
 * Step t sends chunk (me - t + shift) to the right and receives chunk
 * (me - t - 1 + shift) from the left: the one it sends at step t + 1.
 * Each step is cut into nseg segments, and segment k of step t goes out
 * as soon as segment k of step t - 1 has arrived (and been reduced), so
 * both directions of every link stay busy and reduction overlaps the
 * transfers.
 *
 *   all_reduce:     steps 0..n-2 reduce into dst, n-1..2n-3 copy; the owner
 *                   of a chunk computes its final value once (and divides
 *                   for AVG) and everyone else copies it: bitwise equal.
 *   all_gather:     steps 0..n-2 copy; own block placed first.
 *   reduce_scatter: shift -1, steps 0..n-2 reduce; partial blocks in two
 *                   buffers alternating by step, the last step into recv. */

static void ring_unit(const struct ring *r, size_t j, bool rx, int *t,
                      int *chunk, size_t *off, size_t *len)
{
  size_t k = j % r->nseg;

  *t = (int)(j / r->nseg);
  *chunk = wrap(r->me - *t + r->shift - (rx ? 1 : 0), r->n);
  seg_of(r->count, r->n, r->nseg, *chunk, k, off, len);
}

static bool ring_tx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                         size_t *len)
{
  struct ring *r = ctx;
  size_t off, n;
  int t, chunk;

  (void)s;
  ring_unit(r, j, false, &t, &chunk, &off, &n);
  if (t > 0 && r->rx_done + r->nseg <= j)
    return false;
  *len = n * r->es;
  if (r->kind == RING_RS) {
    size_t rel = off - (size_t)chunk * (r->count / (size_t)r->n);

    *ptr = t == 0 ? (char *)r->src + off * r->es
                  : r->part[(t - 1) & 1] + rel * r->es;
  } else if (r->kind == RING_AR && t == 0) {
    *ptr = (char *)r->src + off * r->es;
  } else {
    *ptr = r->dst + off * r->es;
  }
  return true;
}

static void ring_tx_done(void *ctx, struct stream *s, size_t j)
{
  struct ring *r = ctx;

  (void)s;
  (void)j;
  r->tx_done++;
}

static bool ring_rx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                         size_t *len)
{
  struct ring *r = ctx;
  size_t off, n;
  int t, chunk;

  (void)s;
  ring_unit(r, j, true, &t, &chunk, &off, &n);
  /* RS: step t overwrites what step t - 1 sent from the same buffer. */
  if (r->kind == RING_RS && t >= 2 && r->tx_done + r->nseg <= j)
    return false;
  *len = n * r->es;
  *ptr = t < r->rsteps ? r->tmp : r->dst + off * r->es;
  return true;
}

static void ring_rx_done(void *ctx, struct stream *s, size_t j)
{
  struct ring *r = ctx;
  size_t off, n;
  int t, chunk;
  char *d;

  (void)s;
  ring_unit(r, j, true, &t, &chunk, &off, &n);
  if (t < r->rsteps) {
    if (r->kind == RING_RS) {
      size_t rel = off - (size_t)chunk * (r->count / (size_t)r->n);

      d = t == r->rsteps - 1 ? r->dst + rel * r->es
                             : r->part[t & 1] + rel * r->es;
      pg__reduce3(r->t, r->op, d, r->src + off * r->es, r->tmp, n);
    } else {
      d = r->dst + off * r->es;
      if (r->src == r->dst)
        pg__reduce(r->t, r->op, d, r->tmp, n);
      else
        pg__reduce3(r->t, r->op, d, r->src + off * r->es, r->tmp, n);
    }
    if (t == r->rsteps - 1 && r->op == PG_AVG)
      pg__avg_finish(r->t, d, n, r->n);
  }
  r->rx_done++;
}

int tcp_ring_run(struct tcp_comm *c, struct ring *r, int steps,
                 uint16_t code, double deadline)
{
  int left = wrap(c->me - 1, c->n), right = wrap(c->me + 1, c->n);
  size_t txb = 0, rxb = 0, maxseg;
  struct frame th, rh;
  int t;

  r->n = c->n;
  r->me = c->me;
  r->es = pg_dtype_size(r->t);
  r->nseg = nseg_for(r->count / (size_t)r->n * r->es);
  maxseg = chunk_len(r->count, r->n, 0) / r->nseg + 1;
  r->tmp = tcp_scratch(c, maxseg * r->es);
  if (!r->tmp)
    return pg__fail(-ENOMEM, "%s: out of memory", c->opname);
  for (t = 0; t < steps; t++) {
    txb += chunk_len(r->count, r->n, wrap(r->me - t + r->shift, r->n));
    rxb += chunk_len(r->count, r->n, wrap(r->me - t + r->shift - 1, r->n));
  }
  th = coll_frame(c, code, 0, txb * r->es);
  rh = coll_frame(c, code, 0, rxb * r->es);
  tcp_stream_units(c, &c->ss[0], right, true, &th, (size_t)steps * r->nseg,
                   ring_tx_unit, ring_tx_done, r);
  tcp_stream_units(c, &c->ss[1], left, false, &rh, (size_t)steps * r->nseg,
                   ring_rx_unit, ring_rx_done, r);
  return tcp_run(c, c->ss, 2, deadline);
}

/* ---- chains: pipelined broadcast and reduce ------------------------------
 * Broadcast: root -> root+1 -> ... -> root-1; a rank forwards segment k
 * once it has it.  Reduce: root-1 -> root-2 -> ... -> root; each rank
 * combines segment k with its own and passes it on, from a small ring of
 * slots.  Each link carries the message once, whatever n. */

static void chain_seg(const struct chain *ch, size_t j, size_t *off,
                      size_t *len)
{
  seg_of(ch->count, 1, ch->nseg, 0, j, off, len);
}

bool tcp_bc_tx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                    size_t *len)
{
  struct chain *ch = ctx;
  size_t off, n;

  (void)s;
  if (ch->vr > 0 && ch->rx_done <= j)
    return false;
  chain_seg(ch, j, &off, &n);
  *ptr = ch->dst + off * ch->es;
  *len = n * ch->es;
  return true;
}

bool tcp_bc_rx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                    size_t *len)
{
  struct chain *ch = ctx;
  size_t off, n;

  (void)s;
  chain_seg(ch, j, &off, &n);
  *ptr = ch->dst + off * ch->es;
  *len = n * ch->es;
  return true;
}

void tcp_chain_rx_done(void *ctx, struct stream *s, size_t j)
{
  struct chain *ch = ctx;

  (void)s;
  (void)j;
  ch->rx_done++;
}

void tcp_chain_tx_done(void *ctx, struct stream *s, size_t j)
{
  struct chain *ch = ctx;

  (void)s;
  (void)j;
  ch->tx_done++;
}

bool tcp_rd_tx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                    size_t *len)
{
  struct chain *ch = ctx;
  size_t off, n;

  (void)s;
  chain_seg(ch, j, &off, &n);
  *len = n * ch->es;
  if (ch->vr == ch->n - 1) {          /* the far end sends its own data */
    *ptr = (char *)ch->src + off * ch->es;
    return true;
  }
  if (ch->rx_done <= j)
    return false;
  *ptr = ch->slots + (j % CHAIN_SLOTS) * ch->slot_bytes;
  return true;
}

bool tcp_rd_rx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                    size_t *len)
{
  struct chain *ch = ctx;
  size_t off, n;

  (void)s;
  if (ch->vr > 0 && ch->tx_done + CHAIN_SLOTS <= j)
    return false;       /* slot j still holds unit j - CHAIN_SLOTS */
  chain_seg(ch, j, &off, &n);
  *len = n * ch->es;
  *ptr = ch->slots + (ch->vr > 0 ? j % CHAIN_SLOTS : 0) * ch->slot_bytes;
  return true;
}

void tcp_rd_rx_done(void *ctx, struct stream *s, size_t j)
{
  struct chain *ch = ctx;
  size_t off, n;
  char *d;

  (void)s;
  chain_seg(ch, j, &off, &n);
  if (ch->vr > 0) {
    pg__reduce(ch->t, ch->op, ch->slots + (j % CHAIN_SLOTS) * ch->slot_bytes,
               ch->src + off * ch->es, n);
  } else {
    d = ch->dst + off * ch->es;
    if (ch->src == ch->dst)
      pg__reduce(ch->t, ch->op, d, ch->slots, n);
    else
      pg__reduce3(ch->t, ch->op, d, ch->src + off * ch->es, ch->slots, n);
    if (ch->op == PG_AVG)
      pg__avg_finish(ch->t, d, n, ch->n);
  }
  ch->rx_done++;
}

