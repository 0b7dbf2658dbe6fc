/* store_commands.c -- the store server's commands (store_server.h): what
 * each request of store_wire.h does to the keys (store_table.h), waits
 * for keys, and the replies, each charged to the budget (Note [store
 * budget] in store_server.c).  The transport (store_server.c) hands it
 * whole frames. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "num.h"
#include "store_server.h"

/* Queues a reply: status plus up to two pieces of fields. */
static void reply(struct pg_store_server *srv, struct store_conn *c,
                  uint32_t id, uint8_t status, const void *a, size_t alen,
                  const void *b, size_t blen)
{
  stw_buf_u32(&c->out, (uint32_t)(5 + alen + blen));
  stw_buf_u32(&c->out, id);
  stw_buf_u8(&c->out, status);
  stw_buf_put(&c->out, a, alen);
  stw_buf_put(&c->out, b, blen);
  /* The connection may not be the one being served (a woken waiter). */
  pg__st_resume(srv, c);
}

void pg__st_status(struct pg_store_server *srv, struct store_conn *c,
                          uint32_t id, uint8_t status)
{
  reply(srv, c, id, status, NULL, 0, NULL, 0);
}

/* A refusal with a sentence for the client to show: status, then the
 * sentence as bytes. */
void pg__st_refuse(struct pg_store_server *srv, struct store_conn *c,
                          uint32_t id, uint8_t status, const char *fmt, ...)
{
  char msg[300];
  uint8_t n[4];
  va_list ap;
  int k;

  va_start(ap, fmt);
  k = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (k < 0)
    k = 0;
  if ((size_t)k >= sizeof msg)
    k = sizeof msg - 1;
  stw_put_u32(n, (uint32_t)k);
  reply(srv, c, id, status, n, 4, msg, (size_t)k);
}

/* A reply of n bytes would take c or the store past its budget: says so
 * to the client instead. */
static bool reply_over(struct pg_store_server *srv, struct store_conn *c,
                       uint32_t id, size_t n)
{
  if (stw_buf_used(&c->out) + n > srv->max_conn) {
    pg__st_refuse(srv, c, id, ST_OVER_BUDGET, "a reply of %zu bytes is "
                  "over rank 0's per-connection budget of %zu bytes "
                  "(PG_STORE_MAX_CONN_BYTES)", n, srv->max_conn);
    return true;
  }
  if (!pg__st_room(srv, n)) {
    pg__st_refuse(srv, c, id, ST_OVER_BUDGET, "a reply of %zu bytes would "
                  "take rank 0's store past its budget of %zu bytes "
                  "(PG_STORE_MAX_BYTES; %zu in use)", n, srv->max_bytes,
                  pg__st_used(srv));
    return true;
  }
  return false;
}

/* Storing vn bytes under k would take the store past its budget: says
 * so to the client. */
static bool store_over(struct pg_store_server *srv, struct store_conn *c,
                       uint32_t id, const uint8_t *k, size_t kn, size_t vn)
{
  const struct store_entry *e = store_table_find(&srv->keys, k, kn);
  size_t old = e && e->present ? e->vlen : 0;
  size_t add = vn + (e ? 0 : kn + ST_ENTRY_COST);

  if (add <= old || pg__st_room(srv, add - old))
    return false;
  pg__st_refuse(srv, c, id, ST_OVER_BUDGET, "storing %zu bytes would take "
                "rank 0's store past its budget of %zu bytes "
                "(PG_STORE_MAX_BYTES; %zu in use)", vn, srv->max_bytes,
                pg__st_used(srv));
  return true;
}

static void reply_value(struct pg_store_server *srv, struct store_conn *c,
                        uint32_t id, const struct store_entry *e)
{
  uint8_t n[4];

  if (reply_over(srv, c, id, 13 + e->vlen))
    return;
  stw_put_u32(n, (uint32_t)e->vlen);
  reply(srv, c, id, ST_OK, n, 4, e->val, e->vlen);
}

static void reply_i64(struct pg_store_server *srv, struct store_conn *c,
                      uint32_t id, int64_t v)
{
  uint8_t t[8];

  stw_put_u64(t, (uint64_t)v);
  reply(srv, c, id, ST_OK, t, 8, NULL, 0);
}

/* Unlinks c's remaining waits, freeing keys nobody needs any more. */
void pg__st_unwait(struct pg_store_server *srv, struct store_conn *c)
{
  size_t i;

  for (i = 0; i < c->nregs; i++) {
    struct store_reg *r = &c->regs[i];
    struct store_entry *e = r->e;

    if (!e)
      continue;
    LIST_REMOVE(r, on_key);
    r->e = NULL;
    store_table_release(&srv->keys, e);
  }
  free(c->regs);
  c->regs = NULL;
  c->nregs = c->missing = 0;
  c->waiting = false;
  timer_heap_clear(&srv->timers, &c->timer);
}

