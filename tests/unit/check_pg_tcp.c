/* check_pg_tcp.c -- libpg's TCP and hierarchical communicators: N forked
 * ranks on this machine, a real store, every collective checked against a
 * serial reference each rank computes itself. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netdb.h>
#include <unistd.h>

#include "pg_internal.h"
#include "admit.h"
#include "auth.h"
#include "cpu/tcp_setup.h"

#define MAXN 8
#define OP_TIMEOUT 60.0         /* generous: 8 ranks share 2 cores */
#define KILL_DEADLINE 2.0

enum kind { K_TCP, K_HIER };

/* One rank's view, in the child. */
struct rank_ctx {
  struct pg__comm *c;
  pg_store *st;
  int me, n;
  int fails;
  int ready_fd;                 /* write a byte once running, or -1 */
};

typedef void (*body_fn)(struct rank_ctx *rc);
typedef void (*hook_fn)(const pid_t *pids, int n, int ready_fd);

static void failf(struct rank_ctx *rc, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

/* Children report on stderr and by exit status; Check's own asserts
 * belong to the test process only. */
static void failf(struct rank_ctx *rc, const char *fmt, ...)
{
  va_list ap;

  if (rc->fails++ >= 8)
    return;
  fprintf(stderr, "[rank %d/%d] ", rc->me, rc->n);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (%s)\n", pg_last_error());
}

#define EXPECT(rc, cond, ...)                                             \
  do {                                                                    \
    if (!(cond))                                                          \
      failf(rc, __VA_ARGS__);                                             \
  } while (0)

/* ---- values --------------------------------------------------------------
 * Inputs are small integers, so every float SUM, PROD, MIN and MAX is
 * exact in any order (|partial sums| <= 8 * 23, products <= 8: exact even
 * in bf16); only AVG needs a tolerance. */

static uint16_t to_f16(float f)
{
  uint32_t x, m, h, rem, sign;
  int e;

  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000;
  e = (int)((x >> 23) & 0xff) - 127 + 15;
  m = x & 0x7fffff;
  if (e >= 31)
    return (uint16_t)(sign | 0x7c00);
  if (e <= 0)
    return (uint16_t)sign;      /* no subnormals among our values */
  h = sign | (uint32_t)e << 10 | m >> 13;
  rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
    h++;
  return (uint16_t)h;
}

static float from_f16(uint16_t h)
{
  int e = (h >> 10) & 31, m = h & 1023;
  float v;

  if (e == 0)
    v = ldexpf((float)m, -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = ldexpf((float)(1024 + m), e - 25);
  return (h & 0x8000) ? -v : v;
}

static uint16_t to_bf16(float f)
{
  uint32_t x;

  memcpy(&x, &f, 4);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static float from_bf16(uint16_t h)
{
  uint32_t x = (uint32_t)h << 16;
  float f;

  memcpy(&f, &x, 4);
  return f;
}

static bool is_int(pg_dtype t)
{
  return t == PG_I32 || t == PG_I64 || t == PG_U8;
}

static double input(int r, size_t i, pg_dtype t, pg_op op)
{
  long v;

  if (op == PG_PROD)
    return ((size_t)r + i) % 3 == 0 ? 2 : 1;
  v = (long)(((size_t)r * 37 + i * 11 + 5) % 32) - 8;
  return t == PG_U8 ? (double)(v + 8) : (double)v;
}

static void put(pg_dtype t, void *buf, size_t i, double v)
{
  switch (t) {
  case PG_F32: ((float *)buf)[i] = (float)v; break;
  case PG_F64: ((double *)buf)[i] = v; break;
  case PG_F16: ((uint16_t *)buf)[i] = to_f16((float)v); break;
  case PG_BF16: ((uint16_t *)buf)[i] = to_bf16((float)v); break;
  case PG_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case PG_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case PG_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  default: break;
  }
}

static double get(pg_dtype t, const void *buf, size_t i)
{
  switch (t) {
  case PG_F32: return ((const float *)buf)[i];
  case PG_F64: return ((const double *)buf)[i];
  case PG_F16: return from_f16(((const uint16_t *)buf)[i]);
  case PG_BF16: return from_bf16(((const uint16_t *)buf)[i]);
  case PG_I32: return ((const int32_t *)buf)[i];
  case PG_I64: return (double)((const int64_t *)buf)[i];
  case PG_U8: return ((const uint8_t *)buf)[i];
  default: return 0;
  }
}

/* Rank r's input elements first..first+count-1, into buf[0..count). */
static void fill(void *buf, int r, size_t first, size_t count, pg_dtype t,
                 pg_op op)
{
  size_t i;

  for (i = 0; i < count; i++)
    put(t, buf, i, input(r, first + i, t, op));
}

static double reference(int n, size_t i, pg_dtype t, pg_op op)
{
  double acc = input(0, i, t, op);
  int r;

  for (r = 1; r < n; r++) {
    double v = input(r, i, t, op);

    switch (op) {
    case PG_SUM: case PG_AVG: acc += v; break;
    case PG_PROD: acc *= v; break;
    case PG_MIN: acc = v < acc ? v : acc; break;
    case PG_MAX: acc = v > acc ? v : acc; break;
    default: break;
    }
  }
  if (op == PG_AVG)
    acc = is_int(t) ? (double)((int64_t)acc / n) : acc / n;
  return acc;
}

static double tolerance(pg_dtype t)
{
  switch (t) {
  case PG_F32: return 1e-6;
  case PG_F64: return 1e-12;
  case PG_F16: return 2e-3;
  case PG_BF16: return 1e-2;
  default: return 0;
  }
}

static const char *const dname[] = {
  "f32", "f64", "f16", "bf16", "i32", "i64", "u8",
};
static const char *const oname[] = { "sum", "avg", "min", "max", "prod" };

/* Element i of buf (global index first + i) against the reference; one
 * report per call. */
static void check_reduced(struct rank_ctx *rc, const char *what,
                          const void *buf, size_t first, size_t count,
                          pg_dtype t, pg_op op)
{
  size_t i;

  for (i = 0; i < count; i++) {
    double want = reference(rc->n, first + i, t, op);
    double got = get(t, buf, i);
    bool ok = is_int(t) ? got == want
                        : fabs(got - want) <=
                          tolerance(t) * (fabs(want) > 1 ? fabs(want) : 1);

    if (!ok) {
      failf(rc, "%s %s %s count %zu: element %zu is %g, want %g", what,
            dname[t], oname[op], count, first + i, got, want);
      return;
    }
  }
}

static void check_input(struct rank_ctx *rc, const char *what,
                        const void *buf, int r, size_t first, size_t count,
                        pg_dtype t, pg_op op)
{
  size_t i;

  for (i = 0; i < count; i++)
    if (get(t, buf, i) != input(r, first + i, t, op)) {
      failf(rc, "%s %s count %zu: element %zu is %g, want rank %d's %g",
            what, dname[t], count, first + i, get(t, buf, i), r,
            input(r, first + i, t, op));
      return;
    }
}

static uint64_t hash(const void *buf, size_t len)
{
  const unsigned char *p = buf;
  uint64_t h = 1469598103934665603ull;

  while (len--)
    h = (h ^ *p++) * 1099511628211ull;
  return h;
}

static double deadline(void)
{
  return pg__now() + OP_TIMEOUT;
}

/* ---- one collective, every way ------------------------------------------ */

static void *xmalloc(size_t n)
{
  void *p = malloc(n ? n : 1);

  if (!p)
    _exit(99);
  return p;
}

static void t_all_reduce(struct rank_ctx *rc, size_t count, pg_dtype t,
                         pg_op op, bool inplace)
{
  size_t es = pg_dtype_size(t), bytes = count * es;
  char *in = xmalloc(bytes), *out = inplace ? in : xmalloc(bytes);
  int64_t h, *hs = xmalloc((size_t)rc->n * sizeof *hs);
  int err, r;

  fill(in, rc->me, 0, count, t, op);
  if (!inplace)
    memset(out, 0x5a, bytes);
  err = rc->c->ops->all_reduce(rc->c, in, out, count, t, op, deadline());
  EXPECT(rc, err == 0, "all_reduce %s %s count %zu: %s", dname[t],
         oname[op], count, pg_err_name(err));
  check_reduced(rc, inplace ? "all_reduce(in place)" : "all_reduce", out, 0,
                count, t, op);
  if (!inplace)
    check_input(rc, "all_reduce send buffer", in, rc->me, 0, count, t, op);
  /* Every rank must hold the same bits, not just close values. */
  h = (int64_t)hash(out, bytes);
  err = rc->c->ops->all_gather(rc->c, &h, hs, 1, PG_I64, deadline());
  EXPECT(rc, err == 0, "all_gather of hashes: %s", pg_err_name(err));
  for (r = 0; r < rc->n; r++)
    EXPECT(rc, hs[r] == h, "all_reduce %s %s count %zu: rank %d's result "
           "differs in its bits from this rank's", dname[t], oname[op],
           count, r);
  free(hs);
  if (!inplace)
    free(out);
  free(in);
}

static void t_reduce(struct rank_ctx *rc, size_t count, pg_dtype t,
                     pg_op op, bool inplace, int root)
{
  size_t bytes = count * pg_dtype_size(t);
  char *in = xmalloc(bytes), *out = NULL;
  int err;

  fill(in, rc->me, 0, count, t, op);
  if (inplace)
    out = in;
  else if (rc->me == root)
    out = xmalloc(bytes);
  err = rc->c->ops->reduce(rc->c, in, out, count, t, op, root, deadline());
  EXPECT(rc, err == 0, "reduce %s %s count %zu root %d: %s", dname[t],
         oname[op], count, root, pg_err_name(err));
  if (rc->me == root)
    check_reduced(rc, inplace ? "reduce(in place)" : "reduce", out, 0,
                  count, t, op);
  if (!inplace || rc->me != root)
    check_input(rc, "reduce send buffer", in, rc->me, 0, count, t, op);
  if (!inplace)
    free(out);
  free(in);
}

static void t_reduce_scatter(struct rank_ctx *rc, size_t count, pg_dtype t,
                             pg_op op, bool inplace)
{
  size_t es = pg_dtype_size(t), blk = count * es;
  size_t all = blk * (size_t)rc->n;
  char *in = xmalloc(all);
  char *out = inplace ? in + (size_t)rc->me * blk : xmalloc(blk);
  int err;

  fill(in, rc->me, 0, count * (size_t)rc->n, t, op);
  err = rc->c->ops->reduce_scatter(rc->c, in, out, count, t, op,
                                   deadline());
  EXPECT(rc, err == 0, "reduce_scatter %s %s count %zu: %s", dname[t],
         oname[op], count, pg_err_name(err));
  check_reduced(rc, inplace ? "reduce_scatter(in place)" : "reduce_scatter",
                out, (size_t)rc->me * count, count, t, op);
  if (!inplace) {
    check_input(rc, "reduce_scatter send buffer", in, rc->me, 0,
                count * (size_t)rc->n, t, op);
    free(out);
  }
  free(in);
}

static void t_all_gather(struct rank_ctx *rc, size_t count, pg_dtype t,
                         bool inplace)
{
  size_t es = pg_dtype_size(t), blk = count * es;
  char *out = xmalloc(blk * (size_t)rc->n);
  char *in = inplace ? out + (size_t)rc->me * blk : xmalloc(blk);
  int err, r;

  memset(out, 0x5a, blk * (size_t)rc->n);
  fill(in, rc->me, 0, count, t, PG_SUM);
  err = rc->c->ops->all_gather(rc->c, in, out, count, t, deadline());
  EXPECT(rc, err == 0, "all_gather %s count %zu: %s", dname[t], count,
         pg_err_name(err));
  for (r = 0; r < rc->n; r++)
    check_input(rc, inplace ? "all_gather(in place)" : "all_gather",
                out + (size_t)r * blk, r, 0, count, t, PG_SUM);
  if (!inplace)
    free(in);
  free(out);
}

static void t_broadcast(struct rank_ctx *rc, size_t count, pg_dtype t,
                        int root)
{
  size_t bytes = count * pg_dtype_size(t);
  char *buf = xmalloc(bytes);
  int err;

  if (rc->me == root)
    fill(buf, root, 0, count, t, PG_SUM);
  else
    memset(buf, 0x5a, bytes);
  err = rc->c->ops->broadcast(rc->c, buf, count, t, root, deadline());
  EXPECT(rc, err == 0, "broadcast %s count %zu root %d: %s", dname[t],
         count, root, pg_err_name(err));
  check_input(rc, "broadcast", buf, root, 0, count, t, PG_SUM);
  free(buf);
}

/* ---- bodies -------------------------------------------------------------- */

static const size_t sizes[] = { 0, 1, 7, 1000, 4099, 65537, 1 << 20 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* Every collective x dtype x op x size, in place and out of place.  The
 * largest size runs for f32 (every op) and SUM (every type), which keeps
 * 8 ranks on 2 cores within the suite's time. */
static void body_matrix(struct rank_ctx *rc)
{
  size_t si;
  int t, op, ip, k = 0, err;

  for (si = 0; si < NSIZES; si++) {
    size_t count = sizes[si];
    size_t blk = count >= (size_t)rc->n ? count / (size_t)rc->n : count;

    for (t = 0; t < PG_DTYPE_COUNT; t++) {
      for (op = 0; op < PG_OP_COUNT; op++) {
        if (count == 1 << 20 && t != PG_F32 && op != PG_SUM)
          continue;
        for (ip = 0; ip < 2; ip++) {
          t_all_reduce(rc, count, (pg_dtype)t, (pg_op)op, ip);
          t_reduce(rc, count, (pg_dtype)t, (pg_op)op, ip, k++ % rc->n);
          t_reduce_scatter(rc, blk, (pg_dtype)t, (pg_op)op, ip);
        }
      }
      for (ip = 0; ip < 2; ip++)
        t_all_gather(rc, blk, (pg_dtype)t, ip);
      t_broadcast(rc, count, (pg_dtype)t, k++ % rc->n);
    }
    err = rc->c->ops->barrier(rc->c, deadline());
    EXPECT(rc, err == 0, "barrier: %s", pg_err_name(err));
  }
}

/* Messages of several tags to every peer, received in another order than
 * sent (the rest wait in the unexpected queue), one of them large enough
 * that senders block on each other. */
static void body_p2p(struct rank_ctx *rc)
{
  static const int tags[] = { 7, -3, 1 << 20, 0 };
  static const size_t lens[] = { 1000, 0, 3 << 20, 13 };
  int p, k, err;

  for (k = 0; k < 4; k++) {
    for (p = 0; p < rc->n; p++) {
      size_t len = lens[k] + (size_t)rc->me;
      char *buf;

      if (p == rc->me)
        continue;
      buf = xmalloc(len);
      memset(buf, rc->me * 16 + k, len);
      err = rc->c->ops->send(rc->c, buf, len, p, tags[k], deadline());
      EXPECT(rc, err == 0, "send tag %d to %d: %s", tags[k], p,
             pg_err_name(err));
      free(buf);
    }
  }
  for (k = 3; k >= 0; k--) {
    for (p = rc->n - 1; p >= 0; p--) {
      size_t len = lens[k] + (size_t)p, i;
      unsigned char *buf;

      if (p == rc->me)
        continue;
      buf = xmalloc(len);
      err = rc->c->ops->recv(rc->c, buf, len, p, tags[k], deadline());
      EXPECT(rc, err == 0, "recv tag %d from %d: %s", tags[k], p,
             pg_err_name(err));
      for (i = 0; i < len; i++)
        if (buf[i] != (unsigned char)(p * 16 + k)) {
          failf(rc, "recv tag %d from %d: byte %zu is %d", tags[k], p, i,
                buf[i]);
          break;
        }
      free(buf);
    }
  }
  /* A collective after p2p traffic: the streams are still in step. */
  t_all_reduce(rc, 1000, PG_F32, PG_SUM, true);
}

/* Rank 2 sends rank 0 a message and leaves.  Its closed connection must
 * not fail rank 0's send to rank 1 (sends drain every peer), and what it
 * sent before leaving is still there to receive. */
static void body_early_exit(struct rank_ctx *rc)
{
  size_t big = 3 << 20;
  char *buf = xmalloc(big), msg[64] = "from rank 2", got[64];
  int err;

  memset(buf, 7, big);
  if (rc->me == 2) {
    err = rc->c->ops->send(rc->c, msg, sizeof msg, 0, 5, deadline());
    EXPECT(rc, err == 0, "send to 0: %s", pg_err_name(err));
  } else if (rc->me == 0) {
    poll(NULL, 0, 300);         /* rank 2 is gone by now */
    err = rc->c->ops->send(rc->c, buf, big, 1, 1, deadline());
    EXPECT(rc, err == 0, "send to 1 after rank 2 left: %s",
           pg_err_name(err));
    err = rc->c->ops->recv(rc->c, got, sizeof got, 2, 5, deadline());
    EXPECT(rc, err == 0 && strcmp(got, msg) == 0,
           "recv from the departed rank 2: %s", pg_err_name(err));
    err = rc->c->ops->recv(rc->c, got, sizeof got, 2, 5, deadline());
    EXPECT(rc, err == -ECONNRESET, "a second recv from rank 2: %s",
           pg_err_name(err));
  } else {
    err = rc->c->ops->recv(rc->c, buf, big, 0, 1, deadline());
    EXPECT(rc, err == 0, "recv from 0: %s", pg_err_name(err));
  }
  free(buf);
}

/* The victim is killed by the parent mid-collective; the others must see
 * an error within the deadline, and the comm must stay failed. */
static void body_killed(struct rank_ctx *rc)
{
  size_t count = 1 << 20;
  float *buf = xmalloc(count * sizeof *buf);
  int i, err = 0;
  double t0 = 0, took;

  fill(buf, rc->me, 0, count, PG_F32, PG_SUM);
  for (i = 0; i < 100000 && err == 0; i++) {
    t0 = pg__now();
    err = rc->c->ops->all_reduce(rc->c, buf, buf, count, PG_F32, PG_SUM,
                                 t0 + KILL_DEADLINE);
    if (i == 0 && rc->ready_fd >= 0 && write(rc->ready_fd, "r", 1) != 1)
      _exit(98);
  }
  took = pg__now() - t0;
  EXPECT(rc, err == -ECONNRESET || err == -ETIMEDOUT,
         "after a peer died: %s", pg_err_name(err));
  EXPECT(rc, took < KILL_DEADLINE + 0.5, "the failing op took %.2f s", took);
  err = rc->c->ops->barrier(rc->c, pg__now() + KILL_DEADLINE);
  EXPECT(rc, err == PG_EPEERFAIL, "the op after a failure: %s",
         pg_err_name(err));
  free(buf);
}

/* Rank 1 never joins; the others time out (or see the ones that timed
 * out hang up) within the deadline. */
static void body_absent(struct rank_ctx *rc)
{
  float x = 1;
  double t0 = pg__now();
  int err;

  if (rc->me == 1) {
    poll(NULL, 0, (int)(KILL_DEADLINE * 1500));
    return;
  }
  err = rc->c->ops->all_reduce(rc->c, &x, &x, 1, PG_F32, PG_SUM,
                               t0 + KILL_DEADLINE);
  EXPECT(rc, err == -ETIMEDOUT || err == -ECONNRESET,
         "all_reduce without rank 1: %s", pg_err_name(err));
  EXPECT(rc, pg__now() - t0 < KILL_DEADLINE + 0.5, "took %.2f s",
         pg__now() - t0);
}

/* Ranks that disagree on the collective get -EPROTO, not garbage. */
static void body_mismatch(struct rank_ctx *rc)
{
  float x[4] = { 1, 2, 3, 4 };
  int err;

  if (rc->me == 0)
    err = rc->c->ops->all_reduce(rc->c, x, x, 4, PG_F32, PG_SUM,
                                 pg__now() + KILL_DEADLINE);
  else
    err = rc->c->ops->broadcast(rc->c, x, 4, PG_F32, 0,
                                pg__now() + KILL_DEADLINE);
  EXPECT(rc, err == -EPROTO || err == -ECONNRESET,
         "mismatched collectives: %s", pg_err_name(err));
}

/* Large all-reduces (uneven hosts: the leaders' pipeline, segments of 1
 * MiB and the leader's TCP stage on a thread; even hosts: the rails): odd
 * counts, a last segment of a few elements, every rank's bits alike
 * (t_all_reduce checks). */
static void body_pipelined(struct rank_ctx *rc)
{
  static const size_t counts[] = { (1 << 18) * 2 + 7, (1 << 18) + 1,
                                   3 * (1 << 17) + 5 };
  size_t i;

  for (i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    t_all_reduce(rc, counts[i], PG_F32, PG_SUM, i % 2);
    t_all_reduce(rc, counts[i], PG_F32, PG_AVG, !(i % 2));
  }
  t_all_reduce(rc, (1 << 17) * 3 + 1, PG_F64, PG_AVG, false);
  t_all_reduce(rc, (1 << 18) * 3 + 3, PG_I32, PG_MAX, true);
  t_all_reduce(rc, (1 << 20) * 2 + 1, PG_U8, PG_MIN, false);
}

/* TCP sockets this process holds (the store's connection included). */
static int tcp_sockets(void)
{
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  int k = 0;

  if (!d)
    return -1;
  while ((e = readdir(d))) {
    struct stat st;
    int fd = atoi(e->d_name), type = 0;
    socklen_t tl = sizeof type;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;

    if (e->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) ||
        !S_ISSOCK(st.st_mode))
      continue;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 &&
        type == SOCK_STREAM && getsockname(fd, (struct sockaddr *)&ss,
                                           &sl) == 0 &&
        (ss.ss_family == AF_INET || ss.ss_family == AF_INET6))
      k++;
  }
  closedir(d);
  return k;
}

/* 3 hosts x 2 ranks (hosts[] below): no rank holds a socket to every
 * other (a full mesh: 5 more each); a rank holds the store's connection,
 * its point-to-point listener, one socket per other host (its rail) and
 * one per other rank of its host (the near comm), and ranks 1 and 4 (other hosts, other rails) get one connection each
 * way only once they send to each other. */
static void body_no_mesh(struct rank_ctx *rc)
{
  int before = tcp_sockets(), after, err;
  char msg[32] = "across rails", got[32];
  float x = 1;

  /* store + listener + its rail (nhosts - 1) + its host's near comm
   * (L - 1); a full mesh would add 5 */
  EXPECT(rc, before >= 0 && before <= 2 + 2 + 1, "rank %d holds %d TCP "
         "sockets before any p2p (at most 5 without a full mesh)", rc->me,
         before);
  err = rc->c->ops->all_reduce(rc->c, &x, &x, 1, PG_F32, PG_SUM,
                               deadline());
  EXPECT(rc, err == 0 && x == 6, "all_reduce: %s, %g", pg_err_name(err),
         (double)x);
  after = tcp_sockets();
  EXPECT(rc, after == before, "an all_reduce opened sockets: %d then %d",
         before, after);
  /* Rank 4's acceptor takes rank 1's connection whenever it comes, which
   * may be before rank 4 itself leaves the barrier (Note [p2p acceptor]):
   * every count is taken before it. */
  err = rc->c->ops->barrier(rc->c, deadline());
  EXPECT(rc, err == 0, "barrier: %s", pg_err_name(err));
  if (rc->me == 1) {
    err = rc->c->ops->send(rc->c, msg, sizeof msg, 4, 9, deadline());
    EXPECT(rc, err == 0, "send to 4: %s", pg_err_name(err));
    err = rc->c->ops->recv(rc->c, got, sizeof got, 4, 9, deadline());
    EXPECT(rc, err == 0 && strcmp(got, msg) == 0, "recv from 4: %s",
           pg_err_name(err));
  } else if (rc->me == 4) {
    err = rc->c->ops->recv(rc->c, got, sizeof got, 1, 9, deadline());
    EXPECT(rc, err == 0 && strcmp(got, msg) == 0, "recv from 1: %s",
           pg_err_name(err));
    err = rc->c->ops->send(rc->c, got, sizeof got, 1, 9, deadline());
    EXPECT(rc, err == 0, "send to 1: %s", pg_err_name(err));
  }
  after = tcp_sockets();
  EXPECT(rc, after == before + (rc->me == 1 || rc->me == 4 ? 2 : 0),
         "rank %d: %d TCP sockets after the p2p, %d before", rc->me, after,
         before);
  err = rc->c->ops->barrier(rc->c, deadline());
  EXPECT(rc, err == 0, "barrier: %s", pg_err_name(err));
}

static void body_one_all_reduce(struct rank_ctx *rc)
{
  t_all_reduce(rc, 1000, PG_F32, PG_SUM, false);
  t_all_reduce(rc, 7, PG_I64, PG_MAX, true);
}

/* ---- worlds -------------------------------------------------------------- */

static void make_topo(struct pg__topo *tp, int me, int n, const int *host_of)
{
  int r, h;

  memset(tp, 0, sizeof *tp);
  tp->rank = me;
  tp->size = n;
  tp->host_of = xmalloc((size_t)n * sizeof(int));
  tp->local = xmalloc((size_t)n * sizeof(int));
  for (r = 0; r < n; r++) {
    tp->host_of[r] = host_of ? host_of[r] : r;
    if (tp->host_of[r] + 1 > tp->nhosts)
      tp->nhosts = tp->host_of[r] + 1;
  }
  tp->leader_of = xmalloc((size_t)tp->nhosts * sizeof(int));
  for (h = 0; h < tp->nhosts; h++)
    tp->leader_of[h] = -1;
  for (r = 0; r < n; r++) {
    h = tp->host_of[r];
    if (tp->leader_of[h] < 0)
      tp->leader_of[h] = r;
    if (h == tp->host_of[me]) {
      if (r == me)
        tp->local_index = tp->nlocal;
      tp->local[tp->nlocal++] = r;
    }
  }
}

static bool g_stray;          /* test_setup_strays: see stray_main */
static int g_port;            /* the store's, for the hooks */
/* The job token of the store and of each rank's mesh (NULL: none), the
 * setup timeout, and how each rank exited (world()). */
static const char *g_store_token;
static const char *g_mesh_token[MAXN];
static double g_setup_timeout = 30;
static int g_exit[MAXN];

static void child(int me, int n, int port, enum kind kind,
                  const int *host_of, body_fn body, int ready_fd)
{
  struct rank_ctx rc;
  struct pg__topo tp;
  struct pg__setup s;
  struct pg__token token;
  int ranks[MAXN], r, err;

  memset(&rc, 0, sizeof rc);
  rc.me = me;
  rc.n = n;
  rc.ready_fd = ready_fd;
  err = pg_store_connect_auth("127.0.0.1", port, 10,
                              g_store_token ? g_store_token : "", &rc.st);
  if (err) {
    fprintf(stderr, "[rank %d] store: %s\n", me, pg_err_name(err));
    _exit(2);
  }
  make_topo(&tp, me, n, host_of);
  for (r = 0; r < n; r++)
    ranks[r] = r;
  memset(&s, 0, sizeof s);
  s.store = rc.st;
  s.ns = "t/comm/";
  s.topo = &tp;
  s.ranks = ranks;
  s.n = n;
  s.me = me;
  s.timeout = g_setup_timeout;
  s.device = -1;
  if (pg__token_from(g_mesh_token[me] ? g_mesh_token[me] : "", &token))
    _exit(2);
  s.token = &token;
  if (g_stray && me == n - 1) {
    /* The last connector waits until the strays are at rank 0's door. */
    void *v;
    size_t len;

    if (pg_store_get(rc.st, "t/stray", 30, &v, &len) == 0)
      free(v);
  }
  err = kind == K_TCP ? pg__tcp_create(&s, &rc.c) : pg__hier_create(&s,
                                                                    &rc.c);
  if (err) {
    fprintf(stderr, "[rank %d] create: %s: %s\n", me, pg_err_name(err),
            pg_last_error());
    _exit(err == -EACCES ? 4 : 3);
  }
  body(&rc);
  rc.c->ops->destroy(rc.c);
  pg_store_close(rc.st);
  _exit(rc.fails ? 1 : 0);
}

/* The store serves from a process of its own: its thread must not exist
 * in the process that forks the ranks (a child could inherit a lock that
 * thread holds, e.g. the allocator's under ASan).  Serves until *ctl is
 * closed. */
static pid_t store_proc(int *port, int *ctl)
{
  int up[2], down[2];
  pid_t pid;

  ck_assert_int_eq(pipe(up), 0);
  ck_assert_int_eq(pipe(down), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    pg_store_server *srv;
    char b;
    int p = 0;

    close(up[0]);
    close(down[1]);
    if (pg_store_server_start_auth("127.0.0.1", &p, g_store_token ?
                                   g_store_token : "", &srv) != 0)
      p = -1;
    if (write(up[1], &p, sizeof p) != sizeof p || p < 0)
      _exit(1);
    while (read(down[0], &b, 1) > 0)
      ;
    pg_store_server_stop(srv);
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  ck_assert_int_eq(read(up[0], port, sizeof *port), sizeof *port);
  ck_assert_int_gt(*port, 0);
  close(up[0]);
  *ctl = down[1];
  return pid;
}

/* Forks n ranks and waits for them (killing all at limit seconds).
 * Returns how many did not exit 0, not counting the victim (-1: none). */
static int world(int n, enum kind kind, const int *host_of, body_fn body,
                 hook_fn hook, int victim, double limit)
{
  pid_t pids[MAXN], store;
  int port = 0, r, bad = 0, left = n, pfd[2], ctl;
  double end = pg__now() + limit;

  store = store_proc(&port, &ctl);
  g_port = port;
  ck_assert_int_eq(pipe(pfd), 0);
  for (r = 0; r < n; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0) {
      close(pfd[0]);
      close(ctl);
      child(r, n, port, kind, host_of, body, pfd[1]);
    }
  }
  close(pfd[1]);
  if (hook)
    hook(pids, n, pfd[0]);
  while (left > 0) {
    for (r = 0; r < n; r++) {
      int st;

      if (pids[r] <= 0 || waitpid(pids[r], &st, WNOHANG) != pids[r])
        continue;
      g_exit[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (r != victim && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        fprintf(stderr, "rank %d: %s %d\n", r,
                WIFEXITED(st) ? "exit" : "signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        bad++;
      }
      pids[r] = 0;
      left--;
    }
    if (left && pg__now() > end) {
      for (r = 0; r < n; r++)
        if (pids[r] > 0) {
          fprintf(stderr, "rank %d: still running after %.0f s\n", r,
                  limit);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          pids[r] = 0;
          bad++;
          left--;
        }
    }
    if (left)
      poll(NULL, 0, 5);
  }
  close(pfd[0]);
  close(ctl);
  waitpid(store, NULL, 0);
  return bad;
}

/* ---- tests --------------------------------------------------------------- */

START_TEST(test_matrix)
{
  ck_assert_int_eq(world(_i, K_TCP, NULL, body_matrix, NULL, -1, 280), 0);
}
END_TEST

START_TEST(test_p2p)
{
  ck_assert_int_eq(world(_i, K_TCP, NULL, body_p2p, NULL, -1, 60), 0);
}
END_TEST

static void kill_rank2(const pid_t *pids, int n, int ready_fd)
{
  char b;
  int i;

  for (i = 0; i < n; i++)
    ck_assert_int_eq(read(ready_fd, &b, 1), 1);
  poll(NULL, 0, 30);
  kill(pids[2], SIGKILL);
}

START_TEST(test_peer_left_after_send)
{
  ck_assert_int_eq(world(3, K_TCP, NULL, body_early_exit, NULL, -1, 30),
                   0);
}
END_TEST

START_TEST(test_killed_mid_collective)
{
  ck_assert_int_eq(world(4, K_TCP, NULL, body_killed, kill_rank2, 2, 30),
                   0);
}
END_TEST

START_TEST(test_absent_rank_times_out)
{
  ck_assert_int_eq(world(3, K_TCP, NULL, body_absent, NULL, -1, 30), 0);
}
END_TEST

START_TEST(test_mismatch_is_eproto)
{
  ck_assert_int_eq(world(2, K_TCP, NULL, body_mismatch, NULL, -1, 30), 0);
}
END_TEST

/* Two "hosts" of two ranks: shared memory inside, TCP between leaders. */
START_TEST(test_hier_matrix)
{
  static const int hosts[4] = { 0, 0, 1, 1 };

  ck_assert_int_eq(world(4, K_HIER, hosts, body_matrix, NULL, -1, 280), 0);
}
END_TEST

/* Uneven hosts, a host of one, the leaders not the lowest ranks overall. */
START_TEST(test_hier_uneven)
{
  static const int hosts[5] = { 0, 1, 1, 0, 2 };

  ck_assert_int_eq(world(5, K_HIER, hosts, body_matrix, NULL, -1, 280), 0);
}
END_TEST

START_TEST(test_hier_p2p)
{
  static const int hosts[4] = { 0, 0, 1, 1 };

  ck_assert_int_eq(world(4, K_HIER, hosts, body_p2p, NULL, -1, 60), 0);
}
END_TEST

/* Connects to rank 0's listener twice while the mesh is being set up:
 * one connection says nothing, the other sends a hello of another comm;
 * both stay open until this process is killed. */
static pid_t g_stray_pid;

static void stray_main(void)
{
  struct addrinfo hints, *ai;
  struct hello_like { uint32_t magic, version; uint64_t hash;
                      int32_t from, to, n, pad; } h;
  char *ep, *sp;
  pg_store *st;
  void *v;
  size_t len;
  int fd[2], i;

  /* Hold none of the test's pipes: the store stops when they close. */
  for (i = 3; i < 1024; i++)
    close(i);
  if (pg_store_connect("127.0.0.1", g_port, 10, &st) ||
      pg_store_get(st, "t/comm/ep/0", 30, &v, &len))
    _exit(2);
  ep = xmalloc(len + 1);
  memcpy(ep, v, len);
  ep[len] = '\0';
  sp = strrchr(ep, ' ');
  if (!sp)
    _exit(3);
  *sp = '\0';
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(ep, sp + 1, &hints, &ai))
    _exit(4);
  for (i = 0; i < 2; i++) {
    fd[i] = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd[i] < 0 || connect(fd[i], ai->ai_addr, ai->ai_addrlen))
      _exit(5);
  }
  memset(&h, 0, sizeof h);
  h.magic = 0x68746770u;        /* a hello, of another namespace */
  h.version = 1;
  h.hash = 42;
  h.from = 1;
  h.n = 4;
  if (write(fd[1], &h, sizeof h) != sizeof h)
    _exit(6);
  if (pg_store_set(st, "t/stray", "1", 1))
    _exit(7);
  for (;;)
    pause();
}

static void start_stray(const pid_t *pids, int n, int ready_fd)
{
  g_stray_pid = fork();
  ck_assert_int_ge(g_stray_pid, 0);
  if (g_stray_pid == 0)
    stray_main();
}

/* Setup in parallel with strays at the door: a silent connection and one
 * of another comm do not stall or break it. */
START_TEST(test_setup_strays)
{
  int bad;

  g_stray = true;
  bad = world(4, K_TCP, NULL, body_one_all_reduce, start_stray, -1, 60);
  g_stray = false;
  kill(g_stray_pid, SIGKILL);
  waitpid(g_stray_pid, NULL, 0);
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* ---- the job token (Note [mesh hello]) ---- */

#define TOKEN "0123456789abcdef-the-job-token"

static void all_tokens(const char *t)
{
  int r;

  g_store_token = t;
  for (r = 0; r < MAXN; r++)
    g_mesh_token[r] = t;
}

/* With a token the mesh (flat, and lazy p2p across hosts) works. */
START_TEST(test_token_mesh)
{
  static const int hosts[4] = { 0, 0, 1, 1 };

  all_tokens(TOKEN);
  ck_assert_int_eq(world(4, K_TCP, NULL, body_one_all_reduce, NULL, -1, 60),
                   0);
  ck_assert_int_eq(world(4, K_HIER, hosts, body_p2p, NULL, -1, 60), 0);
  all_tokens(NULL);
}
END_TEST

/* A rank whose token differs is refused by the others: it fails with
 * -EACCES, not by taking a peer's place. */
START_TEST(test_token_wrong)
{
  all_tokens(TOKEN);
  g_mesh_token[3] = TOKEN "-but-another";
  g_setup_timeout = 3;
  ck_assert_int_eq(world(4, K_TCP, NULL, body_one_all_reduce, NULL, -1, 60),
                   4);
  ck_assert_int_eq(g_exit[3], 4);
  all_tokens(NULL);
}
END_TEST

/* Note [admission under a flood]: a full table closes one past its
 * deadline, else the oldest of the source holding the most slots; never
 * a legitimate peer's slot for a flood from another address. */
START_TEST(test_admit_victim)
{
  struct pg__unproven u[8];
  struct sockaddr_in a, b;
  uint64_t sa, sb;
  int i;

  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0x0a000001);
  a.sin_port = htons(1000);
  b = a;
  b.sin_port = htons(2000);                 /* the same host: one source */
  sa = pg__admit_source((struct sockaddr *)&a, sizeof a);
  ck_assert(sa == pg__admit_source((struct sockaddr *)&b, sizeof b));
  b.sin_addr.s_addr = htonl(0x0a000002);
  sb = pg__admit_source((struct sockaddr *)&b, sizeof b);
  ck_assert(sa != sb);
  /* Slot 0: the legitimate peer (b), the oldest; 1..7 a flood (a). */
  for (i = 0; i < 8; i++) {
    u[i].src = i == 0 ? sb : sa;
    u[i].since = 10 + i;
    u[i].until = 12 + i;
  }
  ck_assert_int_eq(pg__admit_victim(u, sizeof u[0], 0, 8, 11), 1);
  u[1].since = 30;                          /* then the flood's oldest */
  ck_assert_int_eq(pg__admit_victim(u, sizeof u[0], 0, 8, 11), 2);
  /* One past its deadline goes first, whoever it is. */
  ck_assert_int_eq(pg__admit_victim(u, sizeof u[0], 0, 8, 12.5), 0);
  /* One source only: its oldest, never the newest. */
  for (i = 0; i < 8; i++)
    u[i].src = sa;
  ck_assert_int_eq(pg__admit_victim(u, sizeof u[0], 0, 8, 11), 0);
}
END_TEST

/* Lazy p2p's hello (hier_p2p.c) verifies under its own token only, for
 * the positions it was signed for, and for the receiver's challenge on
 * that connection only: a captured hello replayed on another connection
 * (another challenge) proves nothing. */
START_TEST(test_token_p2p_hello)
{
  struct pg__token a, b;
  struct hello h;
  uint8_t ch[32], other[32];

  ck_assert_int_eq(pg__token_from(TOKEN, &a), 0);
  ck_assert_int_eq(pg__token_from(TOKEN "-but-another", &b), 0);
  pg__nonce(ch, sizeof ch);
  memcpy(other, ch, sizeof other);
  other[0] ^= 1;
  tcp_hello_init(&h, tcp_fnv1a("t/comm/p2p/"), 3, 0, 4);
  tcp_hello_sign(&a, &h, ch);
  ck_assert(tcp_hello_signed(&a, &h, ch));
  ck_assert(!tcp_hello_signed(&a, &h, other));   /* a replay */
  ck_assert(!tcp_hello_signed(&b, &h, ch));
  h.from = 2;                       /* claims another rank */
  ck_assert(!tcp_hello_signed(&a, &h, ch));
}
END_TEST

/* Lazy p2p across hosts with a stranger at rank 0's p2p door first,
 * claiming to be rank 3 with a hello it cannot sign: rank 0 drops it and
 * takes rank 3's message from rank 3. */
static pid_t g_p2p_impostor_pid;

static void body_p2p_from_3(struct rank_ctx *rc)
{
  char buf[1024];
  double until = pg__now() + 10;
  void *v;
  size_t len, i;
  int err;

  if (rc->me == 3) {
    /* After the stranger's hello is at rank 0's door. */
    err = pg_store_get(rc->st, "t/impostor", 30, &v, &len);
    EXPECT(rc, err == 0, "no impostor: %s", pg_err_name(err));
    if (!err)
      free(v);
    memset(buf, 0x33, sizeof buf);
    err = rc->c->ops->send(rc->c, buf, sizeof buf, 0, 9, until);
    EXPECT(rc, err == 0, "send to 0: %s", pg_err_name(err));
  }
  if (rc->me == 0) {
    memset(buf, 0, sizeof buf);
    err = rc->c->ops->recv(rc->c, buf, sizeof buf, 3, 9, until);
    EXPECT(rc, err == 0, "recv from 3: %s", pg_err_name(err));
    for (i = 0; i < sizeof buf && buf[i] == 0x33; i++)
      ;
    EXPECT(rc, i == sizeof buf, "byte %zu from 3 is %d", i, buf[i]);
  }
}

static void p2p_impostor_main(void)
{
  struct addrinfo hints, *ai;
  struct pg__token other;
  struct hello h;
  uint8_t ch[32];
  char *ep, *sp;
  pg_store *st;
  void *v;
  size_t len;
  int fd, i;

  for (i = 3; i < 1024; i++)
    close(i);
  if (pg_store_connect_auth("127.0.0.1", g_port, 10, TOKEN, &st) ||
      pg_store_get(st, "t/comm/p2p/ep/0", 30, &v, &len))
    _exit(2);
  ep = xmalloc(len + 1);
  memcpy(ep, v, len);
  ep[len] = '\0';
  sp = strrchr(ep, ' ');
  if (!sp)
    _exit(3);
  *sp = '\0';
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(ep, sp + 1, &hints, &ai))
    _exit(4);
  fd = socket(ai->ai_family, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen))
    _exit(5);
  if (pg__token_from(TOKEN "-not-the-job's", &other))
    _exit(6);
  if (pg_store_set(st, "t/impostor", "1", 1))
    _exit(8);
  /* Rank 0 sends its challenge once it accepts (in its recv). */
  if (read(fd, ch, sizeof ch) != (ssize_t)sizeof ch)
    _exit(9);
  tcp_hello_init(&h, tcp_fnv1a("t/comm/p2p/"), 3, 0, 4);
  tcp_hello_sign(&other, &h, ch);
  if (write(fd, &h, sizeof h) != sizeof h)
    _exit(7);
  for (;;)
    pause();
}

