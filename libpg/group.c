/* group.c -- pg_init/pg_destroy, the topology, the choice of backend, and
 * the work queue: every operation runs in issue order on the group's
 * progress thread, or inline on the caller's thread when nothing is
 * queued (so a synchronous call costs no thread hand-off). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "knobs.h"
#include "launch_env.h"
#include "pg_internal.h"

#define DEFAULT_TIMEOUT_S 300.0
#define EXIT_WAIT_MAX_S 30.0

enum work_kind {
  W_ALL_REDUCE, W_BROADCAST, W_REDUCE, W_ALL_GATHER, W_REDUCE_SCATTER,
  W_BARRIER, W_SEND, W_RECV, W_ALL_TO_ALL, W_GATHER, W_SCATTER,
};

/* The tag of the point-to-point messages that all_to_all, gather and
 * scatter are made of (Note [composed collectives]); refused from users. */
#define COMPOSED_TAG INT_MIN

struct pg_work {
  struct pg_group *g;
  enum work_kind kind;
  const void *send;
  void *recv;
  size_t count;
  pg_dtype dtype;
  pg_op op;
  int root;             /* root, or peer for send/recv */
  int tag;
  /* all_to_all_v: per-rank counts and displacements (elements); NULL
   * counts: every block is count elements. */
  const size_t *send_counts, *send_displs, *recv_counts, *recv_displs;
  int result;
  bool done;
  int refs;             /* the queue's and the caller's */
  char *why;            /* pg_last_error of a failed async op, for the
                           thread that waits for it */
  struct pg__fence *fence;  /* stream-ordered backends: its completion */
  struct pg_work *next;
};

struct pg_group {
  int rank, size;
  double timeout;
  pg_store *store;
  pg_store_server *server;      /* rank 0 serves the store */
  struct pg__topo topo;         /* the world group's; sub-groups use it */
  const struct pg__topo *wtopo; /* the world's topology */
  struct pg__comm *comm;        /* NULL for a group of one */
  char backend[16];
  int *all_ranks;               /* [size]: each member's world rank */
  /* Sub-groups (Note [sub-groups]): the store key namespace of this
   * group ("pg/" for the world, then "pg/g1/", "pg/g1/g3/", ...), how
   * many children it made, the user's view of the store (a sub-group's
   * keys live under its namespace), and what NCCL needs again. */
  char ns[256];
  int children;
  pg_store *user_store;
  bool is_sub;
  struct pg_group *split_from;  /* the parent whose comm is split */
  int split_color, split_key;
  pg_backend be;
  int device, local_rank;
  char launch_addr[256];        /* MASTER_ADDR derived from srun's env */
  char master_addr[256];        /* rank 0's address, as resolved */
  struct pg__token token;       /* the job token (auth.h); len 0: none */

  pthread_mutex_t mu;
  pthread_cond_t queued;        /* work was queued, or stop */
  pthread_cond_t finished;      /* some work finished */
  pthread_t thread;
  struct pg_work *head, *tail;
  bool busy;                    /* an op is executing (thread or inline) */
  bool stop;
  int failed;                   /* first error: later ops fail fast */

  /* pg_group_start/end: the nesting depth; on the CPU backends the
   * grouped sends and receives, run at the end. */
  int grouping;
  struct pg_work *batch, *batch_tail;
};

/* ---- environment ---------------------------------------------------------- */

static int env_int(const char *name, long lo, long hi, int fallback,
                   bool required, int *out)
{
  char buf[64];
  /* Set by cdrun/torchrun, else derived from srun's or mpirun's. */
  const char *v = pg__launch_env(name, buf, sizeof buf);
  char *end;
  long n;

  if (!v || !*v) {
    if (required)
      return pg__fail(-EINVAL, "%s is not set (run the worker under cdrun, "
                      "torchrun, srun or mpirun, or pass it in struct "
                      "pg_options)", name);
    *out = fallback;
    return 0;
  }
  errno = 0;
  n = strtol(v, &end, 10);
  if (errno || end == v || *end || n < lo || n > hi)
    return pg__fail(-EINVAL, "%s is '%s', expected an integer %ld..%ld",
                    name, v, lo, hi);
  *out = (int)n;
  return 0;
}

static int env_double(enum pg__knob k, double fallback, double *out)
{
  const char *name = pg__knob_name(k);
  const char *v = pg__knob(k);
  char *end;
  double d;

  if (!v || !*v) {
    *out = fallback;
    return 0;
  }
  errno = 0;
  d = strtod(v, &end);
  if (errno || end == v || *end || !(d > 0) || d > 1e9)
    return pg__fail(-EINVAL, "%s is '%s', expected seconds > 0", name, v);
  *out = d;
  return 0;
}

/* This machine: hostname plus boot id, so two containers with the same
 * hostname on different machines are not taken for one host. */
/* This kernel's boot id ("" if unknown): processes that share it share
 * the machine's CPUs, even in network namespaces posing as hosts. */
static void boot_id(char *out, size_t len)
{
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

  out[0] = '\0';
  if (f) {
    if (!fgets(out, (int)len, f))
      out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
  }
}

static void default_host_id(const char *boot, char *out, size_t len)
{
  char host[256] = "unknown";

  gethostname(host, sizeof host - 1);
  snprintf(out, len, "%s/%s", host, boot);
}

/* ---- topology --------------------------------------------------------------- */

static void topo_free(struct pg__topo *t)
{
  free(t->host_of);
  free(t->leader_of);
  free(t->local);
  memset(t, 0, sizeof *t);
}

/* The length of a published "<host id>\n<boot id>"'s host id. */
static size_t host_part(const void *val, size_t len)
{
  const char *nl = memchr(val, '\n', len);

  return nl ? (size_t)(nl - (const char *)val) : len;
}

/* All-gathers host ids (and boot ids) over the store and groups ranks by
 * them. */
static int topo_build(pg_group *g, const char *host_id, const char *boot)
{
  struct pg__topo *t = &g->topo;
  void **vals = NULL;
  size_t *lens = NULL, hl, bl;
  char mine[1024];
  int i, j, err = -ENOMEM;

  t->rank = g->rank;
  t->size = g->size;
  t->host_of = calloc((size_t)g->size, sizeof *t->host_of);
  t->leader_of = calloc((size_t)g->size, sizeof *t->leader_of);
  t->local = calloc((size_t)g->size, sizeof *t->local);
  vals = calloc((size_t)g->size, sizeof *vals);
  lens = calloc((size_t)g->size, sizeof *lens);
  if (!t->host_of || !t->leader_of || !t->local || !vals || !lens)
    goto out;
  snprintf(mine, sizeof mine, "%s\n%s", host_id, boot);
  err = pg__store_allgather(g->store, "pg/", "host/", g->rank, g->size,
                            mine, strlen(mine), g->timeout, vals, lens);
  if (err)
    goto out;
  t->nhosts = 0;
  for (i = 0; i < g->size; i++) {
    hl = host_part(vals[i], lens[i]);
    for (j = 0; j < i; j++)
      if (host_part(vals[j], lens[j]) == hl &&
          memcmp(vals[j], vals[i], hl) == 0)
        break;
    if (j < i) {
      t->host_of[i] = t->host_of[j];
    } else {
      t->leader_of[t->nhosts] = i;
      t->host_of[i] = t->nhosts++;
    }
  }
  t->nlocal = 0;
  for (i = 0; i < g->size; i++)
    if (t->host_of[i] == t->host_of[g->rank]) {
      if (i == g->rank)
        t->local_index = t->nlocal;
      t->local[t->nlocal++] = i;
    }
  t->machine_ranks = 0;
  bl = strlen(boot);
  for (i = 0; i < g->size; i++) {
    hl = host_part(vals[i], lens[i]);
    t->machine_ranks += hl < lens[i] && lens[i] - hl - 1 == bl &&
                        memcmp((char *)vals[i] + hl + 1, boot, bl) == 0;
  }
  err = 0;
out:
  pg__free_vals(vals, g->size);
  free(vals);
  free(lens);
  return err;
}

/* ---- running one operation ----------------------------------------------------- */

