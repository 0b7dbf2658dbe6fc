/* static_barrier.c -- see Note [static barrier] in static_barrier.h. */
#include "static_barrier.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "jobtoken.h"
#include "list.h"
#include "monotime.h"
#include "rdzv_rules.h"

#define LINE_MAX_LEN 200        /* a hello, newline included */
#define ANSWER_MAX_LEN 1024     /* node 0's answer, newline included */
#define RETRY_MS 100            /* between attempts to reach node 0 */
#define EXTRA_CONNS 64          /* connections beyond one per node */
#define MAX_CONNS 100000
#define NONCE_HEX JOBTOKEN_NONCE_HEX  /* Note [static run nonce] */

/* One node's connection to node 0's listener (server side). */
struct conn {
  struct static_barrier *b;
  struct list_node in_barrier;  /* b->conns */
  uv_tcp_t h;
  uv_write_t wr;
  char buf[LINE_MAX_LEN];
  size_t len;
  bool hello;                   /* rank and token are valid */
  bool closing;
  /* Note [static watch]: it said "watch" (it tells how it leaves), and
   * then "done" (its workers succeeded) or "bye". */
  bool watch, done, bye;
  /* Note [static keepalive]: it sends keepalives ("ka"), so its silence
   * for its own window (the "ka W" it started with) is a silent link. */
  bool ka, silent;
  double window, last_rx;
  int rank;
  char token[96];
};

struct static_barrier {
  uv_loop_t *loop;
  struct static_barrier_opts o;
  char addr[256];
  char port_text[16];
  char token[96];
  char hello[LINE_MAX_LEN];
  /* Note [static run nonce]: node 0's own (the server), then the one it
   * sent (every node); "" none */
  char serve_nonce[NONCE_HEX + 1];
  char run_nonce[NONCE_HEX + 1];
  /* node 0's answer: "ok watch <nonce>\n", then "ka\n" when it answers
   * keepalives (Note [static keepalive]) */
  char ok_line[16 + NONCE_HEX + 4];
  static_barrier_done done;
  static_barrier_lost lost;
  void *ctx;
  /* Note [static watch] */
  bool serving_watch;           /* node 0: "ok watch" went out */
  bool watching;                /* the client: node 0 keeps the watch */
  bool server_done;             /* node 0 said "done" */
  bool left;                    /* static_barrier_leave ran, or a loss was
                                   reported: no more losses */
  bool said;                    /* "done" or "bye" went out */
  /* Note [static keepalive] */
  uv_timer_t ka_timer;
  double window;                /* rdzv_rules_keepalive_window; 0: none */
  double last_tick;             /* when ka_timer last ran */
  bool server_ka;               /* the client: node 0 answers keepalives */
  bool server_silent;           /* ... and has been silent for window */
  double server_rx;             /* the client: last byte from node 0 */
  bool finished;                /* done was called, or close */
  int open_handles;             /* handles and requests not yet back */
  bool freeing;
  /* the client: every node */
  uv_getaddrinfo_t gai;
  bool gai_active;
  struct sockaddr_storage peer;
  bool have_peer;
  uv_tcp_t client;
  bool client_open;
  uv_connect_t connect;
  uv_write_t client_wr;
  char cbuf[ANSWER_MAX_LEN];
  size_t clen;
  uv_timer_t retry, deadline;
  /* the server: node 0 when it could bind */
  uv_tcp_t listener;
  bool listening;
  struct list_node conns;       /* newest first */
  int nconns;
  int met;                      /* distinct ranks that said hello */
};

static void try_connect(struct static_barrier *b);

static void retry_fired(uv_timer_t *t)
{
  try_connect(t->data);
}

static void maybe_free(struct static_barrier *b)
{
  if (b->freeing && b->open_handles == 0)
    free(b);
}

static void handle_closed(uv_handle_t *h)
{
  struct static_barrier *b = h->data;

  b->open_handles--;
  maybe_free(b);
}

static void conn_closed(uv_handle_t *h)
{
  struct conn *c = h->data;
  struct static_barrier *b = c->b;

  free(c);
  b->open_handles--;
  maybe_free(b);
}