static void start_p2p_impostor(const pid_t *pids, int n, int ready_fd)
{
  g_p2p_impostor_pid = fork();
  ck_assert_int_ge(g_p2p_impostor_pid, 0);
  if (g_p2p_impostor_pid == 0)
    p2p_impostor_main();
}

START_TEST(test_token_p2p_impostor)
{
  static const int hosts[4] = { 0, 0, 1, 1 };
  int bad;

  all_tokens(TOKEN);
  bad = world(4, K_HIER, hosts, body_p2p_from_3, start_p2p_impostor, -1,
              60);
  kill(g_p2p_impostor_pid, SIGKILL);
  waitpid(g_p2p_impostor_pid, NULL, 0);
  all_tokens(NULL);
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* A stranger who knows the comm's namespace and claims the last rank's
 * place at rank 0's door, before that rank comes, with a proof it cannot
 * make: dropped, and the real rank takes its place. */
static pid_t g_impostor_pid;

static void impostor_main(void)
{
  struct addrinfo hints, *ai;
  struct hello h;
  uint8_t proof[32];
  char *ep, *sp;
  pg_store *st;
  void *v;
  size_t len;
  int fd, i;

  for (i = 3; i < 1024; i++)
    close(i);
  if (pg_store_connect_auth("127.0.0.1", g_port, 10, TOKEN, &st) ||
      pg_store_get(st, "t/comm/ep/0", 30, &v, &len))
    _exit(2);
  ep = xmalloc(len + 1);
  memcpy(ep, v, len);
  ep[len] = '\0';
  sp = strrchr(ep, ' ');
  if (!sp)
    _exit(3);
  *sp = '\0';
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(ep, sp + 1, &hints, &ai))
    _exit(4);
  fd = socket(ai->ai_family, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen))
    _exit(5);
  /* The hello and, without waiting for rank 0's answer (rank 0 is not
   * in its mesh before the last rank has published), a proof. */
  tcp_hello_init(&h, tcp_fnv1a("t/comm/"), 3, 0, 4);
  memset(proof, 0x5a, sizeof proof);
  if (write(fd, &h, sizeof h) != sizeof h ||
      write(fd, proof, sizeof proof) != sizeof proof)
    _exit(6);
  if (pg_store_set(st, "t/stray", "1", 1))
    _exit(9);
  for (;;)
    pause();
}

