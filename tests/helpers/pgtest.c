/* pgtest.c -- a libpg worker for the integration tests: run under cdrun
 * (or with RANK/WORLD_SIZE/MASTER_* set by hand), it checks collectives
 * against a serial reference computed locally, since every rank can
 * generate every rank's input.
 *
 *   pgtest matrix [quick]   every collective x dtype x op x size, in place
 *                           and out of place; all_to_all(_v), gather and
 *                           scatter synchronous and async
 *   pgtest async            several operations in flight, waited out of
 *                           order, overlapping the caller's computation
 *   pgtest store            the group's store across ranks
 *   pgtest sendrecv         point to point with tags
 *   pgtest exchange         pg_group_start/end: every rank sends 1 MiB to
 *                           both neighbours and receives from both, in
 *                           one group (no rank receives first)
 *   pgtest groups           sub-groups: a 2D grid (2 or 3 columns), rows by
 *                           pg_split, columns by pg_new_group, all-reduces
 *                           in a row and a column at once (two threads,
 *                           then interleaved async), per-group store keys
 *   pgtest halfavg          f16/bf16 reductions accumulate in f32 (pg.h):
 *                           an f16 AVG of 65504 is 65504, not +inf
 *   pgtest hold DIR         DIR/pid.<rank>, DIR/token.<rank> (the length
 *                           of CDRUN_JOB_TOKEN), rank 0 DIR/master
 *                           ("addr port"); then waits for DIR/release,
 *                           checks no stranger's pg/exit key is in the
 *                           store, and all-reduces (t_pg_store_auth.sh)
 *   pgtest flooded DIR      DIR/ready.<rank> once the group is up, then
 *                           waits for DIR/go (a flood of strangers'
 *                           connections started meanwhile) and runs
 *                           sendrecv (t_pg_p2p_flood.sh)
 *   pgtest flood_work DIR K the legitimate work of scripts/bench/abuse's
 *                           libpg floods: K fresh handshakes with the
 *                           group's store (CDRUN_LIVE_STORE in live mode,
 *                           else MASTER_ADDR:MASTER_PORT), each with a set
 *                           and a get, then all-reduces over the mesh;
 *                           DIR/done.<rank> says "handshakes=K failed=F
 *                           hwm_kb=N", then it waits for DIR/end
 *   pgtest victim R DIR     rank R SIGKILLs itself in the middle of a
 *                           stream of all-reduces; the others must get an
 *                           error (written to DIR/err.<rank>), not hang
 *
 * Exit status 0 when every check passed; details on stderr otherwise. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pg.h"
#include "pg_internal.h"

static int rank, world;
static long checks, failures;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    checks++;                                                         \
    if (!(cond)) {                                                    \
      failures++;                                                     \
      if (failures <= 20) {                                           \
        fprintf(stderr, "pgtest rank %d: ", rank);                    \
        fprintf(stderr, __VA_ARGS__);                                 \
        fputc('\n', stderr);                                          \
      }                                                               \
    }                                                                 \
  } while (0)

static const char *const dtype_names[] = {
  "f32", "f64", "f16", "bf16", "i32", "i64", "u8",
};
static const char *const op_names[] = { "sum", "avg", "min", "max", "prod" };

/* The input value of element i on rank r: small numbers whose sums and
 * products are exact in every dtype, so any reduction order gives the
 * same bits. */
static double input_value(int r, size_t i, pg_op op, pg_dtype t)
{
  static const double prod_vals[] = { 1, 2, 1, 0.5, 1, -1 };
  unsigned h = (unsigned)(r * 7919 + (int)(i % 1009) * 104729);

  if (op == PG_PROD) {
    if (t == PG_U8 || t == PG_I32 || t == PG_I64)
      return (h % 3 == 0) ? 2 : 1;
    return prod_vals[h % 6];
  }
  if (t == PG_U8)
    return (double)(h % 5);
  if (t == PG_I32 || t == PG_I64)
    return (double)((int)(h % 41) - 20);
  return (double)((int)(h % 33) - 16) * 0.25;
}

static void store_value(void *buf, size_t i, pg_dtype t, double v)
{
  switch (t) {
  case PG_F32: ((float *)buf)[i] = (float)v; break;
  case PG_F64: ((double *)buf)[i] = v; break;
  case PG_F16: ((uint16_t *)buf)[i] = pg__f32_to_f16((float)v); break;
  case PG_BF16: ((uint16_t *)buf)[i] = pg__f32_to_bf16((float)v); break;
  case PG_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case PG_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case PG_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  default: break;
  }
}

static double load_value(const void *buf, size_t i, pg_dtype t)
{
  switch (t) {
  case PG_F32: return ((const float *)buf)[i];
  case PG_F64: return ((const double *)buf)[i];
  case PG_F16: return pg__f16_to_f32(((const uint16_t *)buf)[i]);
  case PG_BF16: return pg__bf16_to_f32(((const uint16_t *)buf)[i]);
  case PG_I32: return ((const int32_t *)buf)[i];
  case PG_I64: return (double)((const int64_t *)buf)[i];
  case PG_U8: return ((const uint8_t *)buf)[i];
  default: return 0;
  }
}

static void fill_input(void *buf, int r, size_t count, pg_op op, pg_dtype t,
                       size_t salt)
{
  size_t i;

  for (i = 0; i < count; i++)
    store_value(buf, i, t, input_value(r, i + salt, op, t));
}