/* Answers c's wait: OK (e is the key that completed it) or TIMEOUT. */
void pg__st_done(struct pg_store_server *srv, struct store_conn *c,
                        uint8_t status, const struct store_entry *e)
{
  if (status == ST_OK && c->wait_op == ST_GET)
    reply_value(srv, c, c->wait_id, e);
  else
    pg__st_status(srv, c, c->wait_id, status);
  pg__st_unwait(srv, c);
}

/* e just got a value: answer the waits it completes. */
static void entry_wake(struct pg_store_server *srv, struct store_entry *e)
{
  struct store_reg *r;

  while ((r = LIST_FIRST(&e->waiters))) {
    LIST_REMOVE(r, on_key);
    r->e = NULL;
    if (--r->c->missing == 0)
      pg__st_done(srv, r->c, ST_OK, e);
  }
}

/* Gives e the value p[0, n); false when out of memory. */
static bool entry_set(struct pg_store_server *srv, struct store_entry *e,
                      const void *p, size_t n)
{
  uint8_t *v = malloc(n ? n : 1);

  if (!v)
    return false;
  if (n)
    memcpy(v, p, n);
  srv->stored = srv->stored - e->vlen + n;
  free(e->val);
  e->val = v;
  e->vlen = n;
  if (!e->present) {
    e->present = true;
    srv->nkeys++;
  }
  return true;
}
/* Registers c as waiting for the keys keys[0..n) (lens in klen) that are
 * absent; the caller checked at least one is. */
static void wait_start(struct pg_store_server *srv, struct store_conn *c,
                       uint8_t op, uint32_t id, const uint8_t *const *keys,
                       const size_t *klen, size_t n, uint32_t ms)
{
  size_t i, need = 0;

  /* Absent keys get entries while they are waited for. */
  for (i = 0; i < n; i++)
    need += sizeof *c->regs + ST_ENTRY_COST + klen[i];
  if (!pg__st_room(srv, need))
    return pg__st_refuse(srv, c, id, ST_OVER_BUDGET, "waiting for %zu "
                         "keys would take rank 0's store past its budget of "
                         "%zu bytes (PG_STORE_MAX_BYTES; %zu in use)", n,
                         srv->max_bytes, pg__st_used(srv));
  c->regs = calloc(n, sizeof *c->regs);
  if (!c->regs) {
    pg__st_status(srv, c, id, ST_NO_MEMORY);
    return;
  }
  c->nregs = n;
  c->waiting = true;
  c->wait_op = op;
  c->wait_id = id;
  for (i = 0; i < n; i++) {
    struct store_entry *e = store_table_get(&srv->keys, keys[i], klen[i]);
    struct store_reg *r = &c->regs[i];

    if (!e)
      goto oom;
    if (e->present)
      continue;
    r->c = c;
    r->e = e;
    LIST_INSERT_HEAD(&e->waiters, r, on_key);
    c->missing++;
  }
  if (ms != ST_NO_LIMIT) {
    timer_heap_set(&srv->timers, &c->timer, pg__now() + ms / 1000.0);
  }
  return;
oom:
  pg__st_unwait(srv, c);
  pg__st_status(srv, c, id, ST_NO_MEMORY);
}

static bool key_ok(const struct pg_store_server *srv, size_t n)
{
  return n <= srv->max_key;
}

/* TOO_LARGE with the limit that refused it. */
static void reply_too_large(struct pg_store_server *srv, struct store_conn *c,
                            uint32_t id, size_t kn, size_t vn)
{
  if (kn > srv->max_key)
    pg__st_refuse(srv, c, id, ST_TOO_LARGE, "a key of %zu bytes is over "
                  "rank 0's limit of %zu (PG_STORE_MAX_KEY)", kn,
                  srv->max_key);
  else
    pg__st_refuse(srv, c, id, ST_TOO_LARGE, "a value of %zu bytes is over "
                  "rank 0's limit of %zu (PG_STORE_MAX_VALUE)", vn,
                  srv->max_value);
}

static void op_set(struct pg_store_server *srv, struct store_conn *c,
                   uint32_t id, struct rd *r)
{
  size_t kn, vn;
  const uint8_t *k = stw_rd_bytes(r, &kn), *v = stw_rd_bytes(r, &vn);
  struct store_entry *e;

  if (!stw_rd_done(r))
    return pg__st_reject(srv, c, id);
  if (!key_ok(srv, kn) || vn > srv->max_value)
    return reply_too_large(srv, c, id, kn, vn);
  if (store_over(srv, c, id, k, kn, vn))
    return;
  e = store_table_get(&srv->keys, k, kn);
  if (!e || !entry_set(srv, e, v, vn)) {
    if (e)
      store_table_release(&srv->keys, e);
    return pg__st_status(srv, c, id, ST_NO_MEMORY);
  }
  pg__st_status(srv, c, id, ST_OK);
  entry_wake(srv, e);
}

