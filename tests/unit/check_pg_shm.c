/* check_pg_shm.c -- the shared-memory communicator (libpg/cpu/shm.c) on
 * its own: N forked processes (N = 1..8), a real store for the setup
 * exchange, every collective x dtype x op x size against a serial
 * reference each rank computes itself, in place and out of place; send /
 * recv with tags out of order; a rank killed mid-collective and a rank that
 * never comes.
 *
 * Ranks are forked from the test process and always leave with _exit():
 * never return into Check.  A rank's failure is a line on stderr and a
 * non-zero exit status; the test asserts on the statuses and on what the
 * ranks left in a shared results page. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pg_internal.h"

#define MAXN 8
#define MAXCASES 2048

/* What the ranks leave for the test process. */
struct results {
  int ncases;
  uint64_t sum[MAXCASES][MAXN];    /* all_reduce result checksums */
  int err[MAXN];
  double elapsed[MAXN];
  int err_after[MAXN];
};

static struct results *res;
static int store_port;

/* One rank of a test: its comm, its store connection. */
struct rank {
  int me, n;
  pg_store *store;
  struct pg__comm *c;
  double timeout;
};

#define RCHECK(r, cond, ...)                                                 \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "rank %d/%d: %s:%d: ", (r)->me, (r)->n, __FILE__,      \
              __LINE__);                                                     \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
      _exit(3);                                                              \
    }                                                                        \
  } while (0)

static void *xmalloc(size_t n)
{
  void *p = malloc(n ? n : 1);

  if (!p) {
    fprintf(stderr, "out of memory\n");
    _exit(4);
  }
  return p;
}

/* Connects to the store and sets the comm up (ns names the comm). */
static void rank_setup(struct rank *r, const char *ns, double timeout)
{
  static int ranks[MAXN] = { 0, 1, 2, 3, 4, 5, 6, 7 };
  struct pg__setup s;
  int err;

  r->timeout = timeout;
  err = pg_store_connect("127.0.0.1", store_port, 10, &r->store);
  RCHECK(r, err == 0, "store connect: %s", pg_strerror(err));
  memset(&s, 0, sizeof s);
  s.store = r->store;
  s.ns = ns;
  s.ranks = ranks;
  s.n = r->n;
  s.me = r->me;
  s.timeout = timeout;
  err = pg__shm_create(&s, &r->c);
  RCHECK(r, err == 0, "pg__shm_create: %s: %s", pg_strerror(err),
         pg_last_error());
  RCHECK(r, strcmp(r->c->ops->name, "cpu-shm") == 0, "name %s",
         r->c->ops->name);
}

static void rank_teardown(struct rank *r)
{
  r->c->ops->destroy(r->c);
  pg_store_close(r->store);
}

typedef void (*rank_fn)(struct rank *r, void *arg);

/* Waits for the ranks, at most RANKS_LIMIT seconds: a hang kills them all
 * and fails the test (the comm's own deadlines should make that
 * impossible). */
#define RANKS_LIMIT 240.0

/* A rank reaped only once all others have exited (-1: none): a killed
 * rank then stays a zombie while its peers notice, as it would under a
 * parent that is slow to wait. */
static int reap_last = -1;

static void reap(pid_t *pids, int n, int *st)
{
  double end = pg__now() + RANKS_LIMIT;
  int left = n, i;
  bool done[MAXN] = { false };

  while (left > 0) {
    for (i = 0; i < n; i++)
      if (!done[i] && (i != reap_last || left == 1) &&
          waitpid(pids[i], &st[i], WNOHANG) == pids[i]) {
        done[i] = true;
        left--;
      }
    if (left == 0)
      break;
    if (pg__now() > end) {
      for (i = 0; i < n; i++)
        if (!done[i])
          kill(pids[i], SIGKILL);
      for (i = 0; i < n; i++)
        if (!done[i])
          waitpid(pids[i], &st[i], 0);
      ck_abort_msg("%d of %d ranks still running after %.0f s", left, n,
                   RANKS_LIMIT);
    }
    usleep(2000);
  }
}

/* Forks n ranks running fn; returns their exit statuses in st[]. */
static void run_ranks(int n, rank_fn fn, void *arg, pid_t *pids, int *st,
                      void (*while_running)(pid_t *pids, int n))
{
  int i;

  for (i = 0; i < n; i++) {
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      struct rank r = { i, n, NULL, NULL, 0 };

      prctl(PR_SET_PDEATHSIG, SIGKILL);
      fn(&r, arg);
      _exit(0);
    }
    pids[i] = pid;
  }
  if (while_running)
    while_running(pids, n);
  reap(pids, n, st);
}

static void expect_clean_exits(int n, const int *st)
{
  int i;

  for (i = 0; i < n; i++)
    ck_assert_msg(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0,
                  "rank %d of %d failed (status 0x%x; see its stderr)", i,
                  n, st[i]);
}

/* The store serves from a process of its own: the test process must stay
 * single-threaded, or a rank forked while the server thread holds a lock
 * (malloc's, the sanitizers') would deadlock. */
static pid_t store_pid;

static void setup(void)
{
  int fds[2];
  ssize_t got;

  res = mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(res, MAP_FAILED);
  ck_assert_int_eq(pipe(fds), 0);
  store_pid = fork();
  ck_assert_int_ge(store_pid, 0);
  if (store_pid == 0) {
    pg_store_server *srv;
    int port = 0;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(fds[0]);
    if (pg_store_server_start("127.0.0.1", &port, &srv) != 0)
      port = -1;
    if (write(fds[1], &port, sizeof port) != (ssize_t)sizeof port)
      _exit(1);
    for (;;)
      pause();
  }
  close(fds[1]);
  got = read(fds[0], &store_port, sizeof store_port);
  close(fds[0]);
  ck_assert_int_eq(got, sizeof store_port);
  ck_assert_int_gt(store_port, 0);
}

static void teardown(void)
{
  kill(store_pid, SIGKILL);
  waitpid(store_pid, NULL, 0);
  munmap(res, sizeof *res);
}

