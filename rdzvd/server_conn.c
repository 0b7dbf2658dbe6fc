/* server_conn.c -- a connection's bytes: reading within the input
 * budget (Note [budgets], Note [read buffers]), writing within the
 * output limits (Note [replies written at once]), closing, never inside
 * the state machine (Note [deferred close]).  Part of rdzvd's server
 * (server.c); its types are in server_int.h. */
#include "server_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "list.h"
#include "metrics.h"
#include "monotime.h"
#include "rdzv_auth.h"
#include "rdzv_proto.h"
#include "hashtab.h"

/* A connection with more unwritten replies than this is not read from
 * until they drain: it stops making work before it is dropped. */
#define OUTPUT_PAUSE ((size_t)256 << 10)
/* Frames up to this size have a share of the input budget of their own
 * (budget_left). */
#define SMALL_FRAME ((size_t)4 << 10)

static void resume_input(struct rdzvd_server *s);
static void conn_close_now(struct conn *c);

void server_conn_freed(uv_handle_t *h)
{
  struct conn *c = (struct conn *)h;
  struct rdzvd_server *s = c->s;

  s->in_bytes -= c->cap;
  if (c->buf)
    s->n_partial--;
  free(c->buf);
  free(c);
  if (!s->stopping)
    resume_input(s);
  rdzvd_server__handle_released(s);
}
/* Note [budgets]
 *
 * Whatever a client can make the daemon hold is bounded, and a client
 * that exceeds a bound is slowed down or dropped, never the daemon:
 * - connections: at most max_conns; more are accepted and closed at once;
 * - a new connection has hello_timeout to join (a status query is one
 *   round trip); until it joins, a frame's body is limited to
 *   prejoin_frame (a JOIN is tiny), checked on its header;
 * - input: most reads hold whole frames and use the shared read buffer;
 *   the partial frames kept per connection count against input_budget
 *   (Note [read buffers]).  A connection whose frame finds too little
 *   left stops being read (paused, in order) until other partial frames
 *   complete or go; one that holds budget and never completes its frame
 *   dies at its deadline (not joined: hello_timeout; joined: the job's
 *   keepalive window);
 * - output: a connection with more than OUTPUT_PAUSE unwritten replies is
 *   not read from (it makes no new work) until they drain; one over
 *   conn_output, or one with unwritten replies when every connection's
 *   together exceed output_budget, is dropped (a reply the socket took at
 *   once counts until the loop turns: Note [replies written at once]);
 * - jobs, keys, values and durations: the state machine's
 *   rdzv_state_limits. */

void server_conn_hello_remove(struct conn *c)
{
  if (!c->in_hello)
    return;
  c->in_hello = false;
  list_remove(&c->hello);
}
static void paused_remove(struct conn *c)
{
  struct rdzvd_server *s = c->s;

  if (!c->in_paused)
    return;
  c->in_paused = false;
  s->n_paused--;
  list_remove(&c->paused);
}
static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf);
static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
/* Reads from c exactly when nothing holds it back. */
void server_conn_read_update(struct conn *c)
{
  bool want = !c->closing && !c->close_pending && !c->in_paused &&
              !c->out_paused;

  if (want == c->reading)
    return;
  c->reading = want;
  if (want)
    uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
  else
    uv_read_stop((uv_stream_t *)&c->tcp);
}
/* c wants input budget that is not there: it waits its turn. */
static void pause_input(struct conn *c)
{
  struct rdzvd_server *s = c->s;

  if (c->in_paused)
    return;
  c->in_paused = true;
  s->n_paused++;
  list_insert_tail(&s->paused, &c->paused);
  server_conn_read_update(c);
}
/* Input budget came free: the paused connections read again, in order
 * (one that still finds too little waits again, at the end).  When every
 * partial frame waits, the first goes on regardless (Note [read
 * buffers]). */
