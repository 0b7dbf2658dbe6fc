/* store.c -- the key-value store: a TCP server thread and its client. */

/* Wire protocol, version 1.  Every integer is little-endian.
 *
 * Handshake: on connect the client sends 4 bytes, 'p' 'g' 's' VERSION.
 * The server answers with its own 4 bytes ('p' 'g' 's' and its version);
 * on a wrong magic or version it answers and then closes.
 *
 * Request:  u32 length | u8 op | u32 request_id | fields
 * Reply:    u32 length | u32 request_id | u8 status | fields (if OK)
 * length counts the bytes after itself.  A byte string ("bytes") is
 * u32 n | n bytes; keys are 0..4096 bytes, values 0..64 MiB.
 *
 *   op  name       request fields                  reply fields (OK)
 *    1  SET        key, value: bytes               -
 *    2  GET        key: bytes, u32 timeout_ms      value: bytes
 *    3  ADD        key: bytes, i64 delta           i64 new value
 *    4  CAS        key, expected, desired: bytes   u8 swapped, u8 present,
 *                                                  value: bytes (after)
 *    5  WAIT       u32 timeout_ms, u32 n, n keys   -
 *    6  DELETE     key: bytes                      u8 existed
 *    7  NUM_KEYS   -                               i64 count
 *
 * timeout_ms: 0 = answer at once (GET: NOT_FOUND, WAIT: TIMEOUT when a
 * key is missing), 0xffffffff = no limit.  Waits are answered by the
 * server when the keys appear or at the deadline, so the client needs no
 * cancel message.  ADD keeps the value as decimal ASCII (absent = 0).
 * CAS: an empty expected value matches an absent key (and an empty one);
 * "present" says whether the key exists after the operation.  WAIT takes
 * at most 65536 keys.
 *
 * Status: 0 OK, 1 NOT_FOUND, 2 TIMEOUT, 3 NOT_NUMBER, 4 TOO_LARGE,
 * 5 MALFORMED, 6 NO_MEMORY, 7 UNKNOWN_OP, 8 OVERFLOW.  A frame that cannot
 * be parsed (length out of range, fields that do not add up to it) gets
 * MALFORMED (request id 0 if unknown) and the server closes the
 * connection; anything else wrong gets its status and the connection
 * stays.  The server answers each connection's requests in order and
 * reads no further request while one waits; the client sends one request
 * at a time (a mutex serialises threads). */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pg_internal.h"

#define ST_VERSION 1
#define ST_MAX_KEY 4096u
#define ST_MAX_VALUE (64u << 20)
#define ST_MAX_WAIT_KEYS 65536u
/* The largest request (CAS) and reply (GET / CAS): checked before any
 * buffer is sized for a frame. */
#define ST_MAX_FRAME (2 * (ST_MAX_VALUE + 4) + ST_MAX_KEY + 16)
#define ST_MAX_REPLY (ST_MAX_VALUE + 16)
#define ST_NO_LIMIT 0xffffffffu

enum {
  ST_SET = 1, ST_GET, ST_ADD, ST_CAS, ST_WAIT, ST_DELETE, ST_NUM_KEYS
};
enum {
  ST_OK = 0, ST_NOT_FOUND, ST_TIMEOUT, ST_NOT_NUMBER, ST_TOO_LARGE,
  ST_MALFORMED, ST_NO_MEMORY, ST_UNKNOWN_OP, ST_OVERFLOW
};

static const uint8_t st_hello[4] = { 'p', 'g', 's', ST_VERSION };

/* ---- encoding ----------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

static void put_u64(uint8_t *p, uint64_t v)
{
  put_u32(p, (uint32_t)v);
  put_u32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get_u32(const uint8_t *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
  return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* A byte queue: data lives in p[off, len).  Appends that fail set oom, so
 * a message is built without a check per field. */
struct buf {
  uint8_t *p;
  size_t off, len, cap;
  bool oom;
};

static bool buf_reserve(struct buf *b, size_t extra)
{
  size_t cap;
  uint8_t *p;

  if (b->cap - b->len >= extra)
    return true;
  if (b->off > 0) {
    memmove(b->p, b->p + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
    if (b->cap - b->len >= extra)
      return true;
  }
  cap = b->cap ? b->cap : 4096;
  while (cap - b->len < extra)
    cap *= 2;
  p = realloc(b->p, cap);
  if (!p) {
    b->oom = true;
    return false;
  }
  b->p = p;
  b->cap = cap;
  return true;
}

static void buf_put(struct buf *b, const void *data, size_t n)
{
  if (n == 0 || !buf_reserve(b, n))
    return;
  memcpy(b->p + b->len, data, n);
  b->len += n;
}

static void buf_u8(struct buf *b, uint8_t v)
{
  buf_put(b, &v, 1);
}

static void buf_u32(struct buf *b, uint32_t v)
{
  uint8_t t[4];

  put_u32(t, v);
  buf_put(b, t, 4);
}

static void buf_u64(struct buf *b, uint64_t v)
{
  uint8_t t[8];

  put_u64(t, v);
  buf_put(b, t, 8);
}

static void buf_bytes(struct buf *b, const void *data, size_t n)
{
  buf_u32(b, (uint32_t)n);
  buf_put(b, data, n);
}

static size_t buf_used(const struct buf *b)
{
  return b->len - b->off;
}

/* Empties b; a buffer grown for one big value is given back. */
static void buf_clear(struct buf *b)
{
  b->off = b->len = 0;
  if (b->cap > (1u << 20)) {
    free(b->p);
    b->p = NULL;
    b->cap = 0;
  }
}

static void buf_free(struct buf *b)
{
  free(b->p);
  memset(b, 0, sizeof *b);
}

/* A reader over one frame; running past the end sets bad. */
struct rd {
  const uint8_t *p;
  size_t n;
  bool bad;
};

static const uint8_t *rd_take(struct rd *r, size_t n)
{
  const uint8_t *p = r->p;

  if (r->bad || r->n < n) {
    r->bad = true;
    return NULL;
  }
  r->p += n;
  r->n -= n;
  return p;
}

static uint8_t rd_u8(struct rd *r)
{
  const uint8_t *p = rd_take(r, 1);

  return p ? p[0] : 0;
}

static uint32_t rd_u32(struct rd *r)
{
  const uint8_t *p = rd_take(r, 4);

  return p ? get_u32(p) : 0;
}

static uint64_t rd_u64(struct rd *r)
{
  const uint8_t *p = rd_take(r, 8);

  return p ? get_u64(p) : 0;
}

static const uint8_t *rd_bytes(struct rd *r, size_t *n)
{
  *n = rd_u32(r);
  return rd_take(r, *n);
}

/* The frame was used up exactly. */
static bool rd_done(const struct rd *r)
{
  return !r->bad && r->n == 0;
}

/* Decimal ASCII to int64: optional sign, at least one digit, nothing
 * else. */
static bool parse_i64(const uint8_t *p, size_t n, int64_t *out)
{
  uint64_t v = 0, lim = INT64_MAX;
  bool neg = false;
  size_t i = 0;

  if (n > 0 && (p[0] == '-' || p[0] == '+')) {
    neg = p[0] == '-';
    lim = (uint64_t)INT64_MAX + 1;
    i = 1;
  }
  if (i == n)
    return false;
  for (; i < n; i++) {
    unsigned d = (unsigned)p[i] - '0';

    if (d > 9 || v > (lim - d) / 10)
      return false;
    v = v * 10 + d;
  }
  if (!neg)
    *out = (int64_t)v;
  else
    *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
  return true;
}

/* ---- server ------------------------------------------------------------- */

#define ST_NOT_IN_HEAP SIZE_MAX
/* Stop reading a connection's requests while this much output waits: a
 * client that does not read its replies cannot grow our memory. */
#define ST_OUT_HIGH (4u << 20)
/* Bytes read from one connection per wakeup, so one big upload does not
 * starve the others. */
#define ST_READ_SLICE (4u << 20)
/* How long a connection being closed for garbage may still drain. */
#define ST_LINGER 1.0

struct st_conn;
struct st_entry;

/* One key a waiting connection still misses, linked on that key. */
struct st_reg {
  struct st_reg *prev, *next;
  struct st_entry *e;       /* NULL once unlinked */
  struct st_conn *c;
};

/* A key.  Entries stay while absent keys have waiters, so a waiter
 * always has something to hang on; num_keys counts present ones. */
struct st_entry {
  struct st_entry *next;    /* hash chain */
  uint64_t hash;
  bool present;
  uint8_t *val;
  size_t vlen;
  struct st_reg *waiters;
  size_t klen;
  uint8_t key[];
};

struct st_conn {
  struct st_conn *prev, *next;      /* every open connection */
  struct st_conn *resume_next;      /* needs progress after a wakeup */
  struct st_conn *dead_next;        /* closed, freed after the batch */
  int fd;
  uint32_t events;                  /* what epoll watches */
  bool hello_done, closing, shut, eof, dead, in_resume;
  struct buf in, out;
  /* A WAIT or GET that waits: one reg per missing key. */
  bool waiting;
  uint8_t wait_op;
  uint32_t wait_id;
  struct st_reg *regs;
  size_t nregs, missing;
  double deadline;                  /* wait end, or linger end */
  size_t heap_idx;
};

struct pg_store_server {
  pthread_t thread;
  int epfd, lfd, wakefd;
  double accept_resume;             /* > 0: accepting paused until then */
  struct st_entry **buckets;
  size_t nbuckets, nentries;
  int64_t nkeys;
  struct st_conn *conns, *resume, *dead;
  struct st_conn **heap;            /* min-heap on deadline */
  size_t heap_len, heap_cap;
};

static uint64_t st_hash(const uint8_t *k, size_t n)
{
  uint64_t h = 1469598103934665603ull;   /* FNV-1a */
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ k[i]) * 1099511628211ull;
  return h;
}