static void op_get(struct pg_store_server *srv, struct store_conn *c,
                   uint32_t id, struct rd *r)
{
  size_t kn;
  const uint8_t *k = stw_rd_bytes(r, &kn);
  uint32_t ms = stw_rd_u32(r);
  struct store_entry *e;

  if (!stw_rd_done(r))
    return pg__st_reject(srv, c, id);
  if (!key_ok(srv, kn))
    return pg__st_status(srv, c, id, ST_TOO_LARGE);
  e = store_table_find(&srv->keys, k, kn);
  if (e && e->present)
    return reply_value(srv, c, id, e);
  if (ms == 0)
    return pg__st_status(srv, c, id, ST_NOT_FOUND);
  wait_start(srv, c, ST_GET, id, &k, &kn, 1, ms);
}

static void op_add(struct pg_store_server *srv, struct store_conn *c,
                   uint32_t id, struct rd *r)
{
  size_t kn;
  const uint8_t *k = stw_rd_bytes(r, &kn);
  int64_t delta = (int64_t)stw_rd_u64(r), cur = 0;
  struct store_entry *e;
  char text[24];
  int n;

  if (!stw_rd_done(r))
    return pg__st_reject(srv, c, id);
  if (!key_ok(srv, kn))
    return pg__st_status(srv, c, id, ST_TOO_LARGE);
  e = store_table_find(&srv->keys, k, kn);
  if (e && e->present && !stw_parse_i64(e->val, e->vlen, &cur))
    return pg__st_status(srv, c, id, ST_NOT_NUMBER);
  if (__builtin_add_overflow(cur, delta, &cur))
    return pg__st_status(srv, c, id, ST_OVERFLOW);
  n = snprintf(text, sizeof text, "%" PRId64, cur);
  if (store_over(srv, c, id, k, kn, (size_t)n))
    return;
  e = store_table_get(&srv->keys, k, kn);
  if (!e || !entry_set(srv, e, text, (size_t)n)) {
    if (e)
      store_table_release(&srv->keys, e);
    return pg__st_status(srv, c, id, ST_NO_MEMORY);
  }
  reply_i64(srv, c, id, cur);
  entry_wake(srv, e);
}

static void op_cas(struct pg_store_server *srv, struct store_conn *c,
                   uint32_t id, struct rd *r)
{
  size_t kn, xn, dn;
  const uint8_t *k = stw_rd_bytes(r, &kn), *x = stw_rd_bytes(r, &xn),
                *d = stw_rd_bytes(r, &dn);
  struct store_entry *e;
  uint8_t head[6];
  bool swap;

  if (!stw_rd_done(r))
    return pg__st_reject(srv, c, id);
  if (!key_ok(srv, kn) || xn > srv->max_value || dn > srv->max_value)
    return reply_too_large(srv, c, id, kn, xn > dn ? xn : dn);
  e = store_table_find(&srv->keys, k, kn);
  if (!e || !e->present)
    swap = xn == 0;
  else
    swap = e->vlen == xn && (xn == 0 || !memcmp(e->val, x, xn));
  if (reply_over(srv, c, id, 15 + (swap ? dn : e && e->present ? e->vlen
                                                             : 0)))
    return;
  if (swap && store_over(srv, c, id, k, kn, dn))
    return;
  if (swap) {
    e = store_table_get(&srv->keys, k, kn);
    if (!e || !entry_set(srv, e, d, dn)) {
      if (e)
        store_table_release(&srv->keys, e);
      return pg__st_status(srv, c, id, ST_NO_MEMORY);
    }
  }
  head[0] = swap;
  head[1] = e && e->present;
  stw_put_u32(head + 2, head[1] ? (uint32_t)e->vlen : 0);
  reply(srv, c, id, ST_OK, head, 6, head[1] ? e->val : NULL,
        head[1] ? e->vlen : 0);
  if (swap)
    entry_wake(srv, e);
}