/* A group of one: every collective is a local copy. */
static int run_self(struct pg_work *w)
{
  size_t bytes = w->count * pg_dtype_size(w->dtype);

  switch (w->kind) {
  case W_ALL_REDUCE:
  case W_ALL_GATHER:
  case W_REDUCE_SCATTER:
  case W_REDUCE:
    if (w->recv && w->recv != w->send && bytes)
      memmove(w->recv, w->send, bytes);
    return 0;
  case W_BROADCAST:
  case W_BARRIER:
    return 0;
  case W_SEND:
  case W_RECV:
    return pg__fail(-EINVAL, "send/recv: peer %d is this rank", w->root);
  case W_ALL_TO_ALL:
  case W_GATHER:
  case W_SCATTER:
    break;
  }
  return -EINVAL;
}

static bool overlap(const void *a, size_t alen, const void *b, size_t blen)
{
  const char *x = a, *y = b;

  return alen && blen && x < y + blen && y < x + alen;
}

/* Note [in-place gathers]: NCCL's in-place conventions are all_gather with
 * send == recv + rank * count and reduce_scatter with recv == send + rank *
 * count.  The CPU backends take disjoint buffers (or send == recv for
 * all_reduce/reduce), so an overlapping pair goes through a temporary of
 * count elements here. */
static int run_overlapping(pg_group *g, struct pg_work *w, double deadline)
{
  struct pg__comm *c = g->comm;
  size_t bytes = w->count * pg_dtype_size(w->dtype);
  void *tmp = malloc(bytes);
  int err;

  if (!tmp)
    return pg__fail(-ENOMEM, "out of memory for an in-place %s",
                    w->kind == W_ALL_GATHER ? "all_gather"
                                            : "reduce_scatter");
  if (w->kind == W_ALL_GATHER) {
    memcpy(tmp, w->send, bytes);
    err = c->ops->all_gather(c, tmp, w->recv, w->count, w->dtype, deadline);
  } else {
    err = c->ops->reduce_scatter(c, w->send, tmp, w->count, w->dtype, w->op,
                                 deadline);
    if (err == 0)
      memcpy(w->recv, tmp, bytes);
  }
  free(tmp);
  return err;
}

/* Note [half precision]: f16 and bf16 reductions accumulate in f32 on
 * the CPU backends: their transports add partial results as they go (a
 * ring rounds after every step), so the data is widened to f32 here, the
 * backend reduces f32, and the result is rounded once; AVG divides before
 * that rounding.  So an f16 average of 65504 over 3 ranks is 65504, not
 * +inf.  It costs a temporary and twice the bytes on the wire, for these
 * dtypes only.  MIN and MAX are exact in any precision: not widened. */
static bool widens(const struct pg_work *w)
{
  return (w->dtype == PG_F16 || w->dtype == PG_BF16) && w->count &&
         (w->op == PG_SUM || w->op == PG_AVG || w->op == PG_PROD) &&
         (w->kind == W_ALL_REDUCE || w->kind == W_REDUCE ||
          w->kind == W_REDUCE_SCATTER);
}

static void widen(pg_dtype t, float *dst, const void *src, size_t n)
{
  const uint16_t *h = src;
  size_t i;

  if (t == PG_F16)
    for (i = 0; i < n; i++)
      dst[i] = pg__f16_to_f32(h[i]);
  else
    for (i = 0; i < n; i++)
      dst[i] = pg__bf16_to_f32(h[i]);
}

static void narrow(pg_dtype t, void *dst, const float *src, size_t n)
{
  uint16_t *h = dst;
  size_t i;

  if (t == PG_F16)
    for (i = 0; i < n; i++)
      h[i] = pg__f32_to_f16(src[i]);
  else
    for (i = 0; i < n; i++)
      h[i] = pg__f32_to_bf16(src[i]);
}

static int run_widened(pg_group *g, struct pg_work *w, double deadline)
{
  struct pg__comm *c = g->comm;
  size_t nin = w->kind == W_REDUCE_SCATTER ? w->count * (size_t)g->size
                                           : w->count;
  /* reduce_scatter's output gets its own block after the input. */
  size_t nout = w->kind == W_REDUCE_SCATTER ? w->count : 0;
  float *in = malloc((nin + nout) * sizeof *in), *out;
  int err;

  if (!in)
    return pg__fail(-ENOMEM, "out of memory widening %zu %s elements to "
                    "f32", nin, w->dtype == PG_F16 ? "f16" : "bf16");
  widen(w->dtype, in, w->send, nin);
  out = in;
  switch (w->kind) {
  case W_ALL_REDUCE:
    err = c->ops->all_reduce(c, in, in, w->count, PG_F32, w->op, deadline);
    break;
  case W_REDUCE:
    err = c->ops->reduce(c, in, in, w->count, PG_F32, w->op, w->root,
                         deadline);
    break;
  default:  /* W_REDUCE_SCATTER */
    out = in + nin;
    err = c->ops->reduce_scatter(c, in, out, w->count, PG_F32, w->op,
                                 deadline);
    break;
  }
  if (!err && w->recv && (w->kind != W_REDUCE || g->rank == w->root))
    narrow(w->dtype, w->recv, out, w->count);
  free(in);
  return err;
}

/* Note [composed collectives]: all_to_all, gather and scatter are made of
 * point-to-point messages (tag COMPOSED_TAG) on every backend.  The CPU
 * backends exchange pairwise: at step s every rank sends to rank + s and
 * receives from rank - s; a send waiting for room drains what arrives
 * meanwhile (shm and TCP), so the cycle of sends cannot deadlock, and a
 * rank holds at most one step's blocks in flight.  NCCL issues every send
 * and receive (its own block included: NCCL sends to itself inside a
 * group) in one ncclGroupStart/End, as torch's alltoall does. */
struct blocks {
  size_t *scount, *sdispl, *rcount, *rdispl;  /* [n] elements */
};

static void blocks_free(struct blocks *b)
{
  free(b->scount);
}

/* Every rank's block of the send and receive buffers, in elements. */
static int blocks_of(const pg_group *g, const struct pg_work *w,
                     struct blocks *b)
{
  size_t n = (size_t)g->size, i, so = 0, ro = 0;

  b->scount = malloc(4 * n * sizeof *b->scount);
  if (!b->scount)
    return pg__fail(-ENOMEM, "out of memory for %zu ranks' blocks", n);
  b->sdispl = b->scount + n;
  b->rcount = b->sdispl + n;
  b->rdispl = b->rcount + n;
  for (i = 0; i < n; i++) {
    b->scount[i] = w->send_counts ? w->send_counts[i] : w->count;
    b->rcount[i] = w->recv_counts ? w->recv_counts[i] : w->count;
    b->sdispl[i] = w->send_displs ? w->send_displs[i] : so;
    b->rdispl[i] = w->recv_displs ? w->recv_displs[i] : ro;
    so = b->sdispl[i] + b->scount[i];
    ro = b->rdispl[i] + b->rcount[i];
  }
  return 0;
}

static int send_block(pg_group *g, const char *base, size_t off,
                      size_t count, size_t es, int peer, double deadline)
{
  return g->comm->ops->send(g->comm, base + off * es, count * es, peer,
                            COMPOSED_TAG, deadline);
}

static int recv_block(pg_group *g, char *base, size_t off, size_t count,
                      size_t es, int peer, double deadline)
{
  return g->comm->ops->recv(g->comm, base + off * es, count * es, peer,
                            COMPOSED_TAG, deadline);
}

static int run_all_to_all(pg_group *g, const struct pg_work *w,
                          const struct blocks *b, bool grouped,
                          double deadline)
{
  size_t es = pg_dtype_size(w->dtype);
  int n = g->size, me = g->rank, s, to, from, err = 0;

  if (!grouped && b->scount[me] && w->recv)
    memmove((char *)w->recv + b->rdispl[me] * es,
            (const char *)w->send + b->sdispl[me] * es, b->scount[me] * es);
  for (s = grouped ? 0 : 1; s < n && !err; s++) {
    to = (me + s) % n;
    from = (me - s + n) % n;
    err = send_block(g, w->send, b->sdispl[to], b->scount[to], es, to,
                     deadline);
    if (!err)
      err = recv_block(g, w->recv, b->rdispl[from], b->rcount[from], es,
                       from, deadline);
  }
  return err;
}

