/* server.c -- the libuv side of rdzvd: accept, frame, decode, hand to the
 * state machine, encode and write what it sends back.  One loop, no
 * threads, no polling: deadlines run from one timer set to the state
 * machine's next deadline. */
#include "server.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "err.h"
#include "hashtab.h"
#include "list.h"
#include "metrics.h"
#include "monotime.h"
#include "rdzv_auth.h"
#include "rdzv_proto.h"
#include "rp_frames.h"

#define READ_CHUNK 65536
#define DEF_MAX_CONNS 65536
#define DEF_HELLO_TIMEOUT 10.0
#define DEF_PREJOIN_FRAME ((size_t)16 << 10)
#define DEF_INPUT_BUDGET ((size_t)64 << 20)
#define DEF_OUTPUT_BUDGET ((size_t)256 << 20)
#define DEF_CONN_OUTPUT ((size_t)8 << 20)
/* A connection with more unwritten replies than this is not read from
 * until they drain: it stops making work before it is dropped. */
#define OUTPUT_PAUSE ((size_t)256 << 10)
/* Frames up to this size have a share of the input budget of their own
 * (budget_left). */
#define SMALL_FRAME ((size_t)4 << 10)
/* Replies up to this size are encoded on the stack (Note [replies
 * written at once]); every reply of a round is far smaller. */
#define SEND_FRAME 1024

/* Note [tenant share]: the connections one peer address holds. */
struct peer_conns {
  uint64_t h;
  int n;
  char addr[INET6_ADDRSTRLEN];
};

struct conn {
  uv_tcp_t tcp;               /* first: the handle's data is the conn */
  struct rdzvd_server *s;
  struct peer_conns *pc;      /* its address's count; NULL: none */
  char *buf;                  /* bytes read, not yet framed */
  size_t len, cap;
  char peer[INET6_ADDRSTRLEN];
  char local[INET6_ADDRSTRLEN];
  bool peer_loopback;
  bool closing;
  bool close_pending;           /* Note [deferred close] */
  bool drop_after_write;        /* close once the write queue drains */
  bool joined;                  /* a JOIN was accepted: Note [budgets] */
  bool reset;                   /* read failed other than by EOF */
  bool reading;                 /* uv_read_start is in effect */
  bool in_hello;                /* not joined yet (s->hello) */
  bool in_paused;               /* waits for input budget (s->paused) */
  bool out_paused;              /* too many unwritten replies */
  struct list_node in_close;    /* s->close_list, when close_pending */
  size_t pending;               /* write_cost of the queued replies */
  size_t burst;                 /* ... and of those written at once in
                                   loop turn burst_turn (Note [replies
                                   written at once]) */
  uint64_t burst_turn;
  struct rdzv_auth_server auth; /* the shared-secret handshake */
  double accepted_at;
  struct list_node in_server; /* s->conns: every open connection */
  struct list_node hello;     /* s->hello: not joined yet, accept order */
  struct list_node paused;    /* s->paused: waiting for input budget */
};

struct write_req {
  uv_write_t req;
  struct conn *c;
  size_t cost;                /* what it holds: write_cost(its bytes) */
  char *data;
};

/* What an unwritten reply of len bytes costs the daemon: its bytes, its
 * write request and two allocations' overhead.  The output limits count
 * this, so that many tiny replies (pongs) are bounded like a few big
 * ones. */
static size_t write_cost(size_t len)
{
  return len + sizeof(struct write_req) + 2 * 16;
}

struct rdzvd_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  uv_timer_t timer;
  struct rdzv_state *reg;
  struct list_node conns;     /* newest first */
  struct list_node close_list; /* closes requested while in the machine,
                                * latest first */
  int in_machine;             /* depth of rdzv_state_* calls running */
  struct rdzvd_server_limits lim;
  int n_conns;
  struct hashtab peers;       /* addr -> struct peer_conns */
  uint64_t peer_seed;
  uint64_t peer_refused;      /* connections refused at a peer's share */
  size_t in_bytes;            /* partial-frame buffers, every conn */
  size_t out_bytes;           /* write_cost of unwritten replies, all */
  size_t burst_bytes;         /* write_cost of this turn's written at once */
  uint64_t turn;              /* loop turns (turn_check) */
  uv_prepare_t turn_check;
  int n_partial;              /* conns holding a partial frame */
  int n_paused;               /* of which waiting for input budget */
  struct list_node hello;     /* oldest first */
  struct list_node paused;    /* first come, first served */
  uv_timer_t hello_timer;
  int port;
  int open_handles;
  bool stopping;
  void (*log)(void *ctx, const char *line);
  void *log_ctx;
  void (*idle_cb)(void *ctx);
  void *idle_ctx;
  uv_idle_t idle_check;
  struct rdzvd_metrics *metrics;  /* NULL: none kept */
  struct rdzv_auth_secret secret; /* len 0: none */
  char rbuf[READ_CHUNK];          /* Note [read buffers] */
};