static void close_conn(struct conn *c)
{
  struct static_barrier *b = c->b;

  if (c->closing)
    return;
  c->closing = true;
  list_remove(&c->in_barrier);
  b->nconns--;
  if (c->hello) {
    struct list_node *pos, *next;
    bool other = false;

    /* The rank stays met while another connection holds it. */
    list_for_each_safe(pos, next, &b->conns) {
      struct conn *o = list_entry(pos, struct conn, in_barrier);

      other |= o->hello && o->rank == c->rank;
    }
    if (!other)
      b->met--;
  }
  uv_close((uv_handle_t *)&c->h, conn_closed);
}

static void stop_listening(struct static_barrier *b)
{
  if (b->listening) {
    b->listening = false;
    uv_close((uv_handle_t *)&b->listener, handle_closed);
  }
}

static void close_client(struct static_barrier *b)
{
  if (b->client_open) {
    b->client_open = false;
    uv_close((uv_handle_t *)&b->client, handle_closed);
  }
}

/* Ends the meeting for this node: the result to the caller, once. */
static void finish(struct static_barrier *b, int err, const char *message)
{
  if (b->finished)
    return;
  b->finished = true;
  uv_timer_stop(&b->retry);
  uv_timer_stop(&b->deadline);
  if (!b->watching)
    close_client(b);
  b->done(b->ctx, err, message);
}

/* ---- Note [static keepalive] (static_barrier.h) ---- */

static void watch_lost(struct static_barrier *b, int rank, const char *token,
                       enum rdzv_rules_leave how);

/* Every keepalive_interval: a keepalive to node 0 (every other node), and
 * the silence of whoever sends them judged by its window.  A tick that
 * comes late (this agent was stopped or starved) judges nobody: what
 * arrived meanwhile is read first. */
static void ka_tick(uv_timer_t *t)
{
  struct static_barrier *b = t->data;
  double now = monotime_now();
  bool judge = now - b->last_tick < 2 * b->o.keepalive_interval;
  struct list_node *pos, *next;
  uv_buf_t ka = uv_buf_init("ka\n", 3);

  b->last_tick = now;
  if (b->left || b->freeing) {
    uv_timer_stop(t);
    return;
  }
  if (b->watching && b->client_open) {
    (void)uv_try_write((uv_stream_t *)&b->client, &ka, 1);
    if (judge && b->server_ka && !b->server_done && !b->server_silent &&
        now - b->server_rx > b->window) {
      b->server_silent = true;
      b->left = !b->lost || b->lost(b->ctx, 0, b->addr, RDZV_LEFT_SILENT);
      if (b->left)
        return;
    }
  }
  if (!b->serving_watch || !judge)
    return;
  list_for_each_safe(pos, next, &b->conns) {
    struct conn *c = list_entry(pos, struct conn, in_barrier);

    if (!c->watch || !c->ka || c->closing || c->done || c->silent ||
        c->rank == 0 || now - c->last_rx <= c->window)
      continue;
    c->silent = true;
    watch_lost(b, c->rank, c->token, RDZV_LEFT_SILENT);
    if (b->left || b->freeing)
      return;           /* the job ends: nobody else is judged */
  }
}

static void keepalive_start(struct static_barrier *b)
{
  uint64_t ms = (uint64_t)(b->o.keepalive_interval * 1000.0);

  b->last_tick = monotime_now();
  uv_timer_start(&b->ka_timer, ka_tick, ms ? ms : 1, ms ? ms : 1);
}

/* ---- the server (node 0) ------------------------------------------------ */

static void conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);

static void conn_written(uv_write_t *w, int status)
{
  struct conn *c = w->data;

  /* Note [static watch]: after "ok watch" a node's connection stays, to
   * hear how it leaves. */
  if (status == 0 && c->b->serving_watch && c->hello && !c->closing &&
      uv_read_start((uv_stream_t *)&c->h, conn_alloc, conn_read) == 0)
    return;
  close_conn(c);
}

/* Answers every connection with line and closes it. */
static void answer_all(struct static_barrier *b, const char *line)
{
  struct list_node *pos, *next;
  uv_buf_t buf;

  stop_listening(b);
  list_for_each_safe(pos, next, &b->conns) {
    struct conn *c = list_entry(pos, struct conn, in_barrier);

    buf = uv_buf_init((char *)line, (unsigned)strlen(line));
    c->wr.data = c;
    uv_read_stop((uv_stream_t *)&c->h);
    if (uv_write(&c->wr, (uv_stream_t *)&c->h, &buf, 1, conn_written) != 0)
      close_conn(c);
  }
}