static struct st_entry *tbl_find(struct pg_store_server *srv,
                                 const uint8_t *k, size_t n)
{
  uint64_t h = st_hash(k, n);
  struct st_entry *e = srv->buckets[h & (srv->nbuckets - 1)];

  for (; e; e = e->next)
    if (e->hash == h && e->klen == n && (n == 0 || !memcmp(e->key, k, n)))
      return e;
  return NULL;
}

static void tbl_grow(struct pg_store_server *srv)
{
  size_t n = srv->nbuckets * 2, i;
  struct st_entry **b = calloc(n, sizeof *b), *e, *next;

  if (!b)
    return;             /* longer chains, still correct */
  for (i = 0; i < srv->nbuckets; i++)
    for (e = srv->buckets[i]; e; e = next) {
      next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
    }
  free(srv->buckets);
  srv->buckets = b;
  srv->nbuckets = n;
}

/* The entry for k, created absent if needed; NULL when out of memory. */
static struct st_entry *tbl_get(struct pg_store_server *srv,
                                const uint8_t *k, size_t n)
{
  struct st_entry *e = tbl_find(srv, k, n), **slot;

  if (e)
    return e;
  e = calloc(1, sizeof *e + n);
  if (!e)
    return NULL;
  e->hash = st_hash(k, n);
  e->klen = n;
  if (n)
    memcpy(e->key, k, n);
  if (srv->nentries >= srv->nbuckets)
    tbl_grow(srv);
  slot = &srv->buckets[e->hash & (srv->nbuckets - 1)];
  e->next = *slot;
  *slot = e;
  srv->nentries++;
  return e;
}

/* Frees e when nothing needs it: absent and nobody waiting. */
static void tbl_release(struct pg_store_server *srv, struct st_entry *e)
{
  struct st_entry **pp;

  if (e->present || e->waiters)
    return;
  pp = &srv->buckets[e->hash & (srv->nbuckets - 1)];
  while (*pp != e)
    pp = &(*pp)->next;
  *pp = e->next;
  srv->nentries--;
  free(e->val);
  free(e);
}

static void tbl_free(struct pg_store_server *srv)
{
  struct st_entry *e, *next;
  size_t i;

  for (i = 0; i < srv->nbuckets; i++)
    for (e = srv->buckets[i]; e; e = next) {
      next = e->next;
      free(e->val);
      free(e);
    }
  free(srv->buckets);
  srv->buckets = NULL;
}

/* ---- timers: a binary heap of connections by deadline ---- */

static void heap_swap(struct pg_store_server *srv, size_t i, size_t j)
{
  struct st_conn *t = srv->heap[i];

  srv->heap[i] = srv->heap[j];
  srv->heap[j] = t;
  srv->heap[i]->heap_idx = i;
  srv->heap[j]->heap_idx = j;
}