static void resume_input(struct rdzvd_server *s)
{
  while (!list_empty(&s->paused) && (s->in_bytes < s->lim.input_budget ||
                                     s->n_partial == s->n_paused)) {
    struct conn *c = list_first(&s->paused, struct conn, paused);

    paused_remove(c);
    server_conn_read_update(c);
  }
}
/* Frees c's partial-frame buffer, keeping the input count. */
static void inbuf_release(struct conn *c)
{
  struct rdzvd_server *s = c->s;

  s->in_bytes -= c->cap;
  if (c->buf)
    s->n_partial--;
  free(c->buf);
  c->buf = NULL;
  c->cap = c->len = 0;
  resume_input(s);
}
/* Note [deferred close]
 *
 * The state machine walks its own lists (a key's waiters, a job's nodes)
 * while it sends, and a send can fail (the output limit, malloc,
 * uv_write): the connection must then close, and closing tells the
 * machine the node is gone, which frees what it is walking.  So every
 * call into the machine goes through server_conn_machine_enter and
 * server_conn_machine_leave, and a close requested meanwhile only marks
 * the connection (close_pending: nothing more is written to it) and
 * queues it; server_conn_machine_leave, once the outermost call has
 * returned, closes what was queued.
 * rdzv_state_conn_closed is called from one place, conn_close_now, and
 * never inside the machine; the machine itself aborts on re-entry
 * (rdzv_state.c), so the contract is enforced, not only written down. */
void server_conn_machine_enter(struct rdzvd_server *s)
{
  s->in_machine++;
}
void server_conn_machine_leave(struct rdzvd_server *s)
{
  struct conn *c;

  if (--s->in_machine > 0)
    return;
  while (!list_empty(&s->close_list)) {
    c = list_first(&s->close_list, struct conn, in_close);
    list_remove(&c->in_close);
    conn_close_now(c);
  }
}
/* Closes a connection: now, or once the machine has returned. */
void server_conn_close(struct conn *c)
{
  struct rdzvd_server *s = c->s;

  if (c->closing || c->close_pending)
    return;
  if (s->in_machine) {
    c->close_pending = true;
    list_insert_head(&s->close_list, &c->in_close);
    return;
  }
  conn_close_now(c);
}
static bool peer_eq(const void *item, const void *key)
{
  return strcmp(((const struct peer_conns *)item)->addr, key) == 0;
}
/* Counts a connection from addr; NULL when it cannot be counted. */
struct peer_conns *server_conn_peer_ref(struct rdzvd_server *s,
                                        const char *addr)
{
  uint64_t h = hashtab_hash_str(s->peer_seed, addr);
  struct peer_conns *pc = hashtab_find(&s->peers, h, addr, peer_eq);

  if (!pc) {
    pc = calloc(1, sizeof *pc);
    if (!pc)
      return NULL;
    pc->h = h;
    snprintf(pc->addr, sizeof pc->addr, "%s", addr);
    if (hashtab_insert(&s->peers, h, pc)) {
      free(pc);
      return NULL;
    }
  }
  pc->n++;
  return pc;
}
static void peer_unref(struct rdzvd_server *s, struct peer_conns *pc)
{
  if (!pc || --pc->n > 0)
    return;
  hashtab_remove(&s->peers, pc->h, pc);
  free(pc);
}
/* The state machine learns the connection is gone; the handle closes. */
static void conn_close_now(struct conn *c)
{
  struct rdzvd_server *s = c->s;

  if (c->closing)
    return;
  c->closing = true;
  list_remove(&c->in_server);
  s->n_conns--;
  peer_unref(s, c->pc);
  c->pc = NULL;
  server_conn_hello_remove(c);
  paused_remove(c);
  if (!s->stopping && server_conn_known(c)) {
    server_conn_machine_enter(s);
    if (c->reset)
      rdzv_state_conn_reset(s->reg, c, monotime_now());
    else
      rdzv_state_conn_closed(s->reg, c, monotime_now());
    server_conn_machine_leave(s);
  }
  metrics_conn_closed(s->metrics);
  uv_close((uv_handle_t *)&c->tcp, server_conn_freed);
  if (!s->stopping) {
    rdzvd_server__schedule(s);
    rdzvd_server__check_idle(s);
  }
}
static void write_done(uv_write_t *req, int status)
{
  struct write_req *w = (struct write_req *)req;
  struct conn *c = w->c;

  c->pending -= w->cost;
  c->s->out_bytes -= w->cost;
  free(w->data);
  free(w);
  if (c->closing)
    return;
  if (c->out_paused && c->pending <= OUTPUT_PAUSE / 4) {
    c->out_paused = false;
    server_conn_read_update(c);
  }
  if (status < 0 || (c->drop_after_write && c->pending == 0))
    server_conn_close(c);
}
/* What c's replies cost the daemon now: those queued, and those written
 * at once in this loop turn (Note [replies written at once]). */