/* gather (to_root) or scatter: the root's buffer holds n blocks of
 * count; its own block is copied unless it is in place. */
static int run_rooted(pg_group *g, const struct pg_work *w, bool grouped,
                      double deadline)
{
  size_t es = pg_dtype_size(w->dtype), bytes = w->count * es;
  bool gather = w->kind == W_GATHER;
  int r, err = 0;

  if (g->rank != w->root)
    return gather ? send_block(g, w->send, 0, w->count, es, w->root,
                               deadline)
                  : recv_block(g, w->recv, 0, w->count, es, w->root,
                               deadline);
  for (r = 0; r < g->size && !err; r++) {
    const char *src = gather ? w->send
                             : (const char *)w->send + (size_t)r * bytes;
    char *dst = gather ? (char *)w->recv + (size_t)r * bytes : w->recv;

    if (r == w->root) {
      if (src == dst || !bytes)
        continue;  /* in place */
      if (!grouped) {
        memmove(dst, src, bytes);
        continue;
      }
      /* NCCL: to itself, inside the group. */
      err = send_block(g, src, 0, w->count, es, r, deadline);
      if (!err)
        err = recv_block(g, dst, 0, w->count, es, r, deadline);
      continue;
    }
    err = gather ? recv_block(g, dst, 0, w->count, es, r, deadline)
                 : send_block(g, src, 0, w->count, es, r, deadline);
  }
  return err;
}

static bool stream_ordered(const pg_group *g);

static int run_composed(pg_group *g, struct pg_work *w, double deadline)
{
  struct pg__comm *c = g->comm;
  bool grouped = c && stream_ordered(g);
  struct blocks b = { 0 };
  int err, e;

  if (w->kind == W_ALL_TO_ALL && (err = blocks_of(g, w, &b)))
    return err;
  if (!c) {
    /* A group of one: its own block. */
    size_t es = pg_dtype_size(w->dtype);
    size_t n = w->kind == W_ALL_TO_ALL ? b.scount[0] : w->count;
    const char *src = (const char *)w->send +
                      (w->kind == W_ALL_TO_ALL ? b.sdispl[0] : 0) * es;
    char *dst = (char *)w->recv +
                (w->kind == W_ALL_TO_ALL ? b.rdispl[0] : 0) * es;

    if (n && src != dst)
      memmove(dst, src, n * es);
    blocks_free(&b);
    return 0;
  }
  if (grouped && (err = c->ops->group_start(c))) {
    blocks_free(&b);
    return err;
  }
  err = w->kind == W_ALL_TO_ALL ? run_all_to_all(g, w, &b, grouped, deadline)
                                : run_rooted(g, w, grouped, deadline);
  if (grouped) {
    e = c->ops->group_end(c);
    if (!err)
      err = e;
  }
  blocks_free(&b);
  return err;
}

static int run_work(pg_group *g, struct pg_work *w)
{
  struct pg__comm *c = g->comm;
  double deadline = pg__now() + g->timeout;
  size_t bytes = w->count * pg_dtype_size(w->dtype);
  size_t all = bytes * (size_t)g->size;

  if (w->kind == W_ALL_TO_ALL || w->kind == W_GATHER ||
      w->kind == W_SCATTER)
    return run_composed(g, w, deadline);
  if (!c)
    return run_self(w);
  if (strcmp(g->backend, "nccl") != 0 && widens(w))
    return run_widened(g, w, deadline);
  if (strcmp(g->backend, "nccl") != 0 &&
      ((w->kind == W_ALL_GATHER && overlap(w->send, bytes, w->recv, all)) ||
       (w->kind == W_REDUCE_SCATTER &&
        overlap(w->send, all, w->recv, bytes))))
    return run_overlapping(g, w, deadline);
  switch (w->kind) {
  case W_ALL_REDUCE:
    return c->ops->all_reduce(c, w->send, w->recv, w->count, w->dtype,
                              w->op, deadline);
  case W_BROADCAST:
    return c->ops->broadcast(c, w->recv, w->count, w->dtype, w->root,
                             deadline);
  case W_REDUCE:
    return c->ops->reduce(c, w->send, w->recv, w->count, w->dtype, w->op,
                          w->root, deadline);
  case W_ALL_GATHER:
    return c->ops->all_gather(c, w->send, w->recv, w->count, w->dtype,
                              deadline);
  case W_REDUCE_SCATTER:
    return c->ops->reduce_scatter(c, w->send, w->recv, w->count, w->dtype,
                                  w->op, deadline);
  case W_BARRIER:
    return c->ops->barrier(c, deadline);
  case W_SEND:
    return c->ops->send(c, w->send, bytes, w->root, w->tag, deadline);
  case W_RECV:
    return c->ops->recv(c, w->recv, bytes, w->root, w->tag, deadline);
  case W_ALL_TO_ALL:
  case W_GATHER:
  case W_SCATTER:
    break;
  }
  return -EINVAL;
}

/* Runs w and records the outcome; called with g->mu NOT held. */
static void execute(pg_group *g, struct pg_work *w)
{
  int failed, err;

  pthread_mutex_lock(&g->mu);
  failed = g->failed;
  pthread_mutex_unlock(&g->mu);
  err = failed ? pg__fail(PG_EPEERFAIL, "an earlier operation of this "
                          "group failed (%s): the group is unusable",
                          pg_err_name(failed))
               : run_work(g, w);
  pthread_mutex_lock(&g->mu);
  if (err && !w->why)
    w->why = strdup(pg_last_error());
  if (err && !g->failed && err != PG_EPEERFAIL)
    g->failed = err;
  w->result = err;
  w->done = true;
  g->busy = false;
  pthread_cond_broadcast(&g->finished);
  /* Wake the progress thread only when work waits: a wake-up per
   * synchronous op costs microseconds on a loaded machine. */
  if (g->head)
    pthread_cond_signal(&g->queued);
  pthread_mutex_unlock(&g->mu);
}

static void work_unref(struct pg_work *w)
{
  /* Called with g->mu held. */
  if (--w->refs == 0) {
    free(w->why);
    free(w);
  }
}

/* Hands a failed async op's sentence to the thread that asked. */
static int work_result(struct pg_work *w)
{
  if (w->result && w->why)
    pg__fail(w->result, "%s", w->why);
  return w->result;
}