static void op_wait(struct pg_store_server *srv, struct store_conn *c,
                    uint32_t id, struct rd *r)
{
  uint32_t ms = stw_rd_u32(r), n = stw_rd_u32(r), i, missing = 0;
  const uint8_t **keys;
  size_t *klen;
  bool big = false;

  /* Every key takes 4 bytes at least: a bogus n allocates nothing. */
  if (r->bad || n > r->n / 4)
    return pg__st_reject(srv, c, id);
  if (n > ST_MAX_WAIT_KEYS)
    return pg__st_status(srv, c, id, ST_TOO_LARGE);
  keys = malloc((n ? n : 1) * sizeof *keys);
  klen = malloc((n ? n : 1) * sizeof *klen);
  if (!keys || !klen) {
    pg__st_status(srv, c, id, ST_NO_MEMORY);
    goto out;
  }
  for (i = 0; i < n; i++) {
    struct store_entry *e;

    keys[i] = stw_rd_bytes(r, &klen[i]);
    if (r->bad)
      break;
    big |= !key_ok(srv, klen[i]);
    e = big ? NULL : store_table_find(&srv->keys, keys[i], klen[i]);
    missing += !e || !e->present;
  }
  if (!stw_rd_done(r))
    pg__st_reject(srv, c, id);
  else if (big)
    pg__st_refuse(srv, c, id, ST_TOO_LARGE, "a key is over rank 0's limit "
                  "of %zu bytes (PG_STORE_MAX_KEY)", srv->max_key);
  else if (missing == 0)
    pg__st_status(srv, c, id, ST_OK);
  else if (ms == 0)
    pg__st_status(srv, c, id, ST_TIMEOUT);
  else
    wait_start(srv, c, ST_WAIT, id, keys, klen, n, ms);
out:
  free(keys);
  free(klen);
}

/* Makes present e absent (its waiters, if any, keep it). */
static void entry_delete(struct pg_store_server *srv, struct store_entry *e)
{
  srv->stored -= e->vlen;
  free(e->val);
  e->val = NULL;
  e->vlen = 0;
  e->present = false;
  srv->nkeys--;
  store_table_release(&srv->keys, e);
}

static void op_delete(struct pg_store_server *srv, struct store_conn *c,
                      uint32_t id, struct rd *r)
{
  size_t kn;
  const uint8_t *k = stw_rd_bytes(r, &kn);
  struct store_entry *e;
  uint8_t existed = 0;

  if (!stw_rd_done(r))
    return pg__st_reject(srv, c, id);
  if (!key_ok(srv, kn))
    return pg__st_status(srv, c, id, ST_TOO_LARGE);
  e = store_table_find(&srv->keys, k, kn);
  if (e && e->present) {
    existed = 1;
    entry_delete(srv, e);
  }
  reply(srv, c, id, ST_OK, &existed, 1, NULL, 0);
}

/* Every key that starts with the prefix: one walk of the table (its
 * size is the store's budget's, so the walk is bounded too). */
static void op_del_prefix(struct pg_store_server *srv,
                          struct store_conn *c, uint32_t id, struct rd *r)
{
  size_t kn, i;
  const uint8_t *k = stw_rd_bytes(r, &kn);
  struct store_entry *e, *next;
  int64_t n = 0;

  if (!stw_rd_done(r))
    return pg__st_reject(srv, c, id);
  if (!key_ok(srv, kn))
    return pg__st_status(srv, c, id, ST_TOO_LARGE);
  for (i = 0; i < srv->keys.nbuckets; i++)
    for (e = srv->keys.buckets[i]; e; e = next) {
      next = e->next;
      if (e->present && e->klen >= kn && (kn == 0 ||
                                          !memcmp(e->key, k, kn))) {
        entry_delete(srv, e);
        n++;
      }
    }
  reply_i64(srv, c, id, n);
}

void pg__st_serve(struct pg_store_server *srv, struct store_conn *c,
                         const uint8_t *p, size_t n)
{
  struct rd r = { p, n, false };
  uint8_t op = stw_rd_u8(&r);
  uint32_t id = stw_rd_u32(&r);

  __atomic_add_fetch(&srv->requests, 1, __ATOMIC_RELAXED);
  switch (op) {
  case ST_SET: op_set(srv, c, id, &r); break;
  case ST_GET: op_get(srv, c, id, &r); break;
  case ST_ADD: op_add(srv, c, id, &r); break;
  case ST_CAS: op_cas(srv, c, id, &r); break;
  case ST_WAIT: op_wait(srv, c, id, &r); break;
  case ST_DELETE: op_delete(srv, c, id, &r); break;
  case ST_DEL_PREFIX: op_del_prefix(srv, c, id, &r); break;
  case ST_NUM_KEYS:
    if (!stw_rd_done(&r))
      pg__st_reject(srv, c, id);
    else
      reply_i64(srv, c, id, srv->nkeys);
    break;
  default:
    pg__st_status(srv, c, id, ST_UNKNOWN_OP);
  }
}