static size_t conn_unwritten(const struct conn *c)
{
  return c->pending + (c->burst_turn == c->s->turn ? c->burst : 0);
}
/* The output limits, for one more reply costing cost: false when c is
 * dropped for it. */
static bool conn_output_ok(struct conn *c, size_t cost)
{
  struct rdzvd_server *s = c->s;
  size_t held = conn_unwritten(c);

  if (held + cost > s->lim.conn_output) {
    rdzvd_server__log(s, "dropping %s: it does not read its replies (%zu "
                      "bytes unwritten)", c->peer, held);
    server_conn_close(c);
    return false;
  }
  if (held && s->out_bytes + s->burst_bytes + cost > s->lim.output_budget) {
    rdzvd_server__log(s, "dropping %s: the output budget (%zu bytes) is spent "
                      "and it has %zu bytes of unread replies", c->peer,
                      s->lim.output_budget, held);
    server_conn_close(c);
    return false;
  }
  return true;
}
/* Queues data[0..len) (ownership passes here), within the limits. */
static void conn_write(struct conn *c, char *data, size_t len)
{
  size_t cost = write_cost(len);
  struct write_req *w;
  uv_buf_t b;

  if (c->closing || c->close_pending || !conn_output_ok(c, cost)) {
    free(data);
    return;
  }
  w = malloc(sizeof *w);
  if (!w) {
    free(data);
    server_conn_close(c);
    return;
  }
  w->c = c;
  w->cost = cost;
  w->data = data;
  b = uv_buf_init(data, (unsigned int)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, write_done) != 0) {
    free(data);
    free(w);
    server_conn_close(c);
    return;
  }
  c->pending += cost;
  c->s->out_bytes += cost;
  if (c->pending > OUTPUT_PAUSE && !c->out_paused) {
    c->out_paused = true;
    server_conn_read_update(c);
  }
  metrics_bytes_out(c->s->metrics, len);
}
/* Note [replies written at once]: a reply to a connection with nothing
 * queued goes to the socket straight from the caller's buffer
 * (uv_try_write, which refuses while anything is queued, so the order
 * holds); only what the socket does not take is copied and queued
 * through conn_write.  A round's N replies then cost N writes and no
 * allocation.  For the output limits (Note [budgets]) a reply written at
 * once still counts until the loop turns, as a write request that
 * completed at once did until its callback ran: a member flooding
 * requests in one read is dropped as before, whether the kernel took
 * its replies or not. */
static void conn_queue_copy(struct conn *c, const char *data, size_t len)
{
  char *copy = malloc(len);

  if (!copy) {
    server_conn_close(c);
    return;
  }
  memcpy(copy, data, len);
  conn_write(c, copy, len);
}
void server_conn_send(struct conn *c, const char *frame, size_t len)
{
  struct rdzvd_server *s = c->s;
  uv_buf_t b = uv_buf_init((char *)frame, (unsigned int)len);
  int n;

  if (c->closing || c->close_pending)
    return;
  if (c->pending) {             /* behind queued replies: queued too */
    conn_queue_copy(c, frame, len);
    return;
  }
  if (!conn_output_ok(c, write_cost(len)))
    return;
  n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  if (n < 0)
    n = 0;      /* EAGAIN, or an error uv_write meets and reports again */
  if (n > 0) {
    if (c->burst_turn != s->turn) {
      c->burst_turn = s->turn;
      c->burst = 0;
    }
    c->burst += write_cost((size_t)n);
    s->burst_bytes += write_cost((size_t)n);
    metrics_bytes_out(s->metrics, (size_t)n);
  }
  if ((size_t)n < len)
    conn_queue_copy(c, frame + n, len - (size_t)n);
}
/* A new loop turn: the replies written at once in the last one are gone
 * (Note [replies written at once]). */