static void *progress_main(void *arg)
{
  pg_group *g = arg;
  struct pg_work *w;

  pthread_mutex_lock(&g->mu);
  for (;;) {
    while (!g->stop && (!g->head || g->busy))
      pthread_cond_wait(&g->queued, &g->mu);
    if (!g->head && g->stop)
      break;
    if (!g->head || g->busy)
      continue;
    w = g->head;
    g->head = w->next;
    if (!g->head)
      g->tail = NULL;
    g->busy = true;
    pthread_mutex_unlock(&g->mu);
    execute(g, w);
    pthread_mutex_lock(&g->mu);
    work_unref(w);
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

static int check_all_to_all(pg_group *g, const struct pg_work *w)
{
  size_t n = (size_t)g->size, es = pg_dtype_size(w->dtype), i, sn = 0,
         rn = 0, lim = SIZE_MAX / 8 / n;

  if (!w->send_counts != !w->recv_counts)
    return pg__fail(-EINVAL, "all_to_all_v: send_counts and recv_counts "
                    "are both required");
  if (!w->send_counts) {
    if (w->count && (!w->send || !w->recv))
      return pg__fail(-EINVAL, "all_to_all: NULL buffer with count %zu",
                      w->count);
    if (overlap(w->send, w->count * n * es, w->recv, w->count * n * es))
      return pg__fail(-EINVAL, "all_to_all: the send and receive buffers "
                      "overlap (it cannot run in place)");
    return 0;
  }
  for (i = 0; i < n; i++) {
    if (w->send_counts[i] > lim || w->recv_counts[i] > lim ||
        (w->send_displs && w->send_displs[i] > lim) ||
        (w->recv_displs && w->recv_displs[i] > lim))
      return pg__fail(-EINVAL, "all_to_all_v: rank %zu's count or "
                      "displacement is too large", i);
    sn += w->send_counts[i];
    rn += w->recv_counts[i];
  }
  if ((sn && !w->send) || (rn && !w->recv))
    return pg__fail(-EINVAL, "all_to_all_v: NULL %s buffer with %zu "
                    "elements", sn && !w->send ? "send" : "receive",
                    sn && !w->send ? sn : rn);
  if (w->send_counts[g->rank] != w->recv_counts[g->rank])
    return pg__fail(-EINVAL, "all_to_all_v: this rank (%d) sends itself "
                    "%zu elements but expects %zu", g->rank,
                    w->send_counts[g->rank], w->recv_counts[g->rank]);
  return 0;
}

/* gather: recv on the root holds n blocks; scatter: send does.  In
 * place: the root's own block is the other buffer. */
static int check_rooted(pg_group *g, const struct pg_work *w)
{
  const char *what = w->kind == W_GATHER ? "gather" : "scatter";
  size_t bytes = w->count * pg_dtype_size(w->dtype);
  bool root = g->rank == w->root;

  if (w->root < 0 || w->root >= g->size)
    return pg__fail(-EINVAL, "%s: root %d is not a rank of this group of "
                    "%d", what, w->root, g->size);
  if (!w->count)
    return 0;
  if (w->kind == W_GATHER ? !w->send || (root && !w->recv)
                          : !w->recv || (root && !w->send))
    return pg__fail(-EINVAL, "%s: NULL buffer with count %zu", what,
                    w->count);
  if (root && w->kind == W_GATHER &&
      (const char *)w->send != (const char *)w->recv +
                               (size_t)w->root * bytes &&
      overlap(w->send, bytes, w->recv, bytes * (size_t)g->size))
    return pg__fail(-EINVAL, "gather: the buffers overlap (in place, send "
                    "is recv + root * count)");
  if (root && w->kind == W_SCATTER &&
      (const char *)w->recv != (const char *)w->send +
                               (size_t)w->root * bytes &&
      overlap(w->recv, bytes, w->send, bytes * (size_t)g->size))
    return pg__fail(-EINVAL, "scatter: the buffers overlap (in place, recv "
                    "is send + root * count)");
  return 0;
}

static int check_args(pg_group *g, const struct pg_work *w)
{
  if (!g)
    return pg__fail(-EINVAL, "the group is NULL");
  if ((unsigned)w->dtype >= PG_DTYPE_COUNT)
    return pg__fail(-EINVAL, "invalid dtype %d", (int)w->dtype);
  if ((unsigned)w->op >= PG_OP_COUNT)
    return pg__fail(-EINVAL, "invalid reduction op %d", (int)w->op);
  if (w->count > SIZE_MAX / 8 / (size_t)g->size)
    return pg__fail(-EINVAL, "count %zu is too large", w->count);
  if (w->count && (w->kind == W_ALL_REDUCE || w->kind == W_ALL_GATHER ||
                   w->kind == W_REDUCE_SCATTER) && (!w->send || !w->recv))
    return pg__fail(-EINVAL, "NULL buffer with count %zu", w->count);
  if ((w->kind == W_BROADCAST || w->kind == W_REDUCE) &&
      (w->root < 0 || w->root >= g->size))
    return pg__fail(-EINVAL, "root %d is not a rank of this group of %d",
                    w->root, g->size);
  if (w->kind == W_REDUCE && w->count && !w->send)
    return pg__fail(-EINVAL, "reduce: NULL send buffer");
  if (w->kind == W_REDUCE && w->count && g->rank == w->root && !w->recv)
    return pg__fail(-EINVAL, "reduce: NULL receive buffer on the root");
  if ((w->kind == W_SEND || w->kind == W_RECV) &&
      (w->root < 0 || w->root >= g->size || w->root == g->rank))
    return pg__fail(-EINVAL, "peer %d is not another rank of this group "
                    "of %d", w->root, g->size);
  if (w->kind == W_BROADCAST && w->count && !w->recv)
    return pg__fail(-EINVAL, "broadcast: NULL buffer");
  if ((w->kind == W_SEND || w->kind == W_RECV) && w->tag == COMPOSED_TAG)
    return pg__fail(-EINVAL, "tag %d is reserved for libpg's own use",
                    w->tag);
  if (w->kind == W_ALL_TO_ALL)
    return check_all_to_all(g, w);
  if (w->kind == W_GATHER || w->kind == W_SCATTER)
    return check_rooted(g, w);
  return 0;
}

static bool stream_ordered(const pg_group *g)
{
  return g->comm && g->comm->ops->take_fence;
}

/* Note [stream model] in nccl.c: the op is enqueued on the caller's
 * thread at once (no progress thread) and returns; a synchronous call
 * then makes the caller's stream wait for it on the device (a barrier:
 * the host), an async one hands its fence to the work handle. */
static int submit_stream(pg_group *g, const struct pg_work *proto,
                         pg_work **out)
{
  struct pg__comm *c = g->comm;
  struct pg_work local = *proto, *w;
  struct pg__fence *f;
  int err;

  pthread_mutex_lock(&g->mu);
  err = run_work(g, &local);
  f = err ? NULL : c->ops->take_fence(c);
  pthread_mutex_unlock(&g->mu);
  if (err)
    return err;
  if (!out) {
    if (f)
      err = c->ops->fence_wait(f, proto->kind == W_BARRIER, -1);
    c->ops->fence_free(f);
    return err;
  }
  w = calloc(1, sizeof *w);
  if (!w) {
    c->ops->fence_free(f);
    return pg__fail(-ENOMEM, "out of memory for a work handle");
  }
  *w = local;
  w->g = g;
  w->fence = f;
  w->refs = 1;
  w->done = f == NULL;  /* nothing was enqueued (count 0) */
  w->why = NULL;
  w->next = NULL;
  *out = w;
  return 0;
}

/* A point-to-point op between pg_group_start and pg_group_end on a CPU
 * backend: kept for the end. */
static int batch_add(pg_group *g, const struct pg_work *proto)
{
  struct pg_work *w;

  if (proto->kind != W_SEND && proto->kind != W_RECV)
    return pg__fail(-ENOTSUP, "only pg_send and pg_recv may be issued "
                    "between pg_group_start and pg_group_end on the CPU "
                    "backends");
  w = calloc(1, sizeof *w);
  if (!w)
    return pg__fail(-ENOMEM, "out of memory queueing a grouped operation");
  *w = *proto;
  w->g = g;
  w->next = NULL;
  if (g->batch_tail)
    g->batch_tail->next = w;
  else
    g->batch = w;
  g->batch_tail = w;
  return 0;
}

/* Queues w (async) or runs it (sync); w is filled but not yet owned. */
static int submit(pg_group *g, const struct pg_work *proto, pg_work **out)
{
  struct pg_work *w;
  int err = check_args(g, proto);

  if (err)
    return err;
  if (g->grouping && out)
    return pg__fail(-EINVAL, "between pg_group_start and pg_group_end "
                    "issue pg_send/pg_recv (no work handles): "
                    "pg_group_end completes the group");
  if (g->grouping && !stream_ordered(g))
    return batch_add(g, proto);
  if (stream_ordered(g))
    return submit_stream(g, proto, out);
  if (!out) {
    /* Synchronous: run inline when the queue is empty and idle. */
    struct pg_work local = *proto;

    pthread_mutex_lock(&g->mu);
    while (g->head || g->busy)
      pthread_cond_wait(&g->finished, &g->mu);
    g->busy = true;
    pthread_mutex_unlock(&g->mu);
    local.g = g;
    local.refs = 1;
    local.why = NULL;
    execute(g, &local);
    free(local.why);
    return local.result;
  }
  w = malloc(sizeof *w);
  if (!w)
    return pg__fail(-ENOMEM, "out of memory queueing an operation");
  *w = *proto;
  w->why = NULL;
  w->g = g;
  w->refs = 2;
  w->next = NULL;
  w->done = false;
  pthread_mutex_lock(&g->mu);
  if (g->tail)
    g->tail->next = w;
  else
    g->head = w;
  g->tail = w;
  pthread_cond_signal(&g->queued);
  pthread_mutex_unlock(&g->mu);
  *out = w;
  return 0;
}

int pg_work_test(pg_work *w, bool *done)
{
  int r = 0;

  if (w->fence) {
    r = w->g->comm->ops->fence_query(w->fence);
    *done = r != 0;
    return r < 0 ? r : 0;
  }

  pthread_mutex_lock(&w->g->mu);
  *done = w->done;
  if (w->done)
    r = work_result(w);
  pthread_mutex_unlock(&w->g->mu);
  return r;
}

int pg_work_wait(pg_work *w, double timeout)
{
  pg_group *g = w->g;
  struct timespec ts;
  double until = timeout >= 0 ? pg__now() + timeout : 0;
  int r;

  if (w->fence)
    return g->comm->ops->fence_wait(w->fence, false, timeout);
  pthread_mutex_lock(&g->mu);
  while (!w->done) {
    if (timeout < 0) {
      pthread_cond_wait(&g->finished, &g->mu);
      continue;
    }
    if (pg__now() >= until)
      break;
    clock_gettime(CLOCK_REALTIME, &ts);
    {
      double left = until - pg__now(), s = (double)ts.tv_sec +
                    (double)ts.tv_nsec / 1e9 + (left > 0 ? left : 0);

      ts.tv_sec = (time_t)s;
      ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    }
    pthread_cond_timedwait(&g->finished, &g->mu, &ts);
  }
  r = w->done ? work_result(w) : -ETIMEDOUT;
  pthread_mutex_unlock(&g->mu);
  return r;
}

int pg_work_synchronize(pg_work *w, double timeout)
{
  if (w && w->fence)
    return w->g->comm->ops->fence_wait(w->fence, true, timeout);
  return w ? pg_work_wait(w, timeout)
           : pg__fail(-EINVAL, "pg_work_synchronize: NULL work");
}

int pg_set_stream(pg_group *g, void *stream)
{
  if (!g)
    return pg__fail(-EINVAL, "pg_set_stream: NULL group");
  if (!stream_ordered(g))
    return 0;  /* host memory: no streams */
  return g->comm->ops->set_stream(g->comm, stream);
}

int pg_group_start(pg_group *g)
{
  int err = 0;

  if (!g)
    return pg__fail(-EINVAL, "pg_group_start: NULL group");
  if (stream_ordered(g)) {
    pthread_mutex_lock(&g->mu);
    err = g->comm->ops->group_start(g->comm);
    pthread_mutex_unlock(&g->mu);
  }
  if (!err)
    g->grouping++;
  return err;
}

/* CPU backends: every send first, then every receive, each in issue
 * order; a send waiting for room receives meanwhile (shm and TCP), so a
 * group's exchange cannot deadlock. */
static int run_batch(pg_group *g)
{
  struct pg_work *w, *next;
  int pass, err = 0, e;

  for (pass = 0; pass < 2; pass++)
    for (w = g->batch; w; w = w->next)
      if ((w->kind == W_SEND) == (pass == 0) && !err) {
        e = submit(g, w, NULL);
        if (e && !err)
          err = e;
      }
  for (w = g->batch; w; w = next) {
    next = w->next;
    free(w);
  }
  g->batch = g->batch_tail = NULL;
  return err;
}

int pg_group_end(pg_group *g)
{
  struct pg__fence *f = NULL;
  int err;

  if (!g)
    return pg__fail(-EINVAL, "pg_group_end: NULL group");
  if (g->grouping == 0)
    return pg__fail(-EINVAL, "pg_group_end without pg_group_start");
  g->grouping--;
  if (!stream_ordered(g))
    return g->grouping ? 0 : run_batch(g);
  pthread_mutex_lock(&g->mu);
  err = g->comm->ops->group_end(g->comm);
  if (!err)
    f = g->comm->ops->take_fence(g->comm);
  pthread_mutex_unlock(&g->mu);
  if (!err && f)
    err = g->comm->ops->fence_wait(f, false, -1);
  if (f)
    g->comm->ops->fence_free(f);
  return err;
}

void pg_work_free(pg_work *w)
{
  pg_group *g;

  if (!w)
    return;
  if (w->fence || (w->g && stream_ordered(w->g))) {
    if (w->fence)
      w->g->comm->ops->fence_free(w->fence);
    free(w->why);
    free(w);
    return;
  }
  g = w->g;
  pthread_mutex_lock(&g->mu);
  work_unref(w);
  pthread_mutex_unlock(&g->mu);
}

/* ---- the operations ---------------------------------------------------------- */

#define WORK(kind_, send_, recv_, count_, dtype_, op_, root_, tag_)        \
  (struct pg_work){ .kind = (kind_), .send = (send_), .recv = (recv_),    \
                    .count = (count_), .dtype = (dtype_), .op = (op_),    \
                    .root = (root_), .tag = (tag_) }

int pg_all_reduce_async(pg_group *g, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_op op, pg_work **w)
{
  struct pg_work p = WORK(W_ALL_REDUCE, send, recv, count, t, op, 0, 0);

  return submit(g, &p, w);
}

int pg_broadcast_async(pg_group *g, void *buf, size_t count, pg_dtype t,
                       int root, pg_work **w)
{
  struct pg_work p = WORK(W_BROADCAST, buf, buf, count, t, PG_SUM, root, 0);

  return submit(g, &p, w);
}

int pg_reduce_async(pg_group *g, const void *send, void *recv, size_t count,
                    pg_dtype t, pg_op op, int root, pg_work **w)
{
  struct pg_work p = WORK(W_REDUCE, send, recv, count, t, op, root, 0);

  return submit(g, &p, w);
}

int pg_all_gather_async(pg_group *g, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_work **w)
{
  struct pg_work p = WORK(W_ALL_GATHER, send, recv, count, t, PG_SUM, 0, 0);

  return submit(g, &p, w);
}

int pg_reduce_scatter_async(pg_group *g, const void *send, void *recv,
                            size_t count, pg_dtype t, pg_op op, pg_work **w)
{
  struct pg_work p = WORK(W_REDUCE_SCATTER, send, recv, count, t, op, 0, 0);

  return submit(g, &p, w);
}

int pg_barrier_async(pg_group *g, pg_work **w)
{
  struct pg_work p = WORK(W_BARRIER, NULL, NULL, 0, PG_U8, PG_SUM, 0, 0);

  return submit(g, &p, w);
}

int pg_send_async(pg_group *g, const void *buf, size_t count, pg_dtype t,
                  int peer, int tag, pg_work **w)
{
  struct pg_work p = WORK(W_SEND, buf, NULL, count, t, PG_SUM, peer, tag);

  return submit(g, &p, w);
}

int pg_recv_async(pg_group *g, void *buf, size_t count, pg_dtype t,
                  int peer, int tag, pg_work **w)
{
  struct pg_work p = WORK(W_RECV, NULL, buf, count, t, PG_SUM, peer, tag);

  return submit(g, &p, w);
}

int pg_all_reduce(pg_group *g, const void *send, void *recv, size_t count,
                  pg_dtype t, pg_op op)
{
  return pg_all_reduce_async(g, send, recv, count, t, op, NULL);
}

int pg_broadcast(pg_group *g, void *buf, size_t count, pg_dtype t, int root)
{
  return pg_broadcast_async(g, buf, count, t, root, NULL);
}

int pg_reduce(pg_group *g, const void *send, void *recv, size_t count,
              pg_dtype t, pg_op op, int root)
{
  return pg_reduce_async(g, send, recv, count, t, op, root, NULL);
}

int pg_all_gather(pg_group *g, const void *send, void *recv, size_t count,
                  pg_dtype t)
{
  return pg_all_gather_async(g, send, recv, count, t, NULL);
}

int pg_reduce_scatter(pg_group *g, const void *send, void *recv,
                      size_t count, pg_dtype t, pg_op op)
{
  return pg_reduce_scatter_async(g, send, recv, count, t, op, NULL);
}

int pg_barrier(pg_group *g)
{
  return pg_barrier_async(g, NULL);
}

int pg_send(pg_group *g, const void *buf, size_t count, pg_dtype t, int peer,
            int tag)
{
  return pg_send_async(g, buf, count, t, peer, tag, NULL);
}

int pg_recv(pg_group *g, void *buf, size_t count, pg_dtype t, int peer,
            int tag)
{
  return pg_recv_async(g, buf, count, t, peer, tag, NULL);
}

int pg_all_to_all_async(pg_group *g, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_work **w)
{
  struct pg_work p = WORK(W_ALL_TO_ALL, send, recv, count, t, PG_SUM, 0, 0);

  return submit(g, &p, w);
}

int pg_all_to_all_v_async(pg_group *g, const void *send,
                          const size_t *send_counts,
                          const size_t *send_displs, void *recv,
                          const size_t *recv_counts,
                          const size_t *recv_displs, pg_dtype t,
                          pg_work **w)
{
  struct pg_work p = WORK(W_ALL_TO_ALL, send, recv, 0, t, PG_SUM, 0, 0);

  if (!send_counts || !recv_counts)
    return pg__fail(-EINVAL, "all_to_all_v: NULL counts");
  p.send_counts = send_counts;
  p.send_displs = send_displs;
  p.recv_counts = recv_counts;
  p.recv_displs = recv_displs;
  return submit(g, &p, w);
}

int pg_gather_async(pg_group *g, const void *send, void *recv, size_t count,
                    pg_dtype t, int root, pg_work **w)
{
  struct pg_work p = WORK(W_GATHER, send, recv, count, t, PG_SUM, root, 0);

  return submit(g, &p, w);
}

int pg_scatter_async(pg_group *g, const void *send, void *recv,
                     size_t count, pg_dtype t, int root, pg_work **w)
{
  struct pg_work p = WORK(W_SCATTER, send, recv, count, t, PG_SUM, root, 0);

  return submit(g, &p, w);
}

int pg_all_to_all(pg_group *g, const void *send, void *recv, size_t count,
                  pg_dtype t)
{
  return pg_all_to_all_async(g, send, recv, count, t, NULL);
}

int pg_all_to_all_v(pg_group *g, const void *send, const size_t *send_counts,
                    const size_t *send_displs, void *recv,
                    const size_t *recv_counts, const size_t *recv_displs,
                    pg_dtype t)
{
  return pg_all_to_all_v_async(g, send, send_counts, send_displs, recv,
                               recv_counts, recv_displs, t, NULL);
}

int pg_gather(pg_group *g, const void *send, void *recv, size_t count,
              pg_dtype t, int root)
{
  return pg_gather_async(g, send, recv, count, t, root, NULL);
}

int pg_scatter(pg_group *g, const void *send, void *recv, size_t count,
               pg_dtype t, int root)
{
  return pg_scatter_async(g, send, recv, count, t, root, NULL);
}

/* ---- sub-groups ------------------------------------------------------------ */

/* Note [sub-groups]: pg_new_group and pg_split are called by every rank
 * of the parent in the same order, so each rank's count of the parent's
 * children names a child alike everywhere: "<parent's ns>g<k>/".  The
 * child's backend keys and its user's store view live under that name,
 * so groups never collide in the store.  A child is a group like the
 * world (its own communicator over its members -- shared memory, TCP or
 * hierarchical by where they live, or a new NCCL communicator -- its own
 * progress thread and queue), so two groups run collectives at once from
 * two threads.  It borrows the world's store connection and topology:
 * destroy children before the world group. */
static int create_comm(pg_group *g, pg_backend be, int device,
                       int local_rank);

/* Whether the parent's children are split from its communicator (NCCL's
 * ncclCommSplit, which every parent rank must call, members or not). */
static bool splits(const pg_group *parent)
{
  return parent->comm && parent->comm->ops->split;
}

/* A parent rank outside the new group takes part in the split. */
static int split_nonmember(pg_group *parent)
{
  struct pg__comm *none = NULL;
  int err;

  if (!splits(parent))
    return 0;
  pthread_mutex_lock(&parent->mu);
  err = parent->comm->ops->split(parent->comm, -1, 0, NULL, &none);
  pthread_mutex_unlock(&parent->mu);
  return err;
}

/* A group whose setup failed with err after its thread started: torn
 * down, and its sentence kept (pg_destroy's teardown may overwrite it),
 * after "what: " when what is not NULL. */
static int setup_failed(pg_group *g, int err, const char *what)
{
  char why[512];

  snprintf(why, sizeof why, "%s", pg_last_error());
  g->comm = NULL;
  pg_destroy(g);
  return what ? pg__fail(err, "%s: %s", what, why)
              : pg__fail(err, "%s", why);
}

/* A group whose setup failed before its progress thread started. */
static void group_free_early(pg_group *g)
{
  free(g->all_ranks);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->queued);
  pthread_cond_destroy(&g->finished);
  free(g);
}

static int child_create(pg_group *parent, const int *members, int n, int me,
                        int color, int key, const char *ns, pg_group **out)
{
  char view[300], what[300];
  pg_group *g = calloc(1, sizeof *g);
  int i, err;

  if (!g)
    return pg__fail(-ENOMEM, "out of memory for a sub-group");
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->queued, NULL);
  pthread_cond_init(&g->finished, NULL);
  g->is_sub = true;
  g->rank = me;
  g->size = n;
  g->timeout = parent->timeout;
  g->store = parent->store;
  g->wtopo = parent->wtopo;
  memcpy(g->master_addr, parent->master_addr, sizeof g->master_addr);
  g->token = parent->token;
  snprintf(g->ns, sizeof g->ns, "%s", ns);
  g->all_ranks = calloc((size_t)n, sizeof *g->all_ranks);
  if (!g->all_ranks) {
    err = pg__fail(-ENOMEM, "out of memory for a sub-group");
    goto fail_early;
  }
  for (i = 0; i < n; i++)
    g->all_ranks[i] = parent->all_ranks ? parent->all_ranks[members[i]]
                                        : members[i];
  if (pthread_create(&g->thread, NULL, progress_main, g) != 0) {
    err = pg__fail(-EAGAIN, "cannot start a sub-group's progress thread");
    goto fail_early;
  }
  snprintf(view, sizeof view, "%su/", ns);
  if (g->store && (err = pg_store_prefix(g->store, view, &g->user_store)))
    goto fail;
  g->be = parent->be;
  g->device = parent->device;
  g->local_rank = parent->local_rank;
  if (splits(parent)) {
    g->split_from = parent;
    g->split_color = color;
    g->split_key = key;
  }
  if (n == 1 && g->be != PG_BACKEND_NCCL)
    snprintf(g->backend, sizeof g->backend, "self");
  else if ((err = create_comm(g, g->be, g->device, g->local_rank)))
    goto fail;
  *out = g;
  return 0;

fail:
  snprintf(what, sizeof what, "sub-group %s", ns);
  return setup_failed(g, err, what);
fail_early:
  group_free_early(g);
  return err;
}