/* ---- inputs and the serial reference ------------------------------------------- */

static uint64_t mix(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Which elements to check against the reference (it costs n inputs per
 * element, and 8 ranks share 2 cores): all of them up to 16384, else both
 * ends and every 7th (a wrong chunk or slice spans far more than 7
 * elements; the all_reduce checksums cover every byte). */
static bool sampled(size_t i, size_t count)
{
  return count <= 16384 || i < 4096 || i + 4096 >= count || i % 7 == 0;
}

static uint64_t checksum(const void *p, size_t len)
{
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  size_t i;

  for (i = 0; i < len; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* Rank r's element i in case salt, as a double (floats) or raw bits. */
static double gen_float(pg_op op, int r, uint64_t salt, size_t i)
{
  uint64_t h = mix(salt * 1000003u ^ (uint64_t)r << 40 ^ i);

  if (op == PG_PROD)
    return 1.0 + ((double)(h % 17) - 8.0) / 32.0;
  return ((double)(h % 2001) - 1000.0) / 7.0;
}

static double gen_half(pg_op op, int r, uint64_t salt, size_t i)
{
  uint64_t h = mix(salt * 1000003u ^ (uint64_t)r << 40 ^ i);

  if (op == PG_PROD)
    return 1.0 + ((double)(h % 9) - 4.0) / 16.0;
  return ((double)(h % 65) - 32.0) / 4.0;
}

static uint64_t gen_bits(int r, uint64_t salt, size_t i)
{
  return mix(salt * 1000003u ^ (uint64_t)r << 40 ^ i ^ 0x5555);
}

static void gen(pg_dtype t, pg_op op, int r, uint64_t salt, size_t i,
                void *out)
{
  switch (t) {
  case PG_F32:
    ((float *)out)[0] = (float)gen_float(op, r, salt, i);
    break;
  case PG_F64:
    ((double *)out)[0] = gen_float(op, r, salt, i);
    break;
  case PG_F16:
    ((uint16_t *)out)[0] = pg__f32_to_f16((float)gen_half(op, r, salt, i));
    break;
  case PG_BF16:
    ((uint16_t *)out)[0] = pg__f32_to_bf16((float)gen_half(op, r, salt, i));
    break;
  case PG_I32:
    ((uint32_t *)out)[0] = (uint32_t)gen_bits(r, salt, i);
    break;
  case PG_I64:
    ((uint64_t *)out)[0] = gen_bits(r, salt, i);
    break;
  case PG_U8:
    ((uint8_t *)out)[0] = (uint8_t)gen_bits(r, salt, i);
    break;
  default:
    break;
  }
}

static void gen_buf(pg_dtype t, pg_op op, int r, uint64_t salt, void *buf,
                    size_t count)
{
  size_t i, sz = pg_dtype_size(t);

  for (i = 0; i < count; i++)
    gen(t, op, r, salt, i, (char *)buf + i * sz);
}

static bool is_float(pg_dtype t)
{
  return t == PG_F32 || t == PG_F64 || t == PG_F16 || t == PG_BF16;
}

static double as_double(pg_dtype t, const void *p)
{
  switch (t) {
  case PG_F32: return *(const float *)p;
  case PG_F64: return *(const double *)p;
  case PG_F16: return pg__f16_to_f32(*(const uint16_t *)p);
  case PG_BF16: return pg__bf16_to_f32(*(const uint16_t *)p);
  default: return 0;
  }
}

static double eps_of(pg_dtype t)
{
  switch (t) {
  case PG_F32: return 0x1p-23;
  case PG_F64: return 0x1p-52;
  case PG_F16: return 0x1p-10;
  default: return 0x1p-7;
  }
}

/* Checks element i of got against the serial reduction of ranks 0..n-1
 * (their inputs regenerated here): floats in double with a tolerance
 * proportional to n, integers exactly with unsigned wrap-around. */
static bool check_elem(pg_dtype t, pg_op op, int n, uint64_t salt,
                       const void *got, size_t i, size_t gen_i, char *why,
                       size_t whylen)
{
  char x[8];
  int r;

  if (is_float(t)) {
    double acc = 0, mag = 0, v, g = as_double(t, got), tol;

    for (r = 0; r < n; r++) {
      gen(t, op, r, salt, gen_i, x);
      v = as_double(t, x);
      if (r == 0)
        acc = v;
      else if (op == PG_SUM || op == PG_AVG)
        acc += v;
      else if (op == PG_PROD)
        acc *= v;
      else if (op == PG_MIN)
        acc = v < acc ? v : acc;
      else
        acc = v > acc ? v : acc;
      mag += fabs(v);
    }
    if (op == PG_AVG) {
      acc /= n;
      mag /= n;
    }
    if (op == PG_PROD)
      mag = fabs(acc);
    tol = op == PG_MIN || op == PG_MAX ? 0 : 2.0 * (n + 1) * eps_of(t) * mag;
    if (fabs(g - acc) <= tol)
      return true;
    snprintf(why, whylen, "element %zu: got %.17g, want %.17g (tol %g)", i,
             g, acc, tol);
    return false;
  } else {
    uint64_t acc = 0, v = 0, gv = 0;
    size_t sz = pg_dtype_size(t);
    int64_t sa = 0, sv;

    for (r = 0; r < n; r++) {
      gen(t, op, r, salt, gen_i, x);
      v = 0;
      memcpy(&v, x, sz);
      if (t == PG_I32)
        sv = (int32_t)(uint32_t)v;
      else if (t == PG_I64)
        sv = (int64_t)v;
      else
        sv = (int64_t)v;
      if (r == 0) {
        acc = v;
        sa = sv;
        continue;
      }
      switch (op) {
      case PG_SUM: case PG_AVG: acc += v; break;
      case PG_PROD: acc *= v; break;
      case PG_MIN: if (sv < sa) { acc = v; sa = sv; } break;
      default: if (sv > sa) { acc = v; sa = sv; } break;
      }
    }
    if (op == PG_AVG) {
      if (t == PG_I32)
        acc = (uint32_t)((int32_t)(uint32_t)acc / n);
      else if (t == PG_I64)
        acc = (uint64_t)((int64_t)acc / n);
      else
        acc = (uint8_t)acc / (uint64_t)n;
    }
    if (sz < 8)
      acc &= (1ull << (8 * sz)) - 1;
    memcpy(&gv, got, sz);
    if (gv == acc)
      return true;
    snprintf(why, whylen, "element %zu: got 0x%llx, want 0x%llx", i,
             (unsigned long long)gv, (unsigned long long)acc);
    return false;
  }
}

static const char *dname[] = { "f32", "f64", "f16", "bf16", "i32", "i64", "u8" };
static const char *oname[] = { "sum", "avg", "min", "max", "prod" };
static const size_t sizes[] = { 0, 1, 7, 1000, 65537, 1u << 20 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

static double deadline(struct rank *r)
{
  return pg__now() + r->timeout;
}

/* ---- the battery ------------------------------------------------------------------ */

static void do_all_reduce(struct rank *r, pg_dtype t, pg_op op, size_t count,
                          bool in_place, int *ncase)
{
  size_t sz = pg_dtype_size(t), i;
  uint64_t salt = (uint64_t)*ncase;
  char *send = xmalloc(count * sz), *recv = in_place ? send
                                                    : xmalloc(count * sz + 1);
  char why[256];
  uint64_t send_sum;
  int err;

  gen_buf(t, op, r->me, salt, send, count);
  send_sum = checksum(send, count * sz);
  if (!in_place)
    recv[count * sz] = 0x3c;   /* must not be touched */
  err = r->c->ops->all_reduce(r->c, send, recv, count, t, op, deadline(r));
  RCHECK(r, err == 0, "all_reduce %s %s %zu: %s: %s", dname[t], oname[op],
         count, pg_err_name(err), pg_last_error());
  for (i = 0; i < count; i++)
    RCHECK(r, !sampled(i, count) ||
              check_elem(t, op, r->n, salt, recv + i * sz, i, i, why,
                         sizeof why),
           "all_reduce %s %s count %zu %s: %s", dname[t], oname[op], count,
           in_place ? "in place" : "out of place", why);
  if (!in_place) {
    RCHECK(r, (unsigned char)recv[count * sz] == 0x3c, "wrote past recv");
    RCHECK(r, checksum(send, count * sz) == send_sum, "send modified");
  }
  RCHECK(r, *ncase < MAXCASES, "too many cases");
  res->sum[*ncase][r->me] = checksum(recv, count * sz);
  if (!in_place)
    free(recv);
  free(send);
  (*ncase)++;
}

static void do_reduce(struct rank *r, pg_dtype t, pg_op op, size_t count,
                      bool in_place, int root, int *ncase)
{
  size_t sz = pg_dtype_size(t), i;
  uint64_t salt = (uint64_t)*ncase + 7777;
  char *send = xmalloc(count * sz), *recv = NULL;
  char why[256];
  uint64_t send_sum;
  int err;

  gen_buf(t, op, r->me, salt, send, count);
  send_sum = checksum(send, count * sz);
  if (in_place)
    recv = send;
  else if (r->me == root)
    recv = xmalloc(count * sz);
  err = r->c->ops->reduce(r->c, send, recv, count, t, op, root, deadline(r));
  RCHECK(r, err == 0, "reduce %s %s %zu root %d: %s: %s", dname[t], oname[op],
         count, root, pg_err_name(err), pg_last_error());
  if (r->me == root)
    for (i = 0; i < count; i++)
      RCHECK(r, !sampled(i, count) ||
                check_elem(t, op, r->n, salt, recv + i * sz, i, i, why,
                           sizeof why),
             "reduce %s %s count %zu root %d %s: %s", dname[t], oname[op],
             count, root, in_place ? "in place" : "out of place", why);
  else if (!in_place)
    RCHECK(r, checksum(send, count * sz) == send_sum, "send modified");
  if (recv != send)
    free(recv);
  free(send);
  (*ncase)++;
}

/* In place: recv = send + me * count (NCCL's convention). */
static void do_reduce_scatter(struct rank *r, pg_dtype t, pg_op op,
                              size_t count, bool in_place, int *ncase)
{
  size_t sz = pg_dtype_size(t), i, all = count * (size_t)r->n;
  uint64_t salt = (uint64_t)*ncase + 99991;
  char *send = xmalloc(all * sz), *recv;
  char why[256];
  int err;

  /* Rank q's block b element i is its element b * count + i. */
  gen_buf(t, op, r->me, salt, send, all);
  recv = in_place ? send + (size_t)r->me * count * sz : xmalloc(count * sz);
  err = r->c->ops->reduce_scatter(r->c, send, recv, count, t, op,
                                  deadline(r));
  RCHECK(r, err == 0, "reduce_scatter %s %s %zu: %s: %s", dname[t],
         oname[op], count, pg_err_name(err), pg_last_error());
  for (i = 0; i < count; i++)
    RCHECK(r, !sampled(i, count) ||
              check_elem(t, op, r->n, salt, recv + i * sz, i,
                         (size_t)r->me * count + i, why, sizeof why),
           "reduce_scatter %s %s count %zu %s: %s", dname[t], oname[op],
           count, in_place ? "in place" : "out of place", why);
  if (!in_place)
    free(recv);
  free(send);
  (*ncase)++;
}

static void do_all_gather(struct rank *r, pg_dtype t, size_t count,
                          bool in_place, int *ncase)
{
  size_t sz = pg_dtype_size(t), i, all = count * (size_t)r->n;
  uint64_t salt = (uint64_t)*ncase + 31337;
  char *recv = xmalloc(all * sz + 1), *send, *want;
  int q, err;

  recv[all * sz] = 0x3c;
  send = in_place ? recv + (size_t)r->me * count * sz : xmalloc(count * sz);
  gen_buf(t, PG_SUM, r->me, salt, send, count);
  err = r->c->ops->all_gather(r->c, send, recv, count, t, deadline(r));
  RCHECK(r, err == 0, "all_gather %s %zu: %s: %s", dname[t], count,
         pg_err_name(err), pg_last_error());
  want = xmalloc(count * sz);
  for (q = 0; q < r->n; q++) {
    gen_buf(t, PG_SUM, q, salt, want, count);
    for (i = 0; i < count; i++)
      RCHECK(r, memcmp(want + i * sz, recv + ((size_t)q * count + i) * sz,
                       sz) == 0,
             "all_gather %s count %zu %s: rank %d's element %zu wrong",
             dname[t], count, in_place ? "in place" : "out of place", q, i);
  }
  free(want);
  RCHECK(r, (unsigned char)recv[all * sz] == 0x3c, "wrote past recv");
  if (!in_place)
    free(send);
  free(recv);
  (*ncase)++;
}

static void do_broadcast(struct rank *r, pg_dtype t, size_t count, int root,
                         int *ncase)
{
  size_t sz = pg_dtype_size(t), i;
  uint64_t salt = (uint64_t)*ncase + 4242;
  char *buf = xmalloc(count * sz);
  int err;

  if (r->me == root)
    gen_buf(t, PG_SUM, root, salt, buf, count);
  else
    memset(buf, 0xee, count * sz);
  err = r->c->ops->broadcast(r->c, buf, count, t, root, deadline(r));
  RCHECK(r, err == 0, "broadcast %s %zu root %d: %s: %s", dname[t], count,
         root, pg_err_name(err), pg_last_error());
  for (i = 0; i < count; i++) {
    char x[8];

    gen(t, PG_SUM, root, salt, i, x);
    RCHECK(r, memcmp(x, buf + i * sz, sz) == 0,
           "broadcast %s count %zu root %d: element %zu wrong", dname[t],
           count, root, i);
  }
  free(buf);
  (*ncase)++;
}

/* Sizes: every one for f32; for the others all but the largest. */
static bool size_ok(pg_dtype t, size_t k)
{
  return sizes[k] < (1u << 20) || t == PG_F32;
}

/* reduce_scatter and all_gather take a count per rank: the largest size
 * is split among the ranks (n times 1M elements would only slow the
 * reference down). */
static size_t per_rank(struct rank *r, size_t k)
{
  return sizes[k] >= (1u << 20) ? sizes[k] / (size_t)r->n + 3 : sizes[k];
}

static void battery(struct rank *r, void *arg)
{
  char ns[64];
  int t, op, ip, ncase = 0, err;
  size_t k;

  (void)arg;
  snprintf(ns, sizeof ns, "battery/%d/", r->n);
  rank_setup(r, ns, 60);
  for (t = 0; t < PG_DTYPE_COUNT; t++)
    for (op = 0; op < PG_OP_COUNT; op++)
      for (k = 0; k < NSIZES; k++)
        for (ip = 0; ip < 2; ip++)
          if (size_ok((pg_dtype)t, k))
            do_all_reduce(r, (pg_dtype)t, (pg_op)op, sizes[k], ip, &ncase);
  if (r->me == 0)
    res->ncases = ncase;
  for (t = 0; t < PG_DTYPE_COUNT; t++)
    for (op = 0; op < PG_OP_COUNT; op++)
      for (k = 0; k < NSIZES; k++)
        for (ip = 0; ip < 2; ip++)
          if (size_ok((pg_dtype)t, k)) {
            do_reduce(r, (pg_dtype)t, (pg_op)op, sizes[k], ip,
                      ncase % r->n, &ncase);
            do_reduce_scatter(r, (pg_dtype)t, (pg_op)op, per_rank(r, k),
                              ip, &ncase);
          }
  for (t = 0; t < PG_DTYPE_COUNT; t++)
    for (k = 0; k < NSIZES; k++)
      if (size_ok((pg_dtype)t, k)) {
        for (ip = 0; ip < 2; ip++)
          do_all_gather(r, (pg_dtype)t, per_rank(r, k), ip, &ncase);
        do_broadcast(r, (pg_dtype)t, sizes[k], ncase % r->n, &ncase);
      }
  err = r->c->ops->barrier(r->c, deadline(r));
  RCHECK(r, err == 0, "barrier: %s", pg_last_error());
  rank_teardown(r);
}

START_TEST(test_battery)
{
  int n = _i, st[MAXN], c, q;
  pid_t pids[MAXN];

  run_ranks(n, battery, NULL, pids, st, NULL);
  expect_clean_exits(n, st);
  /* Every rank got the same bits from every all_reduce. */
  ck_assert_int_gt(res->ncases, 300);
  for (c = 0; c < res->ncases; c++)
    for (q = 1; q < n; q++)
      ck_assert_msg(res->sum[c][q] == res->sum[c][0],
                    "all_reduce case %d: rank %d's result differs from "
                    "rank 0's", c, q);
}
END_TEST

/* ---- send / recv ---------------------------------------------------------------- */

static void fill_msg(unsigned char *p, size_t len, int from, int tag)
{
  size_t i;

  for (i = 0; i < len; i++)
    p[i] = (unsigned char)(mix((uint64_t)from * 131 + (uint64_t)tag * 7 + i) >> 5);
}

static void check_msg(struct rank *r, const unsigned char *p, size_t len,
                      int from, int tag)
{
  unsigned char *want = xmalloc(len);

  fill_msg(want, len, from, tag);
  RCHECK(r, memcmp(p, want, len) == 0, "message from %d tag %d (%zu bytes) "
         "corrupt", from, tag, len);
  free(want);
}

static void p2p(struct rank *r, void *arg)
{
  static const size_t lens[] = { 0, 1, 1000, 65536, 1u << 20, (3u << 20) + 5 };
  int next = (r->me + 1) % r->n, prev = (r->me + r->n - 1) % r->n;
  size_t k, big = (3u << 20) + 5;
  unsigned char *s = xmalloc(big), *d = xmalloc(big);
  char ns[64];
  int err, round;

  (void)arg;
  snprintf(ns, sizeof ns, "p2p/%d/", r->n);
  rank_setup(r, ns, 60);
  /* Around the ring; odd ranks receive first so that messages larger than
   * the ring cannot deadlock. */
  for (round = 0; round < 2; round++)
    for (k = 0; k < sizeof lens / sizeof lens[0]; k++) {
      int tag = (int)k + 100 * round;

      fill_msg(s, lens[k], r->me, tag);
      if (r->me % 2 == 0) {
        err = r->c->ops->send(r->c, s, lens[k], next, tag, deadline(r));
        RCHECK(r, err == 0, "send %zu: %s", lens[k], pg_last_error());
      }
      err = r->c->ops->recv(r->c, d, lens[k], prev, tag, deadline(r));
      RCHECK(r, err == 0, "recv %zu: %s", lens[k], pg_last_error());
      check_msg(r, d, lens[k], prev, tag);
      if (r->me % 2 == 1) {
        err = r->c->ops->send(r->c, s, lens[k], next, tag, deadline(r));
        RCHECK(r, err == 0, "send %zu: %s", lens[k], pg_last_error());
      }
    }
  /* Tags out of order: 3 messages to next, received as tag 3, 1, 2; the
   * first is larger than any ring, so it is queued while streaming. */
  {
    size_t l1 = big, l2 = 10, l3 = 5000;
    unsigned char *a = xmalloc(l1), *b = xmalloc(l3);

    if (r->me % 2 == 0) {
      fill_msg(s, l1, r->me, 1);
      RCHECK(r, r->c->ops->send(r->c, s, l1, next, 1, deadline(r)) == 0,
             "send 1: %s", pg_last_error());
      fill_msg(s, l2, r->me, 2);
      RCHECK(r, r->c->ops->send(r->c, s, l2, next, 2, deadline(r)) == 0,
             "send 2");
      fill_msg(s, l3, r->me, 3);
      RCHECK(r, r->c->ops->send(r->c, s, l3, next, 3, deadline(r)) == 0,
             "send 3");
    }
    RCHECK(r, r->c->ops->recv(r->c, b, l3, prev, 3, deadline(r)) == 0,
           "recv 3: %s", pg_last_error());
    check_msg(r, b, l3, prev, 3);
    RCHECK(r, r->c->ops->recv(r->c, a, l1, prev, 1, deadline(r)) == 0,
           "recv 1: %s", pg_last_error());
    check_msg(r, a, l1, prev, 1);
    /* A wrong size is an error, and the stream stays usable. */
    err = r->c->ops->recv(r->c, b, l2 + 1, prev, 2, deadline(r));
    RCHECK(r, err == -EMSGSIZE, "recv of the wrong size: %s",
           pg_err_name(err));
    if (r->me % 2 == 1) {
      fill_msg(s, l1, r->me, 1);
      RCHECK(r, r->c->ops->send(r->c, s, l1, next, 1, deadline(r)) == 0,
             "send 1");
      fill_msg(s, l2, r->me, 2);
      RCHECK(r, r->c->ops->send(r->c, s, l2, next, 2, deadline(r)) == 0,
             "send 2");
      fill_msg(s, l3, r->me, 3);
      RCHECK(r, r->c->ops->send(r->c, s, l3, next, 3, deadline(r)) == 0,
             "send 3");
    }
    free(a);
    free(b);
  }
  /* Interleaved with a collective, and a bad peer. */
  err = r->c->ops->barrier(r->c, deadline(r));
  RCHECK(r, err == 0, "barrier: %s", pg_last_error());
  err = r->c->ops->send(r->c, s, 1, r->me, 0, deadline(r));
  RCHECK(r, err == -EINVAL, "send to self: %s", pg_err_name(err));
  err = r->c->ops->recv(r->c, d, 1, r->n, 0, deadline(r));
  RCHECK(r, err == -EINVAL, "recv from rank n: %s", pg_err_name(err));
  err = r->c->ops->barrier(r->c, deadline(r));
  RCHECK(r, err == 0, "barrier: %s", pg_last_error());
  free(s);
  free(d);
  rank_teardown(r);
}

START_TEST(test_send_recv)
{
  int n = _i, st[MAXN];
  pid_t pids[MAXN];

  run_ranks(n, p2p, NULL, pids, st, NULL);
  expect_clean_exits(n, st);
}
END_TEST

/* Every rank sends 1 MiB (and a message larger than any ring) to both
 * neighbours before it receives anything: a pair (n = 2) and cycles.
 * TCP drains incoming messages while it sends; shared memory must too,
 * or this deadlocks until the deadline. */
static void p2p_send_first(struct rank *r, void *arg)
{
  static const size_t lens[] = { 1u << 20, (3u << 20) + 5 };
  int next = (r->me + 1) % r->n, prev = (r->me + r->n - 1) % r->n;
  size_t k, big = (3u << 20) + 5;
  unsigned char *s = xmalloc(big), *d = xmalloc(big);
  char ns[64];
  int err;

  (void)arg;
  snprintf(ns, sizeof ns, "p2pfirst/%d/", r->n);
  rank_setup(r, ns, 30);
  for (k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    fill_msg(s, lens[k], r->me, 10 + (int)k);
    err = r->c->ops->send(r->c, s, lens[k], next, 10 + (int)k, deadline(r));
    RCHECK(r, err == 0, "send %zu to next: %s", lens[k], pg_last_error());
    if (r->n > 2) {
      fill_msg(s, lens[k], r->me, 20 + (int)k);
      err = r->c->ops->send(r->c, s, lens[k], prev, 20 + (int)k,
                            deadline(r));
      RCHECK(r, err == 0, "send %zu to prev: %s", lens[k], pg_last_error());
    }
    err = r->c->ops->recv(r->c, d, lens[k], prev, 10 + (int)k, deadline(r));
    RCHECK(r, err == 0, "recv %zu from prev: %s", lens[k], pg_last_error());
    check_msg(r, d, lens[k], prev, 10 + (int)k);
    if (r->n > 2) {
      err = r->c->ops->recv(r->c, d, lens[k], next, 20 + (int)k,
                            deadline(r));
      RCHECK(r, err == 0, "recv %zu from next: %s", lens[k],
             pg_last_error());
      check_msg(r, d, lens[k], next, 20 + (int)k);
    }
  }
  err = r->c->ops->barrier(r->c, deadline(r));
  RCHECK(r, err == 0, "barrier: %s", pg_last_error());
  free(s);
  free(d);
  rank_teardown(r);
}

START_TEST(test_send_first)
{
  int n = _i, st[MAXN];
  pid_t pids[MAXN];

  run_ranks(n, p2p_send_first, NULL, pids, st, NULL);
  expect_clean_exits(n, st);
}
END_TEST

/* ---- failures ----------------------------------------------------------------------- */

#define KILL_N 4
#define KILL_VICTIM 2

/* Everyone loops on large all-reduces (2 s deadline each) until one fails;
 * the test process kills the victim meanwhile. */
static void kill_loop(struct rank *r, void *arg)
{
  size_t count = 1u << 20;
  float *buf = xmalloc(count * sizeof *buf);
  double t0 = 0;
  int err = 0, i;

  (void)arg;
  rank_setup(r, "kill/", 2);
  for (i = 0; i < (int)count; i++)
    buf[i] = 1.0f;
  for (i = 0; i < 100000 && err == 0; i++) {
    t0 = pg__now();
    err = r->c->ops->all_reduce(r->c, buf, buf, count, PG_F32, PG_AVG,
                                t0 + 2.0);
  }
  res->err[r->me] = err;
  res->elapsed[r->me] = pg__now() - t0;
  /* Later ops fail at once. */
  fprintf(stderr, "rank %d: %s after %.3f s: %s\n", r->me, pg_err_name(err),
          res->elapsed[r->me], pg_last_error());
  res->err_after[r->me] = r->c->ops->barrier(r->c, pg__now() + 2.0);
  rank_teardown(r);
  free(buf);
}

static void kill_victim(pid_t *pids, int n)
{
  struct timespec ts = { 0, 300 * 1000000 };

  (void)n;
  nanosleep(&ts, NULL);
  kill(pids[KILL_VICTIM], SIGKILL);
}

START_TEST(test_killed_rank)
{
  int st[KILL_N], i;
  pid_t pids[KILL_N];

  reap_last = KILL_VICTIM;
  run_ranks(KILL_N, kill_loop, NULL, pids, st, kill_victim);
  reap_last = -1;
  ck_assert(WIFSIGNALED(st[KILL_VICTIM]) &&
            WTERMSIG(st[KILL_VICTIM]) == SIGKILL);
  for (i = 0; i < KILL_N; i++) {
    if (i == KILL_VICTIM)
      continue;
    ck_assert_msg(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0,
                  "rank %d status 0x%x", i, st[i]);
    ck_assert_msg(res->err[i] == -ECONNRESET || res->err[i] == -ETIMEDOUT,
                  "rank %d: %s", i, pg_err_name(res->err[i]));
    ck_assert_msg(res->elapsed[i] < 2.5, "rank %d took %.3f s", i,
                  res->elapsed[i]);
    ck_assert_int_eq(res->err_after[i], PG_EPEERFAIL);
  }
}
END_TEST

/* Note [left]: rank 2 of 3 destroys the comm after the first all-reduce
 * and stays alive (an error outside libpg on its way out); the others,
 * in the second all-reduce, fail at once naming it, instead of waiting
 * for its death or their deadline. */
#define LEAVE_N 3
#define LEAVER 2

static void leave_early(struct rank *r, void *arg)
{
  size_t count = 1u << 16;
  float *buf = xmalloc(count * sizeof *buf);
  double end;
  int err, i;

  (void)arg;
  rank_setup(r, "leave/", 10);
  for (i = 0; i < (int)count; i++)
    buf[i] = 1.0f;
  err = r->c->ops->all_reduce(r->c, buf, buf, count, PG_F32, PG_SUM,
                              pg__now() + 10);
  RCHECK(r, err == 0, "first all_reduce: %s", pg_err_name(err));
  if (r->me == LEAVER) {
    rank_teardown(r);
    /* Alive until the others are done, so that only "left" tells them. */
    for (end = pg__now() + 20; pg__now() < end;) {
      if (__atomic_load_n(&res->err_after[0], __ATOMIC_ACQUIRE) &&
          __atomic_load_n(&res->err_after[1], __ATOMIC_ACQUIRE))
        break;
      usleep(2000);
    }
    free(buf);
    return;
  }
  err = r->c->ops->all_reduce(r->c, buf, buf, count, PG_F32, PG_SUM,
                              pg__now() + 10);
  res->err[r->me] = err;
  /* The first to notice says who left; the other learns from its abort. */
  RCHECK(r, err != -ECONNRESET ||
         strstr(pg_last_error(), "rank 2 (pid") ||
         strstr(pg_last_error(), "aborted the communicator"), "%s",
         pg_last_error());
  if (err == -ECONNRESET && strstr(pg_last_error(), "left the communicator"))
    __atomic_store_n(&res->ncases, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&res->err_after[r->me], 1, __ATOMIC_RELEASE);
  rank_teardown(r);
  free(buf);
}

START_TEST(test_rank_left)
{
  int st[LEAVE_N], i;
  pid_t pids[LEAVE_N];

  run_ranks(LEAVE_N, leave_early, NULL, pids, st, NULL);
  expect_clean_exits(LEAVE_N, st);
  for (i = 0; i < LEAVE_N; i++)
    if (i != LEAVER)
      ck_assert_msg(res->err[i] == -ECONNRESET, "rank %d: %s", i,
                    pg_err_name(res->err[i]));
  ck_assert_msg(res->ncases == 1, "no rank said rank %d left", LEAVER);
}
END_TEST

/* Rank 2 of 3 never calls the collective: the others time out by their
 * deadline (or see the first one's abort). */
static void no_show(struct rank *r, void *arg)
{
  float x[1000] = { 0 };
  double t0;
  int err;

  (void)arg;
  rank_setup(r, "noshow/", 5);
  if (r->me == 2) {
    struct timespec ts = { 1, 500 * 1000000 };

    nanosleep(&ts, NULL);
    rank_teardown(r);
    return;
  }
  t0 = pg__now();
  err = r->c->ops->all_reduce(r->c, x, x, 1000, PG_F32, PG_SUM, t0 + 0.5);
  res->err[r->me] = err;
  res->elapsed[r->me] = pg__now() - t0;
  rank_teardown(r);
}

START_TEST(test_no_show)
{
  int st[3], i;
  pid_t pids[3];

  run_ranks(3, no_show, NULL, pids, st, NULL);
  expect_clean_exits(3, st);
  for (i = 0; i < 2; i++) {
    ck_assert_msg(res->err[i] == -ETIMEDOUT || res->err[i] == -ECONNRESET,
                  "rank %d: %s", i, pg_err_name(res->err[i]));
    ck_assert_msg(res->elapsed[i] >= 0.45 && res->elapsed[i] < 1.2,
                  "rank %d: %.3f s", i, res->elapsed[i]);
  }
  ck_assert(res->err[0] == -ETIMEDOUT || res->err[1] == -ETIMEDOUT);
}
END_TEST

/* A rank that has done its part and exited is no failure: rank 1 leaves
 * right after a reduce to rank 0 that rank 2 joins late (0 sleeps on 2
 * meanwhile, and must not mind that 1 is gone). */
static void early_exit(struct rank *r, void *arg)
{
  int32_t x[100], y[100], i, err;
  struct timespec ts = { 0, 300 * 1000000 };

  (void)arg;
  rank_setup(r, "early/", 10);
  for (i = 0; i < 100; i++)
    x[i] = r->me + i;
  if (r->me == 2)
    nanosleep(&ts, NULL);
  err = r->c->ops->reduce(r->c, x, y, 100, PG_I32, PG_SUM, 0, deadline(r));
  RCHECK(r, err == 0, "reduce: %s: %s", pg_err_name(err), pg_last_error());
  if (r->me == 0)
    for (i = 0; i < 100; i++)
      RCHECK(r, y[i] == 3 + 3 * i, "y[%d] = %d", i, y[i]);
  rank_teardown(r);
}

START_TEST(test_early_exit)
{
  int st[3];
  pid_t pids[3];

  run_ranks(3, early_exit, NULL, pids, st, NULL);
  expect_clean_exits(3, st);
}
END_TEST

/* Nothing is left in /dev/shm once the comm is up: rank 0 named the
 * segment "/pg-<random>-<its pid>". */
static void unlinked(struct rank *r, void *arg)
{
  char want[32];
  DIR *d;
  struct dirent *e;

  (void)arg;
  rank_setup(r, "unlinked/", 10);
  RCHECK(r, r->c->ops->barrier(r->c, deadline(r)) == 0, "barrier");
  snprintf(want, sizeof want, "-%d", (int)getpid());
  if (r->me == 0 && (d = opendir("/dev/shm")) != NULL) {
    while ((e = readdir(d)) != NULL) {
      size_t len = strlen(e->d_name), wl = strlen(want);

      RCHECK(r, !(strncmp(e->d_name, "pg-", 3) == 0 && len > wl &&
                  strcmp(e->d_name + len - wl, want) == 0),
             "/dev/shm/%s is still there", e->d_name);
    }
    closedir(d);
  }
  RCHECK(r, r->c->ops->barrier(r->c, deadline(r)) == 0, "barrier");
  rank_teardown(r);
}

START_TEST(test_unlinked)
{
  int st[3];
  pid_t pids[3];

  run_ranks(3, unlinked, NULL, pids, st, NULL);
  expect_clean_exits(3, st);
}
END_TEST

/* Note [stale segments]: a segment of this user and pid namespace whose
 * creator is gone is unlinked by the next rank 0 that creates one; one
 * whose creator lives, or of another pid namespace, stays. */
static uint32_t ns32(void)
{
  struct stat st;

  ck_assert_int_eq(stat("/proc/self/ns/pid", &st), 0);
  return (uint32_t)st.st_ino;
}

static bool shm_exists(const char *name)
{
  char path[128];

  snprintf(path, sizeof path, "/dev/shm%s", name);
  return access(path, F_OK) == 0;
}

static void make_segment(const char *name)
{
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);

  ck_assert_msg(fd >= 0, "shm_open %s: %s", name, strerror(errno));
  close(fd);
}

static void solo_rank(struct rank *r, void *arg)
{
  (void)arg;
  rank_setup(r, "sweep/", 10);
  rank_teardown(r);
}

START_TEST(test_sweep_stale)
{
  char dead[64], alive[64], other[64];
  uint32_t ns = ns32();
  pid_t gone, pids[1];
  int st[1];

  gone = fork();
  ck_assert_int_ge(gone, 0);
  if (gone == 0)
    _exit(0);
  ck_assert_int_eq(waitpid(gone, &st[0], 0), gone);
  snprintf(dead, sizeof dead, "/pg-%08x%08x-%d", ns, 0x1234u, (int)gone);
  snprintf(alive, sizeof alive, "/pg-%08x%08x-%d", ns, 0x1235u,
           (int)getpid());
  snprintf(other, sizeof other, "/pg-%08x%08x-%d", ns ^ 1u, 0x1236u,
           (int)gone);
  make_segment(dead);
  make_segment(alive);
  make_segment(other);
  run_ranks(1, solo_rank, NULL, pids, st, NULL);
  expect_clean_exits(1, st);
  ck_assert_msg(!shm_exists(dead), "%s (creator gone) is still there",
                dead);
  ck_assert_msg(shm_exists(alive), "%s (creator alive) was swept", alive);
  ck_assert_msg(shm_exists(other), "%s (another pid namespace) was swept",
                other);
  shm_unlink(alive);
  shm_unlink(other);
}
END_TEST

/* Note [stale segments]: rank 0 SIGKILLed after it published its
 * segment and before it unlinked it (it waits for rank 1): rank 1 maps
 * it and unlinks the name, whether its setup fails (rank 0 died before
 * it said it mapped the segment) or succeeds (after). */
static void late_rank1(struct rank *r, void *arg)
{
  static int ranks[2] = { 0, 1 };
  struct pg__setup s;
  int err;

  r->me = 1;
  r->n = 2;
  err = pg_store_connect("127.0.0.1", store_port, 10, &r->store);
  RCHECK(r, err == 0, "store connect: %s", pg_strerror(err));
  memset(&s, 0, sizeof s);
  s.store = r->store;
  s.ns = arg;
  s.ranks = ranks;
  s.n = 2;
  s.me = 1;
  s.timeout = 1;
  err = pg__shm_create(&s, &r->c);
  if (err == 0)
    r->c->ops->destroy(r->c);
  pg_store_close(r->store);
}

static void early_rank0(struct rank *r, void *arg)
{
  r->n = 2;
  rank_setup(r, arg, 60);
  _exit(5);      /* not reached: killed while rank 1 is not there */
}

/* ns: the comm's; key: rank 0's value to wait for before the kill. */
static void dead_rank0(const char *ns, const char *key)
{
  char want[32];
  pg_store *st0;
  void *v = NULL;
  size_t len;
  pid_t p0[1], p1[1];
  int st[1];
  DIR *d;
  struct dirent *e;

  ck_assert_int_eq(pg_store_connect("127.0.0.1", store_port, 10, &st0), 0);
  p0[0] = fork();
  ck_assert_int_ge(p0[0], 0);
  if (p0[0] == 0) {
    struct rank r = { 0, 2, NULL, NULL, 0 };

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    early_rank0(&r, (void *)ns);
    _exit(0);
  }
  /* Rank 0 published its segment's name (or that it mapped it): the
   * segment is created, not yet unlinked. */
  ck_assert_int_eq(pg_store_get(st0, key, 30, &v, &len), 0);
  free(v);
  kill(p0[0], SIGKILL);
  ck_assert_int_eq(waitpid(p0[0], &st[0], 0), p0[0]);
  run_ranks(1, late_rank1, (void *)ns, p1, st, NULL);
  expect_clean_exits(1, st);
  snprintf(want, sizeof want, "-%d", (int)p0[0]);
  d = opendir("/dev/shm");
  ck_assert_ptr_nonnull(d);
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name), wl = strlen(want);

    ck_assert_msg(!(strncmp(e->d_name, "pg-", 3) == 0 && l > wl &&
                    strcmp(e->d_name + l - wl, want) == 0),
                  "/dev/shm/%s is still there", e->d_name);
  }
  closedir(d);
  pg_store_close(st0);
}

START_TEST(test_dead_rank0_unlinked)
{
  /* Killed after the name, perhaps before its "mapped": rank 1's setup
   * fails or succeeds. */
  dead_rank0("deadr0/", "deadr0/seg0");
  /* Killed once it said it mapped the segment: rank 1's setup
   * succeeds, and rank 0 never unlinked. */
  dead_rank0("deadr0b/", "deadr0b/att0");
}
END_TEST

/* A comm of one: everything is a local copy. */
static void solo(struct rank *r, void *arg)
{
  int x[5] = { 1, 2, 3, 4, 5 }, y[5], err;

  (void)arg;
  rank_setup(r, "solo/", 10);
  err = r->c->ops->all_reduce(r->c, x, y, 5, PG_I32, PG_AVG, deadline(r));
  RCHECK(r, err == 0 && memcmp(x, y, sizeof x) == 0, "solo all_reduce");
  err = r->c->ops->barrier(r->c, deadline(r));
  RCHECK(r, err == 0, "solo barrier");
  err = r->c->ops->send(r->c, x, 4, 0, 0, deadline(r));
  RCHECK(r, err == -EINVAL, "solo send");
  rank_teardown(r);
}

START_TEST(test_solo)
{
  int st[1];
  pid_t pids[1];

  run_ranks(1, solo, NULL, pids, st, NULL);
  expect_clean_exits(1, st);
}
END_TEST

static Suite *pg_shm_suite(void)
{
  Suite *s = suite_create("pg_shm");
  TCase *tb = tcase_create("battery");
  TCase *tp = tcase_create("p2p");
  TCase *tf = tcase_create("failure");

  tcase_add_checked_fixture(tb, setup, teardown);
  tcase_set_timeout(tb, 300);
  tcase_add_loop_test(tb, test_battery, 1, MAXN + 1);
  suite_add_tcase(s, tb);
  tcase_add_checked_fixture(tp, setup, teardown);
  tcase_set_timeout(tp, 120);
  tcase_add_loop_test(tp, test_send_recv, 2, MAXN + 1);
  tcase_add_loop_test(tp, test_send_first, 2, 5);
  tcase_add_test(tp, test_solo);
  suite_add_tcase(s, tp);
  tcase_add_checked_fixture(tf, setup, teardown);
  tcase_set_timeout(tf, 60);
  tcase_add_test(tf, test_killed_rank);
  tcase_add_test(tf, test_rank_left);
  tcase_add_test(tf, test_no_show);
  tcase_add_test(tf, test_unlinked);
  tcase_add_test(tf, test_sweep_stale);
  tcase_add_test(tf, test_dead_rank0_unlinked);
  tcase_add_test(tf, test_early_exit);
  suite_add_tcase(s, tf);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(pg_shm_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