static void server_log(struct rdzvd_server *s, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

static void server_log(struct rdzvd_server *s, const char *fmt, ...)
{
  char line[1024];
  va_list ap;

  if (!s->log)
    return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  s->log(s->log_ctx, line);
}

/* One handle of s is closed; the last one, once stopping, frees s. */
static void handle_released(struct rdzvd_server *s)
{
  if (--s->open_handles == 0 && s->stopping) {
    rdzv_state_destroy(s->reg);
    rdzv_auth_secret_clear(&s->secret);
    /* Connections closed by the stop itself left their counts. */
    for (size_t i = 0; i < s->peers.cap; i++)
      free(s->peers.s[i].item);
    free(s->peers.s);
    free(s);
  }
}

static void handle_closed(uv_handle_t *h)
{
  handle_released(h->data);
}

static void resume_input(struct rdzvd_server *s);

static void conn_freed(uv_handle_t *h)
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
  handle_released(s);
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

static void hello_remove(struct conn *c)
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
static void update_reading(struct conn *c)
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
  update_reading(c);
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
    update_reading(c);
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

static void check_idle(struct rdzvd_server *s);
static void schedule(struct rdzvd_server *s);

/* With a secret, the state machine learns of a connection only once its
 * handshake has succeeded (Note [authentication gate]). */
static bool conn_known(const struct conn *c)
{
  return c->s->secret.len == 0 || c->auth.state == RDZV_AUTH_S_DONE;
}

/* Note [deferred close]
 *
 * The state machine walks its own lists (a key's waiters, a job's nodes)
 * while it sends, and a send can fail (the output limit, malloc,
 * uv_write): the connection must then close, and closing tells the
 * machine the node is gone, which frees what it is walking.  So every
 * call into the machine goes through machine_enter/machine_leave, and a
 * close requested meanwhile only marks the connection (close_pending:
 * nothing more is written to it) and queues it; machine_leave, once the
 * outermost call has returned, closes what was queued.
 * rdzv_state_conn_closed is called from one place, conn_close_now, and
 * never inside the machine; the machine itself aborts on re-entry
 * (rdzv_state.c), so the contract is enforced, not only written down. */
static void conn_close_now(struct conn *c);

static void machine_enter(struct rdzvd_server *s)
{
  s->in_machine++;
}

static void machine_leave(struct rdzvd_server *s)
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
static void conn_close(struct conn *c)
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
static struct peer_conns *peer_ref(struct rdzvd_server *s, const char *addr)
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
  hello_remove(c);
  paused_remove(c);
  if (!s->stopping && conn_known(c)) {
    machine_enter(s);
    if (c->reset)
      rdzv_state_conn_reset(s->reg, c, monotime_now());
    else
      rdzv_state_conn_closed(s->reg, c, monotime_now());
    machine_leave(s);
  }
  metrics_conn_closed(s->metrics);
  uv_close((uv_handle_t *)&c->tcp, conn_freed);
  if (!s->stopping) {
    schedule(s);
    check_idle(s);
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
    update_reading(c);
  }
  if (status < 0 || (c->drop_after_write && c->pending == 0))
    conn_close(c);
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
    server_log(s, "dropping %s: it does not read its replies (%zu "
               "bytes unwritten)", c->peer, held);
    conn_close(c);
    return false;
  }
  if (held && s->out_bytes + s->burst_bytes + cost > s->lim.output_budget) {
    server_log(s, "dropping %s: the output budget (%zu bytes) is spent "
               "and it has %zu bytes of unread replies", c->peer,
               s->lim.output_budget, held);
    conn_close(c);
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
    conn_close(c);
    return;
  }
  w->c = c;
  w->cost = cost;
  w->data = data;
  b = uv_buf_init(data, (unsigned int)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, write_done) != 0) {
    free(data);
    free(w);
    conn_close(c);
    return;
  }
  c->pending += cost;
  c->s->out_bytes += cost;
  if (c->pending > OUTPUT_PAUSE && !c->out_paused) {
    c->out_paused = true;
    update_reading(c);
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
    conn_close(c);
    return;
  }
  memcpy(copy, data, len);
  conn_write(c, copy, len);
}