/* The meeting failed for everyone: why, to every node and to this one. */
static void fail_all(struct static_barrier *b, const char *why)
{
  static char line[ANSWER_MAX_LEN];

  snprintf(line, sizeof line, "error %s\n", why);
  answer_all(b, line);
  finish(b, -EINVAL, why);
}

static void on_hello(struct conn *c, const char *line)
{
  struct static_barrier *b = c->b;
  char why[ANSWER_MAX_LEN - 16], token[96];
  int version, rank, nnodes, nproc, end = 0;
  struct list_node *pos, *next;
  bool held = false;

  if (sscanf(line, "cdrun-static %d %d %d %d %95s%n", &version, &rank,
             &nnodes, &nproc, token, &end) != 5 || line[end] != '\0' ||
      version != 1 || rank < 0 || nnodes < 1 || nproc < 1) {
    close_conn(c);      /* not one of ours */
    return;
  }
  if (nnodes != b->o.nnodes) {
    snprintf(why, sizeof why, "static rendezvous: nodes disagree on "
             "--nnodes (%d at %s, %d at node 0)", nnodes, token,
             b->o.nnodes);
    fail_all(b, why);
    return;
  }
  if (nproc != b->o.nproc) {
    snprintf(why, sizeof why, "static rendezvous: the static back end "
             "needs the same --nproc_per_node on every node (%d at %s, %d "
             "at node 0)", nproc, token, b->o.nproc);
    fail_all(b, why);
    return;
  }
  if (rank >= b->o.nnodes) {
    close_conn(c);
    return;
  }
  list_for_each_safe(pos, next, &b->conns) {
    struct conn *o = list_entry(pos, struct conn, in_barrier);

    if (o != c && o->hello && o->rank == rank && strcmp(o->token, token)) {
      snprintf(why, sizeof why, "static rendezvous: node rank %d was "
               "claimed by two nodes (%s and %s): give each node its own "
               "--node_rank=0..%d, or use --rdzv_backend=c10d, which "
               "assigns node ranks", rank, o->token, token,
               b->o.nnodes - 1);
      fail_all(b, why);
      return;
    }
  }
  c->hello = true;
  c->rank = rank;
  snprintf(c->token, sizeof c->token, "%s", token);
  list_for_each_safe(pos, next, &b->conns) {
    struct conn *o = list_entry(pos, struct conn, in_barrier);

    held |= o != c && o->hello && o->rank == rank;
  }
  if (!held && ++b->met == b->o.nnodes) {
    b->serving_watch = true;
    answer_all(b, b->ok_line);
    if (b->window > 0)
      keepalive_start(b);
  }
}

/* ---- Note [static watch]: node 0's side ---- */

static const char *how_word(enum rdzv_rules_leave how)
{
  return how == RDZV_LEFT_GOODBYE ? "bye" : how == RDZV_LEFT_DIED ? "died"
                                                                  : "silent";
}

/* A node of the job left (for good, or silent): every other watched node
 * hears it, then this one; once the job ends on a loss, no more are
 * reported. */
static void watch_lost(struct static_barrier *b, int rank, const char *token,
                       enum rdzv_rules_leave how)
{
  struct list_node *pos, *next;
  char line[ANSWER_MAX_LEN];
  uv_buf_t buf;

  if (b->left)
    return;
  snprintf(line, sizeof line, "lost %d %s %s\n", rank, how_word(how), token);
  buf = uv_buf_init(line, (unsigned)strlen(line));
  list_for_each_safe(pos, next, &b->conns) {
    struct conn *o = list_entry(pos, struct conn, in_barrier);

    /* One short line into an idle socket's buffer: it goes at once. */
    if (o->watch && o->rank != rank && !o->closing)
      (void)uv_try_write((uv_stream_t *)&o->h, &buf, 1);
  }
  b->left = !b->lost || b->lost(b->ctx, rank, token, how);
}

/* A watched node's connection ended: unless it said "done", it left. */
static void watch_gone(struct conn *c)
{
  if (c->closing || !c->watch || c->done || c->rank == 0)
    return;           /* rank 0: this node's own client */
  watch_lost(c->b, c->rank, c->token,
             c->bye ? RDZV_LEFT_GOODBYE : RDZV_LEFT_DIED);
}

