/* store_server.h -- the store server's parts, shared by its transport
 * (store_server.c: the epoll thread, connections, handshakes, reading and
 * writing, deadlines) and its commands (store_commands.c: the requests'
 * meaning, the table, waits, replies); nothing here is installed.  Note
 * [store budget] (store_server.c) says what every byte is charged to. */
#ifndef PG_STORE_SERVER_H
#define PG_STORE_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "admit.h"
#include "auth.h"
#include "pg_internal.h"
#include "store_table.h"
#include "store_wire.h"
#include "timer_heap.h"

/* Stop reading a connection's requests while this much output waits: a
 * client that does not read its replies cannot grow our memory. */
#define ST_OUT_HIGH (4u << 20)
/* Bytes read from one connection per wakeup, so one big upload does not
 * starve the others. */
#define ST_READ_SLICE (4u << 20)
/* How long a connection being closed for garbage may still drain. */
#define ST_LINGER 1.0
/* How long a new connection has to prove the token, and how many may be
 * proving it at once (Note [store budget]). */
#define ST_HANDSHAKE_S 10.0
#define ST_MAX_PREAUTH 256
/* What a proven connection costs while it is open, buffers aside: its
 * state, its epoll entry and the kernel's socket, roughly (Note [store
 * budget]: 3000 idle authenticated connections held 17 MB outside it). */
#define ST_CONN_COST 8192
/* What a key costs beyond its bytes: its entry and hash chain. */
#define ST_ENTRY_COST (sizeof(struct store_entry) + 16)

struct store_conn;

/* One key a waiting connection still misses, linked on that key. */
struct store_reg {
  LIST_ENTRY(store_reg) on_key;  /* e->waiters */
  struct store_entry *e;         /* NULL once unlinked */
  struct store_conn *c;
};

/* Where a connection's handshake stands (store_wire.h). */
enum store_auth { CA_HELLO, CA_PROOF, CA_READY };

struct store_conn {
  LIST_ENTRY(store_conn) in_server;    /* srv->conns: every open one */
  TAILQ_ENTRY(store_conn) in_preauth;  /* srv->preauth, oldest first */
  struct store_conn *resume_next;   /* needs progress after a wakeup */
  struct store_conn *dead_next;     /* closed, freed after the batch */
  int fd;
  uint32_t events;                  /* what epoll watches */
  bool closing, shut, eof, dead, in_resume, in_preauth_list, admitted;
  enum store_auth auth;
  uint8_t nc[PG_NONCE_BYTES], ns[PG_NONCE_BYTES];
  struct buf in, out;
  size_t charge;                    /* in.cap + out.cap, in srv->buffered */
  size_t skip;                      /* bytes of a refused frame to drop */
  /* A WAIT or GET that waits: one reg per missing key. */
  bool waiting;
  uint8_t wait_op;
  uint32_t wait_id;
  struct store_reg *regs;
  size_t nregs, missing;
  struct timer_heap_node timer;     /* handshake, wait or linger end */
  struct pg__unproven u;            /* while in preauth (admit.h) */
};

struct pg_store_server {
  pthread_t thread;
  int epfd, lfd, wakefd;
  double accept_resume;             /* > 0: accepting paused until then */
  struct store_table keys;
  int64_t nkeys;                    /* present ones (NUM_KEYS) */
  uint64_t requests;                /* served, for benchmarks (atomic) */
  struct pg__token token;           /* len 0: open to every client */
  /* Note [store budget] */
  size_t max_bytes, max_conn, max_value, max_key;
  size_t stored;                    /* keys (ST_ENTRY_COST each), values */
  size_t buffered;                  /* every connection's charge */
  int npreauth;
  TAILQ_HEAD(, store_conn) preauth;
  LIST_HEAD(, store_conn) conns;
  struct store_conn *resume, *dead;
  struct timer_heap timers;         /* the connections' deadlines */
};

/* ---- store_server.c: the transport's services to the commands ---------- */
/* c needs progress after this wakeup's batch. */
PG__HIDDEN void pg__st_resume(struct pg_store_server *srv,
                              struct store_conn *c);
/* Bytes held against the budget, and whether extra more fit. */
PG__HIDDEN size_t pg__st_used(const struct pg_store_server *srv);
PG__HIDDEN bool pg__st_room(const struct pg_store_server *srv, size_t extra);
/* A frame that cannot be parsed: answered, then c closes. */
PG__HIDDEN void pg__st_reject(struct pg_store_server *srv,
                              struct store_conn *c, uint32_t id);

/* ---- store_commands.c: the commands, for the transport ----------------- */
/* Runs one whole request frame of c (p[0..n): its header and payload). */
PG__HIDDEN void pg__st_serve(struct pg_store_server *srv,
                             struct store_conn *c, const uint8_t *p,
                             size_t n);
PG__HIDDEN void pg__st_status(struct pg_store_server *srv,
                              struct store_conn *c, uint32_t id,
                              uint8_t status);
/* A refusal with a sentence for the client to show: status, then the
 * sentence as bytes. */
PG__HIDDEN void pg__st_refuse(struct pg_store_server *srv,
                              struct store_conn *c, uint32_t id,
                              uint8_t status, const char *fmt, ...)
  __attribute__((format(printf, 5, 6)));
/* c's wait: its registrations dropped; answered OK (e is the key that
 * completed it) or TIMEOUT. */
PG__HIDDEN void pg__st_unwait(struct pg_store_server *srv,
                              struct store_conn *c);
PG__HIDDEN void pg__st_done(struct pg_store_server *srv,
                            struct store_conn *c, uint8_t status,
                            const struct store_entry *e);

#endif