static void conn_send(struct conn *c, const char *frame, size_t len)
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
static void turn_begin(uv_prepare_t *h)
{
  struct rdzvd_server *s = h->data;

  s->turn++;
  s->burst_bytes = 0;
}

static bool is_loopback(const char *addr)
{
  return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0 ||
         strcmp(addr, "localhost") == 0 ||
         strncmp(addr, "::ffff:127.", 11) == 0;
}

/* The state machine's send(): encode and queue.
 *
 * Note [master address seen from afar]: a node on the daemon's own host
 * may have reached it over loopback, so its address is 127.0.0.1 -- right
 * for its neighbours on that host, useless for a remote node.  A remote
 * node learns instead the address at which it reached this host, which is
 * the rank-0 node's host too. */
static void sink_send(void *ctx, void *connp, const struct rdzv_proto_msg *m)
{
  struct conn *c = connp;
  struct rdzv_proto_msg copy;
  char frame[SEND_FRAME], *data;
  size_t len;
  int err;

  (void)ctx;
  if (c->closing || c->close_pending)
    return;
  if (m->op == RDZV_PROTO_ERROR)
    metrics_refusal(c->s->metrics, m->u.text.code);
  if (m->op == RDZV_PROTO_ROUND && is_loopback(m->u.round.master_addr) &&
      !c->peer_loopback && c->local[0]) {
    copy = *m;
    snprintf(copy.u.round.master_addr, sizeof copy.u.round.master_addr,
             "%s", c->local);
    m = &copy;
  }
  err = rdzv_proto_encode_into(m, frame, sizeof frame, &data, &len);
  if (err) {
    server_log(c->s, "internal: cannot encode %s for %s: %s",
               rdzv_proto_op_name(m->op), c->peer, err_str(err));
    return;
  }
  conn_send(c, data, len);
  if (data != frame)
    free(data);
}

static void sink_drop(void *ctx, void *connp)
{
  struct conn *c = connp;

  (void)ctx;
  if (c->closing || c->close_pending)
    return;
  c->drop_after_write = true;
  if (c->pending == 0)
    conn_close(c);
}

static void sink_log(void *ctx, const char *line)
{
  struct rdzvd_server *s = ctx;

  server_log(s, "%s", line);
}

/* A frame the codec refused: answer with an ERROR and close. */
static void reject(struct conn *c, const char *why)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_ERROR;
  m.u.text.code = RDZV_PROTO_ERR_BAD_REQUEST;
  snprintf(m.u.text.message, sizeof m.u.text.message, "%s", why);
  server_log(c->s, "bad request from %s: %s", c->peer, why);
  metrics_frame_error(c->s->metrics);
  sink_send(c->s, c, &m);
  sink_drop(c->s, c);
}

static void hello_fired(uv_timer_t *t);

static void timer_fired(uv_timer_t *t)
{
  schedule(t->data);
}