/* The next child's namespace. */
static void child_ns(pg_group *parent, char *ns, size_t len)
{
  snprintf(ns, len, "%sg%d/", parent->ns, ++parent->children);
}

static int cmp_int(const void *a, const void *b)
{
  int x = *(const int *)a, y = *(const int *)b;

  return (x > y) - (x < y);
}

int pg_new_group(pg_group *parent, const int *ranks, int n, pg_group **out)
{
  char ns[256];
  int *m, i, me = -1, err;

  if (!out)
    return pg__fail(-EINVAL, "pg_new_group: no place for the group");
  *out = NULL;
  if (!parent || !ranks || n < 1 || n > parent->size)
    return pg__fail(-EINVAL, "pg_new_group: %d ranks of a group of %d",
                    n, parent ? parent->size : 0);
  m = malloc((size_t)n * sizeof *m);
  if (!m)
    return pg__fail(-ENOMEM, "pg_new_group: out of memory");
  memcpy(m, ranks, (size_t)n * sizeof *m);
  qsort(m, (size_t)n, sizeof *m, cmp_int);   /* as torch's new_group */
  for (i = 0; i < n; i++) {
    if (m[i] < 0 || m[i] >= parent->size || (i && m[i] == m[i - 1])) {
      err = pg__fail(-EINVAL, "pg_new_group: rank %d is %s", m[i],
                     m[i] < 0 || m[i] >= parent->size
                       ? "not in the parent group" : "listed twice");
      free(m);
      return err;
    }
    if (m[i] == parent->rank)
      me = i;
  }
  child_ns(parent, ns, sizeof ns);
  /* Members by parent rank: NCCL orders a split by key, then rank. */
  err = me < 0 ? split_nonmember(parent)
               : child_create(parent, m, n, me, 0, parent->rank, ns, out);
  free(m);
  return err;
}