static void start_impostor(const pid_t *pids, int n, int ready_fd)
{
  g_impostor_pid = fork();
  ck_assert_int_ge(g_impostor_pid, 0);
  if (g_impostor_pid == 0)
    impostor_main();
}

START_TEST(test_token_impostor)
{
  int bad;

  all_tokens(TOKEN);
  g_stray = true;
  bad = world(4, K_TCP, NULL, body_one_all_reduce, start_impostor, -1, 60);
  g_stray = false;
  kill(g_impostor_pid, SIGKILL);
  waitpid(g_impostor_pid, NULL, 0);
  all_tokens(NULL);
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* A rank that reads a bad endpoint for one lower rank fails with a
 * sentence naming it, and closes only what it opened: the slots of the
 * ranks after it held fd 0 (calloc) and mesh's cleanup closed stdin. */
START_TEST(test_bad_endpoint_keeps_stdin)
{
  pid_t store;
  struct pg__topo tp;
  struct pg__setup s;
  struct pg__comm *c = NULL;
  pg_store *st;
  int port = 0, ctl, ranks[3] = { 0, 1, 2 }, nul;

  nul = open("/dev/null", O_RDONLY);
  ck_assert_int_ge(nul, 0);
  ck_assert_int_eq(dup2(nul, 0), 0);
  close(nul);
  store = store_proc(&port, &ctl);
  ck_assert_int_eq(pg_store_connect("127.0.0.1", port, 10, &st), 0);
  ck_assert_int_eq(pg_store_set(st, "t/comm/ep/0", "nonsense", 8), 0);
  ck_assert_int_eq(pg_store_set(st, "t/comm/ep/1", "127.0.0.1 1", 11), 0);
  make_topo(&tp, 2, 3, NULL);
  memset(&s, 0, sizeof s);
  s.store = st;
  s.ns = "t/comm/";
  s.topo = &tp;
  s.ranks = ranks;
  s.n = 3;
  s.me = 2;
  s.timeout = 10;
  s.device = -1;
  ck_assert_int_eq(pg__tcp_create(&s, &c), -EPROTO);
  ck_assert_ptr_null(c);
  ck_assert_msg(strstr(pg_last_error(), "rank 0 published a bad endpoint "
                       "'nonsense'"), "%s", pg_last_error());
  ck_assert_msg(fcntl(0, F_GETFD) >= 0, "stdin was closed");
  free(tp.host_of);
  free(tp.local);
  free(tp.leader_of);
  pg_store_close(st);
  close(ctl);
  waitpid(store, NULL, 0);
}
END_TEST

static int watch_lost_after(void *arg)
{
  int *calls = arg;

  if (++*calls < 3)
    return 0;
  return pg__fail(PG_ERR_PEER_LOST, "rank 1 is gone");
}

/* Note [setup watch]: a higher rank that published its endpoint and died
 * before it connected (issue 30, a replacement killed in its pg_init)
 * kept rank 0's mesh waiting until the timeout; under a setup watch the
 * mesh asks it between polls and ends with its error. */
START_TEST(test_mesh_asks_watch)
{
  pid_t store;
  struct pg__topo tp;
  struct pg__setup s;
  struct pg__comm *c = NULL;
  pg_store *st;
  int port = 0, ctl, ranks[2] = { 0, 1 }, calls = 0;

  store = store_proc(&port, &ctl);
  ck_assert_int_eq(pg_store_connect("127.0.0.1", port, 10, &st), 0);
  /* Rank 1's endpoint, and nobody behind it to connect. */
  ck_assert_int_eq(pg_store_set(st, "t/comm/ep/1", "127.0.0.1 1", 11), 0);
  make_topo(&tp, 0, 2, NULL);
  memset(&s, 0, sizeof s);
  s.store = st;
  s.ns = "t/comm/";
  s.topo = &tp;
  s.ranks = ranks;
  s.n = 2;
  s.me = 0;
  s.timeout = 5;
  s.device = -1;
  pg__setup_watch(watch_lost_after, &calls);
  ck_assert_int_eq(pg__tcp_create(&s, &c), PG_ERR_PEER_LOST);
  pg__setup_watch(NULL, NULL);
  ck_assert_ptr_null(c);
  ck_assert_int_eq(calls, 3);
  ck_assert_msg(strstr(pg_last_error(), "rank 1 is gone"), "%s",
                pg_last_error());
  free(tp.host_of);
  free(tp.local);
  free(tp.leader_of);
  pg_store_close(st);
  close(ctl);
  waitpid(store, NULL, 0);
}
END_TEST

/* Many ranks connecting at once (the parallel mesh). */
START_TEST(test_setup_many)
{
  ck_assert_int_eq(world(MAXN, K_TCP, NULL, body_one_all_reduce, NULL, -1,
                         60), 0);
}
END_TEST

START_TEST(test_hier_no_full_mesh)
{
  static const int hosts[6] = { 0, 0, 1, 1, 2, 2 };

  ck_assert_int_eq(world(6, K_HIER, hosts, body_no_mesh, NULL, -1, 60), 0);
}
END_TEST

/* Large all-reduces at odd sizes: on hosts of 1, 2 and 3 ranks through
 * the leaders' pipeline, on two hosts of 2 over the rails (a remainder of
 * count % L elements through the small path). */
START_TEST(test_hier_pipelined_uneven)
{
  static const int hosts[6] = { 0, 1, 1, 2, 2, 2 };

  ck_assert_int_eq(world(6, K_HIER, hosts, body_pipelined, NULL, -1, 200),
                   0);
}
END_TEST

START_TEST(test_hier_pipelined_even)
{
  static const int hosts[4] = { 0, 0, 1, 1 };

  ck_assert_int_eq(world(4, K_HIER, hosts, body_pipelined, NULL, -1, 200),
                   0);
}
END_TEST

/* Point-to-point between every pair of 3 uneven hosts: connections made
 * on first use, large messages sent both ways before any receive. */
START_TEST(test_hier_p2p_uneven)
{
  static const int hosts[6] = { 0, 1, 1, 2, 2, 2 };

  ck_assert_int_eq(world(6, K_HIER, hosts, body_p2p, NULL, -1, 120), 0);
}
END_TEST

static Suite *pg_tcp_suite(void)
{
  Suite *s = suite_create("pg_tcp");
  TCase *tc = tcase_create("tcp");
  TCase *tf = tcase_create("failure");
  TCase *th = tcase_create("hier");

  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_matrix, 1, MAXN + 1);
  tcase_add_loop_test(tc, test_p2p, 2, MAXN + 1);
  suite_add_tcase(s, tc);
  tcase_set_timeout(tf, 60);
  tcase_add_test(tf, test_peer_left_after_send);
  tcase_add_test(tf, test_killed_mid_collective);
  tcase_add_test(tf, test_absent_rank_times_out);
  tcase_add_test(tf, test_mismatch_is_eproto);
  tcase_add_test(tf, test_setup_strays);
  tcase_add_test(tf, test_setup_many);
  tcase_add_test(tf, test_bad_endpoint_keeps_stdin);
  tcase_add_test(tf, test_mesh_asks_watch);
  tcase_add_test(tf, test_token_mesh);
  tcase_add_test(tf, test_token_wrong);
  tcase_add_test(tf, test_token_impostor);
  tcase_add_test(tf, test_token_p2p_hello);
  tcase_add_test(tf, test_token_p2p_impostor);
  tcase_add_test(tf, test_admit_victim);
  suite_add_tcase(s, tf);
  tcase_set_timeout(th, 300);
  tcase_add_test(th, test_hier_matrix);
  tcase_add_test(th, test_hier_uneven);
  tcase_add_test(th, test_hier_p2p);
  tcase_add_test(th, test_hier_no_full_mesh);
  tcase_add_test(th, test_hier_pipelined_uneven);
  tcase_add_test(th, test_hier_pipelined_even);
  tcase_add_test(th, test_hier_p2p_uneven);
  suite_add_tcase(s, th);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(pg_tcp_suite());
  int failed;

  srunner_run_all(sr, CK_ENV);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