/* Runs due deadlines and arms the timer for the next one. */
static void schedule(struct rdzvd_server *s)
{
  double now = monotime_now(), next;

  if (s->stopping)
    return;
  machine_enter(s);
  next = rdzv_state_tick(s->reg, now);
  machine_leave(s);
  if (s->stopping)
    return;
  if (next < 0) {
    uv_timer_stop(&s->timer);
  } else {
    double ms = (next - now) * 1000.0;

    uv_timer_start(&s->timer, timer_fired,
                   ms <= 0 ? 0 : (uint64_t)ms + 1, 0);
  }
  check_idle(s);
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

/* Note [authentication gate]: with a secret, a connection's frames go to the
 * handshake (proto/rdzv_auth.c) until it has succeeded; nothing reaches the
 * state machine before (not even the connection's address), and a pre-auth
 * frame may not exceed RDZV_AUTH_PREAUTH_MAX_FRAME.  Returns true when m may
 * go on to rdzv_state_handle. */
static bool auth_gate(struct conn *c, const struct rdzv_proto_msg *m)
{
  struct rdzv_proto_msg reply;
  char why[256];

  switch (rdzv_auth_server_step(&c->auth, &c->s->secret, m, &reply, why,
                         sizeof why)) {
  case RDZV_AUTH_PASS:
    return true;
  case RDZV_AUTH_REPLY:
    sink_send(c->s, c, &reply);
    /* Only now does the state machine learn of the connection. */
    if (c->auth.state == RDZV_AUTH_S_DONE) {
      machine_enter(c->s);
      rdzv_state_set_peer_addr(c->s->reg, c, c->peer);
      machine_leave(c->s);
    }
    return false;
  case RDZV_AUTH_REFUSE:
    server_log(c->s, "authentication failed from %s: %s", c->peer, why);
    metrics_auth_failure(c->s->metrics);
    sink_send(c->s, c, &reply);
    sink_drop(c->s, c);
    return false;
  }
  return false;
}

/* The announced body length of the frame at data (4 bytes there). */
static size_t frame_body_len(const char *data)
{
  const unsigned char *p = (const unsigned char *)data;

  return (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
}

/* STATUS, answered here: the machine's report (its size bounded by what
 * it shows, Note [status size]) and the server's own figures. */
static void server_status(struct conn *c, const struct rdzv_proto_status_req *q)
{
  struct rdzvd_server *s = c->s;
  struct rdzv_proto_msg m;
  cJSON *st, *sv = NULL;
  char *text = NULL;
  int err;

  st = rdzv_state_status_query(s->reg, q, monotime_now(), &err);
  if (st && (sv = cJSON_AddObjectToObject(st, "server")) &&
      cJSON_AddNumberToObject(sv, "connections", s->n_conns) &&
      cJSON_AddNumberToObject(sv, "max_conns", s->lim.max_conns) &&
      cJSON_AddNumberToObject(sv, "max_conns_per_peer",
                              s->lim.max_conns_per_peer) &&
      cJSON_AddNumberToObject(sv, "peer_refusals_connections",
                              (double)s->peer_refused) &&
      cJSON_AddNumberToObject(sv, "input_bytes", (double)s->in_bytes) &&
      cJSON_AddNumberToObject(sv, "input_budget",
                              (double)s->lim.input_budget) &&
      cJSON_AddNumberToObject(sv, "reading_paused", s->n_paused) &&
      cJSON_AddNumberToObject(sv, "output_bytes", (double)s->out_bytes) &&
      cJSON_AddNumberToObject(sv, "output_budget",
                              (double)s->lim.output_budget))
    text = cJSON_PrintUnformatted(st);
  cJSON_Delete(st);
  memset(&m, 0, sizeof m);
  if (text) {
    m.op = RDZV_PROTO_STATUS_REPLY;
    m.u.status_json = text;
  } else {
    m.op = RDZV_PROTO_ERROR;
    m.u.text.code =
        err == -ENOENT ? RDZV_PROTO_ERR_BAD_REQUEST : RDZV_PROTO_ERR_LIMIT;
    snprintf(m.u.text.message, sizeof m.u.text.message, "%s%.*s",
             err == -ENOENT ? "no job " : "out of memory",
             err == -ENOENT ? RDZV_PROTO_MAX_ID : 0, q->job);
  }
  sink_send(s, c, &m);
  cJSON_free(text);
}

/* One decoded message from c, for the machine.  Stops the frame loop
 * once c is going away. */
static int on_frame(void *ctx, struct rdzv_proto_msg *m)
{
  struct conn *c = ctx;
  struct rdzvd_server *s = c->s;
  int rc;

  if (!auth_gate(c, m))         /* a handshake step, or refused */
    return 1;                   /* the frame limit may change: re-read */
  if (m->op == RDZV_PROTO_STATUS) {
    server_status(c, &m->u.status);
    return c->closing || c->close_pending || c->drop_after_write;
  }
  if (m->op == RDZV_PROTO_JOIN)
    metrics_join(s->metrics);
  machine_enter(s);
  rc = rdzv_state_handle(s->reg, c, m, monotime_now());
  machine_leave(s);
  if ((m->op == RDZV_PROTO_JOIN || m->op == RDZV_PROTO_RESUME) && rc == 0 &&
      !c->joined && !c->closing && !c->close_pending && !c->drop_after_write) {
    c->joined = true;
    hello_remove(c);
    return 1;                   /* read on with the joined frame limit */
  }
  return c->closing || c->close_pending || c->drop_after_write;
}

/* Handles every whole frame in data[0..len); returns the bytes used, or
 * -1 when the connection is being closed. */
static ssize_t consume(struct conn *c, const char *data, size_t len)
{
  struct rdzvd_server *s = c->s;
  struct rdzv_proto_msg m;
  char err[256];
  size_t off = 0, max_body;
  ssize_t used;
  enum rdzv_auth_server_state auth;
  bool joined, authed;

  /* Note [pipelined handshake]: a handshake step stops the frame loop
   * (the frame limit may change), and the loop goes on at once with the
   * bytes already here: a frame sent in the same packet as hello (or
   * auth) is answered now, not when more bytes arrive.  Behind hello the
   * only frame that may follow is an auth, and one read with the hello
   * was sent before the challenge was seen (read_with_hello), so it
   * cannot carry a valid proof: either is refused by the handshake
   * (error auth, close).  Frames behind a valid auth are the session's
   * first. */
  do {
    if (len - off >= RDZV_PROTO_FRAME_HEADER &&
        rdzv_auth_server_frame_too_big(&c->auth, &s->secret,
                                frame_body_len(data + off))) {
      memset(&m, 0, sizeof m);
      m.op = RDZV_PROTO_ERROR;
      m.u.text.code = RDZV_PROTO_ERR_AUTH;
      snprintf(m.u.text.message, sizeof m.u.text.message,
               "this server requires a shared secret");
      server_log(s, "authentication failed from %s: no shared secret: a "
                 "frame of %zu bytes before authenticating", c->peer,
                 frame_body_len(data + off));
      metrics_auth_failure(s->metrics);
      sink_send(s, c, &m);
      sink_drop(s, c);
      return -1;
    }
    /* The frame limit depends on how far the connection got: tiny before
     * the handshake, small until it joined (Note [budgets]). */
    joined = c->joined;
    auth = c->auth.state;
    authed = conn_known(c);
    max_body = joined ? RDZV_PROTO_MAX_FRAME : s->lim.prejoin_frame;
    if (!authed && max_body > RDZV_AUTH_PREAUTH_MAX_FRAME)
      max_body = RDZV_AUTH_PREAUTH_MAX_FRAME;
    used = rp_frames_read(data + off, len - off, max_body, on_frame, c,
                          err, sizeof err);
    if (used < 0) {
      reject(c, err);
      return -1;
    }
    off += (size_t)used;
    if (c->closing || c->close_pending || c->drop_after_write)
      return -1;
    /* The frames still here were read with the hello. */
    c->auth.read_with_hello = auth == RDZV_AUTH_S_HELLO &&
                              c->auth.state == RDZV_AUTH_S_PROOF;
  } while (used > 0 && (joined != c->joined || auth != c->auth.state));
  c->auth.read_with_hello = false;
  return (ssize_t)off;
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
    conn_close(c);
    return;
  }
  if (nread == 0)
    return;
  metrics_bytes_in(s->metrics, (size_t)nread);
  if (buf->base == s->rbuf) {
    used = consume(c, buf->base, (size_t)nread);
    left = used < 0 ? 0 : (size_t)nread - (size_t)used;
    if (left) {
      /* Already read, so kept; alloc_cb reserves the rest. */
      c->buf = malloc(left);
      if (!c->buf) {
        conn_close(c);
        return;
      }
      c->cap = c->len = left;
      s->in_bytes += left;
      s->n_partial++;
      memcpy(c->buf, buf->base + used, left);
    }
  } else {
    c->len += (size_t)nread;
    used = consume(c, c->buf, c->len);
    if (used > 0) {
      memmove(c->buf, c->buf + used, c->len - (size_t)used);
      c->len -= (size_t)used;
    }
    if (c->len == 0 || used < 0)
      inbuf_release(c);
  }
  schedule(s);
}

static void addr_string(const struct sockaddr_storage *ss, char *out,
                        size_t len)
{
  if (ss->ss_family == AF_INET) {
    uv_ip4_name((const struct sockaddr_in *)ss, out, len);
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

    /* Dual-stack sockets show IPv4 peers as ::ffff:a.b.c.d. */
    if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
      inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], out, (socklen_t)len);
    else
      uv_ip6_name(s6, out, len);
  } else {
    snprintf(out, len, "?");
  }
}