struct split_entry {
  int color, key, rank;
};

static int cmp_split(const void *a, const void *b)
{
  const struct split_entry *x = a, *y = b;

  if (x->key != y->key)
    return (x->key > y->key) - (x->key < y->key);
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Every parent rank's (color, key), all-gathered over the store under
 * the child's namespace. */
static int split_exchange(pg_group *parent, const char *ns, int color,
                          int key, struct split_entry *e)
{
  int n = parent->size, i, err = -ENOMEM;
  char mine[64];
  void **vals = calloc((size_t)n, sizeof *vals);
  size_t *lens = calloc((size_t)n, sizeof *lens);

  if (vals && lens) {
    snprintf(mine, sizeof mine, "%d %d", color, key);
    err = pg__store_allgather(parent->store, ns, "split/", parent->rank, n,
                              mine, strlen(mine), parent->timeout, vals,
                              lens);
  }
  for (i = 0; !err && i < n; i++) {
    char txt[64];

    snprintf(txt, sizeof txt, "%.*s", (int)(lens[i] < 63 ? lens[i] : 63),
             (const char *)vals[i]);
    e[i].rank = i;
    if (sscanf(txt, "%d %d", &e[i].color, &e[i].key) != 2)
      err = pg__fail(-EPROTO, "pg_split: rank %d published '%s'", i, txt);
  }
  if (err == -ENOMEM)
    pg__fail(err, "pg_split: out of memory");
  pg__free_vals(vals, n);
  free(vals);
  free(lens);
  return err;
}

int pg_split(pg_group *parent, int color, int key, pg_group **out)
{
  struct split_entry *e;
  char ns[256], cns[300];
  int *m, n = 0, i, me = -1, err;

  if (!out)
    return pg__fail(-EINVAL, "pg_split: no place for the group");
  *out = NULL;
  if (!parent)
    return pg__fail(-EINVAL, "pg_split: NULL parent");
  child_ns(parent, ns, sizeof ns);
  e = calloc((size_t)parent->size, sizeof *e);
  m = calloc((size_t)parent->size, sizeof *m);
  if (!e || !m) {
    free(e);
    free(m);
    return pg__fail(-ENOMEM, "pg_split: out of memory");
  }
  if (parent->size == 1) {
    e[0] = (struct split_entry){ color, key, 0 };
    err = 0;
  } else {
    err = split_exchange(parent, ns, color, key, e);
  }
  if (!err && color >= 0) {
    qsort(e, (size_t)parent->size, sizeof *e, cmp_split);
    for (i = 0; i < parent->size; i++)
      if (e[i].color == color) {
        if (e[i].rank == parent->rank)
          me = n;
        m[n++] = e[i].rank;
      }
    /* One child per color, each under its own name. */
    snprintf(cns, sizeof cns, "%sc%d/", ns, color);
    err = child_create(parent, m, n, me, color, key, cns, out);
  } else if (!err) {
    err = split_nonmember(parent);
  }
  free(e);
  free(m);
  return err;
}

/* ---- creating and destroying ------------------------------------------------------ */

static int resolve_options(const struct pg_options *o, pg_group *g,
                           const char **addr, int *port, pg_backend *be,
                           int *local_rank)
{
  int err, lws;
  const char *b;

  g->rank = o->rank;
  g->size = o->world_size;
  if (g->size < 0 &&
      (err = env_int("WORLD_SIZE", 1, 1 << 24, 1, true, &g->size)))
    return err;
  if (g->size < 1)
    return pg__fail(-EINVAL, "world size %d, expected >= 1", g->size);
  if (g->rank < 0 &&
      (err = env_int("RANK", 0, g->size - 1, 0, true, &g->rank)))
    return err;
  if (g->rank >= g->size)
    return pg__fail(-EINVAL, "rank %d is outside the world of %d", g->rank,
                    g->size);
  *local_rank = o->local_rank;
  if (*local_rank < 0 &&
      (err = env_int("LOCAL_RANK", 0, INT_MAX, 0, false, local_rank)))
    return err;
  if (o->local_world_size < 0 &&
      (err = env_int("LOCAL_WORLD_SIZE", 1, INT_MAX, 1, false, &lws)))
    return err;
  *addr = o->master_addr ? o->master_addr
        : pg__launch_env("MASTER_ADDR", g->launch_addr,
                         sizeof g->launch_addr);
  if (g->size > 1 && (!*addr || !**addr))
    return pg__fail(-EINVAL, "MASTER_ADDR is not set (run the worker under "
                    "cdrun, torchrun or srun, pass master_addr, or for "
                    "mpirun across hosts: -x MASTER_ADDR=<rank 0's host>)");
  *port = o->master_port;
  if (*port <= 0 && g->size > 1 &&
      (err = env_int("MASTER_PORT", 1, 65535, 0, true, port)))
    return err;
  g->timeout = o->timeout;
  if (g->timeout <= 0 &&
      (err = env_double(PG_KNOB_TIMEOUT, DEFAULT_TIMEOUT_S, &g->timeout)))
    return err;
  *be = o->backend;
  b = pg__knob(PG_KNOB_BACKEND);
  if (*be == PG_BACKEND_AUTO && b) {
    if (strcmp(b, "cpu") == 0)
      *be = PG_BACKEND_CPU;
    else if (strcmp(b, "nccl") == 0)
      *be = PG_BACKEND_NCCL;
    else
      return pg__fail(-EINVAL, "PG_BACKEND is '%s', expected cpu or nccl",
                      b);
  }
  return 0;
}

/* The number of hosts among the members. */
static int member_hosts(const pg_group *g)
{
  int i, j, k = 0;

  for (i = 0; i < g->size; i++) {
    for (j = 0; j < i; j++)
      if (g->wtopo->host_of[g->all_ranks[j]] ==
          g->wtopo->host_of[g->all_ranks[i]])
        break;
    k += j == i;
  }
  return k;
}

static int create_comm(pg_group *g, pg_backend be, int device,
                       int local_rank)
{
  struct pg__setup s;
  char ns[300];
  int i, nhosts;

  if (!g->all_ranks) {
    g->all_ranks = calloc((size_t)g->size, sizeof *g->all_ranks);
    if (!g->all_ranks)
      return -ENOMEM;
    for (i = 0; i < g->size; i++)
      g->all_ranks[i] = i;
  }
  if (!g->wtopo)
    g->wtopo = &g->topo;
  g->be = be;
  g->device = device;
  g->local_rank = local_rank;
  nhosts = g->wtopo->host_of ? member_hosts(g) : 1;
  memset(&s, 0, sizeof s);
  s.store = g->store;
  s.topo = g->wtopo;
  s.ranks = g->all_ranks;
  s.n = g->size;
  s.me = g->rank;
  s.timeout = g->timeout;
  s.device = device;
  s.local_rank = local_rank;
  s.ns = ns;
  s.master_addr = g->master_addr[0] ? g->master_addr : NULL;
  s.token = &g->token;
  if (be == PG_BACKEND_NCCL) {
    snprintf(ns, sizeof ns, "%snccl/", g->ns);
    snprintf(g->backend, sizeof g->backend, "nccl");
    if (g->split_from) {
      pg_group *p = g->split_from;
      int err;

      pthread_mutex_lock(&p->mu);
      err = p->comm->ops->split(p->comm, g->split_color, g->split_key, &s,
                                &g->comm);
      pthread_mutex_unlock(&p->mu);
      return err;
    }
    return pg__nccl_create(&s, &g->comm);
  }
  if (nhosts == 1) {
    snprintf(ns, sizeof ns, "%sshm/", g->ns);
    snprintf(g->backend, sizeof g->backend, "cpu-shm");
    return pg__shm_create(&s, &g->comm);
  }
  if (nhosts == g->size) {
    snprintf(ns, sizeof ns, "%stcp/", g->ns);
    snprintf(g->backend, sizeof g->backend, "cpu-tcp");
    return pg__tcp_create(&s, &g->comm);
  }
  snprintf(ns, sizeof ns, "%shier/", g->ns);
  snprintf(g->backend, sizeof g->backend, "cpu-hier");
  return pg__hier_create(&s, &g->comm);
}

/* addr is "localhost" or a loopback address (127.0.0.0/8, ::1): every
 * rank runs here.  Other names are not resolved for this: a hostname
 * that /etc/hosts maps to 127.0.1.1 here may be another address for the
 * other hosts. */
static bool is_loopback(const char *addr)
{
  struct addrinfo hints, *res, *ai;
  bool all = true;

  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  if (!addr || strcmp(addr, "localhost") != 0)
    hints.ai_flags = AI_NUMERICHOST;
  if (!addr || getaddrinfo(addr, NULL, &hints, &res) != 0)
    return false;
  for (ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET)
      all &= (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr)
              >> 24) == 127;
    else if (ai->ai_family == AF_INET6)
      all &= IN6_IS_ADDR_LOOPBACK(
          &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    else
      all = false;
  }
  freeaddrinfo(res);
  return all;
}