static void heap_up(struct pg_store_server *srv, size_t i)
{
  while (i > 0 && srv->heap[i]->deadline <
                  srv->heap[(i - 1) / 2]->deadline) {
    heap_swap(srv, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
}

static void heap_down(struct pg_store_server *srv, size_t i)
{
  for (;;) {
    size_t l = 2 * i + 1, m = i;

    if (l < srv->heap_len && srv->heap[l]->deadline <
                             srv->heap[m]->deadline)
      m = l;
    if (l + 1 < srv->heap_len && srv->heap[l + 1]->deadline <
                                 srv->heap[m]->deadline)
      m = l + 1;
    if (m == i)
      return;
    heap_swap(srv, i, m);
    i = m;
  }
}

static bool heap_push(struct pg_store_server *srv, struct st_conn *c)
{
  if (srv->heap_len == srv->heap_cap) {
    size_t cap = srv->heap_cap ? 2 * srv->heap_cap : 64;
    struct st_conn **h = realloc(srv->heap, cap * sizeof *h);

    if (!h)
      return false;
    srv->heap = h;
    srv->heap_cap = cap;
  }
  c->heap_idx = srv->heap_len;
  srv->heap[srv->heap_len++] = c;
  heap_up(srv, c->heap_idx);
  return true;
}

static void heap_remove(struct pg_store_server *srv, struct st_conn *c)
{
  size_t i = c->heap_idx;

  if (i == ST_NOT_IN_HEAP)
    return;
  c->heap_idx = ST_NOT_IN_HEAP;
  srv->heap_len--;
  if (i == srv->heap_len)
    return;
  srv->heap[i] = srv->heap[srv->heap_len];
  srv->heap[i]->heap_idx = i;
  heap_down(srv, i);
  heap_up(srv, srv->heap[i]->heap_idx);
}

/* ---- connections ---- */

static void resume_push(struct pg_store_server *srv, struct st_conn *c)
{
  if (c->in_resume)
    return;
  c->in_resume = true;
  c->resume_next = srv->resume;
  srv->resume = c;
}

/* Queues a reply: status plus up to two pieces of fields. */
static void reply(struct pg_store_server *srv, struct st_conn *c,
                  uint32_t id, uint8_t status, const void *a, size_t alen,
                  const void *b, size_t blen)
{
  buf_u32(&c->out, (uint32_t)(5 + alen + blen));
  buf_u32(&c->out, id);
  buf_u8(&c->out, status);
  buf_put(&c->out, a, alen);
  buf_put(&c->out, b, blen);
  /* The connection may not be the one being served (a woken waiter). */
  resume_push(srv, c);
}

static void reply_status(struct pg_store_server *srv, struct st_conn *c,
                         uint32_t id, uint8_t status)
{
  reply(srv, c, id, status, NULL, 0, NULL, 0);
}

static void reply_value(struct pg_store_server *srv, struct st_conn *c,
                        uint32_t id, const struct st_entry *e)
{
  uint8_t n[4];

  put_u32(n, (uint32_t)e->vlen);
  reply(srv, c, id, ST_OK, n, 4, e->val, e->vlen);
}

static void reply_i64(struct pg_store_server *srv, struct st_conn *c,
                      uint32_t id, int64_t v)
{
  uint8_t t[8];

  put_u64(t, (uint64_t)v);
  reply(srv, c, id, ST_OK, t, 8, NULL, 0);
}

/* Unlinks c's remaining waits, freeing keys nobody needs any more. */
static void wait_clear(struct pg_store_server *srv, struct st_conn *c)
{
  size_t i;

  for (i = 0; i < c->nregs; i++) {
    struct st_reg *r = &c->regs[i];
    struct st_entry *e = r->e;

    if (!e)
      continue;
    if (r->prev)
      r->prev->next = r->next;
    else
      e->waiters = r->next;
    if (r->next)
      r->next->prev = r->prev;
    r->e = NULL;
    tbl_release(srv, e);
  }
  free(c->regs);
  c->regs = NULL;
  c->nregs = c->missing = 0;
  c->waiting = false;
  heap_remove(srv, c);
}

/* Answers c's wait: OK (e is the key that completed it) or TIMEOUT. */
static void wait_done(struct pg_store_server *srv, struct st_conn *c,
                      uint8_t status, const struct st_entry *e)
{
  if (status == ST_OK && c->wait_op == ST_GET)
    reply_value(srv, c, c->wait_id, e);
  else
    reply_status(srv, c, c->wait_id, status);
  wait_clear(srv, c);
}

/* e just got a value: answer the waits it completes. */
static void entry_wake(struct pg_store_server *srv, struct st_entry *e)
{
  struct st_reg *r;

  while ((r = e->waiters)) {
    e->waiters = r->next;
    if (r->next)
      r->next->prev = NULL;
    r->e = NULL;
    if (--r->c->missing == 0)
      wait_done(srv, r->c, ST_OK, e);
  }
}

/* Gives e the value p[0, n); false when out of memory. */
static bool entry_set(struct pg_store_server *srv, struct st_entry *e,
                      const void *p, size_t n)
{
  uint8_t *v = malloc(n ? n : 1);

  if (!v)
    return false;
  if (n)
    memcpy(v, p, n);
  free(e->val);
  e->val = v;
  e->vlen = n;
  if (!e->present) {
    e->present = true;
    srv->nkeys++;
  }
  return true;
}

static void conn_close(struct pg_store_server *srv, struct st_conn *c)
{
  if (c->dead)
    return;
  wait_clear(srv, c);
  heap_remove(srv, c);
  epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  c->fd = -1;
  if (c->prev)
    c->prev->next = c->next;
  else
    srv->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  buf_free(&c->in);
  buf_free(&c->out);
  /* Events of this batch may still name c: free it after the batch. */
  c->dead = true;
  c->dead_next = srv->dead;
  srv->dead = c;
}

/* A frame we cannot parse: say so, then close once the reply is out (or
 * after ST_LINGER), reading and dropping what still comes so the close
 * does not reset the connection before the peer reads the reply. */
static void conn_reject(struct pg_store_server *srv, struct st_conn *c,
                        uint32_t id)
{
  if (id || c->hello_done)
    reply_status(srv, c, id, ST_MALFORMED);
  c->closing = true;
  c->in.off = c->in.len = 0;
  c->deadline = pg__now() + ST_LINGER;
  if (!heap_push(srv, c))
    c->out.oom = true;      /* closes it at once */
  resume_push(srv, c);
}

/* Registers c as waiting for the keys keys[0..n) (lens in klen) that are
 * absent; the caller checked at least one is. */
static void wait_start(struct pg_store_server *srv, struct st_conn *c,
                       uint8_t op, uint32_t id, const uint8_t *const *keys,
                       const size_t *klen, size_t n, uint32_t ms)
{
  size_t i;

  c->regs = calloc(n, sizeof *c->regs);
  if (!c->regs) {
    reply_status(srv, c, id, ST_NO_MEMORY);
    return;
  }
  c->nregs = n;
  c->waiting = true;
  c->wait_op = op;
  c->wait_id = id;
  for (i = 0; i < n; i++) {
    struct st_entry *e = tbl_get(srv, keys[i], klen[i]);
    struct st_reg *r = &c->regs[i];

    if (!e)
      goto oom;
    if (e->present)
      continue;
    r->c = c;
    r->e = e;
    r->next = e->waiters;
    if (r->next)
      r->next->prev = r;
    e->waiters = r;
    c->missing++;
  }
  if (ms != ST_NO_LIMIT) {
    c->deadline = pg__now() + ms / 1000.0;
    if (!heap_push(srv, c))
      goto oom;
  }
  return;
oom:
  wait_clear(srv, c);
  reply_status(srv, c, id, ST_NO_MEMORY);
}

static bool key_ok(size_t n)
{
  return n <= ST_MAX_KEY;
}

static void op_set(struct pg_store_server *srv, struct st_conn *c,
                   uint32_t id, struct rd *r)
{
  size_t kn, vn;
  const uint8_t *k = rd_bytes(r, &kn), *v = rd_bytes(r, &vn);
  struct st_entry *e;

  if (!rd_done(r))
    return conn_reject(srv, c, id);
  if (!key_ok(kn) || vn > ST_MAX_VALUE)
    return reply_status(srv, c, id, ST_TOO_LARGE);
  e = tbl_get(srv, k, kn);
  if (!e || !entry_set(srv, e, v, vn)) {
    if (e)
      tbl_release(srv, e);
    return reply_status(srv, c, id, ST_NO_MEMORY);
  }
  reply_status(srv, c, id, ST_OK);
  entry_wake(srv, e);
}

static void op_get(struct pg_store_server *srv, struct st_conn *c,
                   uint32_t id, struct rd *r)
{
  size_t kn;
  const uint8_t *k = rd_bytes(r, &kn);
  uint32_t ms = rd_u32(r);
  struct st_entry *e;

  if (!rd_done(r))
    return conn_reject(srv, c, id);
  if (!key_ok(kn))
    return reply_status(srv, c, id, ST_TOO_LARGE);
  e = tbl_find(srv, k, kn);
  if (e && e->present)
    return reply_value(srv, c, id, e);
  if (ms == 0)
    return reply_status(srv, c, id, ST_NOT_FOUND);
  wait_start(srv, c, ST_GET, id, &k, &kn, 1, ms);
}

static void op_add(struct pg_store_server *srv, struct st_conn *c,
                   uint32_t id, struct rd *r)
{
  size_t kn;
  const uint8_t *k = rd_bytes(r, &kn);
  int64_t delta = (int64_t)rd_u64(r), cur = 0;
  struct st_entry *e;
  char text[24];
  int n;

  if (!rd_done(r))
    return conn_reject(srv, c, id);
  if (!key_ok(kn))
    return reply_status(srv, c, id, ST_TOO_LARGE);
  e = tbl_find(srv, k, kn);
  if (e && e->present && !parse_i64(e->val, e->vlen, &cur))
    return reply_status(srv, c, id, ST_NOT_NUMBER);
  if (__builtin_add_overflow(cur, delta, &cur))
    return reply_status(srv, c, id, ST_OVERFLOW);
  n = snprintf(text, sizeof text, "%" PRId64, cur);
  e = tbl_get(srv, k, kn);
  if (!e || !entry_set(srv, e, text, (size_t)n)) {
    if (e)
      tbl_release(srv, e);
    return reply_status(srv, c, id, ST_NO_MEMORY);
  }
  reply_i64(srv, c, id, cur);
  entry_wake(srv, e);
}

static void op_cas(struct pg_store_server *srv, struct st_conn *c,
                   uint32_t id, struct rd *r)
{
  size_t kn, xn, dn;
  const uint8_t *k = rd_bytes(r, &kn), *x = rd_bytes(r, &xn),
                *d = rd_bytes(r, &dn);
  struct st_entry *e;
  uint8_t head[6];
  bool swap;

  if (!rd_done(r))
    return conn_reject(srv, c, id);
  if (!key_ok(kn) || xn > ST_MAX_VALUE || dn > ST_MAX_VALUE)
    return reply_status(srv, c, id, ST_TOO_LARGE);
  e = tbl_find(srv, k, kn);
  if (!e || !e->present)
    swap = xn == 0;
  else
    swap = e->vlen == xn && (xn == 0 || !memcmp(e->val, x, xn));
  if (swap) {
    e = tbl_get(srv, k, kn);
    if (!e || !entry_set(srv, e, d, dn)) {
      if (e)
        tbl_release(srv, e);
      return reply_status(srv, c, id, ST_NO_MEMORY);
    }
  }
  head[0] = swap;
  head[1] = e && e->present;
  put_u32(head + 2, head[1] ? (uint32_t)e->vlen : 0);
  reply(srv, c, id, ST_OK, head, 6, head[1] ? e->val : NULL,
        head[1] ? e->vlen : 0);
  if (swap)
    entry_wake(srv, e);
}

static void op_wait(struct pg_store_server *srv, struct st_conn *c,
                    uint32_t id, struct rd *r)
{
  uint32_t ms = rd_u32(r), n = rd_u32(r), i, missing = 0;
  const uint8_t **keys;
  size_t *klen;
  bool big = false;

  /* Every key takes 4 bytes at least: a bogus n allocates nothing. */
  if (r->bad || n > r->n / 4)
    return conn_reject(srv, c, id);
  if (n > ST_MAX_WAIT_KEYS)
    return reply_status(srv, c, id, ST_TOO_LARGE);
  keys = malloc((n ? n : 1) * sizeof *keys);
  klen = malloc((n ? n : 1) * sizeof *klen);
  if (!keys || !klen) {
    reply_status(srv, c, id, ST_NO_MEMORY);
    goto out;
  }
  for (i = 0; i < n; i++) {
    struct st_entry *e;

    keys[i] = rd_bytes(r, &klen[i]);
    if (r->bad)
      break;
    big |= !key_ok(klen[i]);
    e = big ? NULL : tbl_find(srv, keys[i], klen[i]);
    missing += !e || !e->present;
  }
  if (!rd_done(r))
    conn_reject(srv, c, id);
  else if (big)
    reply_status(srv, c, id, ST_TOO_LARGE);
  else if (missing == 0)
    reply_status(srv, c, id, ST_OK);
  else if (ms == 0)
    reply_status(srv, c, id, ST_TIMEOUT);
  else
    wait_start(srv, c, ST_WAIT, id, keys, klen, n, ms);
out:
  free(keys);
  free(klen);
}

static void op_delete(struct pg_store_server *srv, struct st_conn *c,
                      uint32_t id, struct rd *r)
{
  size_t kn;
  const uint8_t *k = rd_bytes(r, &kn);
  struct st_entry *e;
  uint8_t existed = 0;

  if (!rd_done(r))
    return conn_reject(srv, c, id);
  if (!key_ok(kn))
    return reply_status(srv, c, id, ST_TOO_LARGE);
  e = tbl_find(srv, k, kn);
  if (e && e->present) {
    existed = 1;
    free(e->val);
    e->val = NULL;
    e->vlen = 0;
    e->present = false;
    srv->nkeys--;
    tbl_release(srv, e);
  }
  reply(srv, c, id, ST_OK, &existed, 1, NULL, 0);
}

static void serve_frame(struct pg_store_server *srv, struct st_conn *c,
                        const uint8_t *p, size_t n)
{
  struct rd r = { p, n, false };
  uint8_t op = rd_u8(&r);
  uint32_t id = rd_u32(&r);

  switch (op) {
  case ST_SET: op_set(srv, c, id, &r); break;
  case ST_GET: op_get(srv, c, id, &r); break;
  case ST_ADD: op_add(srv, c, id, &r); break;
  case ST_CAS: op_cas(srv, c, id, &r); break;
  case ST_WAIT: op_wait(srv, c, id, &r); break;
  case ST_DELETE: op_delete(srv, c, id, &r); break;
  case ST_NUM_KEYS:
    if (!rd_done(&r))
      conn_reject(srv, c, id);
    else
      reply_i64(srv, c, id, srv->nkeys);
    break;
  default:
    reply_status(srv, c, id, ST_UNKNOWN_OP);
  }
}

/* Serves the complete requests buffered on c, in order, until one waits
 * or the output backs up. */
static void conn_serve(struct pg_store_server *srv, struct st_conn *c)
{
  while (!c->waiting && !c->closing && !c->out.oom &&
         buf_used(&c->out) < ST_OUT_HIGH) {
    const uint8_t *p = c->in.p + c->in.off;
    size_t avail = buf_used(&c->in);
    uint32_t len;

    if (!c->hello_done) {
      if (avail < 4)
        break;
      buf_put(&c->out, st_hello, 4);
      if (memcmp(p, st_hello, 4)) {
        conn_reject(srv, c, 0);
        break;
      }
      c->hello_done = true;
      c->in.off += 4;
      continue;
    }
    if (avail < 4)
      break;
    len = get_u32(p);
    if (len < 5 || len > ST_MAX_FRAME) {
      conn_reject(srv, c, avail >= 9 ? get_u32(p + 5) : 0);
      break;
    }
    if (avail - 4 < len)
      break;
    /* Nothing below reads c->in, so the frame can be used in place. */
    c->in.off += 4 + (size_t)len;
    serve_frame(srv, c, p + 4, len);
  }
  if (buf_used(&c->in) == 0)
    buf_clear(&c->in);
}

/* Reads what c has for us.  Returns -1 when c must close. */
static int conn_read(struct st_conn *c)
{
  size_t total = 0;

  while (total < ST_READ_SLICE) {
    ssize_t n;

    /* A big frame grows the buffer by doubling as its bytes arrive, not
     * by trusting its header up front. */
    if (c->closing)
      c->in.off = c->in.len = 0;
    if (!buf_reserve(&c->in, 65536))
      return -1;
    n = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, 0);
    if (n > 0) {
      c->in.len += (size_t)n;
      total += (size_t)n;
    } else if (n == 0) {
      c->eof = true;
      return c->closing ? -1 : 0;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return 0;
    } else {
      return -1;
    }
  }
  return 0;
}

static int conn_flush(struct st_conn *c)
{
  while (buf_used(&c->out) > 0) {
    ssize_t n = send(c->fd, c->out.p + c->out.off, buf_used(&c->out),
                     MSG_NOSIGNAL | MSG_DONTWAIT);

    if (n > 0)
      c->out.off += (size_t)n;
    else if (n < 0 && errno == EINTR)
      continue;
    else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    else
      return -1;
  }
  buf_clear(&c->out);
  return 0;
}

/* After anything happened to c: serve, write, close or re-arm epoll. */
static void conn_progress(struct pg_store_server *srv, struct st_conn *c)
{
  uint32_t want;

  for (;;) {
    bool backed_up;

    conn_serve(srv, c);
    backed_up = buf_used(&c->out) >= ST_OUT_HIGH;
    if (c->out.oom || conn_flush(c) < 0)
      return conn_close(srv, c);
    if (!backed_up || buf_used(&c->out) >= ST_OUT_HIGH || c->waiting ||
        c->closing)
      break;
  }
  if (c->closing && !c->shut && buf_used(&c->out) == 0) {
    shutdown(c->fd, SHUT_WR);
    c->shut = true;
  }
  /* A peer that hung up gets the replies to what it sent, then we close;
   * one that hung up while waiting is gone. */
  if (c->eof && (c->waiting || c->closing || buf_used(&c->out) == 0))
    return conn_close(srv, c);
  want = 0;
  if (!c->eof) {
    want |= EPOLLRDHUP;
    if (c->closing || (!c->waiting && buf_used(&c->out) < ST_OUT_HIGH))
      want |= EPOLLIN;
  }
  if (buf_used(&c->out) > 0)
    want |= EPOLLOUT;
  if (want != c->events) {
    struct epoll_event ev = { .events = want, .data.ptr = c };

    if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
      return conn_close(srv, c);
    c->events = want;
  }
}

static void conn_event(struct pg_store_server *srv, struct st_conn *c,
                       uint32_t ev)
{
  if (c->dead)
    return;
  if ((ev & (EPOLLERR | EPOLLHUP)) || ((ev & EPOLLRDHUP) && c->waiting))
    return conn_close(srv, c);
  if ((ev & (EPOLLIN | EPOLLRDHUP)) && conn_read(c) < 0)
    return conn_close(srv, c);
  conn_progress(srv, c);
}

static void srv_accept(struct pg_store_server *srv)
{
  for (;;) {
    int fd = accept4(srv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int one = 1;
    struct st_conn *c;
    struct epoll_event ev;

    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        /* Out of fds or memory: the listener stays readable, so stop
         * watching it for a moment instead of spinning. */
        struct epoll_event ev0 = { .events = 0, .data.ptr = &srv->lfd };

        if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, srv->lfd, &ev0) == 0)
          srv->accept_resume = pg__now() + 0.1;
      }
      return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c = calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    c->fd = fd;
    c->heap_idx = ST_NOT_IN_HEAP;
    c->events = EPOLLIN | EPOLLRDHUP;
    ev.events = c->events;
    ev.data.ptr = c;
    if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
      close(fd);
      free(c);
      continue;
    }
    c->next = srv->conns;
    if (c->next)
      c->next->prev = c;
    srv->conns = c;
  }
}