/* Arms the hello timer for the oldest connection that has not joined. */
static void hello_arm(struct rdzvd_server *s)
{
  struct conn *oldest;
  double ms;

  if (list_empty(&s->hello)) {
    uv_timer_stop(&s->hello_timer);
    return;
  }
  oldest = list_first(&s->hello, struct conn, hello);
  ms = (oldest->accepted_at + s->lim.hello_timeout - monotime_now()) *
       1000.0;
  uv_timer_start(&s->hello_timer, hello_fired, ms <= 0 ? 0
                 : (uint64_t)ms + 1, 0);
}

/* Connections accepted hello_timeout ago that have not joined go.  The
 * list is in accept order, so only its head is ever looked at. */
static void hello_fired(uv_timer_t *t)
{
  struct rdzvd_server *s = t->data;
  double now = monotime_now();
  struct conn *c;

  while (!list_empty(&s->hello) &&
         (c = list_first(&s->hello, struct conn, hello))->accepted_at +
         s->lim.hello_timeout <= now) {
    server_log(s, "dropping %s: no join within %g s of connecting",
               c->peer, s->lim.hello_timeout);
    hello_remove(c);
    conn_close(c);
  }
  hello_arm(s);
}

static void on_connection(uv_stream_t *listener, int status)
{
  struct rdzvd_server *s = listener->data;
  struct sockaddr_storage ss;
  int namelen = sizeof ss;
  struct conn *c;

  if (status < 0) {
    server_log(s, "accept: %s", uv_strerror(status));
    return;
  }
  c = calloc(1, sizeof *c);
  if (!c)
    return;
  c->s = s;
  list_init(&c->in_server);
  list_init(&c->hello);
  list_init(&c->paused);
  list_init(&c->in_close);
  uv_tcp_init(s->loop, &c->tcp);
  s->open_handles++;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, conn_freed);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  metrics_conn_opened(s->metrics);
  s->n_conns++;
  list_insert_head(&s->conns, &c->in_server);
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &namelen) == 0)
    addr_string(&ss, c->peer, sizeof c->peer);
  namelen = sizeof ss;
  if (uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&ss, &namelen) == 0)
    addr_string(&ss, c->local, sizeof c->local);
  c->peer_loopback = is_loopback(c->peer);
  if (s->n_conns > s->lim.max_conns) {
    server_log(s, "refused a connection from %s: too many connections "
               "(%d)", c->peer, s->lim.max_conns);
    conn_close(c);
    return;
  }
  c->pc = peer_ref(s, c->peer);
  if (c->pc && c->pc->n > s->lim.max_conns_per_peer) {
    struct rdzv_proto_msg m;

    /* Note [tenant share]: told why, then closed; other addresses go on. */
    s->peer_refused++;
    memset(&m, 0, sizeof m);
    m.op = RDZV_PROTO_ERROR;
    m.u.text.code = RDZV_PROTO_ERR_LIMIT;
    snprintf(m.u.text.message, sizeof m.u.text.message, "too many "
             "connections from %s (%d: rdzvd --max-conns-per-peer)", c->peer,
             s->lim.max_conns_per_peer);
    server_log(s, "refused a connection from %s: %s", c->peer,
               m.u.text.message);
    sink_send(s, c, &m);
    sink_drop(s, c);
    return;
  }
  c->accepted_at = monotime_now();
  c->in_hello = true;
  list_insert_tail(&s->hello, &c->hello);
  if (!uv_is_active((uv_handle_t *)&s->hello_timer))
    hello_arm(s);
  if (conn_known(c)) {
    machine_enter(s);
    rdzv_state_set_peer_addr(s->reg, c, c->peer);
    machine_leave(s);
  }
  update_reading(c);
}