/* Note [store lifetime]: rank 0's store server must outlive every other
 * rank's last use of it, so pg_destroy ends with each rank checking in and
 * rank 0 waiting (bounded) for all of them before it stops serving. */
static void exit_barrier(pg_group *g)
{
  char key[64];
  char **keys;
  int i;

  if (!g->store || g->size == 1 || g->is_sub)
    return;
  snprintf(key, sizeof key, "pg/exit/%d", g->rank);
  pg_store_set(g->store, key, "1", 1);
  if (g->rank != 0)
    return;
  keys = calloc((size_t)g->size, sizeof *keys);
  if (!keys)
    return;
  for (i = 0; i < g->size; i++) {
    snprintf(key, sizeof key, "pg/exit/%d", i);
    keys[i] = strdup(key);
  }
  pg_store_wait(g->store, (const char *const *)keys, (size_t)g->size,
                g->timeout < EXIT_WAIT_MAX_S ? g->timeout : EXIT_WAIT_MAX_S);
  for (i = 0; i < g->size; i++)
    free(keys[i]);
  free(keys);
}

void pg_destroy(pg_group *g)
{
  if (!g)
    return;
  pthread_mutex_lock(&g->mu);
  g->stop = true;
  pthread_cond_broadcast(&g->queued);
  pthread_mutex_unlock(&g->mu);
  pthread_join(g->thread, NULL);
  if (g->comm)
    g->comm->ops->destroy(g->comm);
  exit_barrier(g);
  pg_store_close(g->user_store);
  if (g->store && !g->is_sub)
    pg_store_close(g->store);
  if (g->server)
    pg_store_server_stop(g->server);
  topo_free(&g->topo);
  free(g->all_ranks);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->queued);
  pthread_cond_destroy(&g->finished);
  free(g);
}