/* What a watched node says: "watch", "done", "bye". */
static void watch_lines(struct conn *c)
{
  char *nl;

  while (!c->closing && (nl = memchr(c->buf, '\n', c->len))) {
    size_t k = (size_t)(nl - c->buf) + 1;

    *nl = '\0';
    if (strcmp(c->buf, "watch") == 0) {
      c->watch = true;
    } else if (strcmp(c->buf, "done") == 0) {
      c->done = true;
    } else if (strcmp(c->buf, "bye") == 0) {
      c->bye = true;
      watch_gone(c);
    } else if (strncmp(c->buf, "ka", 2) == 0 &&
               (c->buf[2] == '\0' || c->buf[2] == ' ')) {
      uv_buf_t pong = uv_buf_init("ka\n", 3);
      double w = 0;

      /* Note [static keepalive]: "ka W" first (its window), then "ka";
       * each is answered, so that it hears this node too. */
      if (!c->ka && sscanf(c->buf + 2, "%lf", &w) == 1 && w > 0 && w < 1e7)
        c->window = w;
      else if (!c->ka)
        c->window = c->b->window;     /* "ka" alone: this node's */
      c->ka = true;
      (void)uv_try_write((uv_stream_t *)&c->h, &pong, 1);
    }
    memmove(c->buf, c->buf + k, c->len - k);
    c->len -= k;
  }
  if (c->len == sizeof c->buf)
    close_conn(c);      /* not one of ours */
}

static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  struct conn *c = h->data;

  (void)hint;
  *buf = uv_buf_init(c->buf + c->len, (unsigned)(sizeof c->buf - c->len));
}

static void conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
  struct conn *c = s->data;
  char *nl;

  (void)buf;
  if (n < 0) {
    if (c->b->serving_watch)
      watch_gone(c);
    close_conn(c);      /* gone: its rank is no longer met */
    return;
  }
  c->len += (size_t)n;
  if (c->b->serving_watch) {
    c->last_rx = monotime_now();
    c->silent = false;          /* it speaks again */
    watch_lines(c);
    return;
  }
  nl = memchr(c->buf, '\n', c->len);
  if (!nl) {
    if (c->len == sizeof c->buf)
      close_conn(c);    /* too long for a hello */
    return;
  }
  if (c->hello) {
    close_conn(c);      /* one line per connection */
    return;
  }
  *nl = '\0';
  if ((size_t)(nl - c->buf) + 1 != c->len) {
    close_conn(c);
    return;
  }
  c->len = 0;
  on_hello(c, c->buf);
}

static void on_connection(uv_stream_t *server, int status)
{
  struct static_barrier *b = server->data;
  int limit = b->o.nnodes < MAX_CONNS ? b->o.nnodes + EXTRA_CONNS
                                      : MAX_CONNS + EXTRA_CONNS;
  struct conn *c;

  if (status < 0 || !b->listening)
    return;
  c = calloc(1, sizeof *c);
  if (!c)
    return;
  c->b = b;
  list_init(&c->in_barrier);
  c->h.data = c;
  if (uv_tcp_init(b->loop, &c->h) != 0) {
    free(c);
    return;
  }
  b->open_handles++;
  list_insert_head(&b->conns, &c->in_barrier);
  b->nconns++;
  if (uv_accept(server, (uv_stream_t *)&c->h) != 0 || b->nconns > limit ||
      uv_read_start((uv_stream_t *)&c->h, conn_alloc, conn_read) != 0)
    close_conn(c);
}

/* Node 0 serves the meeting unless the port is taken (another node 0 on
 * this host serves it: only connect, and be caught as a duplicate). */
static int start_server(struct static_barrier *b)
{
  struct sockaddr_storage sa;
  int err;

  if (strchr(b->addr, ':'))
    err = uv_ip6_addr("::", b->o.port, (struct sockaddr_in6 *)&sa);
  else
    err = uv_ip4_addr("0.0.0.0", b->o.port, (struct sockaddr_in *)&sa);
  if (err)
    return err;
  err = uv_tcp_init(b->loop, &b->listener);
  if (err)
    return err;
  b->listener.data = b;
  b->open_handles++;
  b->listening = true;
  err = uv_tcp_bind(&b->listener, (struct sockaddr *)&sa, 0);
  if (err == 0)
    err = uv_listen((uv_stream_t *)&b->listener, 128, on_connection);
  if (err) {
    stop_listening(b);
    return err == UV_EADDRINUSE ? 0 : err;
  }
  return 0;
}