static void idle_fire(uv_idle_t *h)
{
  struct rdzvd_server *s = h->data;
  void (*cb)(void *) = s->idle_cb;

  uv_idle_stop(h);
  if (!cb || s->stopping || rdzv_state_node_count(s->reg) > 0)
    return;
  s->idle_cb = NULL;
  cb(s->idle_ctx);
}

static void check_idle(struct rdzvd_server *s)
{
  if (s->idle_cb && rdzv_state_node_count(s->reg) == 0)
    uv_idle_start(&s->idle_check, idle_fire);
}

void rdzvd_server_on_idle(struct rdzvd_server *s, void (*cb)(void *ctx),
                          void *ctx)
{
  s->idle_cb = cb;
  s->idle_ctx = ctx;
  check_idle(s);
}

static int bind_listener(struct rdzvd_server *s, const char *host, int port,
                         char *err, size_t errlen)
{
  struct sockaddr_storage ss;
  struct addrinfo hints, *res = NULL;
  char portstr[16];
  int rc;

  memset(&ss, 0, sizeof ss);
  if (!host || !*host) {
    /* Dual stack first; an IPv4-only machine falls back to 0.0.0.0. */
    uv_ip6_addr("::", port, (struct sockaddr_in6 *)&ss);
    rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
      rc = uv_listen((uv_stream_t *)&s->listener, 16384, on_connection);
    if (rc == UV_EAFNOSUPPORT || rc == UV_EADDRNOTAVAIL) {
      uv_ip4_addr("0.0.0.0", port, (struct sockaddr_in *)&ss);
      rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
      if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 16384, on_connection);
    }
    if (rc)
      snprintf(err, errlen, "cannot listen on port %d: %s", port,
               uv_strerror(rc));
    return rc;
  }
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  snprintf(portstr, sizeof portstr, "%d", port);
  rc = getaddrinfo(host, portstr, &hints, &res);
  if (rc != 0) {
    return err_set(err, errlen, UV_EINVAL, "cannot resolve '%s': %s", host,
                   gai_strerror(rc));
  }
  rc = uv_tcp_bind(&s->listener, res->ai_addr, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&s->listener, 16384, on_connection);
  freeaddrinfo(res);
  if (rc)
    snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port,
             uv_strerror(rc));
  return rc;
}