/* The reduction of element i over ranks, in the dtype's arithmetic. */
static double expected(size_t i, pg_op op, pg_dtype t, size_t salt)
{
  double acc = input_value(0, i + salt, op, t), v;
  int r;

  for (r = 1; r < world; r++) {
    v = input_value(r, i + salt, op, t);
    switch (op) {
    case PG_SUM: case PG_AVG: acc += v; break;
    case PG_MIN: acc = v < acc ? v : acc; break;
    case PG_MAX: acc = v > acc ? v : acc; break;
    case PG_PROD: acc *= v; break;
    default: break;
    }
  }
  if (t == PG_U8 && (op == PG_SUM || op == PG_PROD || op == PG_AVG))
    acc = (double)((uint8_t)(int64_t)acc);   /* wraps like unsigned */
  if (op == PG_AVG) {
    if (t == PG_I32 || t == PG_I64 || t == PG_U8)
      acc = trunc(acc / world);
    else
      acc /= world;
  }
  return acc;
}

static bool close_enough(double got, double want, pg_dtype t, pg_op op)
{
  double tol = 0;

  if (op == PG_AVG && (t == PG_F16 || t == PG_BF16))
    tol = fabs(want) * (t == PG_BF16 ? 1e-2 : 2e-3) + 1e-3;
  else if (op == PG_AVG && (t == PG_F32 || t == PG_F64))
    tol = fabs(want) * 1e-6 + 1e-9;
  return fabs(got - want) <= tol;
}

static void check_result(const char *what, const void *buf, size_t count,
                         pg_dtype t, pg_op op, size_t salt)
{
  size_t i;
  double got, want;

  for (i = 0; i < count; i++) {
    got = load_value(buf, i, t);
    want = expected(i, op, t, salt);
    if (!close_enough(got, want, t, op)) {
      CHECK(0, "%s %s %s count %zu: element %zu is %g, expected %g", what,
            dtype_names[t], op_names[op], count, i, got, want);
      return;
    }
  }
  checks++;
}