/* ---- the client (every node) ------------------------------------------- */

static void retry_later(struct static_barrier *b)
{
  close_client(b);
  b->clen = 0;
  if (!b->finished)
    uv_timer_start(&b->retry, retry_fired, RETRY_MS, 0);
}

static void client_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  struct static_barrier *b = h->data;

  (void)hint;
  *buf = uv_buf_init(b->cbuf + b->clen, (unsigned)(sizeof b->cbuf - b->clen
                                                    - 1));
}

/* ---- Note [static watch]: every other node's side ---- */

static void client_watch(struct static_barrier *b, ssize_t n)
{
  char *nl, host[96];
  int rank, end = 0;
  char how[16], token[96];

  if (n < 0) {
    b->watching = false;
    close_client(b);
    uv_timer_stop(&b->ka_timer);
    if (!b->server_done && !b->left) {
      snprintf(host, sizeof host, "%s", b->addr);
      b->left = true;
      if (b->lost)
        b->lost(b->ctx, 0, host, RDZV_LEFT_DIED);
    }
    return;
  }
  b->server_rx = monotime_now();
  b->server_silent = false;     /* node 0 speaks again */
  b->clen += (size_t)n;
  b->cbuf[b->clen] = '\0';
  while (b->watching && (nl = strchr(b->cbuf, '\n'))) {
    size_t k = (size_t)(nl - b->cbuf) + 1;

    *nl = '\0';
    if (strcmp(b->cbuf, "done") == 0) {
      b->server_done = true;
    } else if (strcmp(b->cbuf, "ka") == 0) {
      b->server_ka = b->window > 0;     /* Note [static keepalive] */
    } else if (strcmp(b->cbuf, "bye") == 0 && !b->left) {
      b->left = true;
      if (b->lost)
        b->lost(b->ctx, 0, b->addr, RDZV_LEFT_GOODBYE);
    } else if (sscanf(b->cbuf, "lost %d %15s %95s%n", &rank, how, token,
                      &end) == 3 && b->cbuf[end] == '\0' && !b->left &&
               rank >= 0 && rank < b->o.nnodes) {
      b->left = !b->lost ||
                b->lost(b->ctx, rank, token,
                        strcmp(how, "bye") == 0 ? RDZV_LEFT_GOODBYE
                        : strcmp(how, "silent") == 0 ? RDZV_LEFT_SILENT
                                                     : RDZV_LEFT_DIED);
    }
    memmove(b->cbuf, b->cbuf + k, b->clen - k + 1);
    b->clen -= k;
  }
  if (b->clen >= sizeof b->cbuf - 1)
    b->clen = 0;        /* not node 0's: forget it */
}

/* Whether line is node 0's "ok watch", with or without a run nonce
 * (Note [static run nonce]); the nonce goes to b->run_nonce. */
static bool ok_watch(struct static_barrier *b, const char *line)
{
  static const char prefix[] = "ok watch";
  const char *n = line + sizeof prefix - 1;

  if (strncmp(line, prefix, sizeof prefix - 1) != 0)
    return false;
  if (*n == '\0') {
    b->run_nonce[0] = '\0';
    return true;
  }
  if (*n != ' ' || strlen(n + 1) != NONCE_HEX ||
      strspn(n + 1, "0123456789abcdef") != NONCE_HEX)
    return false;
  memcpy(b->run_nonce, n + 1, NONCE_HEX + 1);
  return true;
}