int rdzvd_server_start(uv_loop_t *loop, const struct rdzvd_server_opts *o,
                       struct rdzvd_server **out, char *err, size_t errlen)
{
  struct rdzvd_server *s = calloc(1, sizeof *s);
  struct rdzv_state_sink sink;
  struct sockaddr_storage ss;
  int namelen = sizeof ss, rc;

  if (!s) {
    return err_set(err, errlen, UV_ENOMEM, "out of memory");
  }
  s->loop = loop;
  list_init(&s->conns);
  list_init(&s->close_list);
  list_init(&s->hello);
  list_init(&s->paused);
  if (o->secret)
    s->secret = *o->secret;
  s->lim = o->io;
  rdzvd_server_limits_default(&s->lim);
  s->log = o->log;
  s->log_ctx = o->log_ctx;
  sink.ctx = s;
  sink.send = sink_send;
  sink.drop = sink_drop;
  /* No log (--quiet): the machine formats no line to throw away. */
  sink.log = o->log ? sink_log : NULL;
  s->peer_seed = hashtab_mix64((uint64_t)(uintptr_t)s ^ 0x7065657273ull);
  s->reg = rdzv_state_create(&sink, &o->limits);
  if (s->reg && o->token_key && o->token_key->len &&
      rdzv_state_set_token_key(s->reg, o->token_key)) {
    rdzv_state_destroy(s->reg);
    s->reg = NULL;
  }
  if (!s->reg) {
    rdzv_auth_secret_clear(&s->secret);
    free(s);
    return err_set(err, errlen, UV_ENOMEM, "out of memory");
  }
  s->metrics = o->metrics;
  rdzv_state_set_metrics(s->reg, o->metrics);
  rdzv_state_set_ledger(s->reg, o->ledger);
  rdzv_state_set_live_host(s->reg, o->live);
  if (o->embedded) {
    char me[RDZV_PROTO_MAX_ADDR + 1] = "";

    if (gethostname(me, sizeof me - 1) < 0)
      me[0] = '\0';
    rdzv_state_set_embedded(s->reg, (int64_t)getpid(), me);
  }
  uv_tcp_init(loop, &s->listener);
  uv_timer_init(loop, &s->timer);
  uv_idle_init(loop, &s->idle_check);
  uv_timer_init(loop, &s->hello_timer);
  uv_prepare_init(loop, &s->turn_check);
  s->listener.data = s;
  s->timer.data = s;
  s->idle_check.data = s;
  s->hello_timer.data = s;
  s->turn_check.data = s;
  s->open_handles = 5;
  uv_prepare_start(&s->turn_check, turn_begin);
  rc = bind_listener(s, o->host, o->port, err, errlen);
  if (rc) {
    rdzvd_server_stop(s);
    return rc;
  }
  if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss,
                         &namelen) == 0)
    s->port = ntohs(ss.ss_family == AF_INET6
                        ? ((struct sockaddr_in6 *)&ss)->sin6_port
                        : ((struct sockaddr_in *)&ss)->sin_port);
  *out = s;
  return 0;
}