#define TRY(call)                                                     \
  do {                                                                \
    int err_ = (call);                                                \
    if (err_) {                                                       \
      fprintf(stderr, "pgtest rank %d: %s: %s (%s)\n", rank, #call,   \
              pg_strerror(err_), pg_last_error());                    \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

static void one_reduction_case(pg_group *g, pg_dtype t, pg_op op,
                               size_t count, bool in_place)
{
  size_t es = pg_dtype_size(t), n = (size_t)world, i, r;
  size_t bytes = count * es + 1;
  unsigned char *send = malloc(bytes * n), *recv = malloc(bytes * n);
  unsigned char *tmp = malloc(bytes * n);
  int root = (int)(count % n);

  /* all_reduce */
  fill_input(send, rank, count, op, t, 0);
  if (in_place) {
    TRY(pg_all_reduce(g, send, send, count, t, op));
    check_result("all_reduce(in place)", send, count, t, op, 0);
  } else {
    memset(recv, 0xAB, bytes);
    TRY(pg_all_reduce(g, send, recv, count, t, op));
    check_result("all_reduce", recv, count, t, op, 0);
  }

  /* reduce to root */
  fill_input(send, rank, count, op, t, 0);
  memset(recv, 0xAB, bytes);
  TRY(pg_reduce(g, send, in_place ? send : recv, count, t, op, root));
  if (rank == root)
    check_result("reduce", in_place ? send : recv, count, t, op, 0);

  /* reduce_scatter: block b of rank r's input is the input at salt b *
   * count, so block b's expected value is expected(i, salt = b*count). */
  for (r = 0; r < n; r++)
    fill_input(send + r * count * es, rank, count, op, t, r * count);
  if (in_place) {
    TRY(pg_reduce_scatter(g, send, send + (size_t)rank * count * es, count,
                          t, op));
    check_result("reduce_scatter(in place)",
                 send + (size_t)rank * count * es, count, t, op,
                 (size_t)rank * count);
  } else {
    TRY(pg_reduce_scatter(g, send, recv, count, t, op));
    check_result("reduce_scatter", recv, count, t, op,
                 (size_t)rank * count);
  }

  /* bitwise agreement of all_reduce results across ranks */
  if (op == PG_SUM && count) {
    fill_input(send, rank, count, op, t, 0);
    TRY(pg_all_reduce(g, send, recv, count, t, op));
    TRY(pg_all_gather(g, recv, tmp, count, t));
    for (i = 1; i < n; i++)
      CHECK(memcmp(tmp, tmp + i * count * es, count * es) == 0,
            "all_reduce %s count %zu: rank %zu's result differs from rank "
            "0's", dtype_names[t], count, i);
  }
  free(send);
  free(recv);
  free(tmp);
}

/* The value of element i of the block that rank `from` sends rank `to`. */
static double block_value(int from, int to, size_t i, pg_dtype t)
{
  return input_value(from, i + (size_t)to * 131, PG_SUM, t);
}

static void fill_block(void *buf, int from, int to, size_t count, pg_dtype t)
{
  size_t i;

  for (i = 0; i < count; i++)
    store_value(buf, i, t, block_value(from, to, i, t));
}

static bool block_ok(const void *buf, int from, int to, size_t count,
                     pg_dtype t)
{
  size_t i;

  for (i = 0; i < count; i++)
    if (load_value(buf, i, t) != block_value(from, to, i, t))
      return false;
  return true;
}

/* all_to_all_v's size of the block from rank `from` to rank `to`:
 * 0..count, different for every pair. */
static size_t vcount(int from, int to, size_t count)
{
  return count ? ((size_t)from * 3 + (size_t)to * 5 + count) % (count + 1)
               : 0;
}

/* Waits for w when it is an async call's (async = the in_place pass). */
static void finish_async(pg_work *w)
{
  if (w) {
    TRY(pg_work_wait(w, 120));
    pg_work_free(w);
  }
}

/* all_to_all (equal and vector sizes), gather and scatter: synchronous
 * on the out-of-place pass, async (and gather/scatter in place) on the
 * other. */
static void composed_case(pg_group *g, pg_dtype t, size_t count,
                          bool async)
{
  size_t es = pg_dtype_size(t), n = (size_t)world, r, off;
  size_t *sc = calloc(n, sizeof *sc), *rc = calloc(n, sizeof *rc);
  size_t *sd = calloc(n, sizeof *sd), *rd = calloc(n, sizeof *rd);
  unsigned char *a = malloc(count * es * n + 1);
  unsigned char *b = malloc(count * es * n + 1);
  pg_work *w = NULL, **wp = async ? &w : NULL;
  int root = (int)((count + 2) % n);
  bool ok;

  /* all_to_all */
  for (r = 0; r < n; r++)
    fill_block(a + r * count * es, rank, (int)r, count, t);
  memset(b, 0x5A, count * es * n + 1);
  TRY(async ? pg_all_to_all_async(g, a, b, count, t, wp)
            : pg_all_to_all(g, a, b, count, t));
  finish_async(w);
  w = NULL;
  for (ok = true, r = 0; r < n && ok; r++)
    ok = block_ok(b + r * count * es, (int)r, rank, count, t);
  CHECK(ok, "all_to_all%s %s count %zu: block %zu wrong",
        async ? "(async)" : "", dtype_names[t], count, r - 1);

  /* all_to_all_v: blocks of different sizes; the receive side with
   * explicit displacements in reverse rank order, the send side packed */
  for (off = 0, r = 0; r < n; r++) {
    sc[r] = vcount(rank, (int)r, count);
    fill_block(a + off * es, rank, (int)r, sc[r], t);
    off += sc[r];
  }
  for (off = 0, r = n; r-- > 0;) {
    rc[r] = vcount((int)r, rank, count);
    rd[r] = off;
    off += rc[r];
  }
  memset(b, 0x5A, count * es * n + 1);
  TRY(async ? pg_all_to_all_v_async(g, a, sc, NULL, b, rc, rd, t, wp)
            : pg_all_to_all_v(g, a, sc, NULL, b, rc, rd, t));
  finish_async(w);
  w = NULL;
  for (ok = true, r = 0; r < n && ok; r++)
    ok = block_ok(b + rd[r] * es, (int)r, rank, rc[r], t);
  CHECK(ok, "all_to_all_v%s %s count %zu: block %zu wrong",
        async ? "(async)" : "", dtype_names[t], count, r - 1);

  /* gather: in place on the async pass */
  memset(b, 0x5A, count * es * n + 1);
  if (async && rank == root) {
    fill_block(b + (size_t)root * count * es, rank, root, count, t);
    TRY(pg_gather_async(g, b + (size_t)root * count * es, b, count, t, root,
                        wp));
  } else {
    fill_block(a, rank, root, count, t);
    TRY(async ? pg_gather_async(g, a, rank == root ? b : NULL, count, t,
                                root, wp)
              : pg_gather(g, a, rank == root ? b : NULL, count, t, root));
  }
  finish_async(w);
  w = NULL;
  for (ok = true, r = 0; rank == root && r < n && ok; r++)
    ok = block_ok(b + r * count * es, (int)r, root, count, t);
  CHECK(ok, "gather%s %s count %zu to %d: block %zu wrong",
        async ? "(async, in place)" : "", dtype_names[t], count, root,
        r - 1);

  /* scatter: in place on the async pass */
  for (r = 0; r < n; r++)
    fill_block(a + r * count * es, root, (int)r, count, t);
  memset(b, 0x5A, count * es + 1);
  if (async && rank == root)
    TRY(pg_scatter_async(g, a, a + (size_t)root * count * es, count, t, root,
                         wp));
  else
    TRY(async ? pg_scatter_async(g, rank == root ? a : NULL, b, count, t,
                                 root, wp)
              : pg_scatter(g, rank == root ? a : NULL, b, count, t, root));
  finish_async(w);
  ok = block_ok(async && rank == root ? a + (size_t)root * count * es : b,
                root, rank, count, t);
  CHECK(ok, "scatter%s %s count %zu from %d: wrong data",
        async ? "(async, in place)" : "", dtype_names[t], count, root);
  if (count == 1 && t == PG_F32 && !async) {
    /* Bad input: a clear error, no communication. */
    CHECK(pg_all_to_all(g, a, a, 1, t) == -EINVAL,
          "an in-place all_to_all was accepted");
    CHECK(pg_gather(g, a, b, 1, t, world) == -EINVAL,
          "gather to root %d was accepted", world);
    CHECK(pg_send(g, a, 1, t, (rank + 1) % world, INT_MIN) == -EINVAL,
          "a send with libpg's own tag was accepted");
  }
  free(sc);
  free(rc);
  free(sd);
  free(rd);
  free(a);
  free(b);
}

static void one_data_case(pg_group *g, pg_dtype t, size_t count,
                          bool in_place)
{
  size_t es = pg_dtype_size(t), n = (size_t)world, r, i;
  unsigned char *buf = malloc(count * es * n + 1);
  unsigned char *out = malloc(count * es * n + 1);
  int root = (int)((count + 1) % n);
  bool ok;

  /* broadcast */
  if (rank == root)
    fill_input(buf, root, count, PG_SUM, t, 7);
  else
    memset(buf, 0x5A, count * es + 1);
  TRY(pg_broadcast(g, buf, count, t, root));
  ok = true;
  for (i = 0; i < count && ok; i++)
    ok = load_value(buf, i, t) == input_value(root, i + 7, PG_SUM, t);
  CHECK(ok, "broadcast %s count %zu from %d: wrong data", dtype_names[t],
        count, root);

  /* all_gather */
  if (in_place) {
    fill_input(out + (size_t)rank * count * es, rank, count, PG_SUM, t, 3);
    TRY(pg_all_gather(g, out + (size_t)rank * count * es, out, count, t));
  } else {
    fill_input(buf, rank, count, PG_SUM, t, 3);
    TRY(pg_all_gather(g, buf, out, count, t));
  }
  ok = true;
  for (r = 0; r < n && ok; r++)
    for (i = 0; i < count && ok; i++)
      ok = load_value(out + r * count * es, i, t) ==
           input_value((int)r, i + 3, PG_SUM, t);
  CHECK(ok, "all_gather%s %s count %zu: wrong data",
        in_place ? "(in place)" : "", dtype_names[t], count);
  free(buf);
  free(out);
  composed_case(g, t, count, in_place);
}

static int mode_matrix(pg_group *g, bool quick)
{
  static const size_t sizes[] = { 0, 1, 7, 1000, 65537 };
  size_t nsizes = quick ? 4 : sizeof sizes / sizeof sizes[0], s;
  int t, op, ip;

  for (t = 0; t < PG_DTYPE_COUNT; t++)
    for (s = 0; s < nsizes; s++)
      for (ip = 0; ip < 2; ip++) {
        for (op = 0; op < PG_OP_COUNT; op++)
          one_reduction_case(g, (pg_dtype)t, (pg_op)op, sizes[s], ip);
        one_data_case(g, (pg_dtype)t, sizes[s], ip);
      }
  /* One large message through the pipelined paths. */
  one_reduction_case(g, PG_F32, PG_SUM, (1u << 20) + 3, false);
  one_data_case(g, PG_F32, (1u << 20) + 3, false);
  TRY(pg_barrier(g));
  return 0;
}

static int mode_async(pg_group *g)
{
  enum { N = 6 };
  size_t count = 1 << 16, i;
  float *bufs[N];
  pg_work *w[N];
  volatile double sink = 0;
  bool done;
  int k;

  for (k = 0; k < N; k++) {
    bufs[k] = malloc(count * sizeof(float));
    fill_input(bufs[k], rank, count, PG_SUM, PG_F32, (size_t)k);
    TRY(pg_all_reduce_async(g, bufs[k], bufs[k], count, PG_F32, PG_SUM,
                            &w[k]));
  }
  /* The caller computes while the operations run. */
  for (i = 0; i < 2000000; i++)
    sink += (double)i * 1e-9;
  /* Waits out of order: the last first. */
  for (k = N - 1; k >= 0; k--) {
    TRY(pg_work_wait(w[k], 60));
    TRY(pg_work_test(w[k], &done));
    CHECK(done, "work %d not done after wait", k);
    check_result("async all_reduce", bufs[k], count, PG_F32, PG_SUM,
                 (size_t)k);
    pg_work_free(w[k]);
    free(bufs[k]);
  }
  /* A handle freed before completion completes on its own. */
  bufs[0] = malloc(count * sizeof(float));
  fill_input(bufs[0], rank, count, PG_SUM, PG_F32, 0);
  TRY(pg_all_reduce_async(g, bufs[0], bufs[0], count, PG_F32, PG_SUM,
                          &w[0]));
  pg_work_free(w[0]);
  TRY(pg_barrier(g));         /* runs after it, in issue order */
  check_result("detached all_reduce", bufs[0], count, PG_F32, PG_SUM, 0);
  free(bufs[0]);
  return 0;
}

static int mode_store(pg_group *g)
{
  pg_store *s = pg_group_store(g);
  char key[64];
  void *v;
  size_t len;
  int64_t n;
  bool swapped;

  TRY(pg_store_add(s, "t/counter", 1, &n));
  TRY(pg_barrier(g));
  TRY(pg_store_add(s, "t/counter", 0, &n));
  CHECK(n == world, "store counter %lld, expected %d", (long long)n, world);
  snprintf(key, sizeof key, "t/from/%d", rank);
  TRY(pg_store_set(s, key, &rank, sizeof rank));
  snprintf(key, sizeof key, "t/from/%d", (rank + 1) % world);
  TRY(pg_store_get(s, key, 30, &v, &len));
  CHECK(len == sizeof(int) && *(int *)v == (rank + 1) % world,
        "store get of a neighbour's key");
  free(v);
  /* Exactly one rank wins a compare-and-set on an absent key. */
  TRY(pg_store_compare_set(s, "t/leader", NULL, 0, &rank, sizeof rank,
                           &v, &len, &swapped));
  free(v);
  TRY(pg_all_reduce(g, &(int){ swapped }, &n, 1, PG_I32, PG_SUM));
  CHECK((int)n == 1, "%d ranks won the compare_set", (int)n);
  CHECK(pg_store_get(s, "t/absent", 0, &v, &len) == -ENOENT,
        "get of an absent key without waiting");
  CHECK(pg_store_get(s, "t/absent", 0.2, &v, &len) == -ETIMEDOUT,
        "get of an absent key with a 0.2 s timeout");
  TRY(pg_barrier(g));
  return 0;
}

static int mode_sendrecv(pg_group *g)
{
  int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  size_t count = 100003, i;
  int32_t *a = malloc(count * 4), *b = malloc(count * 4);
  int32_t small = rank * 10, got = -1;

  if (world < 2)
    return 0;
  for (i = 0; i < count; i++)
    a[i] = (int32_t)(rank * 1000003 + (int)i);
  /* Even ranks send first, odd ranks receive first: no deadlock. */
  if (rank % 2 == 0) {
    TRY(pg_send(g, a, count, PG_I32, next, 5));
    TRY(pg_send(g, &small, 1, PG_I32, next, 6));
    TRY(pg_recv(g, b, count, PG_I32, prev, 5));
    TRY(pg_recv(g, &got, 1, PG_I32, prev, 6));
  } else {
    TRY(pg_recv(g, b, count, PG_I32, prev, 5));
    TRY(pg_recv(g, &got, 1, PG_I32, prev, 6));
    TRY(pg_send(g, a, count, PG_I32, next, 5));
    TRY(pg_send(g, &small, 1, PG_I32, next, 6));
  }
  for (i = 0; i < count; i++)
    if (b[i] != (int32_t)(prev * 1000003 + (int)i))
      break;
  CHECK(i == count, "recv from %d: element %zu wrong", prev, i);
  CHECK(got == prev * 10, "tagged small message: got %d", got);
  free(a);
  free(b);
  TRY(pg_barrier(g));
  return 0;
}

/* Rank r's input for the half-precision checks: f16 65504 everywhere
 * (any f16 partial sum overflows); bf16 1 on rank 0 and 2^-8 elsewhere
 * (1 + 2^-8 rounds back to 1 in bf16, so per-step rounding loses every
 * small term). */
static float half_input(pg_dtype t, int r)
{
  return t == PG_F16 ? 65504.0f : r == 0 ? 1.0f : 0x1p-8f;
}

/* The one rounding of the exact f32 result. */
static uint16_t half_want(pg_dtype t, pg_op op)
{
  float acc = 0;
  int r;

  for (r = 0; r < world; r++)
    acc += half_input(t, r);
  if (op == PG_AVG)
    acc /= (float)world;
  return t == PG_F16 ? pg__f32_to_f16(acc) : pg__f32_to_bf16(acc);
}

static int mode_halfavg(pg_group *g)
{
  static const pg_dtype types[] = { PG_F16, PG_BF16 };
  size_t count = 1000, i, k;
  uint16_t *a = malloc(count * 2 * (size_t)world), *b = malloc(count * 2);
  uint16_t x, want;
  const char *tn;
  int op;

  for (k = 0; k < 2; k++) {
    pg_dtype t = types[k];

    tn = t == PG_F16 ? "f16" : "bf16";
    x = t == PG_F16 ? pg__f32_to_f16(half_input(t, rank))
                    : pg__f32_to_bf16(half_input(t, rank));
    for (op = PG_SUM; op <= PG_AVG; op++) {
      /* A SUM of 65504s is +inf in any precision: not checked. */
      if (t == PG_F16 && op == PG_SUM)
        continue;
      want = half_want(t, (pg_op)op);
      for (i = 0; i < count; i++)
        a[i] = x;
      TRY(pg_all_reduce(g, a, a, count, t, (pg_op)op));
      for (i = 0; i < count && a[i] == want; i++)
        ;
      CHECK(i == count, "all_reduce %s %s: element %zu is %#x, want %#x",
            tn, op_names[op], i, i < count ? a[i] : 0, want);
      for (i = 0; i < count; i++)
        a[i] = x;
      TRY(pg_reduce(g, a, b, count, t, (pg_op)op, world - 1));
      if (rank == world - 1) {
        for (i = 0; i < count && b[i] == want; i++)
          ;
        CHECK(i == count, "reduce %s %s: element %zu is %#x, want %#x", tn,
              op_names[op], i, i < count ? b[i] : 0, want);
      }
      for (i = 0; i < count * (size_t)world; i++)
        a[i] = x;
      TRY(pg_reduce_scatter(g, a, b, count, t, (pg_op)op));
      for (i = 0; i < count && b[i] == want; i++)
        ;
      CHECK(i == count, "reduce_scatter %s %s: element %zu is %#x, want "
            "%#x", tn, op_names[op], i, i < count ? b[i] : 0, want);
    }
  }
  free(a);
  free(b);
  TRY(pg_barrier(g));
  return 0;
}

static int mode_exchange(pg_group *g)
{
  int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  size_t count = 1 << 18, i;   /* 1 MiB of i32 */
  int32_t *a = malloc(count * 4), *fromprev = malloc(count * 4);
  int32_t *fromnext = malloc(count * 4);
  int round;

  if (world < 2)
    return 0;
  for (round = 0; round < 3; round++) {
    for (i = 0; i < count; i++)
      a[i] = (int32_t)(rank * 1000003 + (int)i + round);
    TRY(pg_group_start(g));
    TRY(pg_send(g, a, count, PG_I32, next, 1));
    if (world > 2)
      TRY(pg_send(g, a, count, PG_I32, prev, 2));
    TRY(pg_recv(g, fromprev, count, PG_I32, prev, 1));
    if (world > 2)
      TRY(pg_recv(g, fromnext, count, PG_I32, next, 2));
    TRY(pg_group_end(g));
    for (i = 0; i < count; i++)
      if (fromprev[i] != (int32_t)(prev * 1000003 + (int)i + round))
        break;
    CHECK(i == count, "round %d: from %d: element %zu wrong", round, prev,
          i);
    for (i = 0; world > 2 && i < count; i++)
      if (fromnext[i] != (int32_t)(next * 1000003 + (int)i + round))
        break;
    CHECK(world == 2 || i == count, "round %d: from %d: element %zu wrong",
          round, next, i);
  }
  /* Only point to point may be grouped on the CPU backends; async never. */
  TRY(pg_group_start(g));
  {
    pg_work *w = NULL;

    CHECK(pg_send_async(g, a, 1, PG_I32, next, 3, &w) == -EINVAL && !w,
          "an async send in a group was accepted");
  }
  TRY(pg_group_end(g));
  CHECK(pg_group_end(g) == -EINVAL, "pg_group_end without a start");
  free(a);
  free(fromprev);
  free(fromnext);
  TRY(pg_barrier(g));
  return 0;
}

static int mode_victim(pg_group *g, int victim, const char *dir)
{
  size_t count = 4096;
  float *buf = calloc(count, sizeof(float));
  char path[4096];
  double start = pg__now();
  FILE *f;
  int i, err = 0;

  for (i = 0; i < 1000000 && !err; i++) {
    if (rank == victim && i == 50)
      raise(SIGKILL);
    if (i == 50)
      start = pg__now();
    err = pg_all_reduce(g, buf, buf, count, PG_F32, PG_SUM);
  }
  snprintf(path, sizeof path, "%s/err.%d", dir, rank);
  f = fopen(path, "w");
  if (f) {
    fprintf(f, "%s %.3f %s\n", pg_err_name(err), pg__now() - start,
            pg_last_error());
    fclose(f);
  }
  free(buf);
  return err ? 0 : 1;
}

/* ---- sub-groups -------------------------------------------------------- */

struct ar_loop {
  pg_group *g;
  int rounds, err;
  double want;           /* the sum of the members' values, round 0 */
  bool ok;
};

/* all_reduce rounds on one group; runs on its own thread. */
static void *ar_loop_main(void *arg)
{
  struct ar_loop *l = arg;
  size_t count = 4099, i;
  float *buf = malloc(count * sizeof *buf);
  int k;

  l->ok = true;
  for (k = 0; k < l->rounds && !l->err; k++) {
    for (i = 0; i < count; i++)
      buf[i] = (float)(rank + 1) + (float)k;
    l->err = pg_all_reduce(l->g, buf, buf, count, PG_F32, PG_SUM);
    for (i = 0; i < count && !l->err; i++)
      if (buf[i] != (float)(l->want + k * pg_size(l->g)))
        l->ok = false;
  }
  free(buf);
  return NULL;
}

/* A rows x cols grid (3 columns when 3 divides the world, else 2): rows
 * by pg_split, columns by pg_new_group; all-reduces in a row and a column
 * at once from two threads, then interleaved async; a gather in a
 * column; per-group store keys; the non-member marker; bad input.  One
 * piece on purpose: a script of collective calls every rank must make in
 * the same order, read top to bottom. */
static int mode_groups(pg_group *g)
{
  int cols = world % 3 == 0 ? 3 : 2, rows = world / cols;
  int row = rank / cols, col = rank % cols, c, r, i;
  pg_group *rowg = NULL, *colg = NULL, *mine = NULL, *none = NULL;
  int members[64];
  struct ar_loop lr, lc;
  pthread_t tr, tc;
  float a[3], b[3];
  pg_work *wa, *wb;
  pg_store *s;
  void *v;
  size_t len;
  double rowsum = 0, colsum = 0;

  if (world < 4 || world % cols || world > 64) {
    fprintf(stderr, "pgtest groups: needs a world of 4..64 ranks that 2 "
            "or 3 divides\n");
    return 1;
  }
  TRY(pg_split(g, row, col, &rowg));
  for (c = 0; c < cols; c++) {
    pg_group *x = NULL;

    for (r = 0; r < rows; r++)
      members[r] = (rows - 1 - r) * cols + c;   /* any order */
    TRY(pg_new_group(g, members, rows, &x));
    CHECK((x != NULL) == (c == col), "column %d: member %d, group %p", c,
          c == col, (void *)x);
    if (c == col)
      colg = x;
  }
  /* A color < 0: no group. */
  TRY(pg_split(g, -1, 0, &none));
  CHECK(none == NULL, "pg_split with color -1 gave a group");
  CHECK(rowg && colg, "no row or column group");
  if (!rowg || !colg)
    return 1;
  CHECK(pg_rank(rowg) == col && pg_size(rowg) == cols,
        "row group: rank %d of %d, want %d of %d", pg_rank(rowg),
        pg_size(rowg), col, cols);
  CHECK(pg_rank(colg) == row && pg_size(colg) == rows,
        "column group: rank %d of %d, want %d of %d", pg_rank(colg),
        pg_size(colg), row, rows);
  for (i = 0; i < cols; i++)
    rowsum += row * cols + i + 1;
  for (i = 0; i < rows; i++)
    colsum += i * cols + col + 1;

  /* Two threads, one group each, at once. */
  lr = (struct ar_loop){ rowg, 20, 0, rowsum, false };
  lc = (struct ar_loop){ colg, 20, 0, colsum, false };
  if (pthread_create(&tr, NULL, ar_loop_main, &lr) ||
      pthread_create(&tc, NULL, ar_loop_main, &lc)) {
    fprintf(stderr, "pgtest groups: pthread_create failed\n");
    return 1;
  }
  pthread_join(tr, NULL);
  pthread_join(tc, NULL);
  CHECK(!lr.err && lr.ok, "row all_reduce from a thread: %s, %s",
        pg_err_name(lr.err), lr.ok ? "right" : "wrong sums");
  CHECK(!lc.err && lc.ok, "column all_reduce from a thread: %s, %s",
        pg_err_name(lc.err), lc.ok ? "right" : "wrong sums");

  /* Interleaved async on one thread. */
  for (i = 0; i < 3; i++)
    a[i] = b[i] = (float)(rank + 1);
  TRY(pg_all_reduce_async(rowg, a, a, 3, PG_F32, PG_SUM, &wa));
  TRY(pg_all_reduce_async(colg, b, b, 3, PG_F32, PG_SUM, &wb));
  TRY(pg_work_wait(wb, 60));
  TRY(pg_work_wait(wa, 60));
  pg_work_free(wa);
  pg_work_free(wb);
  CHECK(a[2] == (float)rowsum && b[2] == (float)colsum,
        "interleaved async: row %g (want %g), column %g (want %g)", a[2],
        rowsum, b[2], colsum);

  /* A gather in the column: roots and blocks are the group's ranks. */
  {
    float my_v = (float)rank, got[64];

    TRY(pg_gather(colg, &my_v, pg_rank(colg) == 0 ? got : NULL, 1, PG_F32,
                  0));
    for (i = 0; pg_rank(colg) == 0 && i < rows; i++)
      CHECK(got[i] == (float)(i * cols + col),
            "column gather: block %d is %g", i, got[i]);
  }

  /* Store keys are the group's: each row's rank 0 writes "who". */
  s = pg_group_store(rowg);
  if (pg_rank(rowg) == 0)
    TRY(pg_store_set(s, "who", &row, sizeof row));
  TRY(pg_store_get(s, "who", 60, &v, &len));
  CHECK(len == sizeof row && *(int *)v == row, "row %d read another "
        "group's key", row);
  free(v);
  CHECK(pg_store_get(pg_group_store(g), "who", 0, &v, &len) == -ENOENT,
        "a row group's key is visible in the world's store");

  /* Bad input. */
  CHECK(pg_new_group(g, (int[]){ 0, 0 }, 2, &mine) == -EINVAL && !mine,
        "a rank listed twice was accepted");
  CHECK(pg_new_group(g, (int[]){ world }, 1, &mine) == -EINVAL,
        "rank %d of a group of %d was accepted", world, world);
  TRY(pg_barrier(colg));
  TRY(pg_barrier(rowg));
  pg_destroy(colg);
  pg_destroy(rowg);
  TRY(pg_barrier(g));
  return 0;
}

static void write_file(const char *dir, const char *name, const char *text)
{
  char path[PATH_MAX];
  FILE *f;

  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0)
    CHECK(0, "cannot write %s", path);
}

static int mode_hold(pg_group *g, const char *dir)
{
  const char *tok = getenv("CDRUN_JOB_TOKEN");
  char name[64], text[300], path[PATH_MAX];
  int v = rank + 1, i;

  snprintf(name, sizeof name, "pid.%d", rank);
  snprintf(text, sizeof text, "%d\n", (int)getpid());
  write_file(dir, name, text);
  snprintf(name, sizeof name, "token.%d", rank);
  snprintf(text, sizeof text, "%zu\n", tok ? strlen(tok) : 0);
  write_file(dir, name, text);
  if (rank == 0) {
    snprintf(text, sizeof text, "%s %s\n", getenv("MASTER_ADDR"),
             getenv("MASTER_PORT"));
    write_file(dir, "master", text);
  }
  snprintf(path, sizeof path, "%s/release", dir);
  while (access(path, F_OK) != 0)
    usleep(20000);
  for (i = 0; i < world; i++) {
    char key[32];
    void *val = NULL;
    size_t len;

    snprintf(key, sizeof key, "pg/exit/%d", i);
    CHECK(pg_store_get(pg_group_store(g), key, 0, &val, &len) ==
          -ENOENT, "someone wrote %s before the end", key);
    free(val);
  }
  TRY(pg_all_reduce(g, &v, &v, 1, PG_I32, PG_SUM));
  CHECK(v == world * (world + 1) / 2, "all-reduce gave %d", v);
  return 0;
}

static int mode_flooded(pg_group *g, const char *dir)
{
  char name[64], path[PATH_MAX];

  snprintf(name, sizeof name, "ready.%d", rank);
  write_file(dir, name, "1\n");
  snprintf(path, sizeof path, "%s/go", dir);
  while (access(path, F_OK) != 0)
    usleep(20000);
  return mode_sendrecv(g);
}

/* The store endpoint a worker's own connections go to: the live store in
 * live mode, else rank 0's. */
static void store_endpoint(char *host, size_t hlen, int *port)
{
  const char *live = getenv("CDRUN_LIVE_STORE");
  const char *colon;

  if (live && (colon = strrchr(live, ':'))) {
    snprintf(host, hlen, "%.*s", (int)(colon - live), live);
    *port = atoi(colon + 1);
    return;
  }
  snprintf(host, hlen, "%s", getenv("MASTER_ADDR") ? getenv("MASTER_ADDR")
                                                   : "127.0.0.1");
  *port = getenv("MASTER_PORT") ? atoi(getenv("MASTER_PORT")) : 0;
}

static long self_hwm_kb(void)
{
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;

  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld", &kb) == 1)
      break;
  if (f)
    fclose(f);
  return kb;
}

static int mode_flood_work(pg_group *g, const char *dir, int k)
{
  const char *token = getenv("CDRUN_JOB_TOKEN");
  char host[256], key[64], name[64], text[128], path[PATH_MAX];
  int port, i, failed = 0, spins;
  float x[1024];

  store_endpoint(host, sizeof host, &port);
  for (i = 0; i < k; i++) {
    pg_store *s;
    void *v = NULL;
    size_t len = 0;
    int err = pg_store_connect_auth(host, port, 60, token, &s);

    if (err) {
      fprintf(stderr, "pgtest rank %d: handshake %d with %s:%d: %s\n",
              rank, i, host, port, pg_last_error());
      failed++;
      continue;
    }
    snprintf(key, sizeof key, "flood/%d/%d", rank, i);
    err = pg_store_set(s, key, &i, sizeof i);
    if (!err)
      err = pg_store_get(s, key, 30, &v, &len);
    if (err || len != sizeof i || *(int *)v != i) {
      fprintf(stderr, "pgtest rank %d: set/get %d: %s\n", rank, i,
              err ? pg_last_error() : "wrong value");
      failed++;
    }
    free(v);
    pg_store_close(s);
  }
  for (i = 0; i < 20; i++) {
    for (size_t j = 0; j < 1024; j++)
      x[j] = (float)(rank + 1);
    TRY(pg_all_reduce(g, x, x, 1024, PG_F32, PG_SUM));
    CHECK(x[0] == (float)world * (world + 1) / 2, "all-reduce %d: %g", i,
          x[0]);
  }
  TRY(pg_barrier(g));
  CHECK(failed == 0, "%d of %d store handshakes failed", failed, k);
  snprintf(name, sizeof name, "done.%d", rank);
  snprintf(text, sizeof text, "handshakes=%d failed=%d hwm_kb=%ld\n", k,
           failed, self_hwm_kb());
  write_file(dir, name, text);
  snprintf(path, sizeof path, "%s/end", dir);
  for (spins = 0; access(path, F_OK) != 0 && spins < 6000; spins++)
    usleep(20000);
  return 0;
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "";
  pg_group *g;
  int rc = 2, err;

  err = pg_init(NULL, &g);
  if (err) {
    fprintf(stderr, "pgtest: pg_init: %s: %s\n", pg_strerror(err),
            pg_last_error());
    return 1;
  }
  rank = pg_rank(g);
  world = pg_size(g);
  if (strcmp(mode, "matrix") == 0)
    rc = mode_matrix(g, argc > 2 && strcmp(argv[2], "quick") == 0);
  else if (strcmp(mode, "async") == 0)
    rc = mode_async(g);
  else if (strcmp(mode, "store") == 0)
    rc = mode_store(g);
  else if (strcmp(mode, "sendrecv") == 0)
    rc = mode_sendrecv(g);
  else if (strcmp(mode, "exchange") == 0)
    rc = mode_exchange(g);
  else if (strcmp(mode, "groups") == 0)
    rc = mode_groups(g);
  else if (strcmp(mode, "halfavg") == 0)
    rc = mode_halfavg(g);
  else if (strcmp(mode, "hold") == 0 && argc == 3)
    rc = mode_hold(g, argv[2]);
  else if (strcmp(mode, "flooded") == 0 && argc == 3)
    rc = mode_flooded(g, argv[2]);
  else if (strcmp(mode, "flood_work") == 0 && argc == 4)
    rc = mode_flood_work(g, argv[2], atoi(argv[3]));
  else if (strcmp(mode, "victim") == 0 && argc == 4)
    rc = mode_victim(g, atoi(argv[2]), argv[3]);
  else
    fprintf(stderr, "pgtest: unknown mode '%s'\n", mode);
  if (rc == 0 && failures)
    rc = 1;
  if (rank == 0 || failures)
    fprintf(stderr, "pgtest %s: rank %d of %d (%s): %ld checks, %ld "
            "failed\n", mode, rank, world, pg_backend_name(g), checks,
            failures);
  if (strcmp(mode, "victim") != 0)
    pg_destroy(g);
  return rc;
}