static void client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
  struct static_barrier *b = s->data;
  char *nl;

  (void)buf;
  if (b->watching) {
    client_watch(b, n);
    return;
  }
  if (b->finished)
    return;
  if (n < 0) {
    retry_later(b);     /* no answer: node 0 went away, or it was not us */
    return;
  }
  b->clen += (size_t)n;
  b->cbuf[b->clen] = '\0';
  nl = strchr(b->cbuf, '\n');
  if (!nl) {
    if (b->clen >= sizeof b->cbuf - 1)
      retry_later(b);
    return;
  }
  *nl = '\0';
  if (ok_watch(b, b->cbuf) && b->o.node_rank != 0) {
    char hello[64];
    size_t rest = b->clen - (size_t)(nl + 1 - b->cbuf);
    uv_buf_t w;

    /* Note [static watch]: node 0 keeps the connection; say how this
     * node leaves, when it does.  Note [static keepalive]: and send
     * keepalives, the first with this node's window. */
    if (b->window > 0)
      snprintf(hello, sizeof hello, "watch\nka %.3f\n", b->window);
    else
      snprintf(hello, sizeof hello, "watch\n");
    w = uv_buf_init(hello, (unsigned)strlen(hello));
    b->watching = uv_try_write((uv_stream_t *)&b->client, &w, 1) ==
                  (int)strlen(hello);
    memmove(b->cbuf, nl + 1, rest + 1);
    b->clen = rest;
    b->server_rx = monotime_now();
    finish(b, 0, NULL);
    if (b->watching && !b->freeing) {
      if (b->window > 0)
        keepalive_start(b);
      client_watch(b, 0);       /* what came with "ok watch" */
    }
  } else if (strcmp(b->cbuf, "ok") == 0 || ok_watch(b, b->cbuf))
    finish(b, 0, NULL);
  else if (strncmp(b->cbuf, "error ", 6) == 0)
    finish(b, -EINVAL, b->cbuf + 6);
  else
    retry_later(b);
}

static void hello_written(uv_write_t *w, int status)
{
  struct static_barrier *b = w->data;

  if (status < 0 && !b->finished && b->client_open)
    retry_later(b);
}

static void connected(uv_connect_t *req, int status)
{
  struct static_barrier *b = req->data;
  uv_buf_t buf = uv_buf_init(b->hello, (unsigned)strlen(b->hello));

  if (b->finished || !b->client_open)
    return;
  if (status < 0) {
    retry_later(b);
    return;
  }
  b->client_wr.data = b;
  if (uv_write(&b->client_wr, (uv_stream_t *)&b->client, &buf, 1,
               hello_written) != 0 ||
      uv_read_start((uv_stream_t *)&b->client, client_alloc,
                    client_read) != 0)
    retry_later(b);
}

static void resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *ai)
{
  struct static_barrier *b = req->data;

  b->gai_active = false;
  b->open_handles--;
  if (b->freeing) {
    uv_freeaddrinfo(ai);
    maybe_free(b);
    return;
  }
  if (status == 0 && ai && ai->ai_addrlen <= sizeof b->peer) {
    memcpy(&b->peer, ai->ai_addr, ai->ai_addrlen);
    b->have_peer = true;
  }
  uv_freeaddrinfo(ai);
  if (b->finished)
    return;
  if (b->have_peer)
    try_connect(b);
  else
    uv_timer_start(&b->retry, retry_fired, RETRY_MS, 0);
}

static void try_connect(struct static_barrier *b)
{
  struct addrinfo hints;

  if (b->finished)
    return;
  if (!b->have_peer) {
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    b->gai.data = b;
    if (uv_getaddrinfo(b->loop, &b->gai, resolved, b->addr, b->port_text,
                       &hints) == 0) {
      b->gai_active = true;
      b->open_handles++;
    } else {
      uv_timer_start(&b->retry, retry_fired, RETRY_MS, 0);
    }
    return;
  }
  if (uv_tcp_init(b->loop, &b->client) != 0) {
    uv_timer_start(&b->retry, retry_fired, RETRY_MS, 0);
    return;
  }
  b->client.data = b;
  b->client_open = true;
  b->open_handles++;
  b->connect.data = b;
  if (uv_tcp_connect(&b->connect, &b->client, (struct sockaddr *)&b->peer,
                     connected) != 0)
    retry_later(b);
}