int rdzvd_server_port(const struct rdzvd_server *s)
{
  return s->port;
}

void rdzvd_server_peer_counts(const struct rdzvd_server *s, int *peers,
                              uint64_t *refused_jobs,
                              uint64_t *refused_waiting,
                              uint64_t *refused_conns)
{
  rdzv_state_peer_counts(s->reg, peers, refused_jobs, refused_waiting);
  *refused_conns = s->peer_refused;
}

int rdzvd_server_nodes(const struct rdzvd_server *s)
{
  return rdzv_state_node_count(s->reg);
}

void rdzvd_server_jobs_by_phase(const struct rdzvd_server *s,
                                int counts[RDZV_STATE_PHASES],
                                const char *names[RDZV_STATE_PHASES])
{
  rdzv_state_jobs_by_phase(s->reg, counts, names);
}

void rdzvd_server_going_away(struct rdzvd_server *s, const char *why)
{
  struct rdzv_proto_msg m;
  struct list_node todo;

  if (s->stopping)
    return;
  /* Stop accepting first: an agent that reconnects at once must not
   * reach this daemon's backlog, only its successor. */
  uv_close((uv_handle_t *)&s->listener, handle_closed);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_GOING_AWAY;
  snprintf(m.u.text.message, sizeof m.u.text.message, "%s", why);
  /* uv_write writes at once into an empty socket buffer, so the frame
   * is out before the close below; a connection with replies still
   * queued may lose it and finds out from the close instead. */
  /* A send that fails closes its connection, and the state machine may
   * close others then: the connections still to visit wait on todo, from
   * which a close takes them out, and go back to s->conns in order. */
  list_init(&todo);
  while (!list_empty(&s->conns)) {
    struct list_node *n = s->conns.next;

    list_remove(n);
    list_insert_tail(&todo, n);
  }
  while (!list_empty(&todo)) {
    struct conn *c = list_first(&todo, struct conn, in_server);

    list_remove(&c->in_server);
    list_insert_tail(&s->conns, &c->in_server);
    if (conn_known(c) && !c->closing && !c->close_pending)
      sink_send(s, c, &m);
  }
  rdzvd_server_stop(s);
}

void rdzvd_server_stop(struct rdzvd_server *s)
{
  struct list_node *pos, *next;

  if (s->stopping)
    return;
  s->stopping = true;
  list_for_each_safe(pos, next, &s->conns) {
    struct conn *c = list_entry(pos, struct conn, in_server);

    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, conn_freed);
  }
  list_init(&s->conns);       /* closing: none is unlinked from now on */
  if (!uv_is_closing((uv_handle_t *)&s->listener))
    uv_close((uv_handle_t *)&s->listener, handle_closed);
  uv_close((uv_handle_t *)&s->timer, handle_closed);
  uv_close((uv_handle_t *)&s->idle_check, handle_closed);
  uv_close((uv_handle_t *)&s->hello_timer, handle_closed);
  uv_close((uv_handle_t *)&s->turn_check, handle_closed);
}

void rdzvd_server_limits_default(struct rdzvd_server_limits *l)
{
  if (l->max_conns <= 0)
    l->max_conns = DEF_MAX_CONNS;
  /* A quarter of the whole, but never below what a small daemon (or
   * one host's agents) needs: 1024, or every connection when fewer. */
  if (l->max_conns_per_peer <= 0) {
    int floor_n = l->max_conns < 1024 ? l->max_conns : 1024;

    l->max_conns_per_peer = l->max_conns / 4 > floor_n ? l->max_conns / 4
                                                       : floor_n;
  }
  if (!(l->hello_timeout > 0))
    l->hello_timeout = DEF_HELLO_TIMEOUT;
  if (!l->prejoin_frame)
    l->prejoin_frame = DEF_PREJOIN_FRAME;
  if (!l->input_budget)
    l->input_budget = DEF_INPUT_BUDGET;
  if (!l->output_budget)
    l->output_budget = DEF_OUTPUT_BUDGET;
  if (!l->conn_output)
    l->conn_output = DEF_CONN_OUTPUT;
}
