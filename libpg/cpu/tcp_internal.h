/* tcp_internal.h -- what the TCP communicator's files share: the frame on
 * the wire, peers, streams, the comm, and the ring and chain state. */
#ifndef PG_TCP_INTERNAL_H
#define PG_TCP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pg_internal.h"

/* Messages of at most this many bytes take the latency-optimal algorithms
 * (log2(n) or one exchange of the whole buffer); larger ones the
 * bandwidth-optimal ring and chains. */
#define SMALL_BYTES (64 * 1024)
/* Between two ranks both algorithms take one round trip per step, and the
 * ring's two steps (halves: reduce-scatter, then all-gather) move the same
 * bytes as doubling's one exchange of the whole buffer but reduce half as
 * much and copy nothing; its messages are half as long, so the second
 * starts while the link is still busy.  Across hosts (scripts/bench/net)
 * the ring catches up with doubling at a few KiB and pulls ahead above.
 * So all-reduces of two ranks take the ring above this size. */
#define PAIR_SMALL_BYTES (8 * 1024)
/* Rings and chains move segments of about this size, so a rank reduces or
 * forwards segment k while segment k+1 is still on the wire (Gloo: 1 MiB;
 * smaller stays in L2 while it is reduced and then sent on). */
#define SEG_BYTES (256 * 1024)
/* A chain-reduce rank holds this many partial segments not yet sent. */
#define CHAIN_SLOTS 4
/* Direct (all-to-all) gathers post 2(n-1) streams at once; above this many
 * ranks the ring is used whatever the size. */
#define DIRECT_MAX 16
/* Kernel socket buffers: room for several segments in flight each way. */
#define SOCK_BUF (4 * 1024 * 1024)
/* The scratch buffer is kept between operations up to this size. */
#define SCRATCH_KEEP (4 * 1024 * 1024)

#define FRAME_MAGIC 0x66746770u  /* "pgtf" */
#define HELLO_MAGIC 0x68746770u  /* "pgth" */
#define HELLO_VERSION 2

enum { FRAME_COLL = 1, FRAME_P2P = 2 };
enum {
  C_ALL_REDUCE = 1, C_BROADCAST, C_REDUCE, C_ALL_GATHER, C_REDUCE_SCATTER,
  C_BARRIER,
};

/* Every message is a frame: this header, then len bytes.  Collectives
 * carry their number and kind so ranks that disagree on what they are
 * doing get -EPROTO instead of garbage; p2p frames carry the tag. */
struct frame {
  uint32_t magic;
  uint16_t kind;
  uint16_t code;      /* collective | dtype << 4 | reduction << 8 */
  uint32_t seq;       /* collective: its number on this comm */
  int32_t tag;        /* p2p: the tag; collective: root or round */
  uint64_t len;
};
_Static_assert(sizeof(struct frame) == 24, "frame header is 24 bytes");

/* Note [mesh hello]: a connection's first bytes each way.  The
 * connector's carries its nonce; the acceptor's its own nonce and its
 * proof of the job token over both (auth.h), then the connector sends
 * its proof (32 bytes): a challenge-response, so a peer without the
 * token gets no socket of the comm, and a redirected endpoint leads
 * nowhere.  Lazy p2p (hier_p2p.c) is the other way round: the receiver
 * sends a 32-byte challenge first, the sender's hello carries its proof
 * over its nonce and the challenge in mac, and the receiver answers one
 * byte once it took the connection (Note [lazy p2p]). */
struct hello {
  uint32_t magic, version;
  uint64_t ns_hash;
  int32_t from, to, n, pad;
  uint8_t nonce[32];
  uint8_t mac[32];
};

/* A p2p message that arrived before its recv. */
struct umsg {
  struct umsg *next;
  int tag;
  size_t len;
  char data[];
};

struct peer {
  int fd;               /* -1 for this rank */
  int rank;             /* global rank, for messages */
  struct frame in;      /* incoming header being read */
  size_t in_got;
  struct umsg *drain;   /* unexpected p2p body being read */
  size_t drain_got;
  struct umsg *qhead, *qtail;
};

struct stream;
/* Unit j of a stream: false while it depends on another stream. */
typedef bool (*unit_fn)(void *ctx, struct stream *s, size_t j, char **ptr,
                        size_t *len);
/* Unit j moved (rx: arrived; tx: handed to the kernel). */
typedef void (*done_fn)(void *ctx, struct stream *s, size_t j);

/* One message to or from one peer, in units. */
struct stream {
  struct peer *p;
  bool tx;
  bool drain_only;      /* queues the peer's p2p frames; never finishes */
  bool p2p;             /* rx: a p2p recv (match the tag) */
  struct frame h;       /* tx: the header to send; rx: the one expected */
  size_t hoff;          /* tx: header bytes sent */
  bool hdr;             /* rx: header matched */
  size_t nunits, j;
  char *buf;            /* single-unit streams (unit == NULL) */
  size_t buflen;
  char *ptr;            /* the current unit */
  size_t len, off;
  bool have;
  unit_fn unit;
  done_fn done;
  void *ctx;
  short want;           /* poll events awaited; 0: blocked on a unit */
  bool fin;
};