static void timed_out(uv_timer_t *t)
{
  struct static_barrier *b = t->data;
  char why[512];

  if (b->listening)
    snprintf(why, sizeof why, "static rendezvous: waited %g s for the "
             "other nodes: %d of %d node ranks met here at port %d (each "
             "node needs its own --node_rank, or use "
             "--rdzv_backend=c10d)", b->o.timeout_s, b->met, b->o.nnodes,
             b->o.port);
  else
    snprintf(why, sizeof why, "static rendezvous: waited %g s for node 0 "
             "at %s:%d (the --node_rank=0 node serves the meeting there, "
             "on MASTER_PORT, until every node has arrived)",
             b->o.timeout_s, b->addr, b->o.port);
  stop_listening(b);
  while (!list_empty(&b->conns))
    close_conn(list_first(&b->conns, struct conn, in_barrier));
  finish(b, -ETIMEDOUT, why);
}

int static_barrier_start(uv_loop_t *loop, const struct static_barrier_opts *o,
                         static_barrier_done done, static_barrier_lost lost,
                         void *ctx, struct static_barrier **out)
{
  struct static_barrier *b = calloc(1, sizeof *b);
  char host[64];
  unsigned rnd = 0;
  int err;

  if (!b)
    return -ENOMEM;
  b->loop = loop;
  list_init(&b->conns);
  b->o = *o;
  snprintf(b->addr, sizeof b->addr, "%s", o->master_addr);
  b->o.master_addr = b->addr;
  snprintf(b->port_text, sizeof b->port_text, "%d", o->port);
  b->done = done;
  b->lost = lost;
  b->ctx = ctx;
  if (gethostname(host, sizeof host) < 0)
    snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  host[strcspn(host, " \t\n")] = '\0';
  if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
    rnd = (unsigned)uv_hrtime();
  if (o->node_rank == 0) {
    jobtoken_run_nonce(b->serve_nonce);
  }
  snprintf(b->token, sizeof b->token, "%s:pid%d:%08x", host, (int)getpid(),
           rnd);
  snprintf(b->hello, sizeof b->hello, "cdrun-static 1 %d %d %d %s\n",
           o->node_rank, o->nnodes, o->nproc, b->token);
  if (o->keepalive_interval > 0 && o->keepalive_misses > 0)
    b->window = rdzv_rules_keepalive_window(o->keepalive_interval,
                                            o->keepalive_misses);
  if (o->node_rank == 0)
    snprintf(b->ok_line, sizeof b->ok_line, "ok watch %s\n%s",
             b->serve_nonce, b->window > 0 ? "ka\n" : "");
  uv_timer_init(loop, &b->retry);
  uv_timer_init(loop, &b->deadline);
  uv_timer_init(loop, &b->ka_timer);
  b->retry.data = b->deadline.data = b->ka_timer.data = b;
  b->open_handles = 3;
  if (o->node_rank == 0) {
    err = start_server(b);
    if (err) {
      b->finished = true;
      static_barrier_close(b);
      return err;
    }
  }
  uv_timer_start(&b->deadline, timed_out, (uint64_t)(o->timeout_s * 1000.0),
                 0);
  /* Connects from the loop: done never runs inside this call. */
  uv_timer_start(&b->retry, retry_fired, 0, 0);
  *out = b;
  return 0;
}

const char *static_barrier_run_nonce(const struct static_barrier *b)
{
  return b ? b->run_nonce : "";
}

void static_barrier_leave(struct static_barrier *b, bool done)
{
  struct list_node *pos, *next;
  uv_buf_t buf = done ? uv_buf_init("done\n", 5) : uv_buf_init("bye\n", 4);

  if (!b || b->said)
    return;
  b->left = b->said = true;
  if (b->watching && b->client_open)
    (void)uv_try_write((uv_stream_t *)&b->client, &buf, 1);
  if (b->serving_watch)
    list_for_each_safe(pos, next, &b->conns) {
      struct conn *c = list_entry(pos, struct conn, in_barrier);

      if (c->watch && !c->closing)
        (void)uv_try_write((uv_stream_t *)&c->h, &buf, 1);
    }
}

void static_barrier_close(struct static_barrier *b)
{
  if (!b)
    return;
  b->finished = true;
  b->freeing = true;
  stop_listening(b);
  while (!list_empty(&b->conns))
    close_conn(list_first(&b->conns, struct conn, in_barrier));
  close_client(b);
  if (b->gai_active)
    uv_cancel((uv_req_t *)&b->gai);
  uv_close((uv_handle_t *)&b->retry, handle_closed);
  uv_close((uv_handle_t *)&b->deadline, handle_closed);
  uv_close((uv_handle_t *)&b->ka_timer, handle_closed);
}