static void srv_expire(struct pg_store_server *srv)
{
  double now = pg__now();

  while (srv->heap_len > 0 && srv->heap[0]->deadline <= now) {
    struct st_conn *c = srv->heap[0];

    heap_remove(srv, c);
    if (c->waiting)
      wait_done(srv, c, ST_TIMEOUT, NULL);
    else
      conn_close(srv, c);   /* a rejected one that lingered enough */
  }
}

static int srv_timeout_ms(const struct pg_store_server *srv)
{
  double dt, next = INFINITY;

  if (srv->heap_len > 0)
    next = srv->heap[0]->deadline;
  if (srv->accept_resume > 0)
    next = fmin(next, srv->accept_resume);
  if (isinf(next))
    return -1;
  dt = next - pg__now();
  if (dt <= 0)
    return 0;
  return dt > 86400 ? 86400000 : (int)ceil(dt * 1000);
}

static void *srv_main(void *arg)
{
  struct pg_store_server *srv = arg;
  struct epoll_event evs[64];
  bool stop = false;

  pthread_setname_np(pthread_self(), "pg-store");   /* for top, gdb */

  while (!stop) {
    int n = epoll_wait(srv->epfd, evs, 64, srv_timeout_ms(srv)), i;
    struct st_conn *c;

    if (n < 0 && errno != EINTR)
      break;
    for (i = 0; i < n; i++) {
      if (evs[i].data.ptr == &srv->wakefd)
        stop = true;
      else if (evs[i].data.ptr == &srv->lfd)
        srv_accept(srv);
      else
        conn_event(srv, evs[i].data.ptr, evs[i].events);
    }
    srv_expire(srv);
    if (srv->accept_resume > 0 && pg__now() >= srv->accept_resume) {
      struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &srv->lfd };

      epoll_ctl(srv->epfd, EPOLL_CTL_MOD, srv->lfd, &ev);
      srv->accept_resume = 0;
    }
    while ((c = srv->resume)) {
      srv->resume = c->resume_next;
      c->in_resume = false;
      if (!c->dead)
        conn_progress(srv, c);
    }
    while ((c = srv->dead)) {
      srv->dead = c->dead_next;
      free(c);
    }
  }
  /* Stopping (or epoll broke): every client sees its connection close
   * now rather than waiting for its deadline. */
  while (srv->conns)
    conn_close(srv, srv->conns);
  while (srv->dead) {
    struct st_conn *c = srv->dead;

    srv->dead = c->dead_next;
    free(c);
  }
  srv->resume = NULL;
  return NULL;
}