struct tcp_comm {
  struct pg__comm base;
  int n, me;
  struct peer *peers;
  uint32_t seq;
  int dead;             /* the error that poisoned the comm, or 0 */
  const char *opname;
  struct stream *ss;    /* [2n + 2] */
  struct pollfd *pfd;   /* [2n + 2] */
  char *scratch;
  size_t scratch_len;
  double spin_s;        /* Note [spin then sleep] in tcp_stream.c: the */
  double spin_cur;      /* most, the current budget, and the waits since */
  unsigned spin_idle;   /* the budget reached 0 */
  bool spin_yield;      /* sched_yield between the spin's retries */
  double cut_next;      /* Note [a node cut off]: the next ask */
  const bool *cut_armed;  /* struct pg__setup's cut watch */
  int (*cut_ask)(void *arg);
  void *cut_arg;
};

/* ---- small helpers ------------------------------------------------------ */

static inline int wrap(int x, int n)
{
  x %= n;
  return x < 0 ? x + n : x;
}

static inline size_t min_sz(size_t a, size_t b)
{
  return a < b ? a : b;
}

/* Chunk c of n over count elements, then segment k of nseg within it:
 * sizes differ by at most one element, so any count divides. */
static inline void seg_of(size_t count, int n, size_t nseg, int c,
                          size_t k, size_t *off, size_t *len)
{
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  size_t cs = (size_t)c * base + min_sz((size_t)c, rem);
  size_t cl = base + ((size_t)c < rem);
  size_t sb = cl / nseg, sr = cl % nseg;

  *off = cs + k * sb + min_sz(k, sr);
  *len = sb + (k < sr);
}

static inline size_t chunk_len(size_t count, int n, int c)
{
  return count / (size_t)n + ((size_t)c < count % (size_t)n);
}

/* Segments per chunk so that each is about SEG_BYTES. */
static inline size_t nseg_for(size_t chunk_bytes)
{
  size_t k = (chunk_bytes + SEG_BYTES - 1) / SEG_BYTES;

  return k ? k : 1;
}

static inline uint16_t code_of(int coll, pg_dtype t, pg_op op)
{
  return (uint16_t)(coll | (int)t << 4 | (int)op << 8);
}

static inline struct frame coll_frame(struct tcp_comm *c, uint16_t code,
                                      int tag, size_t len)
{
  struct frame f;

  memset(&f, 0, sizeof f);
  f.magic = FRAME_MAGIC;
  f.kind = FRAME_COLL;
  f.code = code;
  f.seq = c->seq;
  f.tag = tag;
  f.len = len;
  return f;
}

enum ring_kind { RING_AR, RING_AG, RING_RS };

struct ring {
  enum ring_kind kind;
  pg_dtype t;
  pg_op op;
  size_t es;
  int n, me, shift, rsteps;
  size_t count;         /* elements over all n chunks */
  size_t nseg;
  const char *src;
  char *dst;            /* AR: the accumulator; AG: recv; RS: recv */
  char *part[2];        /* RS: partial blocks */
  char *tmp;            /* one segment */
  size_t rx_done, tx_done;
};

struct chain {
  pg_dtype t;
  pg_op op;
  size_t es, count, nseg;
  int vr, n;
  const char *src;
  char *dst;
  char *slots;          /* reduce: CHAIN_SLOTS segments */
  size_t slot_bytes;
  size_t rx_done, tx_done;
};

/* tcp_stream.c: messages as streams of units, moved by one poll() loop. */
char *tcp_scratch(struct tcp_comm *c, size_t bytes);
const char *tcp_coll_name(int code);
int tcp_ms_until(double deadline);
struct stream *tcp_stream_init(struct tcp_comm *c, struct stream *s,
                               int peer, bool tx, const struct frame *h);
void tcp_stream_buf(struct tcp_comm *c, struct stream *s, int peer, bool tx,
                    const struct frame *h, const void *buf);
void tcp_stream_units(struct tcp_comm *c, struct stream *s, int peer,
                      bool tx, const struct frame *h, size_t nunits,
                      unit_fn unit, done_fn done, void *ctx);
int tcp_run(struct tcp_comm *c, struct stream *ss, int ns, double deadline);
int tcp_sendrecv(struct tcp_comm *c, int to, const struct frame *th,
                 const void *sbuf, int from, const struct frame *rh,
                 void *rbuf, double deadline);
int tcp_send1(struct tcp_comm *c, int to, const struct frame *h,
              const void *buf, double deadline);
int tcp_recv1(struct tcp_comm *c, int from, const struct frame *h,
              void *buf, double deadline);

/* tcp_ring.c: the segmented ring and the pipelined chains. */
int tcp_ring_run(struct tcp_comm *c, struct ring *r, int steps,
                 uint16_t code, double deadline);
bool tcp_bc_tx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                    size_t *len);
bool tcp_bc_rx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                    size_t *len);
bool tcp_rd_tx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                    size_t *len);
bool tcp_rd_rx_unit(void *ctx, struct stream *s, size_t j, char **ptr,
                    size_t *len);
void tcp_rd_rx_done(void *ctx, struct stream *s, size_t j);
void tcp_chain_rx_done(void *ctx, struct stream *s, size_t j);
void tcp_chain_tx_done(void *ctx, struct stream *s, size_t j);

/* tcp.c: closes npeers peers' sockets and frees what c holds (not c). */
void tcp_comm_release(struct tcp_comm *c, int npeers);

/* tcp_setup.c: endpoints through the store, then the mesh of sockets. */
int tcp_connect_all(struct tcp_comm *c, const struct pg__setup *s,
                    double deadline);

#endif