void server_conn_turn_begin(uv_prepare_t *h)
{
  struct rdzvd_server *s = h->data;

  s->turn++;
  s->burst_bytes = 0;
}
/* Note [read buffers]: most reads carry whole frames, so they land in one
 * buffer shared by every connection; only a partial frame is copied into
 * the connection's own buffer.  10,000 idle agents then cost no read
 * memory at all.
 *
 * A partial frame's buffer is sized to the frame its header announces:
 * that is its reservation of the input budget (Note [budgets]).  A frame
 * that got its reservation always completes once its sender sends it, and
 * then gives it back; one that cannot get it waits (reading paused) in
 * order.  What a read of the shared buffer leaves over is kept unreserved
 * (it was read already; reads there are sized to the budget left), so two
 * such leftovers could each wait for the other: when every other partial
 * frame is waiting, the one still reading gets its frame anyway.  The
 * budget is thus exceeded by at most one frame and a header per
 * connection, and waiting frames never block each other for good.  A
 * quarter of the budget is only for small frames (SMALL_FRAME), so large
 * frames from stalled senders leave room for everyone's JOINs. */

/* The bytes c's partial frame needs in all: its header, or the whole
 * frame once the header is in. */
static size_t frame_need(const struct conn *c)
{
  const unsigned char *u = (const unsigned char *)c->buf;

  if (c->len < RDZV_PROTO_FRAME_HEADER)
    return RDZV_PROTO_FRAME_HEADER;
  return RDZV_PROTO_FRAME_HEADER + ((size_t)u[0] << 24 | (size_t)u[1] << 16 |
                            (size_t)u[2] << 8 | (size_t)u[3]);
}
/* What is left of the input budget for a partial frame of need bytes.
 * A quarter of it is kept for small frames (every message an agent
 * sends is one), so that large frames held by stalled senders cannot
 * starve the JOINs and KEEPALIVEs of everyone else. */
static size_t budget_left(const struct rdzvd_server *s, size_t need)
{
  size_t budget = s->lim.input_budget;

  if (need > SMALL_FRAME)
    budget -= budget / 4;
  return s->in_bytes < budget ? budget - s->in_bytes : 0;
}
static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  struct conn *c = (struct conn *)h;
  struct rdzvd_server *s = c->s;
  size_t need, left;
  char *grown;

  (void)hint;
  if (c->len == 0) {
    /* What is left over after the whole frames must fit the budget. */
    left = budget_left(s, 0);
    *buf = uv_buf_init(s->rbuf, (unsigned int)(left < RDZV_PROTO_FRAME_HEADER
                                  ? RDZV_PROTO_FRAME_HEADER
                                  : left < sizeof s->rbuf ? left
                                  : sizeof s->rbuf));
    return;
  }
  need = frame_need(c);
  if (need > c->cap) {
    /* No reservation to be had: read_cb sees UV_ENOBUFS, pauses c.
     * Unless every other partial frame waits already: then c goes on
     * anyway, so that one always progresses. */
    if ((need - c->cap > budget_left(s, need) &&
         s->n_partial - s->n_paused > 1) ||
        !(grown = realloc(c->buf, need))) {
      *buf = uv_buf_init(NULL, 0);
      return;
    }
    s->in_bytes += need - c->cap;
    c->buf = grown;
    c->cap = need;
  }
  *buf = uv_buf_init(c->buf + c->len, (unsigned int)(c->cap - c->len));
}
static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
  struct conn *c = (struct conn *)st;
  struct rdzvd_server *s = c->s;
  ssize_t used;
  size_t left;

  if (nread == UV_ENOBUFS) {
      pause_input(c);
    return;
  }
  if (nread < 0) {
    /* Note [soft state]: a reset (not a clean close) may be a network
     * cut the agent survives: its node waits for it to come back. */
    c->reset = nread != UV_EOF;
    server_conn_close(c);
    return;
  }
  if (nread == 0)
    return;
  metrics_bytes_in(s->metrics, (size_t)nread);
  if (buf->base == s->rbuf) {
    used = server_dispatch_consume(c, buf->base, (size_t)nread);
    left = used < 0 ? 0 : (size_t)nread - (size_t)used;
    if (left) {
      /* Already read, so kept; alloc_cb reserves the rest. */
      c->buf = malloc(left);
      if (!c->buf) {
        server_conn_close(c);
        return;
      }
      c->cap = c->len = left;
      s->in_bytes += left;
      s->n_partial++;
      memcpy(c->buf, buf->base + used, left);
    }
  } else {
    c->len += (size_t)nread;
    used = server_dispatch_consume(c, c->buf, c->len);
    if (used > 0) {
      memmove(c->buf, c->buf + used, c->len - (size_t)used);
      c->len -= (size_t)used;
    }
    if (c->len == 0 || used < 0)
      inbuf_release(c);
  }
  rdzvd_server__schedule(s);
}