/* A listening socket on sa; SO_REUSEADDR because cdrun holds the port
 * bound (Note [port reservation] in launcher/port.h). */
static int listen_on(const struct sockaddr *sa, socklen_t len)
{
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  0);
  int one = 1, zero = 0, err;

  if (fd < 0)
    return -errno;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      (sa->sa_family == AF_INET6 &&
       setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) < 0) ||
      bind(fd, sa, len) < 0 || listen(fd, 16384) < 0) {
    err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

static int srv_listen(const char *addr, int port)
{
  struct addrinfo hints, *res, *ai;
  char service[16];
  int fd = -EADDRNOTAVAIL, rc;

  if (!addr) {
    /* Dual-stack ::, else (no IPv6 here) 0.0.0.0. */
    struct sockaddr_in6 s6 = { .sin6_family = AF_INET6,
                               .sin6_port = htons((uint16_t)port),
                               .sin6_addr = IN6ADDR_ANY_INIT };
    struct sockaddr_in s4 = { .sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_ANY) };

    fd = listen_on((struct sockaddr *)&s6, sizeof s6);
    if (fd < 0)
      fd = listen_on((struct sockaddr *)&s4, sizeof s4);
  } else {
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(service, sizeof service, "%d", port);
    rc = getaddrinfo(addr, service, &hints, &res);
    if (rc)
      return pg__fail(-EINVAL, "store: cannot resolve listen address "
                      "'%s': %s", addr, gai_strerror(rc));
    for (ai = res; ai; ai = ai->ai_next) {
      fd = listen_on(ai->ai_addr, ai->ai_addrlen);
      if (fd >= 0)
        break;
    }
    freeaddrinfo(res);
  }
  if (fd < 0)
    return pg__fail(fd, "store: cannot listen on %s:%d: %s",
                    addr ? addr : "*", port, strerror(-fd));
  return fd;
}