int pg_init(const struct pg_options *o, pg_group **out)
{
  struct pg_options defaults = PG_OPTIONS_INIT;
  char host_id[512], boot[64];
  const char *addr = NULL, *hid, *tok;
  pg_backend be = PG_BACKEND_AUTO;
  pg_group *g;
  int port = 0, local_rank = 0, err;
  bool loopback;

  if (!o)
    o = &defaults;
  g = calloc(1, sizeof *g);
  if (!g)
    return pg__fail(-ENOMEM, "out of memory");
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->queued, NULL);
  pthread_cond_init(&g->finished, NULL);
  snprintf(g->ns, sizeof g->ns, "pg/");
  err = resolve_options(o, g, &addr, &port, &be, &local_rank);
  if (err)
    goto fail_early;
  if (addr)
    snprintf(g->master_addr, sizeof g->master_addr, "%s", addr);
  if (pthread_create(&g->thread, NULL, progress_main, g) != 0) {
    err = pg__fail(-EAGAIN, "cannot start the progress thread");
    goto fail_early;
  }
  if (be == PG_BACKEND_NCCL && !pg__nccl_built()) {
    err = pg__fail(-ENOTSUP, "PG_BACKEND=nccl: libpg was built without "
                   "NCCL (no CUDA/NCCL found at build time)");
    goto fail;
  }
  g->be = be;
  g->device = o->device;
  g->local_rank = local_rank;
  if (g->size == 1 && be != PG_BACKEND_NCCL) {
    snprintf(g->backend, sizeof g->backend, "self");
    *out = g;
    return 0;
  }
  if (g->size == 1) {
    /* NCCL with one rank: device buffers need the real backend, and a
     * single member needs no store. */
    g->topo.rank = 0;
    g->topo.size = 1;
    g->topo.nhosts = 1;
    err = create_comm(g, be, o->device, local_rank);
    if (err)
      goto fail;
    *out = g;
    return 0;
  }

  /* Note [job token]: the store and the TCP mesh serve only those who
   * prove the token; a loopback group's store listens on loopback only,
   * token or not. */
  tok = o->job_token ? o->job_token : pg__knob(PG_KNOB_JOB_TOKEN);
  if ((err = pg__token_from(tok ? tok : "", &g->token)))
    goto fail;
  loopback = is_loopback(addr);
  if (!g->token.len)
    pg__token_warn_missing(loopback);
  if (g->rank == 0) {
    int p = port;

    err = pg_store_server_start_auth(loopback ? addr : NULL, &p,
                                     tok ? tok : "", &g->server);
    if (err) {
      err = pg__fail(err, "rank 0 cannot serve the store on port %d: %s",
                     port, pg_strerror(err));
      goto fail;
    }
  }
  err = pg_store_connect_auth(g->rank == 0 && !loopback ? "127.0.0.1"
                              : addr, port, g->timeout, tok ? tok : "",
                              &g->store);
  if (err) {
    err = pg__fail(err, "cannot reach the store at %s:%d: %s", addr, port,
                   pg_last_error()[0] ? pg_last_error() : pg_strerror(err));
    goto fail;
  }
  boot_id(boot, sizeof boot);
  hid = o->host_id ? o->host_id : pg__knob(PG_KNOB_HOST_ID);
  if (!hid || !*hid) {
    default_host_id(boot, host_id, sizeof host_id);
    hid = host_id;
  }
  err = topo_build(g, hid, boot);
  if (err)
    goto fail;
  err = create_comm(g, be, o->device, local_rank);
  if (err)
    goto fail;
  *out = g;
  return 0;

fail:
  return setup_failed(g, err, NULL);
fail_early:
  group_free_early(g);
  return err;
}

void *pg__mem_alloc(pg_group *g, size_t bytes)
{
  struct pg__comm *c = g->comm;
  void *p = NULL;

  if (c && c->ops->mem_alloc)
    return c->ops->mem_alloc(c, bytes);
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
    return NULL;
  return p;
}

void pg__mem_free(pg_group *g, void *p)
{
  struct pg__comm *c = g->comm;

  if (c && c->ops->mem_free)
    c->ops->mem_free(c, p);
  else
    free(p);
}

int pg__mem_zero(pg_group *g, void *p, size_t bytes)
{
  struct pg__comm *c = g->comm;

  if (c && c->ops->mem_zero)
    return c->ops->mem_zero(c, p, bytes);
  memset(p, 0, bytes);
  return 0;
}

int pg__mem_copy(pg_group *g, void *dst, const void *src, size_t bytes)
{
  struct pg__comm *c = g->comm;

  if (c && c->ops->mem_copy)
    return c->ops->mem_copy(c, dst, src, bytes);
  memmove(dst, src, bytes);
  return 0;
}

int pg_rank(const pg_group *g)
{
  return g->rank;
}

int pg_size(const pg_group *g)
{
  return g->size;
}

const char *pg_backend_name(const pg_group *g)
{
  return g->backend;
}

pg_store *pg_group_store(pg_group *g)
{
  return g->user_store ? g->user_store : g->store;
}