static int srv_add_fd(struct pg_store_server *srv, int fd, void *tag)
{
  struct epoll_event ev = { .events = EPOLLIN, .data.ptr = tag };

  return epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static void srv_free(struct pg_store_server *srv)
{
  if (srv->lfd >= 0)
    close(srv->lfd);
  if (srv->epfd >= 0)
    close(srv->epfd);
  if (srv->wakefd >= 0)
    close(srv->wakefd);
  tbl_free(srv);
  free(srv->heap);
  free(srv);
}

int pg_store_server_start(const char *addr, int *port,
                          pg_store_server **out)
{
  struct pg_store_server *srv;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  sigset_t all, old;
  int err;

  if (!out || !port || *port < 0 || *port > 65535)
    return pg__fail(-EINVAL, "store: server needs a port 0..65535 (got "
                    "%d)", port ? *port : -1);
  *out = NULL;
  srv = calloc(1, sizeof *srv);
  if (!srv)
    return pg__fail(-ENOMEM, "store: out of memory");
  srv->lfd = srv->epfd = srv->wakefd = -1;
  srv->nbuckets = 1024;
  srv->buckets = calloc(srv->nbuckets, sizeof *srv->buckets);
  if (!srv->buckets) {
    srv_free(srv);
    return pg__fail(-ENOMEM, "store: out of memory");
  }
  srv->lfd = srv_listen(addr, *port);
  if (srv->lfd < 0) {
    err = srv->lfd;
    srv->lfd = -1;
    srv_free(srv);
    return err;
  }
  srv->epfd = epoll_create1(EPOLL_CLOEXEC);
  srv->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (srv->epfd < 0 || srv->wakefd < 0 ||
      getsockname(srv->lfd, (struct sockaddr *)&ss, &sl) < 0 ||
      (err = srv_add_fd(srv, srv->lfd, &srv->lfd)) < 0 ||
      (err = srv_add_fd(srv, srv->wakefd, &srv->wakefd)) < 0) {
    err = -errno;
    srv_free(srv);
    return pg__fail(err, "store: server setup: %s", strerror(-err));
  }
  /* The thread takes no signals: they belong to the application. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  err = -pthread_create(&srv->thread, NULL, srv_main, srv);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err) {
    srv_free(srv);
    return pg__fail(err, "store: cannot start the server thread: %s",
                    strerror(-err));
  }
  if (ss.ss_family == AF_INET6)
    *port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  else
    *port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  *out = srv;
  return 0;
}

void pg_store_server_stop(pg_store_server *srv)
{
  uint64_t one = 1;

  if (!srv)
    return;
  while (write(srv->wakefd, &one, sizeof one) < 0 && errno == EINTR)
    ;
  pthread_join(srv->thread, NULL);
  srv_free(srv);
}

/* ---- client ------------------------------------------------------------- */

/* Calls that do not wait give up after this much (or the connect
 * timeout, when longer): the server answers them at once. */
#define ST_MIN_OP_TIMEOUT 10.0
/* A wait's reply comes from the server at its deadline; we allow this
 * much more before calling the server dead. */
#define ST_GRACE 1.0

struct pg_store {
  /* Note [prefix views]: a view (pg_store_prefix) has no connection of
   * its own: each call goes to base with prefix + key. */
  pg_store *base;
  char *prefix;
  size_t plen;
  pthread_mutex_t mu;
  int fd;                   /* -1 once broken */
  uint32_t next_id;
  double op_timeout;
  struct buf req;
  char where[300];          /* "host:port", for sentences */
};

struct st_reply {
  uint8_t *body;            /* the whole frame after its length */
  uint8_t status;
  struct rd r;              /* the fields */
};

static int st_fail(const pg_store *s, int err, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

static int st_fail(const pg_store *s, int err, const char *fmt, ...)
{
  char msg[400];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return pg__fail(err, "store %s: %s", s->where, msg);
}

/* Waits for ev on fd until deadline (INFINITY: none). */
static int io_wait(int fd, short ev, double deadline)
{
  struct pollfd p = { .fd = fd, .events = ev };

  for (;;) {
    double left = deadline - pg__now();
    int ms = -1, rc;

    if (left <= 0)
      return -ETIMEDOUT;
    if (isfinite(deadline))
      ms = left > 86400 ? 86400000 : (int)ceil(left * 1000);
    rc = poll(&p, 1, ms);
    if (rc > 0)
      return 0;
    if (rc < 0 && errno != EINTR)
      return -errno;
  }
}

static int io_err(int e)
{
  return e == EPIPE ? -ECONNRESET : -e;
}

static int send_all(int fd, const uint8_t *p, size_t n, double deadline)
{
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    int err;

    if (k > 0) {
      p += k;
      n -= (size_t)k;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if ((err = io_wait(fd, POLLOUT, deadline)))
        return err;
    } else if (k < 0 && errno != EINTR) {
      return io_err(errno);
    }
  }
  return 0;
}

static int recv_all(int fd, uint8_t *p, size_t n, double deadline)
{
  while (n > 0) {
    ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
    int err;

    if (k > 0) {
      p += k;
      n -= (size_t)k;
    } else if (k == 0) {
      return -ECONNRESET;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if ((err = io_wait(fd, POLLIN, deadline)))
        return err;
    } else if (errno != EINTR) {
      return io_err(errno);
    }
  }
  return 0;
}

static void sleep_s(double t)
{
  struct timespec ts;

  if (t <= 0)
    return;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

/* One connection attempt to every address of host.  0 with s->fd set,
 * or an error; *fatal when retrying cannot help; why gets details. */
static int st_try(pg_store *s, const char *host, int port, double deadline,
                  bool *fatal, char *why, size_t whylen)
{
  struct addrinfo hints, *res, *ai;
  char service[16];
  int err = -ECONNREFUSED, rc;

  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  snprintf(service, sizeof service, "%d", port);
  rc = getaddrinfo(host, service, &hints, &res);
  if (rc) {
    /* The name may not exist yet (a pod starting): retry. */
    snprintf(why, whylen, "cannot resolve '%s': %s", host,
             rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    return -EHOSTUNREACH;
  }
  for (ai = res; ai; ai = ai->ai_next) {
    /* Give a connect at least a moment, even with timeout 0. */
    double until = fmax(deadline, pg__now() + 0.1);
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
                    SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1, soerr = 0;
    socklen_t sl = sizeof soerr;
    uint8_t hello[4];

    if (fd < 0) {
      err = -errno;
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
      if (errno != EINPROGRESS) {
        err = -errno;
        close(fd);
        continue;
      }
      err = io_wait(fd, POLLOUT, until);
      if (!err && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
        soerr = errno;
      if (err || soerr) {
        err = err ? err : -soerr;
        close(fd);
        continue;
      }
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    until = fmax(deadline, pg__now() + 1.0);
    err = send_all(fd, st_hello, 4, until);
    if (!err)
      err = recv_all(fd, hello, 4, until);
    if (err) {
      snprintf(why, whylen, "handshake failed: %s", strerror(-err));
      close(fd);
      continue;
    }
    if (memcmp(hello, st_hello, 3) || hello[3] != ST_VERSION) {
      *fatal = true;
      if (memcmp(hello, st_hello, 3))
        snprintf(why, whylen, "not a libpg store (it answered %02x %02x "
                 "%02x %02x)", hello[0], hello[1], hello[2], hello[3]);
      else
        snprintf(why, whylen, "the server speaks store protocol %d, we "
                 "speak %d", hello[3], ST_VERSION);
      close(fd);
      err = -EPROTO;
      break;
    }
    s->fd = fd;
    err = 0;
    break;
  }
  freeaddrinfo(res);
  return err;
}

int pg_store_connect(const char *host, int port, double timeout,
                     pg_store **out)
{
  double start = pg__now(), deadline, backoff = 0.01;
  char why[200] = "";
  bool fatal = false;
  pg_store *s;
  int err;

  if (!out)
    return pg__fail(-EINVAL, "store: no place for the connection");
  *out = NULL;
  if (!host || !*host || port < 1 || port > 65535 || !(timeout >= 0))
    return pg__fail(-EINVAL, "store: cannot connect to %s:%d (timeout %g "
                    "s)", host ? host : "(null)", port, timeout);
  s = calloc(1, sizeof *s);
  if (!s)
    return pg__fail(-ENOMEM, "store: out of memory");
  s->fd = -1;
  s->op_timeout = fmax(timeout, ST_MIN_OP_TIMEOUT);
  snprintf(s->where, sizeof s->where, strchr(host, ':') ? "[%s]:%d" :
           "%s:%d", host, port);
  deadline = start + timeout;
  for (;;) {
    double left;

    why[0] = '\0';
    err = st_try(s, host, port, deadline, &fatal, why, sizeof why);
    left = deadline - pg__now();
    if (!err || fatal || left <= 0)
      break;
    sleep_s(fmin(backoff, left));
    backoff = fmin(2 * backoff, 0.5);
  }
  if (err) {
    if (err == -ECONNREFUSED && !why[0])
      err = st_fail(s, err, "connection refused after %g s", timeout);
    else if (err == -ETIMEDOUT && !why[0])
      err = st_fail(s, err, "no answer after %g s", timeout);
    else if (fatal)
      err = st_fail(s, err, "%s", why);
    else
      err = st_fail(s, err, "%s (after %g s)", why[0] ? why :
                    strerror(-err), timeout);
    free(s);
    return err;
  }
  pthread_mutex_init(&s->mu, NULL);
  *out = s;
  return 0;
}

void pg_store_close(pg_store *s)
{
  if (!s)
    return;
  if (s->base) {
    free(s->prefix);
    free(s);
    return;
  }
  if (s->fd >= 0)
    close(s->fd);
  pthread_mutex_destroy(&s->mu);
  buf_free(&s->req);
  free(s);
}

/* Locks s; fails (unlocked) when the connection broke earlier. */
static int st_enter(pg_store *s)
{
  if (!s)
    return pg__fail(-EINVAL, "store: no connection");
  pthread_mutex_lock(&s->mu);
  if (s->fd < 0) {
    pthread_mutex_unlock(&s->mu);
    return st_fail(s, -ECONNRESET, "the connection broke earlier");
  }
  return 0;
}

static void req_begin(pg_store *s, uint8_t op)
{
  s->req.off = s->req.len = 0;
  s->req.oom = false;
  buf_u32(&s->req, 0);
  buf_u8(&s->req, op);
  buf_u32(&s->req, ++s->next_id);
}

/* Drops the connection: after an I/O error or a missed reply the stream
 * can no longer be trusted to line up with our requests. */
static int st_break(pg_store *s, int err, const char *what, double wait)
{
  close(s->fd);
  s->fd = -1;
  if (err == -ETIMEDOUT)
    return st_fail(s, err, "%s: no reply within %g s; connection dropped",
                   what, wait);
  if (err == -ECONNRESET)
    return st_fail(s, err, "%s: connection closed by the server", what);
  return st_fail(s, err, "%s: %s", what, strerror(-err));
}

/* Sends s->req and reads the reply, waiting up to wait seconds
 * (INFINITY: no limit).  The caller frees rep->body. */
static int st_call(pg_store *s, const char *what, double wait,
                   struct st_reply *rep)
{
  double deadline = pg__now() + wait;
  uint8_t hdr[4];
  uint32_t len;
  int err;

  rep->body = NULL;
  if (s->req.oom) {
    buf_clear(&s->req);
    return st_fail(s, -ENOMEM, "%s: out of memory", what);
  }
  put_u32(s->req.p, (uint32_t)(s->req.len - 4));
  err = send_all(s->fd, s->req.p, s->req.len, deadline);
  buf_clear(&s->req);
  if (!err)
    err = recv_all(s->fd, hdr, 4, deadline);
  if (err)
    return st_break(s, err, what, wait);
  len = get_u32(hdr);
  if (len < 5 || len > ST_MAX_REPLY)
    return st_break(s, -EPROTO, what, wait);
  rep->body = malloc((size_t)len + 1);  /* + 1: room for a NUL */
  if (!rep->body)
    return st_break(s, -ENOMEM, what, wait);
  err = recv_all(s->fd, rep->body, len, deadline);
  if (!err && get_u32(rep->body) != s->next_id)
    err = -EPROTO;
  if (err) {
    free(rep->body);
    rep->body = NULL;
    return st_break(s, err, what, wait);
  }
  rep->status = rep->body[4];
  rep->r.p = rep->body + 5;
  rep->r.n = len - 5;
  rep->r.bad = false;
  return 0;
}

/* The error for a status other than OK. */
static int st_status(pg_store *s, const char *what, uint8_t status,
                     double timeout)
{
  switch (status) {
  case ST_NOT_FOUND:
    return st_fail(s, -ENOENT, "%s: no such key", what);
  case ST_TIMEOUT:
    return st_fail(s, -ETIMEDOUT, "%s: not set after %g s", what, timeout);
  case ST_NOT_NUMBER:
    return st_fail(s, -EINVAL, "%s: the value is not a decimal integer",
                   what);
  case ST_TOO_LARGE:
    return st_fail(s, -EMSGSIZE, "%s: the server refused it as too large",
                   what);
  case ST_NO_MEMORY:
    return st_fail(s, -ENOMEM, "%s: the server is out of memory", what);
  case ST_UNKNOWN_OP:
    return st_fail(s, -ENOTSUP, "%s: the server does not know it", what);
  case ST_OVERFLOW:
    return st_fail(s, -ERANGE, "%s: the result overflows int64", what);
  case ST_MALFORMED:
    return st_break(s, -EPROTO, what, 0);
  default:
    return st_break(s, -EPROTO, what, 0);
  }
}

/* Finishes a call: frees the reply, unlocks, returns err. */
static int st_leave(pg_store *s, struct st_reply *rep, int err)
{
  free(rep->body);
  pthread_mutex_unlock(&s->mu);
  return err;
}

static int check_key(const pg_store *s, const char *key)
{
  size_t n;

  if (!key)
    return st_fail(s, -EINVAL, "no key given");
  n = strlen(key);
  if (n > ST_MAX_KEY)
    return st_fail(s, -EMSGSIZE, "key '%.40s...': too long (%zu bytes, "
                   "limit %u)", key, n, ST_MAX_KEY);
  return 0;
}

static int check_value(const pg_store *s, const char *key, const void *v,
                       size_t n)
{
  if (n > ST_MAX_VALUE)
    return st_fail(s, -EMSGSIZE, "key '%.80s': value too large (%zu "
                   "bytes, limit %u)", key, n, ST_MAX_VALUE);
  if (!v && n)
    return st_fail(s, -EINVAL, "key '%.80s': NULL value of %zu bytes",
                   key, n);
  return 0;
}

/* Seconds to milliseconds on the wire: < 0 is no limit. */
static uint32_t wire_ms(double timeout)
{
  double ms = ceil(timeout * 1000);

  if (timeout < 0 || ms >= ST_NO_LIMIT)
    return ST_NO_LIMIT;
  return (uint32_t)ms;
}

/* How long the client waits for a wait's reply. */
static double wait_span(const pg_store *s, double timeout)
{
  if (timeout < 0)
    return INFINITY;
  return timeout > 0 ? timeout + ST_GRACE : s->op_timeout;
}

/* ---- prefix views (Note [prefix views]) ---- */

static int view_key(const pg_store *s, const char *key, char **out)
{
  size_t kl;

  if (!key)
    return pg__fail(-EINVAL, "store: NULL key");
  kl = strlen(key);
  if (s->plen + kl > ST_MAX_KEY)
    return pg__fail(-EINVAL, "store: key '%.80s' under the prefix '%.80s' "
                    "is longer than %u bytes", key, s->prefix, ST_MAX_KEY);
  *out = malloc(s->plen + kl + 1);
  if (!*out)
    return pg__fail(-ENOMEM, "store: out of memory");
  memcpy(*out, s->prefix, s->plen);
  memcpy(*out + s->plen, key, kl + 1);
  return 0;
}

int pg_store_prefix(pg_store *s, const char *prefix, pg_store **out)
{
  pg_store *v;

  if (!out)
    return pg__fail(-EINVAL, "store: no place for the view");
  *out = NULL;
  if (!s || !prefix || strlen(prefix) > ST_MAX_KEY)
    return pg__fail(-EINVAL, "store: a prefix view needs a store and a "
                    "prefix of at most %u bytes", ST_MAX_KEY);
  v = calloc(1, sizeof *v);
  if (!v || !(v->prefix = strdup(prefix))) {
    free(v);
    return pg__fail(-ENOMEM, "store: out of memory");
  }
  v->base = s;
  v->plen = strlen(prefix);
  v->fd = -1;
  *out = v;
  return 0;
}

/* The body of a keyed call on a view: forwards CALL with k in place of
 * the key. */
#define VIEW_FORWARD(s, key, CALL)                                      \
  do {                                                                  \
    if ((s) && (s)->base) {                                             \
      char *k;                                                          \
      int verr_ = view_key((s), (key), &k);                             \
      if (verr_)                                                        \
        return verr_;                                                   \
      verr_ = (CALL);                                                   \
      free(k);                                                          \
      return verr_;                                                     \
    }                                                                   \
  } while (0)

int pg_store_set(pg_store *s, const char *key, const void *value,
                 size_t len)
{
  struct st_reply rep = { 0 };
  char what[128];
  int err;

  VIEW_FORWARD(s, key, pg_store_set(s->base, k, value, len));
  if ((err = st_enter(s)))
    return err;
  if ((err = check_key(s, key)) || (err = check_value(s, key, value, len)))
    return st_leave(s, &rep, err);
  snprintf(what, sizeof what, "set '%.80s'", key);
  req_begin(s, ST_SET);
  buf_bytes(&s->req, key, strlen(key));
  buf_bytes(&s->req, value, len);
  if ((err = st_call(s, what, s->op_timeout, &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    err = st_status(s, what, rep.status, 0);
  else if (!rd_done(&rep.r))
    err = st_break(s, -EPROTO, what, 0);
  return st_leave(s, &rep, err);
}

int pg_store_get(pg_store *s, const char *key, double timeout,
                 void **value, size_t *len)
{
  struct st_reply rep = { 0 };
  const uint8_t *v;
  char what[128];
  size_t n;
  int err;

  if (!value || !len || timeout != timeout)
    return pg__fail(-EINVAL, "store: get needs value, len and a timeout");
  VIEW_FORWARD(s, key, pg_store_get(s->base, k, timeout, value, len));
  *value = NULL;
  *len = 0;
  if ((err = st_enter(s)))
    return err;
  if ((err = check_key(s, key)))
    return st_leave(s, &rep, err);
  snprintf(what, sizeof what, "get '%.80s'", key);
  req_begin(s, ST_GET);
  buf_bytes(&s->req, key, strlen(key));
  buf_u32(&s->req, wire_ms(timeout));
  if ((err = st_call(s, what, wait_span(s, timeout), &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    return st_leave(s, &rep, st_status(s, what, rep.status, timeout));
  v = rd_bytes(&rep.r, &n);
  if (!rd_done(&rep.r))
    return st_leave(s, &rep, st_break(s, -EPROTO, what, 0));
  /* Hand the reply buffer over: the value moves to its front and gets a
   * NUL, so text values can be used as strings. */
  memmove(rep.body, v, n);
  rep.body[n] = '\0';
  *value = rep.body;
  *len = n;
  rep.body = NULL;
  return st_leave(s, &rep, 0);
}

int pg_store_add(pg_store *s, const char *key, int64_t delta,
                 int64_t *result)
{
  struct st_reply rep = { 0 };
  char what[128];
  int64_t v;
  int err;

  VIEW_FORWARD(s, key, pg_store_add(s->base, k, delta, result));
  if ((err = st_enter(s)))
    return err;
  if ((err = check_key(s, key)))
    return st_leave(s, &rep, err);
  snprintf(what, sizeof what, "add to '%.80s'", key);
  req_begin(s, ST_ADD);
  buf_bytes(&s->req, key, strlen(key));
  buf_u64(&s->req, (uint64_t)delta);
  if ((err = st_call(s, what, s->op_timeout, &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    return st_leave(s, &rep, st_status(s, what, rep.status, 0));
  v = (int64_t)rd_u64(&rep.r);
  if (!rd_done(&rep.r))
    return st_leave(s, &rep, st_break(s, -EPROTO, what, 0));
  if (result)
    *result = v;
  return st_leave(s, &rep, 0);
}

static int view_wait(pg_store *s, const char *const *keys, size_t n,
                     double timeout)
{
  char **full = calloc(n ? n : 1, sizeof *full);
  size_t i;
  int err = full ? 0 : pg__fail(-ENOMEM, "store: out of memory");

  for (i = 0; !err && i < n; i++)
    err = view_key(s, keys[i], &full[i]);
  if (!err)
    err = pg_store_wait(s->base, (const char *const *)full, n, timeout);
  for (i = 0; full && i < n; i++)
    free(full[i]);
  free(full);
  return err;
}

int pg_store_wait(pg_store *s, const char *const *keys, size_t n,
                  double timeout)
{
  struct st_reply rep = { 0 };
  size_t i, total = 13;
  char what[128];
  int err;

  if ((!keys && n) || timeout != timeout)
    return pg__fail(-EINVAL, "store: wait needs keys and a timeout");
  if (s && s->base)
    return view_wait(s, keys, n, timeout);
  if ((err = st_enter(s)))
    return err;
  for (i = 0; i < n; i++) {
    if ((err = check_key(s, keys[i])))
      return st_leave(s, &rep, err);
    total += 4 + strlen(keys[i]);
  }
  if (n > ST_MAX_WAIT_KEYS || total > ST_MAX_FRAME)
    return st_leave(s, &rep, st_fail(s, -EMSGSIZE, "wait for %zu keys: "
                                     "too many (limit %u keys, %u bytes)",
                                     n, ST_MAX_WAIT_KEYS, ST_MAX_FRAME));
  if (n == 0)
    return st_leave(s, &rep, 0);
  if (n == 1)
    snprintf(what, sizeof what, "wait for '%.80s'", keys[0]);
  else
    snprintf(what, sizeof what, "wait for %zu keys ('%.40s', ...)", n,
             keys[0]);
  req_begin(s, ST_WAIT);
  buf_u32(&s->req, wire_ms(timeout));
  buf_u32(&s->req, (uint32_t)n);
  for (i = 0; i < n; i++)
    buf_bytes(&s->req, keys[i], strlen(keys[i]));
  if ((err = st_call(s, what, wait_span(s, timeout), &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    err = st_status(s, what, rep.status, timeout);
  else if (!rd_done(&rep.r))
    err = st_break(s, -EPROTO, what, 0);
  return st_leave(s, &rep, err);
}

int pg_store_compare_set(pg_store *s, const char *key, const void *expected,
                         size_t expected_len, const void *desired,
                         size_t desired_len, void **current,
                         size_t *current_len, bool *swapped)
{
  struct st_reply rep = { 0 };
  uint8_t did, present;
  const uint8_t *v;
  char what[128];
  size_t n;
  int err;

  if (current)
    *current = NULL;
  if (current_len)
    *current_len = 0;
  if (swapped)
    *swapped = false;
  VIEW_FORWARD(s, key, pg_store_compare_set(s->base, k, expected,
                                            expected_len, desired,
                                            desired_len, current,
                                            current_len, swapped));
  if ((err = st_enter(s)))
    return err;
  if ((err = check_key(s, key)) ||
      (err = check_value(s, key, expected, expected_len)) ||
      (err = check_value(s, key, desired, desired_len)))
    return st_leave(s, &rep, err);
  snprintf(what, sizeof what, "compare_set '%.80s'", key);
  req_begin(s, ST_CAS);
  buf_bytes(&s->req, key, strlen(key));
  buf_bytes(&s->req, expected, expected_len);
  buf_bytes(&s->req, desired, desired_len);
  if ((err = st_call(s, what, s->op_timeout, &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    return st_leave(s, &rep, st_status(s, what, rep.status, 0));
  did = rd_u8(&rep.r);
  present = rd_u8(&rep.r);
  v = rd_bytes(&rep.r, &n);
  if (!rd_done(&rep.r) || did > 1 || present > 1 || (!present && n))
    return st_leave(s, &rep, st_break(s, -EPROTO, what, 0));
  if (swapped)
    *swapped = did;
  /* An absent key reads as NULL; a present one, even empty, as a
   * NUL-terminated copy. */
  if (current && present) {
    memmove(rep.body, v, n);
    rep.body[n] = '\0';
    *current = rep.body;
    rep.body = NULL;
  }
  if (current_len)
    *current_len = n;
  return st_leave(s, &rep, 0);
}

int pg_store_delete(pg_store *s, const char *key, bool *deleted)
{
  struct st_reply rep = { 0 };
  char what[128];
  uint8_t d;
  int err;

  if (deleted)
    *deleted = false;
  VIEW_FORWARD(s, key, pg_store_delete(s->base, k, deleted));
  if ((err = st_enter(s)))
    return err;
  if ((err = check_key(s, key)))
    return st_leave(s, &rep, err);
  snprintf(what, sizeof what, "delete '%.80s'", key);
  req_begin(s, ST_DELETE);
  buf_bytes(&s->req, key, strlen(key));
  if ((err = st_call(s, what, s->op_timeout, &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    return st_leave(s, &rep, st_status(s, what, rep.status, 0));
  d = rd_u8(&rep.r);
  if (!rd_done(&rep.r) || d > 1)
    return st_leave(s, &rep, st_break(s, -EPROTO, what, 0));
  if (deleted)
    *deleted = d;
  return st_leave(s, &rep, 0);
}

int pg_store_num_keys(pg_store *s, int64_t *n)
{
  struct st_reply rep = { 0 };
  int64_t v;
  int err;

  if (!n)
    return pg__fail(-EINVAL, "store: num_keys needs a result");
  if (s && s->base)   /* every key, as torch's PrefixStore counts */
    return pg_store_num_keys(s->base, n);
  if ((err = st_enter(s)))
    return err;
  req_begin(s, ST_NUM_KEYS);
  if ((err = st_call(s, "num_keys", s->op_timeout, &rep)))
    return st_leave(s, &rep, err);
  if (rep.status != ST_OK)
    return st_leave(s, &rep, st_status(s, "num_keys", rep.status, 0));
  v = (int64_t)rd_u64(&rep.r);
  if (!rd_done(&rep.r))
    return st_leave(s, &rep, st_break(s, -EPROTO, "num_keys", 0));
  *n = v;
  return st_leave(s, &rep, 0);
}
