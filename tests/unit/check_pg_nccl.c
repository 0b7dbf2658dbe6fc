/* check_pg_nccl.c -- unit tests for libpg's NCCL backend (libpg/nccl/). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pg_internal.h"

#ifdef PG_WITH_NCCL
#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#endif

/* Defined (1) by the fake CUDA runtime (tests/fakecuda/): the tests that
 * need its hooks (injected failures, a chosen device count) run only
 * there. */
extern int fakecuda_is_fake __attribute__((weak));
#define fakecuda_is_fake (&fakecuda_is_fake != NULL)

/* The fake's accounting (tests/fakecuda/fake.h): communicators, streams
 * and events left; every rank checks it after its last destroy. */
extern int fake_leaks(char *why, size_t len) __attribute__((weak));
extern unsigned fake_contexts(void) __attribute__((weak));

/* Devices visible to CUDA, counted in a child: a process that has
 * initialized CUDA cannot use it in children it forks, and the rank
 * tests fork one child per GPU.  0 when libpg has no NCCL. */
static int probe_devices(void)
{
#ifdef PG_WITH_NCCL
  pid_t pid;
  int st, n = 0;

  pid = fork();
  if (pid == 0) {
    if (cudaGetDeviceCount(&n) != cudaSuccess)
      n = 0;
    _exit(n > 100 ? 100 : n);
  }
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
    return 0;
  return WEXITSTATUS(st);
#else
  return 0;
#endif
}

START_TEST(test_built_matches_build)
{
#ifdef PG_WITH_NCCL
  ck_assert_msg(pg__nccl_built(), "compiled with PG_WITH_NCCL, but libpg "
                "says its NCCL backend is not built");
#else
  ck_assert_msg(!pg__nccl_built(), "libpg has NCCL but this test was "
                "compiled without it: build it with $(PG_NCCL_CFLAGS)");
#endif
}
END_TEST

static struct pg__setup setup1(const int *ranks, int n, int me, int dev,
                               double timeout)
{
  struct pg__setup s;

  memset(&s, 0, sizeof s);
  s.ns = "t/nccl/";
  s.ranks = ranks;
  s.n = n;
  s.me = me;
  s.timeout = timeout;
  s.device = dev;
  return s;
}

/* Without a GPU (or NCCL) create fails cleanly and says why; with one, a
 * device that does not exist is -ENODEV too. */
START_TEST(test_create_without_device)
{
  static const int ranks[] = { 0 };
  int ndev = probe_devices();
  struct pg__setup s = setup1(ranks, 1, 0, -1, 5);
  struct pg__comm dummy, *c = &dummy;
  int err;

  if (ndev > 0)
    s.device = ndev;
  pg__fail(0, "%s", "");
  err = pg__nccl_create(&s, &c);
  ck_assert_ptr_null(c);
  ck_assert_str_ne(pg_last_error(), "");
  if (!pg__nccl_built()) {
    ck_assert_int_eq(err, -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(pg_last_error(), "without NCCL"));
  } else if (ndev == 0) {
    ck_assert_msg(err == -ENODEV, "got %d (%s)", err, pg_last_error());
    ck_assert_ptr_nonnull(strstr(pg_last_error(), "no CUDA device"));
  } else {
    ck_assert_msg(err == -ENODEV, "got %d (%s)", err, pg_last_error());
  }
}
END_TEST

START_TEST(test_device_rule)
{
  ck_assert_int_eq(pg__pick_device(2, 5, 4), 2);   /* explicit */
  ck_assert_int_eq(pg__pick_device(-1, 5, 1), 0);  /* one visible */
  ck_assert_int_eq(pg__pick_device(-1, 1, 1), 0);
  ck_assert_int_eq(pg__pick_device(-1, 5, 4), 1);  /* local rank mod n */
  ck_assert_int_eq(pg__pick_device(-1, 3, 8), 3);
  ck_assert_int_eq(pg__pick_device(-1, -1, 8), 0);
}
END_TEST

START_TEST(test_create_bad_member)
{
  static const int ranks[] = { 0, 1 };
  struct pg__setup s = setup1(ranks, 2, 2, -1, 5);
  struct pg__comm *c = NULL;
  int err = pg__nccl_create(&s, &c);

  ck_assert_ptr_null(c);
  ck_assert_int_eq(err, pg__nccl_built() ? -EINVAL : -ENOTSUP);
}
END_TEST

#ifdef PG_WITH_NCCL

/* ---- host reference --------------------------------------------------- */

static uint16_t f32_to_f16(float f)
{
  uint32_t x, sign, mant, h, rem, half;
  int32_t exp;
  int shift;

  memcpy(&x, &f, sizeof x);
  sign = (x >> 16) & 0x8000;
  exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff)
    return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31)
    return (uint16_t)(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10)
      return (uint16_t)sign;
    mant |= 0x800000;
    shift = 14 - exp;
    h = mant >> shift;
    rem = mant & ((1u << shift) - 1);
    half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1)))
      h++;
    return (uint16_t)(sign | h);
  }
  h = ((uint32_t)exp << 10) | (mant >> 13);
  rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
    h++;  /* a carry into the exponent is still right */
  return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h)
{
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, x;
  int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float f;

  if (exp == 0) {
    f = ldexpf((float)mant, -24);
    return sign ? -f : f;
  }
  if (exp == 31)
    x = sign | 0x7f800000 | ((uint32_t)mant << 13);
  else
    x = sign | ((uint32_t)(exp + 112) << 23) | ((uint32_t)mant << 13);
  memcpy(&f, &x, sizeof f);
  return f;
}

static uint16_t f32_to_bf16(float f)
{
  uint32_t x;

  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffff) > 0x7f800000)
    return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static float bf16_to_f32(uint16_t h)
{
  uint32_t x = (uint32_t)h << 16;
  float f;

  memcpy(&f, &x, sizeof f);
  return f;
}

static void put(pg_dtype t, void *buf, size_t i, double v)
{
  uint16_t h;

  switch (t) {
  case PG_F32: ((float *)buf)[i] = (float)v; break;
  case PG_F64: ((double *)buf)[i] = v; break;
  case PG_F16: h = f32_to_f16((float)v); ((uint16_t *)buf)[i] = h; break;
  case PG_BF16: h = f32_to_bf16((float)v); ((uint16_t *)buf)[i] = h; break;
  case PG_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case PG_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case PG_U8: ((uint8_t *)buf)[i] = (uint8_t)((int64_t)v & 0xff); break;
  default: break;
  }
}

static double get(pg_dtype t, const void *buf, size_t i)
{
  switch (t) {
  case PG_F32: return ((const float *)buf)[i];
  case PG_F64: return ((const double *)buf)[i];
  case PG_F16: return f16_to_f32(((const uint16_t *)buf)[i]);
  case PG_BF16: return bf16_to_f32(((const uint16_t *)buf)[i]);
  case PG_I32: return ((const int32_t *)buf)[i];
  case PG_I64: return (double)((const int64_t *)buf)[i];
  case PG_U8: return ((const uint8_t *)buf)[i];
  default: return 0;
  }
}

static bool is_int(pg_dtype t)
{
  return t == PG_I32 || t == PG_I64 || t == PG_U8;
}

/* Rank r's element idx: small integers, so every sum and product of up to
 * 8 ranks is exact in every dtype (f16, bf16 and u8 included). */
static double gen(pg_dtype t, pg_op op, int r, size_t idx, int salt)
{
  unsigned h = (unsigned)(r * 131 + salt * 17) + (unsigned)idx * 7u;

  if (op == PG_PROD)
    return t == PG_U8 ? 1 + h % 3 : (h % 3 == 2 ? -1.0 : 1.0 + h % 3);
  /* u8 minimum and maximum straddle 127/128: a signed mapping shows. */
  if (t == PG_U8 && (op == PG_MIN || op == PG_MAX))
    return 120 + h % 16;
  return t == PG_U8 ? h % 5 : (double)(int)(h % 9) - 4;
}

/* The reduction of element idx over n ranks; AVG on integers truncates
 * (pg.h). */
static double ref(pg_dtype t, pg_op op, int n, size_t idx, int salt)
{
  double acc = gen(t, op, 0, idx, salt), v;
  int r;

  for (r = 1; r < n; r++) {
    v = gen(t, op, r, idx, salt);
    switch (op) {
    case PG_SUM: case PG_AVG: acc += v; break;
    case PG_MIN: acc = v < acc ? v : acc; break;
    case PG_MAX: acc = v > acc ? v : acc; break;
    case PG_PROD: acc *= v; break;
    default: break;
    }
  }
  if (op == PG_AVG)
    acc = is_int(t) ? (double)((int64_t)acc / n) : acc / n;
  return acc;
}

/* ---- one rank --------------------------------------------------------- */

#define MAXCOUNT 65537
#define MAXRANKS 4

static const size_t sizes[] = { 0, 1, 7, 1000, MAXCOUNT };

struct rank {
  struct pg__comm *c;
  int n, me, salt, fails;
  void *dsend, *drecv;        /* device, MAXRANKS * MAXCOUNT * 8 bytes */
  unsigned char *hs, *hr;     /* host, as big */
};

/* + slack: the tests poison one byte past the largest block */
#define BUFBYTES ((size_t)MAXRANKS * MAXCOUNT * 8 + 64)

static double deadline(void)
{
  return pg__now() + 60;
}

static void report(struct rank *k, const char *what, pg_dtype t,
                   pg_op op, size_t count, const char *fmt, ...)
  __attribute__((format(printf, 6, 7)));

/* Prints the first few failures of a rank (a child: no ck_assert). */
static void report(struct rank *k, const char *what, pg_dtype t,
                   pg_op op, size_t count, const char *fmt, ...)
{
  va_list ap;

  if (++k->fails > 5)
    return;
  fprintf(stderr, "rank %d/%d: %s dtype %d op %d count %zu: ", k->me,
          k->n, what, (int)t, (int)op, count);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static void check_rc(struct rank *k, const char *what, pg_dtype t,
                     pg_op op, size_t count, int rc)
{
  if (rc != 0) {
    report(k, what, t, op, count, "rc %d (%s)", rc, pg_last_error());
  }
}

/* Note [stream model]: an op returns once enqueued.  Orders what the
 * caller does next after it: on the device (the legacy stream waits for
 * the op's fence) or, every third op, on the host. */
static int joined(struct rank *k, int rc)
{
  struct pg__fence *f;
  static unsigned turn;

  if (rc)
    return rc;
  f = k->c->ops->take_fence(k->c);
  if (!f)
    return 0;
  rc = k->c->ops->fence_wait(f, ++turn % 3 == 0, 60);
  k->c->ops->fence_free(f);
  return rc;
}

static void h2d(void *d, const void *h, size_t bytes)
{
  if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice))
    abort();
}

static void d2h(void *h, const void *d, size_t bytes)
{
  if (bytes && cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost))
    abort();
}

/* Compares element i of buf with want. */
static void expect(struct rank *k, const char *what, pg_dtype t, pg_op op,
                   size_t count, const unsigned char *buf, size_t i,
                   double want)
{
  static const double eps[PG_DTYPE_COUNT] = {
    0x1p-23, 0x1p-52, 0x1p-10, 0x1p-7, 0, 0, 0
  };
  unsigned char tmp[8];
  double got = get(t, buf, i), tol;

  /* What the dtype can hold; AVG on floats may round differently (NCCL
   * scales before summing). */
  put(t, tmp, 0, want);
  want = get(t, tmp, 0);
  tol = op == PG_AVG ? eps[t] * 8 * fmax(4, fabs(want)) : 0;
  if (!(fabs(got - want) <= tol))
    report(k, what, t, op, count, "[%zu] got %.9g, want %.9g", i, got, want);
}

static void fill(pg_dtype t, pg_op op, int r, unsigned char *h,
                 size_t first, size_t count, int salt)
{
  size_t i;

  for (i = 0; i < count; i++)
    put(t, h, i, gen(t, op, r, first + i, salt));
}

static void do_all_reduce(struct rank *k, pg_dtype t, pg_op op, size_t cnt)
{
  size_t es = pg_dtype_size(t), i;
  int inplace, rc;

  for (inplace = 0; inplace < 2; inplace++) {
    fill(t, op, k->me, k->hs, 0, cnt, k->salt);
    h2d(k->dsend, k->hs, cnt * es);
    cudaMemset(k->drecv, 0xab, cnt * es + 1);
    rc = joined(k, k->c->ops->all_reduce(k->c, k->dsend,
                                         inplace ? k->dsend : k->drecv, cnt,
                                         t, op, deadline()));
    check_rc(k, "all_reduce", t, op, cnt, rc);
    d2h(k->hr, inplace ? k->dsend : k->drecv, cnt * es);
    for (i = 0; i < cnt; i++)
      expect(k, inplace ? "all_reduce in place" : "all_reduce", t, op, cnt,
             k->hr, i, ref(t, op, k->n, i, k->salt));
  }
}

static void do_reduce(struct rank *k, pg_dtype t, pg_op op, size_t cnt)
{
  size_t es = pg_dtype_size(t), i;
  int root = k->salt % k->n, rc;

  fill(t, op, k->me, k->hs, 0, cnt, k->salt);
  h2d(k->dsend, k->hs, cnt * es);
  rc = joined(k, k->c->ops->reduce(k->c, k->dsend,
                                   k->me == root ? k->drecv : NULL, cnt, t,
                                   op, root, deadline()));
  check_rc(k, "reduce", t, op, cnt, rc);
  if (k->me != root)
    return;
  d2h(k->hr, k->drecv, cnt * es);
  for (i = 0; i < cnt; i++)
    expect(k, "reduce", t, op, cnt, k->hr, i, ref(t, op, k->n, i, k->salt));
}

/* Modes: 0 separate buffers, 1 in place as pg.h says (recv == send +
 * me * count), 2 send == recv (output in send's first block). */
static const char *const modes[] = { "", " in place", " send == recv" };

static void do_reduce_scatter(struct rank *k, pg_dtype t, pg_op op,
                              size_t cnt)
{
  size_t es = pg_dtype_size(t), i, mine = (size_t)k->me * cnt;
  char what[64];
  void *out;
  int mode, rc;

  for (mode = 0; mode < 3; mode++) {
    snprintf(what, sizeof what, "reduce_scatter%s", modes[mode]);
    out = mode == 0 ? k->drecv : mode == 1 ? (char *)k->dsend + mine * es
                                           : k->dsend;
    fill(t, op, k->me, k->hs, 0, (size_t)k->n * cnt, k->salt);
    h2d(k->dsend, k->hs, (size_t)k->n * cnt * es);
    rc = joined(k, k->c->ops->reduce_scatter(k->c, k->dsend, out, cnt, t,
                                             op, deadline()));
    check_rc(k, what, t, op, cnt, rc);
    d2h(k->hr, out, cnt * es);
    for (i = 0; i < cnt; i++)
      expect(k, what, t, op, cnt, k->hr, i,
             ref(t, op, k->n, mine + i, k->salt));
  }
}

static void do_broadcast(struct rank *k, pg_dtype t, size_t cnt)
{
  size_t es = pg_dtype_size(t), i;
  int root = (k->salt + 1) % k->n, rc;

  fill(t, PG_SUM, k->me, k->hs, 0, cnt, k->salt);
  h2d(k->dsend, k->hs, cnt * es);
  rc = joined(k, k->c->ops->broadcast(k->c, k->dsend, cnt, t, root,
                                      deadline()));
  check_rc(k, "broadcast", t, PG_SUM, cnt, rc);
  d2h(k->hr, k->dsend, cnt * es);
  for (i = 0; i < cnt; i++)
    expect(k, "broadcast", t, PG_SUM, cnt, k->hr, i,
           gen(t, PG_SUM, root, i, k->salt));
}

/* Modes as for reduce_scatter: 1 is send == recv + me * count, 2 has the
 * input in recv's first block. */
static void do_all_gather(struct rank *k, pg_dtype t, size_t cnt)
{
  size_t es = pg_dtype_size(t), i;
  char what[64];
  void *in;
  int mode, r, rc;

  for (mode = 0; mode < 3; mode++) {
    snprintf(what, sizeof what, "all_gather%s", modes[mode]);
    in = mode == 0 ? k->dsend
       : mode == 1 ? (char *)k->drecv + (size_t)k->me * cnt * es : k->drecv;
    fill(t, PG_SUM, k->me, k->hs, 0, cnt, k->salt);
    cudaMemset(k->drecv, 0xab, (size_t)k->n * cnt * es + 1);
    h2d(in, k->hs, cnt * es);
    rc = joined(k, k->c->ops->all_gather(k->c, in, k->drecv, cnt, t,
                                         deadline()));
    check_rc(k, what, t, PG_SUM, cnt, rc);
    d2h(k->hr, k->drecv, (size_t)k->n * cnt * es);
    for (r = 0; r < k->n; r++)
      for (i = 0; i < cnt; i++)
        expect(k, what, t, PG_SUM, cnt, k->hr, (size_t)r * cnt + i,
               gen(t, PG_SUM, r, i, k->salt));
  }
}

/* A ring: rank 0 sends first, the others receive first, so the blocking
 * calls cannot all wait on each other. */
static void do_send_recv(struct rank *k, pg_dtype t, size_t cnt)
{
  size_t es = pg_dtype_size(t), i;
  int next = (k->me + 1) % k->n, prev = (k->me + k->n - 1) % k->n;
  int rc1, rc2;

  if (k->n < 2)
    return;
  fill(t, PG_SUM, k->me, k->hs, 0, cnt, k->salt);
  h2d(k->dsend, k->hs, cnt * es);
  if (k->me == 0) {
    rc1 = joined(k, k->c->ops->send(k->c, k->dsend, cnt * es, next, 7,
                                    deadline()));
    rc2 = joined(k, k->c->ops->recv(k->c, k->drecv, cnt * es, prev, 7,
                                    deadline()));
  } else {
    rc2 = joined(k, k->c->ops->recv(k->c, k->drecv, cnt * es, prev, 7,
                                    deadline()));
    rc1 = joined(k, k->c->ops->send(k->c, k->dsend, cnt * es, next, 7,
                                    deadline()));
  }
  check_rc(k, "send", t, PG_SUM, cnt, rc1);
  check_rc(k, "recv", t, PG_SUM, cnt, rc2);
  d2h(k->hr, k->drecv, cnt * es);
  for (i = 0; i < cnt; i++)
    expect(k, "recv", t, PG_SUM, cnt, k->hr, i,
           gen(t, PG_SUM, prev, i, k->salt));
}

/* Count 0 must not synchronize: rank 0 alone calls every op with it, and
 * the collectives after must still match up. */
static void do_zero_alone(struct rank *k)
{
  struct pg__comm *c = k->c;
  double d = pg__now() + 1;
  int rc = 0;

  if (k->me != 0)
    return;
  rc |= c->ops->all_reduce(c, k->dsend, k->drecv, 0, PG_F32, PG_SUM, d);
  rc |= c->ops->broadcast(c, k->dsend, 0, PG_F32, 0, d);
  rc |= c->ops->reduce(c, k->dsend, k->drecv, 0, PG_F32, PG_SUM, 0, d);
  rc |= c->ops->all_gather(c, k->dsend, k->drecv, 0, PG_F32, d);
  rc |= c->ops->reduce_scatter(c, k->dsend, k->drecv, 0, PG_F32, PG_SUM,
                               d);
  if (k->n > 1) {
    rc |= c->ops->send(c, k->dsend, 0, 1, 0, d);
    rc |= c->ops->recv(c, k->drecv, 0, 1, 0, d);
  }
  check_rc(k, "count 0 alone", PG_F32, PG_SUM, 0, rc);
  /* Bad arguments fail without touching the comm. */
  rc = c->ops->broadcast(c, k->dsend, 1, PG_F32, k->n, d);
  if (rc != -EINVAL)
    report(k, "broadcast root n", PG_F32, PG_SUM, 1, "rc %d", rc);
  rc = c->ops->all_reduce(c, k->dsend, k->drecv, 1, PG_DTYPE_COUNT,
                          PG_SUM, d);
  if (rc != -EINVAL)
    report(k, "bad dtype", PG_F32, PG_SUM, 1, "rc %d", rc);
}

static int rank_collectives(const struct pg__setup *s)
{
  struct rank k;
  size_t z;
  int t, op, err;

  memset(&k, 0, sizeof k);
  k.n = s->n;
  k.me = s->me;
  err = pg__nccl_create(s, &k.c);
  if (err) {
    fprintf(stderr, "rank %d: pg__nccl_create: %d %s\n", s->me, err,
            pg_last_error());
    return 1;
  }
  if (cudaSetDevice(s->device) || cudaMalloc(&k.dsend, BUFBYTES) ||
      cudaMalloc(&k.drecv, BUFBYTES))
    abort();
  k.hs = malloc(BUFBYTES);
  k.hr = malloc(BUFBYTES);
  if (!k.hs || !k.hr)
    abort();
  do_zero_alone(&k);
  for (t = 0; t < PG_DTYPE_COUNT; t++) {
    for (z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
      for (op = 0; op < PG_OP_COUNT; op++) {
        k.salt++;
        do_all_reduce(&k, (pg_dtype)t, (pg_op)op, sizes[z]);
        do_reduce(&k, (pg_dtype)t, (pg_op)op, sizes[z]);
        do_reduce_scatter(&k, (pg_dtype)t, (pg_op)op, sizes[z]);
      }
      do_broadcast(&k, (pg_dtype)t, sizes[z]);
      do_all_gather(&k, (pg_dtype)t, sizes[z]);
      do_send_recv(&k, (pg_dtype)t, sizes[z]);
      check_rc(&k, "barrier", (pg_dtype)t, PG_SUM, 0,
               joined(&k, k.c->ops->barrier(k.c, deadline())));
    }
  }
  k.c->ops->destroy(k.c);
  cudaFree(k.dsend);
  cudaFree(k.drecv);
  free(k.hs);
  free(k.hr);
  return k.fails ? 1 : 0;
}

/* Rank 1 joins init and then never calls the collective: rank 0 must time
 * out, abort, and fail every later op. */
static int rank_op_timeout(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  void *d = NULL;
  double t0;
  int err, fails = 0;

  err = pg__nccl_create(s, &c);
  if (err) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (s->me == 1) {
    sleep(8);
    c->ops->destroy(c);
    return 0;
  }
  if (cudaSetDevice(s->device) || cudaMalloc(&d, 4096))
    abort();
  t0 = pg__now();
  /* Enqueued at once; the watchdog fails it past its deadline, naming
   * the op and its sequence number. */
  err = c->ops->all_reduce(c, d, d, 1000, PG_F32, PG_SUM, t0 + 2);
  if (err == 0) {
    struct pg__fence *f = c->ops->take_fence(c);

    err = f ? c->ops->fence_wait(f, true, 30) : -EINVAL;
    c->ops->fence_free(f);
  }
  if (err != -ETIMEDOUT || !strstr(pg_last_error(), "ncclAllReduce (#1 ") ||
      !strstr(pg_last_error(), "did not complete within")) {
    fprintf(stderr, "all_reduce: %d after %.1f s (%s)\n", err,
            pg__now() - t0, pg_last_error());
    fails++;
  }
  err = c->ops->barrier(c, pg__now() + 2);
  if (err != PG_EPEERFAIL) {
    fprintf(stderr, "barrier after abort: %d\n", err);
    fails++;
  }
  c->ops->destroy(c);
  cudaFree(d);
  return fails ? 1 : 0;
}

/* Note [stream model]: the input is written by a slow copy on a stream of
 * the caller's (pg_set_stream); the op must wait for it on the device, at
 * submit time, and the caller's stream must wait for the op (device wait)
 * before the result is copied back on it.  Nothing waits on the host. */
static int rank_stream_order(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  struct pg__fence *f;
  cudaStream_t st;
  size_t n = 4096, i;
  float *d, *h, *out;
  int err, round, fails = 0;

  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (cudaSetDevice(s->device) ||
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) ||
      cudaMalloc((void **)&d, n * sizeof *d))
    abort();
  h = malloc(n * sizeof *h);
  out = malloc(n * sizeof *out);
  c->ops->set_stream(c, st);
  for (round = 1; round <= 20; round++) {
    for (i = 0; i < n; i++)
      h[i] = (float)(round * 100 + s->me);
    if (cudaMemcpyAsync(d, h, n * sizeof *d, cudaMemcpyHostToDevice, st))
      abort();
    err = c->ops->all_reduce(c, d, d, n, PG_F32, PG_SUM, pg__now() + 60);
    f = err ? NULL : c->ops->take_fence(c);
    if (!err)
      err = c->ops->fence_wait(f, false, 60);
    c->ops->fence_free(f);
    if (cudaMemcpyAsync(out, d, n * sizeof *d, cudaMemcpyDeviceToHost, st) ||
        cudaStreamSynchronize(st))
      abort();
    for (i = 0; i < n && !err; i++)
      if (out[i] != (float)(round * 100 * s->n + s->n * (s->n - 1) / 2)) {
        fprintf(stderr, "rank %d round %d: [%zu] = %g\n", s->me, round, i,
                out[i]);
        fails++;
        break;
      }
    if (err) {
      fprintf(stderr, "rank %d: all_reduce: %s\n", s->me, pg_last_error());
      fails++;
    }
    /* The next round's copy into h must not race this round's. */
    if (cudaStreamSynchronize(st))
      abort();
  }
  c->ops->destroy(c);
  cudaStreamDestroy(st);
  cudaFree(d);
  free(h);
  free(out);
  return fails ? 1 : 0;
}

/* Both ranks send 1 MiB to each other before receiving, in a group:
 * without ncclGroupStart/End each send would wait for a receive queued
 * behind the peer's own send. */
static int rank_group_p2p(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  struct pg__fence *f;
  size_t n = 1 << 20, i;
  unsigned char *a, *b, *h;
  int peer = 1 - s->me, err;

  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (cudaSetDevice(s->device) || cudaMalloc((void **)&a, n) ||
      cudaMalloc((void **)&b, n))
    abort();
  h = malloc(n);
  for (i = 0; i < n; i++)
    h[i] = (unsigned char)(i * 7 + (size_t)s->me);
  h2d(a, h, n);
  err = c->ops->group_start(c);
  if (!err)
    err = c->ops->send(c, a, n, peer, 0, pg__now() + 60);
  if (!err)
    err = c->ops->recv(c, b, n, peer, 0, pg__now() + 60);
  if (!err)
    err = c->ops->group_end(c);
  f = err ? NULL : c->ops->take_fence(c);
  if (!err)
    err = f ? c->ops->fence_wait(f, true, 30) : -EINVAL;
  c->ops->fence_free(f);
  if (err) {
    fprintf(stderr, "rank %d: grouped exchange: %d %s\n", s->me, err,
            pg_last_error());
    return 1;
  }
  d2h(h, b, n);
  for (i = 0; i < n; i++)
    if (h[i] != (unsigned char)(i * 7 + (size_t)peer)) {
      fprintf(stderr, "rank %d: byte %zu from %d wrong\n", s->me, i, peer);
      return 1;
    }
  c->ops->destroy(c);
  cudaFree(a);
  cudaFree(b);
  free(h);
  return 0;
}

/* Note [watchdog]: rank 1's third collective fails (the fake's injected
 * async error); rank 1's watchdog aborts and publishes it, and the other
 * ranks, stuck in that collective on their GPUs, abort theirs on seeing
 * the store key: they fail with PG_EPEERFAIL naming rank 1, long before
 * the 30 s deadline. */
static int rank_failure_spreads(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  struct pg__fence *f;
  float *d;
  int i, err = 0;

  setenv("FAKENCCL_FAIL_RANK", "1", 1);
  setenv("FAKENCCL_FAIL_OP", "3", 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (cudaSetDevice(s->device) || cudaMalloc((void **)&d, 4096))
    abort();
  for (i = 0; i < 10 && !err; i++) {
    err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM, pg__now() + 30);
    f = err ? NULL : c->ops->take_fence(c);
    if (!err)
      err = f ? c->ops->fence_wait(f, true, -1) : -EINVAL;
    c->ops->fence_free(f);
  }
  c->ops->destroy(c);
  cudaFree(d);
  if (i != 3) {
    fprintf(stderr, "rank %d: op %d failed (%d: %s), expected op 3\n",
            s->me, i, err, pg_last_error());
    return 1;
  }
  if (s->me == 1 ? err == PG_ENCCL(ncclSystemError)
                 : err == PG_EPEERFAIL &&
                   strstr(pg_last_error(), "because rank 1: "))
    return 0;
  fprintf(stderr, "rank %d: got %d (%s)\n", s->me, err, pg_last_error());
  return 1;
}

/* ---- issue 23: the five bugs and the surviving mutations ------------- */

/* Takes the comm's last fence and waits for it on the host. */
static int wait_last(struct pg__comm *c, double timeout)
{
  struct pg__fence *f = c->ops->take_fence(c);
  int err;

  if (!f)
    return 0;
  err = c->ops->fence_wait(f, true, timeout);
  c->ops->fence_free(f);
  return err;
}

/* A second communicator over the same ranks (its own namespace). */
static int create_ns(const struct pg__setup *s, const char *ns,
                     struct pg__comm **out)
{
  struct pg__setup s2 = *s;

  s2.ns = ns;
  if (pg__nccl_create(&s2, out)) {
    fprintf(stderr, "rank %d: create %s: %s\n", s->me, ns, pg_last_error());
    return 1;
  }
  return 0;
}

static float *dev_floats(const struct pg__setup *s, size_t n)
{
  float *d;

  if (cudaSetDevice(s->device) || cudaMalloc((void **)&d, n * sizeof *d))
    abort();
  return d;
}

/* Bug 1: reduce_scatter with send == recv inside a group: the copy of
 * the own block to block 0 must run after the grouped operation (at
 * ncclGroupEnd), not before it. */
static int rank_group_inplace_rs(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  size_t cnt = 3000, i;
  float *d, *h;
  int r, err, fails = 0;

  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  d = dev_floats(s, (size_t)s->n * cnt);
  h = malloc((size_t)s->n * cnt * sizeof *h);
  for (i = 0; i < (size_t)s->n * cnt; i++)
    h[i] = (float)(s->me * 1000 + (int)(i % 997));
  h2d(d, h, (size_t)s->n * cnt * sizeof *h);
  err = c->ops->group_start(c);
  if (!err)
    err = c->ops->reduce_scatter(c, d, d, cnt, PG_F32, PG_SUM,
                                 pg__now() + 60);
  if (!err)
    err = c->ops->group_end(c);
  if (!err)
    err = wait_last(c, 60);
  if (err) {
    fprintf(stderr, "rank %d: grouped reduce_scatter: %s\n", s->me,
            pg_last_error());
    fails++;
  }
  d2h(h, d, cnt * sizeof *h);
  for (i = 0; i < cnt && !fails; i++) {
    float want = 0;

    for (r = 0; r < s->n; r++)
      want += (float)(r * 1000 + (int)(((size_t)s->me * cnt + i) % 997));
    if (h[i] != want) {
      fprintf(stderr, "rank %d: in-place grouped reduce_scatter [%zu] = "
              "%g, want %g\n", s->me, i, h[i], want);
      fails++;
    }
  }
  c->ops->destroy(c);
  cudaFree(d);
  free(h);
  return fails ? 1 : 0;
}

/* Bug 2: NCCL's group is the thread's.  An op on B issued inside A's
 * group runs at A's group end; its fence must not complete before. */
static int rank_group_other_comm(const struct pg__setup *s)
{
  struct pg__comm *a = NULL, *b = NULL;
  struct pg__fence *f;
  size_t n = 50000, i;
  float *d, *h;
  int err, st = 0, fails = 0;

  if (create_ns(s, "t/a/", &a) || create_ns(s, "t/b/", &b))
    return 1;
  d = dev_floats(s, n);
  h = malloc(n * sizeof *h);
  for (i = 0; i < n; i++)
    h[i] = (float)(s->me + 1);
  h2d(d, h, n * sizeof *h);
  err = a->ops->group_start(a);
  if (!err)
    err = b->ops->all_reduce(b, d, d, n, PG_F32, PG_SUM, pg__now() + 60);
  f = err ? NULL : b->ops->take_fence(b);
  if (f && (st = b->ops->fence_query(f)) != 0) {
    fprintf(stderr, "rank %d: B's op is done (%d) before A's group end "
            "launched it\n", s->me, st);
    fails++;
  }
  if (!err)
    err = a->ops->group_end(a);
  if (!err)
    err = wait_last(a, 60);
  if (!err && f)
    err = b->ops->fence_wait(f, true, 60);
  b->ops->fence_free(f);
  if (err) {
    fprintf(stderr, "rank %d: %s\n", s->me, pg_last_error());
    fails++;
  }
  d2h(h, d, n * sizeof *h);
  for (i = 0; i < n && !fails; i++)
    if (h[i] != (float)(s->n * (s->n + 1) / 2)) {
      fprintf(stderr, "rank %d: [%zu] = %g: B's wait returned before its "
              "op ran\n", s->me, i, h[i]);
      fails++;
    }
  a->ops->destroy(a);
  b->ops->destroy(b);
  cudaFree(d);
  free(h);
  return fails ? 1 : 0;
}

/* Bug 3: rank 1's failure in communicator A must bring down rank 0's
 * wait in communicator B (as ProcessGroupNCCL's async error handling),
 * not leave it to B's 20 s deadline.  With async_errors_off
 * (TORCH_NCCL_ASYNC_ERROR_HANDLING=0) it stays in A: rank 0's B times
 * out at its deadline (3 s then). */
static bool async_errors_off;

static int rank_failure_other_comm(const struct pg__setup *s)
{
  struct pg__comm *a = NULL, *b = NULL;
  double limit = async_errors_off ? 3 : 20;
  float *d;
  int err;

  if (async_errors_off)
    setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0", 1);
  setenv("FAKENCCL_FAIL_RANK", "1", 1);
  setenv("FAKENCCL_FAIL_OP", "1", 1);
  if (create_ns(s, "t/a/", &a) || create_ns(s, "t/b/", &b))
    return 1;
  d = dev_floats(s, 1024);
  if (s->me == 1)
    err = a->ops->all_reduce(a, d, d, 1024, PG_F32, PG_SUM,
                             pg__now() + limit);
  else
    err = b->ops->all_reduce(b, d, d, 1024, PG_F32, PG_SUM,
                             pg__now() + limit);
  if (!err)
    err = wait_last(s->me == 1 ? a : b, -1);
  a->ops->destroy(a);
  b->ops->destroy(b);
  cudaFree(d);
  if (s->me == 1 ? err == PG_ENCCL(ncclSystemError)
                 : err == (async_errors_off ? -ETIMEDOUT : PG_EPEERFAIL))
    return 0;
  fprintf(stderr, "rank %d: got %d (%s)\n", s->me, err, pg_last_error());
  return 1;
}

/* Bug 4: rank 0 destroys its comm with an op in flight that rank 1's
 * failure will never let finish: destroy must see the failure rank 1
 * publishes and abort, not drain for the comm's 120 s (the 10 s alarm). */
static int rank_destroy_sees_peer(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  float *d;
  int err;

  setenv("FAKENCCL_FAIL_RANK", "1", 1);
  setenv("FAKENCCL_FAIL_OP", "1", 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  d = dev_floats(s, 1024);
  err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM, pg__now() + 120);
  if (s->me == 1 && !err)
    err = wait_last(c, -1);
  alarm(10);
  c->ops->destroy(c);
  alarm(0);
  cudaFree(d);
  if (s->me == 1 && err != PG_ENCCL(ncclSystemError)) {
    fprintf(stderr, "rank 1: got %d (%s)\n", err, pg_last_error());
    return 1;
  }
  return 0;
}

/* Bug 5: CUDA graphs.  (a) An op captured on the caller's stream is not
 * watched (its events cannot be queried), and the comm stays healthy.
 * (b) With no stream set, an op during someone else's capture must not
 * use the legacy stream, and the watchdog's queries must not invalidate
 * the capture (a thread-local relaxed capture mode). */
static int rank_graph_capture(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  struct pg__fence *f;
  cudaStream_t st;
  cudaGraph_t g = NULL;
  cudaError_t e;
  float *d;
  int err, fails = 0;

  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  d = dev_floats(s, 1024);
  if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking))
    abort();
  c->ops->set_stream(c, st);
  if (cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal))
    abort();
  err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM, pg__now() + 60);
  f = err ? NULL : c->ops->take_fence(c);
  if (!err && f)
    err = c->ops->fence_wait(f, false, -1);
  e = cudaStreamEndCapture(st, &g);
  if (err || e != cudaSuccess) {
    fprintf(stderr, "captured all_reduce: %d (%s), capture: %s\n", err,
            pg_last_error(), cudaGetErrorString(e));
    fails++;
  }
  if (f && (err = c->ops->fence_wait(f, true, 30)) != 0) {
    fprintf(stderr, "a captured op was watched: %s\n", pg_last_error());
    fails++;
  }
  c->ops->fence_free(f);
  /* (b) */
  c->ops->set_stream(c, NULL);
  if (cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal))
    abort();
  err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM, pg__now() + 60);
  /* The watchdog polls the op's event meanwhile (every 50 ms). */
  usleep(300000);
  e = cudaStreamEndCapture(st, &g);
  if (!err)
    err = wait_last(c, 30);
  if (err || e != cudaSuccess) {
    fprintf(stderr, "all_reduce during a capture: %d (%s), capture: %s\n",
            err, pg_last_error(), cudaGetErrorString(e));
    fails++;
  }
  err = c->ops->barrier(c, pg__now() + 30);
  if (!err)
    err = wait_last(c, 30);
  if (err) {
    fprintf(stderr, "barrier after the captures: %s\n", pg_last_error());
    fails++;
  }
  c->ops->destroy(c);
  cudaStreamDestroy(st);
  cudaFree(d);
  return fails ? 1 : 0;
}

/* Mutation: a barrier that does not synchronize.  Rank 1 sets its key
 * late; after the barrier every rank must see every key. */
static int rank_barrier_syncs(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  char key[32];
  void *v = NULL;
  size_t len;
  int r, err, fails = 0;

  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (s->me == 1)
    usleep(300000);
  snprintf(key, sizeof key, "t/bar/%d", s->me);
  pg_store_set(s->store, key, "1", 1);
  err = c->ops->barrier(c, pg__now() + 60);
  if (!err)
    err = wait_last(c, 60);
  for (r = 0; r < s->n && !err; r++) {
    snprintf(key, sizeof key, "t/bar/%d", r);
    if (pg_store_get(s->store, key, 0, &v, &len) != 0) {
      fprintf(stderr, "rank %d left the barrier before rank %d reached "
              "it\n", s->me, r);
      fails++;
    }
    free(v);
    v = NULL;
  }
  if (err) {
    fprintf(stderr, "rank %d: barrier: %s\n", s->me, pg_last_error());
    fails++;
  }
  c->ops->destroy(c);
  return fails ? 1 : 0;
}

/* Mutation: the comm's timeout (group end's deadline) ignoring the
 * group's (3 s here, from run_ranks).  Rank 1 never joins the grouped
 * op; rank 0's watchdog must fail it at 3 s, well before its 15 s host
 * wait gives up. */
static int rank_group_timeout(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  void *v = NULL;
  size_t len;
  float *d;
  int err, fails = 0;

  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  d = dev_floats(s, 1024);
  if (s->me == 1) {
    pg_store_get(s->store, "t/gto/done", 60, &v, &len);
    free(v);
  } else {
    err = c->ops->group_start(c);
    if (!err)
      err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM,
                               pg__now() + 60);
    if (!err)
      err = c->ops->group_end(c);
    if (!err)
      err = wait_last(c, 15);
    if (err != -ETIMEDOUT || !strstr(pg_last_error(), "within 3 s")) {
      fprintf(stderr, "grouped op: %d (%s)\n", err, pg_last_error());
      fails++;
    }
    pg_store_set(s->store, "t/gto/done", "1", 1);
  }
  c->ops->destroy(c);
  cudaFree(d);
  return fails ? 1 : 0;
}

/* Mutation: a failure at submission not published.  Rank 1's second
 * call fails before reaching its stream; rank 0, stuck in its second
 * op, must learn it from the store (PG_EPEERFAIL naming rank 1) before
 * its own 10 s deadline. */
static int rank_submit_failure_spreads(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  float *d;
  int i, err = 0;

  setenv("FAKENCCL_FAIL_RANK", "1", 1);
  setenv("FAKENCCL_SUBMIT_FAIL_OP", "2", 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  d = dev_floats(s, 1024);
  for (i = 1; i <= 3 && !err; i++) {
    err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM, pg__now() + 10);
    if (!err)
      err = wait_last(c, -1);
  }
  c->ops->destroy(c);
  cudaFree(d);
  if (i == 3 && (s->me == 1 ? err == PG_ENCCL(ncclUnhandledCudaError)
                            : err == PG_EPEERFAIL &&
                              strstr(pg_last_error(), "because rank 1")))
    return 0;
  fprintf(stderr, "rank %d: op %d: %d (%s)\n", s->me, i - 1, err,
          pg_last_error());
  return 1;
}

/* Collectives and ncclGroupEnd answering ncclInProgress. */
static int rank_in_progress(const struct pg__setup *s)
{
  struct pg__setup s2 = *s;

  setenv("FAKENCCL_INPROGRESS", "1", 1);
  s2.ns = "t/p2p/";
  return rank_stream_order(s) | (s->n == 2 ? rank_group_p2p(&s2) : 0);
}

/* A host pointer is refused with a clear error, and the comm lives on. */
static int rank_host_pointer(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  float host[16] = { 0 };
  int err, fails = 0;

  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  err = c->ops->all_reduce(c, host, host, 16, PG_F32, PG_SUM,
                           pg__now() + 30);
  if (err != -EINVAL || !strstr(pg_last_error(), "not memory of device")) {
    fprintf(stderr, "host pointer: %d (%s)\n", err, pg_last_error());
    fails++;
  }
  err = c->ops->barrier(c, pg__now() + 30);
  if (!err)
    err = wait_last(c, 30);
  if (err) {
    fprintf(stderr, "barrier after: %s\n", pg_last_error());
    fails++;
  }
  c->ops->destroy(c);
  return fails ? 1 : 0;
}

/* TORCH_NCCL_BLOCKING_WAIT=1 (cdrun exports it): a device wait is a host
 * wait, so the op is done when the wait returns. */
static int rank_torch_blocking_wait(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  struct pg__fence *f;
  float *d;
  int err, st = -1, fails = 0;

  setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  d = dev_floats(s, 65536);
  err = c->ops->all_reduce(c, d, d, 65536, PG_F32, PG_SUM, pg__now() + 30);
  f = err ? NULL : c->ops->take_fence(c);
  if (f && !(err = c->ops->fence_wait(f, false, -1)))
    st = c->ops->fence_query(f);
  c->ops->fence_free(f);
  if (err || st != 1) {
    fprintf(stderr, "blocking wait: %d, state %d (%s)\n", err, st,
            pg_last_error());
    fails++;
  }
  c->ops->destroy(c);
  cudaFree(d);
  return fails ? 1 : 0;
}

/* A host wait that times out aborts the comm: later ops fail at once. */
static int rank_wait_timeout_aborts(const struct pg__setup *s)
{
  struct pg__comm *c = NULL;
  void *v = NULL;
  size_t len;
  float *d;
  int err, fails = 0;

  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  d = dev_floats(s, 1024);
  if (s->me == 1) {
    pg_store_get(s->store, "t/wto/done", 60, &v, &len);
    free(v);
  } else {
    err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM, pg__now() + 60);
    if (!err)
      err = wait_last(c, 0.5);
    if (err != -ETIMEDOUT) {
      fprintf(stderr, "host wait: %d (%s)\n", err, pg_last_error());
      fails++;
    }
    err = c->ops->barrier(c, pg__now() + 60);
    if (err != PG_EPEERFAIL) {
      fprintf(stderr, "after a timed-out wait: %d (%s)\n", err,
              pg_last_error());
      fails++;
    }
    pg_store_set(s->store, "t/wto/done", "1", 1);
  }
  c->ops->destroy(c);
  cudaFree(d);
  return fails ? 1 : 0;
}

/* ---- issue 24: live recovery (Note [live recovery] in nccl_live.c) ----- */

#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22807 && \
    defined(NCCL_REVOKE_DEFAULT)
#define HAVE_REVOKE 1
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22703 && \
    defined(NCCL_SHRINK_ABORT)
#define HAVE_SHRINK 1
#endif

/* Waits until a non-blocking comm's state is not ncclInProgress. */
static ncclResult_t settled(ncclComm_t c)
{
  ncclResult_t r = ncclSuccess, st = ncclInProgress;
  double until = pg__now() + 60;

  while (pg__now() < until) {
    r = ncclCommGetAsyncError(c, &st);
    if (r != ncclSuccess)
      return r;
    if (st != ncclInProgress)
      return st;
    usleep(1000);
  }
  return ncclInProgress;
}

/* NCCL 2.28's non-blocking split and shrink (libpg's Note [child
 * handle]): the call answers ncclInProgress with *newcomm still NULL;
 * the PARENT says ncclInProgress until the job ends, and NCCL writes the
 * handle through the caller's pointer (here a variable of the caller,
 * alive until this returns) before that.  Only then is the child read
 * and waited ready. */
static ncclResult_t child_settled(ncclComm_t parent, ncclResult_t r,
                                  ncclComm_t *newcomm)
{
  if (r == ncclInProgress)
    r = settled(parent);
  if (r == ncclSuccess && __atomic_load_n(newcomm, __ATOMIC_ACQUIRE))
    r = settled(*newcomm);
  return r;
}

/* A raw non-blocking NCCL communicator over s's members: the contract
 * tests below call NCCL itself (the fake, or the real one on a GPU). */
static int raw_comm(const struct pg__setup *s, const char *key,
                    ncclComm_t *out)
{
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclUniqueId id;
  void *v = NULL;
  size_t len = 0;
  ncclResult_t r;

  if (cudaSetDevice(s->device))
    abort();
  if (s->me == 0) {
    if (ncclGetUniqueId(&id) ||
        pg_store_set(s->store, key, &id, sizeof id))
      return 1;
  } else {
    if (pg_store_get(s->store, key, 60, &v, &len) || len != sizeof id)
      return 1;
    memcpy(&id, v, sizeof id);
    free(v);
  }
  cfg.blocking = 0;
  r = ncclCommInitRankConfig(out, s->n, id, s->me, &cfg);
  if (r == ncclInProgress)
    r = settled(*out);
  if (r != ncclSuccess) {
    fprintf(stderr, "rank %d: init: %s\n", s->me, ncclGetErrorString(r));
    return 1;
  }
  return 0;
}

/* Counts a broken promise of the contract. */
#define EXPECT(k, cond, ...)                                              \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "rank %d: ", (k)->me);                              \
      fprintf(stderr, __VA_ARGS__);                                       \
      fputc('\n', stderr);                                                \
      (k)->fails++;                                                       \
    }                                                                     \
  } while (0)

/* Waits for a store key (a rank's signal to the others). */
static void wait_key(const struct pg__setup *s, const char *key)
{
  void *v = NULL;
  size_t len;

  pg_store_get(s->store, key, 60, &v, &len);
  free(v);
}

#ifdef HAVE_REVOKE
/* ncclCommRevoke's contract: rank 0's all-reduce waits for rank 1, who
 * never calls it; the revoke makes it return (the stream drains), the
 * comm says ncclInProgress until then and ncclSuccess after, later
 * collectives, a second revoke, bad flags and finalize are refused, and
 * destroy still works. */
static int rank_revoke_contract(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  ncclComm_t c = NULL;
  cudaStream_t st;
  ncclResult_t r;
  float *d = dev_floats(s, 1024);

  if (raw_comm(s, "t/rv/id", &c) ||
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking))
    return 1;
  EXPECT(&k, ncclCommRevoke(NULL, 0) == ncclSuccess, "revoke(NULL)");
  if (s->me == 0) {
    r = ncclAllReduce(d, d, 1024, ncclFloat32, ncclSum, c, st);
    if (r == ncclInProgress)
      r = settled(c);
    EXPECT(&k, r == ncclSuccess, "all-reduce: %d", (int)r);
    EXPECT(&k, cudaStreamQuery(st) == cudaErrorNotReady,
           "the all-reduce finished without rank 1");
    EXPECT(&k, ncclCommRevoke(c, 1) == ncclInvalidArgument,
           "revoke with flags 1");
    r = ncclCommRevoke(c, NCCL_REVOKE_DEFAULT);
    EXPECT(&k, r == ncclSuccess || r == ncclInProgress, "revoke: %d",
           (int)r);
    EXPECT(&k, settled(c) == ncclSuccess, "revoke never settled");
    EXPECT(&k, cudaStreamSynchronize(st) == cudaSuccess,
           "the stream after the revoke");
    r = ncclAllReduce(d, d, 1024, ncclFloat32, ncclSum, c, st);
    EXPECT(&k, r == ncclInvalidUsage, "all-reduce after revoke: %d",
           (int)r);
    EXPECT(&k, ncclCommRevoke(c, 0) == ncclInvalidArgument,
           "a second revoke");
    EXPECT(&k, ncclCommFinalize(c) == ncclInvalidArgument,
           "finalize after revoke");
    pg_store_set(s->store, "t/rv/done", "1", 1);
  } else {
    wait_key(s, "t/rv/done");
    r = ncclCommRevoke(c, 0);
    EXPECT(&k, (r == ncclSuccess || r == ncclInProgress) &&
           settled(c) == ncclSuccess, "rank 1's revoke: %d", (int)r);
  }
  EXPECT(&k, ncclCommDestroy(c) == ncclSuccess, "destroy after revoke");
  cudaStreamDestroy(st);
  cudaFree(d);
  return k.fails ? 1 : 0;
}
#endif

#ifdef HAVE_SHRINK
/* How the contract tests check a communicator's membership: an all-gather
 * of each member's old rank, and an all-reduce of old rank + 1. */
static void check_members(struct rank *k, const struct pg__setup *s,
                          ncclComm_t c, const int *want, int n)
{
  cudaStream_t st;
  int32_t *d, h[MAXRANKS], sum = 0, mine = s->me, i;
  ncclResult_t r;

  if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) ||
      cudaMalloc((void **)&d, (MAXRANKS + 1) * sizeof *d))
    abort();
  h2d(d, &mine, sizeof mine);
  r = ncclAllGather(d, d + 1, 1, ncclInt32, c, st);
  if (r == ncclInProgress)
    r = settled(c);
  if (cudaStreamSynchronize(st))
    abort();
  mine = s->me + 1;
  h2d(d, &mine, sizeof mine);
  if (r == ncclSuccess)
    r = ncclAllReduce(d, d, 1, ncclInt32, ncclSum, c, st);
  if (r == ncclInProgress)
    r = settled(c);
  if (r != ncclSuccess || cudaStreamSynchronize(st)) {
    EXPECT(k, 0, "collectives on the shrunk comm: %s",
           ncclGetErrorString(r));
  } else {
    d2h(h, d + 1, (size_t)n * sizeof *h);
    for (i = 0; i < n; i++) {
      EXPECT(k, h[i] == want[i], "new rank %d is old rank %d, want %d",
             i, h[i], want[i]);
      sum += want[i] + 1;
    }
    d2h(h, d, sizeof *h);
    EXPECT(k, h[0] == sum, "all-reduce %d, want %d", h[0], sum);
  }
  cudaFree(d);
  cudaStreamDestroy(st);
}

/* ncclCommShrink's contract: rank 1 of 4 dies; the survivors' misuse is
 * refused at once, then each passes {1} and gets a comm of 3 where old
 * ranks 0, 2, 3 are 0, 1, 2. */
static int rank_shrink_contract(const struct pg__setup *s)
{
  static const int want[] = { 0, 2, 3 };
  struct rank k = { .me = s->me };
  ncclComm_t c = NULL, nc = NULL;
  int bad[2], one[1] = { 1 };
  ncclResult_t r;

  if (raw_comm(s, "t/sh/id", &c))
    return 1;
  if (s->me == 1) {
    ncclCommAbort(c);
    return 0;
  }
  EXPECT(&k, ncclCommShrink(c, NULL, 1, &nc, NULL, 0) ==
         ncclInvalidArgument && !nc, "a NULL list");
  bad[0] = s->me;
  EXPECT(&k, ncclCommShrink(c, bad, 1, &nc, NULL, 0) ==
         ncclInvalidArgument && !nc, "excluding itself");
  bad[0] = 1;
  bad[1] = s->n;
  EXPECT(&k, ncclCommShrink(c, bad, 2, &nc, NULL, 0) ==
         ncclInvalidArgument && !nc, "a rank out of range");
  EXPECT(&k, ncclCommShrink(c, one, 1, &nc, NULL, 8) ==
         ncclInvalidArgument && !nc, "unknown flags");
  r = ncclCommShrink(c, one, 1, &nc, NULL,
                     s->me == 0 ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT);
  EXPECT(&k, r != ncclInProgress || !nc, "ncclInProgress with the handle "
         "set at once (NCCL 2.28 writes it when the shrink completes)");
  r = child_settled(c, r, &nc);
  if (r != ncclSuccess || !nc) {
    EXPECT(&k, 0, "shrink: %s", ncclGetErrorString(r));
  } else {
    check_members(&k, s, nc, want, 3);
    ncclCommDestroy(nc);
  }
  ncclCommAbort(c);
  return k.fails ? 1 : 0;
}

/* Survivors that disagree on the list: rank 3 dies, rank 1 says ranks 2
 * and 3 left, ranks 0 and 2 say 3 did.  The fake fails every survivor's
 * new comm (ncclInvalidUsage) instead of hanging or mixing them. */
static int rank_shrink_mismatch(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  ncclComm_t c = NULL, nc = NULL;
  int l1[] = { 3, 2 }, l0[] = { 3 };
  ncclResult_t r;

  if (raw_comm(s, "t/shm/id", &c))
    return 1;
  if (s->me == 3) {
    ncclCommAbort(c);
    return 0;
  }
  r = s->me == 1 ? ncclCommShrink(c, l1, 2, &nc, NULL, NCCL_SHRINK_ABORT)
                 : ncclCommShrink(c, l0, 1, &nc, NULL, NCCL_SHRINK_ABORT);
  r = child_settled(c, r, &nc);
  EXPECT(&k, r == ncclInvalidUsage, "mismatched lists: %s",
         ncclGetErrorString(r));
  EXPECT(&k, s->me != 1 || (l1[0] == 2 && l1[1] == 3),
         "the list was not sorted in place, as NCCL does");
  if (nc)
    ncclCommAbort(nc);
  ncclCommAbort(c);
  return k.fails ? 1 : 0;
}

/* Whether the file has the line (the fake's $FAKENCCL_TRACE). */
static bool traced(const char *path, const char *line)
{
  char buf[256];
  FILE *f = fopen(path, "re");
  bool found = false;

  while (f && !found && fgets(buf, sizeof buf, f))
    found = strncmp(buf, line, strlen(line)) == 0;
  if (f)
    fclose(f);
  return found;
}

/* The backend in live mode: four ranks all-reduce, rank 1 dies (its exit
 * key first, for rank_main's barrier), the survivors' in-flight
 * all-reduce fails with PG_ERR_PEER_LOST from the watchdog's pidfd (no
 * deadline is near), then the shrink hook makes their comm of 3 (old
 * ranks 0, 2, 3), which all-reduces and all-gathers right. */
static int rank_live_shrink(const struct pg__setup *s)
{
  static const int want[] = { 0, 2, 3 };
  struct rank k = { .me = s->me };
  struct pg__setup s2 = *s;
  struct pg__comm *c = NULL, *c2 = NULL;
  int one[] = { 1 }, i, err;
  float *d = dev_floats(s, 4096), h[4096];
  char trace[64];

  setenv("CDRUN_RECOVERY", "live", 1);
  snprintf(trace, sizeof trace, "/tmp/check_pg_nccl.%d.trace",
           (int)getppid());
  setenv("FAKENCCL_TRACE", trace, 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  err = c->ops->all_reduce(c, d, d, 4096, PG_F32, PG_SUM, pg__now() + 60);
  if (!err)
    err = wait_last(c, 60);
  EXPECT(&k, err == 0, "first all-reduce: %s", pg_last_error());
  if (s->me == 1) {
    pg_store_set(s->store, "t/exit/1", "1", 1);
    _exit(0);
  }
  /* The host wait gives up at 30 s: the pidfd sees the death in two
   * watchdog ticks. */
  err = c->ops->all_reduce(c, d, d, 4096, PG_F32, PG_SUM, pg__now() + 600);
  if (!err)
    err = wait_last(c, 30);
  EXPECT(&k, err == PG_ERR_PEER_LOST && strstr(pg_last_error(), "died"),
         "with rank 1 dead: %d (%s)", err, pg_last_error());
  err = c->ops->barrier(c, pg__now() + 60);
  EXPECT(&k, err == PG_ERR_PEER_LOST, "an op after: %d (%s)", err,
         pg_last_error());
  c->ops->revoke(c);
  s2.n = 3;
  s2.me = s->me == 0 ? 0 : s->me - 1;
  s2.ns = "t/g1/nccl/";
  err = c->ops->shrink ? c->ops->shrink(c, one, 1, &s2, &c2) : -ENOTSUP;
  c->ops->destroy(c);
  if (err) {
    fprintf(stderr, "rank %d: shrink: %d %s\n", s->me, err, pg_last_error());
    return 1;
  }
  if (fakecuda_is_fake && s->me == 0)
    EXPECT(&k, traced(trace, "ncclCommShrink rank=0 n=4 excluded=0x2 "
                      "flags=1"), "no ncclCommShrink with "
           "NCCL_SHRINK_ABORT in %s", trace);
  for (i = 0; i < 4096; i++)
    h[i] = (float)(s->me + 1) * (float)(i % 7);
  h2d(d, h, sizeof h);
  err = c2->ops->all_reduce(c2, d, d, 4096, PG_F32, PG_SUM, pg__now() + 60);
  if (!err)
    err = wait_last(c2, 60);
  EXPECT(&k, err == 0, "all-reduce on the shrunk comm: %s",
         pg_last_error());
  d2h(h, d, sizeof h);
  for (i = 0; i < 4096 && !k.fails; i++)
    EXPECT(&k, h[i] == (float)(1 + 3 + 4) * (float)(i % 7),
           "[%d] = %g after the shrink", i, h[i]);
  {
    int32_t *g = NULL, mine = s->me, got[3];

    if (cudaMalloc((void **)&g, 4 * sizeof *g))
      abort();
    h2d(g, &mine, sizeof mine);
    err = c2->ops->all_gather(c2, g, g + 1, 1, PG_I32, pg__now() + 60);
    if (!err)
      err = wait_last(c2, 60);
    d2h(got, g + 1, sizeof got);
    for (i = 0; i < 3 && !err; i++)
      EXPECT(&k, got[i] == want[i], "new rank %d is old rank %d", i,
             got[i]);
    cudaFree(g);
  }
  c2->ops->destroy(c2);
  cudaFree(d);
  if (s->me == 0)
    unlink(trace);
  return k.fails ? 1 : 0;
}
#endif

/* A grow: ranks 0-2 work in a comm of 3 that rank 3 is not in; then (as
 * after a death and a replacement) they revoke it, and all four make the
 * next generation's comm with pg__nccl_create: a second NCCL communicator
 * in the same process, its id under a new namespace. */
static int rank_live_grow(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  struct pg__setup s3 = *s, s4 = *s;
  struct pg__comm *c = NULL, *c4 = NULL;
  float *d = dev_floats(s, 1000), h[1000];
  int i, err;

  setenv("CDRUN_RECOVERY", "live", 1);
  s3.n = 3;
  s3.ns = "t/g0/nccl/";
  s4.ns = "t/g1/nccl/";
  if (s->me < 3) {
    if (pg__nccl_create(&s3, &c)) {
      fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
      return 1;
    }
    err = c->ops->all_reduce(c, d, d, 1000, PG_F32, PG_SUM, pg__now() + 60);
    if (!err)
      err = wait_last(c, 60);
    EXPECT(&k, err == 0, "generation 0: %s", pg_last_error());
    c->ops->revoke(c);
    err = c->ops->barrier(c, pg__now() + 60);
    EXPECT(&k, err == PG_ERR_PEER_LOST, "after revoke: %d", err);
  }
  if (pg__nccl_create(&s4, &c4)) {
    fprintf(stderr, "rank %d: create again: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (c)
    c->ops->destroy(c);
  for (i = 0; i < 1000; i++)
    h[i] = (float)(s->me + 1);
  h2d(d, h, sizeof h);
  err = c4->ops->all_reduce(c4, d, d, 1000, PG_F32, PG_SUM, pg__now() + 60);
  if (!err)
    err = wait_last(c4, 60);
  EXPECT(&k, err == 0, "generation 1: %s", pg_last_error());
  d2h(h, d, sizeof h);
  for (i = 0; i < 1000 && !k.fails; i++)
    EXPECT(&k, h[i] == 10, "[%d] = %g with the newcomer", i, h[i]);
  c4->ops->destroy(c4);
  cudaFree(d);
  return k.fails ? 1 : 0;
}

/* The revoke hook while an op is in flight (restart mode, so that a
 * timeout would say -ETIMEDOUT): rank 0's all-reduce waits for rank 1,
 * who never calls it; the revoke fails it at once with PG_ERR_PEER_LOST,
 * later ops too, and destroy does not wait for the deadline (the alarm). */
static int rank_revoke_inflight(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  struct pg__comm *c = NULL;
  struct pg__fence *f;
  float *d = dev_floats(s, 1024);
  int err;

  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (s->me == 1) {
    wait_key(s, "t/ri/done");
  } else {
    err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM,
                             pg__now() + 600);
    f = err ? NULL : c->ops->take_fence(c);
    EXPECT(&k, f && c->ops->fence_query(f) == 0, "the op is not in flight");
    c->ops->revoke(c);
    err = f ? c->ops->fence_wait(f, true, 300) : -EINVAL;
    c->ops->fence_free(f);
    EXPECT(&k, err == PG_ERR_PEER_LOST && strstr(pg_last_error(),
                                                 "revoked"),
           "the in-flight op: %d (%s)", err, pg_last_error());
    err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM, pg__now() + 60);
    EXPECT(&k, err == PG_ERR_PEER_LOST, "an op after: %d", err);
    pg_store_set(s->store, "t/ri/done", "1", 1);
  }
  alarm(60);
  c->ops->destroy(c);
  alarm(0);
  cudaFree(d);
  return k.fails ? 1 : 0;
}

/* Live mode maps a timeout (a peer stuck or dead) to PG_ERR_PEER_LOST;
 * restart mode keeps -ETIMEDOUT (rank_op_timeout). */
static int rank_live_timeout(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  struct pg__comm *c = NULL;
  float *d = dev_floats(s, 1024);
  int err;

  setenv("CDRUN_RECOVERY", "live", 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (s->me == 1) {
    wait_key(s, "t/lt/done");
  } else {
    err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM, pg__now() + 1);
    if (!err)
      err = wait_last(c, 60);
    EXPECT(&k, err == PG_ERR_PEER_LOST &&
           strstr(pg_last_error(), "did not complete within"),
           "a timeout in live mode: %d (%s)", err, pg_last_error());
    pg_store_set(s->store, "t/lt/done", "1", 1);
  }
  c->ops->destroy(c);
  cudaFree(d);
  return k.fails ? 1 : 0;
}

/* ---- issue 31: split and shrink as NCCL 2.28 does them ---------------- */

static int ndevices;        /* the devices the ranks share (below) */
static bool other_device;   /* this rank used another device on purpose */

/* Old ranks of c's members, in c's order (an all-gather). */
static void check_order(struct rank *k, int old, struct pg__comm *c,
                        const int *want, int n)
{
  int32_t *g = NULL, mine = old, got[MAXRANKS];
  int err, i;

  if (cudaMalloc((void **)&g, (MAXRANKS + 1) * sizeof *g))
    abort();
  h2d(g, &mine, sizeof mine);
  err = c->ops->all_gather(c, g, g + 1, 1, PG_I32, pg__now() + 60);
  if (!err)
    err = wait_last(c, 60);
  EXPECT(k, err == 0, "all-gather on the split comm: %s", pg_last_error());
  if (!err) {
    d2h(got, g + 1, (size_t)n * sizeof *got);
    for (i = 0; i < n; i++)
      EXPECT(k, got[i] == want[i], "member %d of the split comm is old "
             "rank %d, want %d", i, got[i], want[i]);
  }
  cudaFree(g);
}

/* An all-reduce of me + 1 on c, checked. */
static int sum_check(struct rank *k, const struct pg__setup *s,
                     struct pg__comm *c, const char *what)
{
  float *d = dev_floats(s, 1), h = (float)(s->me + 1);
  int err;

  h2d(d, &h, sizeof h);
  err = c->ops->all_reduce(c, d, d, 1, PG_F32, PG_SUM, pg__now() + 60);
  if (!err)
    err = wait_last(c, 60);
  d2h(&h, d, sizeof h);
  EXPECT(k, err == 0 && h == (float)(s->n * (s->n + 1) / 2),
         "%s: err %d (%s), sum %g", what, err, err ? pg_last_error() : "",
         h);
  cudaFree(d);
  return err;
}

struct parent_op {
  struct rank *k;
  const struct pg__setup *s;
  struct pg__comm *c;
};

/* Another thread's op on the parent while the split runs: it must wait
 * for the split, not meet NCCL's refusal of an in-progress parent. */
static void *parent_op_main(void *arg)
{
  struct parent_op *o = arg;

  usleep(50000);
  cudaSetDevice(o->s->device);
  sum_check(o->k, o->s, o->c, "another thread's all-reduce on the parent "
            "during the split");
  return NULL;
}

/* Note [child handle] (libpg/nccl/nccl_comm.c): ranks 0 and 1 split with
 * color 0 and keys that reverse them, rank 2 alone with color 1, rank 3
 * with no color; the split takes 300 ms on the fake (the parent says
 * ncclInProgress meanwhile, as NCCL's job does), while the watchdogs run
 * and another thread of each rank issues an all-reduce on the parent.
 * Then every rank, the non-member too, uses the parent at once, and the
 * children have the right members in the right order. */
static int rank_split(const struct pg__setup *s)
{
  static const int want0[] = { 1, 0 }, want1[] = { 2 };
  struct rank k = { .me = s->me };
  struct pg__setup s2 = *s;
  struct pg__comm *c = NULL, *c2 = NULL;
  struct parent_op o;
  pthread_t th;
  int err;

  alarm(60);
  setenv("FAKENCCL_JOB_MS", "300", 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  o = (struct parent_op){ &k, s, c };
  if (pthread_create(&th, NULL, parent_op_main, &o))
    abort();
  s2.n = s->me < 2 ? 2 : 1;
  s2.me = s->me == 0 ? 1 : 0;
  s2.ns = s->me < 2 ? "t/sp/c0/" : "t/sp/c1/";
  err = c->ops->split(c, s->me < 2 ? 0 : 1, -s->me,
                      s->me == 3 ? NULL : &s2, &c2);
  EXPECT(&k, err == 0, "split: %d (%s)", err, pg_last_error());
  EXPECT(&k, (c2 != NULL) == (s->me != 3), "rank %d %s a sub-group comm",
         s->me, c2 ? "got" : "did not get");
  pthread_join(th, NULL);
  sum_check(&k, s, c, "the parent right after the split");
  if (c2) {
    check_order(&k, s->me, c2, s->me < 2 ? want0 : want1, s2.n);
    sum_check(&k, &s2, c2, "the split comm");
    c2->ops->destroy(c2);
  }
  c->ops->destroy(c);
  alarm(0);
  return k.fails ? 1 : 0;
}

#ifdef HAVE_SHRINK
/* A shrink that a survivor (rank 2) never joins fails at the new
 * group's deadline (2 s, not the parent's 60) on ranks 0 and 1, and
 * stops both communicators: the revoked parent by an abort (a second
 * revoke would not end NCCL's job), the child NCCL wrote meanwhile too
 * (the fake's leak check). */
static int rank_shrink_timeout(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  struct pg__setup s2 = *s;
  struct pg__comm *c = NULL, *c2 = NULL;
  int three[] = { 3 }, err;

  alarm(20);
  setenv("CDRUN_RECOVERY", "live", 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (s->me < 2) {
    c->ops->revoke(c);
    s2.n = 3;
    s2.ns = "t/sht/g1/";
    s2.timeout = 2;
    err = c->ops->shrink(c, three, 1, &s2, &c2);
    EXPECT(&k, err != 0 && !c2 &&
           strstr(pg_last_error(), "did not complete by its deadline"),
           "a shrink rank 2 never joins: %d (%s)", err, pg_last_error());
    pg_store_set(s->store, s->me ? "t/sht/done1" : "t/sht/done0", "1", 1);
  } else {
    wait_key(s, "t/sht/done0");
    wait_key(s, "t/sht/done1");
  }
  if (c2)
    c2->ops->destroy(c2);
  c->ops->destroy(c);
  alarm(0);
  return k.fails ? 1 : 0;
}

/* Live recovery's shrink failing on one survivor only (the fake's
 * FAKENCCL_SHRINK_FAIL_RANK=1, after the others' succeeded; the parents
 * revoked and failed before, so their keys carry nothing new): that
 * survivor publishes the failure under the new comm's key, so the
 * others' first op on it fails at once with the reason, not at its
 * 10 s deadline. */
static int rank_shrink_fail_spreads(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  struct pg__setup s2 = *s;
  struct pg__comm *c = NULL, *c2 = NULL;
  float *d = dev_floats(s, 256);
  int three[] = { 3 }, err;

  alarm(20);
  setenv("CDRUN_RECOVERY", "live", 1);
  setenv("FAKENCCL_SHRINK_FAIL_RANK", "1", 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (s->me < 3) {
    c->ops->revoke(c);
    s2.n = 3;
    s2.ns = "t/shf/g1/";
    err = c->ops->shrink(c, three, 1, &s2, &c2);
    EXPECT(&k, (err != 0) == (s->me == 1), "shrink on rank %d: %d (%s)",
           s->me, err, pg_last_error());
    if (c2) {
      err = c2->ops->all_reduce(c2, d, d, 256, PG_F32, PG_SUM,
                                pg__now() + 10);
      if (!err)
        err = wait_last(c2, 60);
      EXPECT(&k, err == PG_ERR_PEER_LOST && strstr(pg_last_error(),
                                                   "aborted because"),
             "an op after rank 1's shrink failed: %d (%s)", err,
             pg_last_error());
      c2->ops->destroy(c2);
    }
    pg_store_set(s->store, s->me == 0 ? "t/shf/d0" : s->me == 1
                 ? "t/shf/d1" : "t/shf/d2", "1", 1);
  }
  wait_key(s, "t/shf/d0");
  wait_key(s, "t/shf/d1");
  wait_key(s, "t/shf/d2");
  c->ops->destroy(c);
  cudaFree(d);
  alarm(0);
  return k.fails ? 1 : 0;
}
#endif

/* A split with a member missing fails at the new group's deadline (2 s),
 * not the parent's, and stops both (no communicator left behind: the
 * fake's leak check).  The parent here is itself a split comm, so a
 * child made blocking would hang in the nested split (the alarm). */
static int rank_split_timeout(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  struct pg__setup s2 = *s, s3;
  struct pg__comm *c = NULL, *c2 = NULL, *c3 = NULL;
  int err;

  alarm(20);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  s2.ns = "t/spt/c/";
  err = c->ops->split(c, 0, 0, &s2, &c2);
  EXPECT(&k, err == 0, "split: %s", pg_last_error());
  if (!err && s->me == 0) {
    s3 = s2;
    s3.n = 1;
    s3.ns = "t/spt/cc/";
    s3.timeout = 2;
    err = c2->ops->split(c2, 0, 0, &s3, &c3);
    EXPECT(&k, err == -ETIMEDOUT && !c3 &&
           strstr(pg_last_error(), "did not complete by its deadline"),
           "a split without member 1: %d (%s)", err, pg_last_error());
    err = c2->ops->barrier(c2, pg__now() + 60);
    EXPECT(&k, err != 0 && strstr(pg_last_error(), "aborted"),
           "the parent after its split timed out: %d (%s)", err,
           pg_last_error());
    pg_store_set(s->store, "t/spt/done", "1", 1);
  } else if (!err) {
    wait_key(s, "t/spt/done");
  }
  if (c3)
    c3->ops->destroy(c3);
  if (c2)
    c2->ops->destroy(c2);
  c->ops->destroy(c);
  alarm(0);
  return k.fails ? 1 : 0;
}

/* An op whose NCCL call stays ncclInProgress (a launch waiting for a dead
 * peer's connection: the fake's FAKENCCL_INPROGRESS=hold on rank 0) ends
 * as soon as the watchdog fails the comm (rank 1 publishes a failure),
 * not at its 30 s deadline. */
static int rank_in_progress_peer(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  struct pg__comm *c = NULL;
  float *d = dev_floats(s, 256);
  int err;

  if (s->me == 0)
    setenv("FAKENCCL_INPROGRESS", "hold", 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (s->me == 0) {
    err = c->ops->all_reduce(c, d, d, 256, PG_F32, PG_SUM, pg__now() + 30);
    if (!err)
      err = wait_last(c, 60);
    EXPECT(&k, err == PG_EPEERFAIL && strstr(pg_last_error(),
                                             "rank 1 gave up"),
           "an op held in progress when rank 1 fails: %d (%s)", err,
           pg_last_error());
    pg_store_set(s->store, "t/ipp/done", "1", 1);
  } else {
    pg_store_set(s->store, "t/nccl/abort", "rank 1 gave up",
                 strlen("rank 1 gave up"));
    wait_key(s, "t/ipp/done");
  }
  c->ops->destroy(c);
  cudaFree(d);
  return k.fails ? 1 : 0;
}

/* Ordering across communicators in one group: B's all-reduce issued in
 * A's group.  The caller's stream, told to wait for B's op (a device
 * wait before the group end), and A's group fence (which covers the
 * group's other ops) both see its result. */
static int rank_group_cross_order(const struct pg__setup *s)
{
  struct pg__comm *a = NULL, *b = NULL;
  struct pg__fence *fb = NULL;
  size_t n = 50000, i;
  float *d, *e, *h, want = (float)(s->n * (s->n + 1) / 2);
  int err, fails = 0;

  setenv("FAKECUDA_DELAY_US", "3000", 1);
  if (create_ns(s, "t/xa/", &a) || create_ns(s, "t/xb/", &b))
    return 1;
  d = dev_floats(s, n);
  e = dev_floats(s, n);
  h = malloc(n * sizeof *h);
  for (i = 0; i < n; i++)
    h[i] = (float)(s->me + 1);
  h2d(d, h, n * sizeof *h);
  err = a->ops->group_start(a);
  if (!err)
    err = b->ops->all_reduce(b, d, d, n, PG_F32, PG_SUM, pg__now() + 60);
  fb = err ? NULL : b->ops->take_fence(b);
  if (fb)
    err = b->ops->fence_wait(fb, false, 60);  /* queued for the end */
  if (!err)
    err = a->ops->group_end(a);
  /* The caller's stream (the legacy one here) after the device wait. */
  if (!err && (cudaMemcpyAsync(e, d, n * sizeof *e,
                               cudaMemcpyDeviceToDevice, 0) ||
               cudaStreamSynchronize(0)))
    abort();
  if (!err) {
    d2h(h, e, n * sizeof *h);
    for (i = 0; i < n && !fails; i++)
      if (h[i] != want) {
        fprintf(stderr, "rank %d: [%zu] = %g on the caller's stream after "
                "a device wait for B's op in A's group\n", s->me, i, h[i]);
        fails++;
      }
    err = wait_last(a, 60);
  }
  if (fb)
    b->ops->fence_wait(fb, true, 60);
  b->ops->fence_free(fb);
  fb = NULL;
  /* A second group: only A's fence is waited for, on the host. */
  for (i = 0; i < n; i++)
    h[i] = (float)(s->me + 1);
  h2d(e, h, n * sizeof *h);
  if (!err)
    err = a->ops->group_start(a);
  if (!err)
    err = b->ops->all_reduce(b, e, e, n, PG_F32, PG_SUM, pg__now() + 60);
  if (!err)
    err = a->ops->group_end(a);
  if (!err)
    err = wait_last(a, 60);
  if (!err) {
    d2h(h, e, n * sizeof *h);
    for (i = 0; i < n && !fails; i++)
      if (h[i] != want) {
        fprintf(stderr, "rank %d: [%zu] = %g after A's group fence: it "
                "did not cover B's op\n", s->me, i, h[i]);
        fails++;
      }
    err = wait_last(b, 60);
  }
  if (err) {
    fprintf(stderr, "rank %d: %s\n", s->me, pg_last_error());
    fails++;
  }
  if (fb)
    b->ops->fence_wait(fb, true, 60);
  b->ops->fence_free(fb);
  a->ops->destroy(a);
  b->ops->destroy(b);
  cudaFree(d);
  cudaFree(e);
  free(h);
  return fails ? 1 : 0;
}

/* Queues n slow copies of bytes from src to dst on the legacy stream
 * (the caller's stream here): work that is still running. */
static void busy_stream(void *dst, const void *src, size_t bytes, int n)
{
  while (n-- > 0)
    if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0))
      abort();
}

static int all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (p[i] != v)
      return 0;
  return 1;
}

/* The backend's memory (pg_mem_*) in stream order, as CUDA's
 * stream-ordered pool reuses it (the fake poisons a block where its
 * stream reaches the allocation and the free: Note [stream-ordered
 * pool]): a zeroing after the caller's queued writes; a free after the
 * caller's queued reads; a free after a collective still reading the
 * buffer; memory handed out only once its stream reached the allocation. */
static int rank_mem_order(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  struct pg__comm *c = NULL;
  size_t bytes = 4096;
  unsigned char *p, *q, *src, out[4096], h[4096];
  float *x, *y, hx[1024];
  int err, i;

  setenv("FAKECUDA_DELAY_US", "3000", 1);
  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  if (cudaSetDevice(s->device) || cudaMalloc((void **)&src, bytes))
    abort();
  memset(h, 7, sizeof h);
  h2d(src, h, bytes);
  /* The zeroing comes after the caller's queued writes. */
  p = c->ops->mem_alloc(c, bytes);
  busy_stream(p, src, bytes, 3);
  err = c->ops->mem_zero(c, p, bytes);
  d2h(out, p, bytes);
  EXPECT(&k, err == 0 && all_bytes(out, bytes, 0), "pg_mem_zero after "
         "queued writes on the caller's stream: err %d, [0] = %#x", err,
         out[0]);
  /* The free comes after the caller's queued reads. */
  h2d(p, h, bytes);
  busy_stream(src, src, bytes, 3);
  if (cudaMemcpyAsync(src, p, bytes, cudaMemcpyDeviceToDevice, 0))
    abort();
  c->ops->mem_free(c, p);
  d2h(out, src, bytes);
  EXPECT(&k, all_bytes(out, bytes, 7), "a read queued on the caller's "
         "stream before pg_mem_free got %#x, want 7", out[0]);
  /* The free comes after a collective still reading the buffer. */
  x = c->ops->mem_alloc(c, sizeof hx);
  y = dev_floats(s, 1024);
  for (i = 0; i < 1024; i++)
    hx[i] = (float)i;
  h2d(x, hx, sizeof hx);
  err = c->ops->all_reduce(c, x, y, 1024, PG_F32, PG_SUM, pg__now() + 60);
  c->ops->mem_free(c, x);
  if (!err)
    err = wait_last(c, 60);
  d2h(hx, y, sizeof hx);
  for (i = 0; i < 1024 && !k.fails; i++)
    EXPECT(&k, err == 0 && hx[i] == (float)(i * s->n), "an all-reduce "
           "whose input was freed right after it: err %d, [%d] = %g", err,
           i, hx[i]);
  /* Memory handed out while the NCCL stream is busy is the caller's only
   * once that stream got to the allocation (with 2 ranks, rank 1 joins
   * the all-reduce 200 ms late: the stream stays busy that long). */
  if (s->me == 1)
    usleep(200000);
  err = c->ops->all_reduce(c, y, y, 1024, PG_F32, PG_SUM, pg__now() + 60);
  q = c->ops->mem_alloc(c, bytes);
  h2d(q, h, bytes);
  if (!err)
    err = wait_last(c, 60);
  d2h(out, q, bytes);
  EXPECT(&k, err == 0 && all_bytes(out, bytes, 7), "memory from "
         "pg_mem_alloc written at once reads %#x, want 7", out[0]);
  c->ops->mem_free(c, q);
  c->ops->destroy(c);
  cudaFree(src);
  cudaFree(y);
  return k.fails ? 1 : 0;
}

/* Two ranks of one communicator on one GPU: NCCL's init refuses them
 * ("Duplicate GPU detected", src/init.cc), on a one-GPU machine as on
 * the fake's one device. */
static int rank_duplicate_gpu(const struct pg__setup *s)
{
  ncclComm_t c = NULL;
  int failed = raw_comm(s, "t/dup/id", &c);

  if (c)
    ncclCommAbort(c);
  if (!failed)
    fprintf(stderr, "rank %d: two ranks of one communicator on one GPU "
            "were let in\n", s->me);
  return failed ? 0 : 1;
}

/* A buffer on another device is refused with the reason, before NCCL
 * (which would fault on it) sees it. */
static int rank_other_device_buffer(const struct pg__setup *s)
{
  struct rank k = { .me = s->me };
  struct pg__comm *c = NULL;
  float *d;
  int err;

  if (pg__nccl_create(s, &c)) {
    fprintf(stderr, "rank %d: create: %s\n", s->me, pg_last_error());
    return 1;
  }
  other_device = true;
  if (cudaSetDevice((s->device + 1) % ndevices) ||
      cudaMalloc((void **)&d, 1024 * sizeof *d) ||
      cudaSetDevice(s->device))
    abort();
  err = c->ops->all_reduce(c, d, d, 1024, PG_F32, PG_SUM, pg__now() + 60);
  EXPECT(&k, err == -EINVAL && strstr(pg_last_error(), "another device"),
         "another device's buffer: %d (%s)", err, pg_last_error());
  c->ops->destroy(c);
  cudaSetDevice((s->device + 1) % ndevices);
  cudaFree(d);
  cudaSetDevice(s->device);
  return k.fails ? 1 : 0;
}

/* ---- ranks as processes ---------------------------------------------- */

typedef int (*rank_fn)(const struct pg__setup *s);

/* ndevices: devices the ranks share (the fake lets ranks share one
 * device, so the multi-rank tests run with one fake device too). */

/* Rank 0 serves the store and hands its port to the others through
 * pipes; each rank gets device `me` (mod the devices, on the fake). */
static int rank_main(rank_fn fn, int n, int me, int (*fds)[2],
                     double timeout)
{
  static const int ranks[MAXRANKS] = { 0, 1, 2, 3 };
  struct pg__setup s = setup1(ranks, n, me, fakecuda_is_fake && ndevices > 0
                              ? me % ndevices : me, timeout);
  pg_store_server *srv = NULL;
  pg_store *st = NULL;
  int port = 0, r, rc;

  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (me == 0) {
    if (pg_store_server_start("127.0.0.1", &port, &srv))
      port = -1;
    for (r = 1; r < n; r++)
      if (write(fds[r][1], &port, sizeof port) != sizeof port)
        return 1;
  } else if (read(fds[me][0], &port, sizeof port) != sizeof port) {
    return 1;
  }
  if (port < 0 || pg_store_connect("127.0.0.1", port, 30, &st)) {
    fprintf(stderr, "rank %d: store: %s\n", me, pg_last_error());
    return 1;
  }
  s.store = st;
  rc = fn(&s);
  if (fake_leaks) {
    char why[160];

    if (fake_leaks(why, sizeof why) > 0) {
      fprintf(stderr, "rank %d: fake CUDA/NCCL leak: %s\n", me, why);
      rc = 1;
    }
  }
  /* Note [contexts] (fakecuda.c): a thread of this rank that used CUDA
   * without cudaSetDevice made a context on another GPU. */
  if (fake_contexts && !other_device &&
      (fake_contexts() & ~(1u << s.device))) {
    fprintf(stderr, "rank %d (device %d): CUDA contexts on devices %#x: a "
            "thread used CUDA without cudaSetDevice\n", me, s.device,
            fake_contexts());
    rc = 1;
  }
  /* Rank 0's store outlives every rank's use of it (as pg_destroy's exit
   * barrier makes sure): the watchdogs read it until the end. */
  {
    char key[32];
    const char *keys[MAXRANKS];
    static char names[MAXRANKS][32];

    snprintf(key, sizeof key, "t/exit/%d", me);
    pg_store_set(st, key, "1", 1);
    for (r = 0; r < n; r++) {
      snprintf(names[r], sizeof names[r], "t/exit/%d", r);
      keys[r] = names[r];
    }
    if (me == 0)
      pg_store_wait(st, keys, (size_t)n, 60);
  }
  pg_store_close(st);
  if (srv)
    pg_store_server_stop(srv);
  return rc;
}

static void run_ranks(rank_fn fn, int n, double timeout)
{
  int fds[MAXRANKS][2];
  pid_t pids[MAXRANKS];
  int r, st;

  for (r = 0; r < n; r++)
    ck_assert_int_eq(pipe(fds[r]), 0);
  for (r = 0; r < n; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0)
      _exit(rank_main(fn, n, r, fds, timeout));
  }
  for (r = 0; r < n; r++) {
    ck_assert_int_eq(waitpid(pids[r], &st, 0), pids[r]);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "rank %d of %d failed (status %#x; its stderr says why)",
                  r, n, st);
  }
  for (r = 0; r < n; r++) {
    close(fds[r][0]);
    close(fds[r][1]);
  }
}

/* _i: the number of ranks (and GPUs). */
START_TEST(test_collectives)
{
  run_ranks(rank_collectives, _i, 60);
}
END_TEST

START_TEST(test_split)
{
  run_ranks(rank_split, 4, 60);
}
END_TEST

#ifdef HAVE_SHRINK
START_TEST(test_shrink_timeout)
{
  run_ranks(rank_shrink_timeout, 4, 60);
}
END_TEST

START_TEST(test_shrink_fail_spreads)
{
  run_ranks(rank_shrink_fail_spreads, 4, 60);
}
END_TEST
#endif

START_TEST(test_split_timeout)
{
  run_ranks(rank_split_timeout, 2, 60);
}
END_TEST

START_TEST(test_in_progress_peer)
{
  run_ranks(rank_in_progress_peer, 2, 60);
}
END_TEST

START_TEST(test_group_cross_order)
{
  run_ranks(rank_group_cross_order, 2, 60);
}
END_TEST

/* _i: the number of ranks. */
START_TEST(test_mem_order)
{
  run_ranks(rank_mem_order, _i, 60);
}
END_TEST

START_TEST(test_duplicate_gpu)
{
  run_ranks(rank_duplicate_gpu, 2, 60);
}
END_TEST

START_TEST(test_other_device_buffer)
{
  run_ranks(rank_other_device_buffer, 1, 60);
}
END_TEST

START_TEST(test_op_timeout)
{
  run_ranks(rank_op_timeout, 2, 20);
}
END_TEST

START_TEST(test_stream_order)
{
  run_ranks(rank_stream_order, _i, 60);
}
END_TEST

START_TEST(test_group_p2p)
{
  run_ranks(rank_group_p2p, 2, 60);
}
END_TEST

START_TEST(test_failure_spreads)
{
  run_ranks(rank_failure_spreads, 3, 120);
}
END_TEST

START_TEST(test_group_inplace_rs)
{
  run_ranks(rank_group_inplace_rs, 2, 60);
}
END_TEST

START_TEST(test_group_other_comm)
{
  run_ranks(rank_group_other_comm, 2, 60);
}
END_TEST

/* _i: 1 with TORCH_NCCL_ASYNC_ERROR_HANDLING=0. */
START_TEST(test_failure_other_comm)
{
  async_errors_off = _i;
  run_ranks(rank_failure_other_comm, 2, 60);
}
END_TEST

START_TEST(test_destroy_sees_peer)
{
  run_ranks(rank_destroy_sees_peer, 2, 120);
}
END_TEST

START_TEST(test_graph_capture)
{
  run_ranks(rank_graph_capture, 1, 60);
}
END_TEST

START_TEST(test_barrier_syncs)
{
  run_ranks(rank_barrier_syncs, _i, 60);
}
END_TEST

START_TEST(test_group_timeout)
{
  run_ranks(rank_group_timeout, 2, 3);
}
END_TEST

START_TEST(test_submit_failure_spreads)
{
  run_ranks(rank_submit_failure_spreads, 2, 60);
}
END_TEST

START_TEST(test_in_progress)
{
  run_ranks(rank_in_progress, _i, 60);
}
END_TEST

START_TEST(test_host_pointer)
{
  run_ranks(rank_host_pointer, 1, 60);
}
END_TEST

START_TEST(test_torch_blocking_wait)
{
  run_ranks(rank_torch_blocking_wait, 2, 60);
}
END_TEST

START_TEST(test_wait_timeout_aborts)
{
  run_ranks(rank_wait_timeout_aborts, 2, 60);
}
END_TEST

#ifdef HAVE_REVOKE
START_TEST(test_revoke_contract)
{
  run_ranks(rank_revoke_contract, 2, 60);
}
END_TEST
#endif

#ifdef HAVE_SHRINK
START_TEST(test_shrink_contract)
{
  run_ranks(rank_shrink_contract, 4, 60);
}
END_TEST

START_TEST(test_shrink_mismatch)
{
  run_ranks(rank_shrink_mismatch, 4, 60);
}
END_TEST

START_TEST(test_live_shrink)
{
  run_ranks(rank_live_shrink, 4, 600);
}
END_TEST
#endif

START_TEST(test_live_grow)
{
  run_ranks(rank_live_grow, 4, 60);
}
END_TEST

START_TEST(test_revoke_inflight)
{
  run_ranks(rank_revoke_inflight, 2, 600);
}
END_TEST

START_TEST(test_live_timeout)
{
  run_ranks(rank_live_timeout, 2, 60);
}
END_TEST

/* Note [device rule]: a worker at local rank 3 that sees one device
 * (CUDA_VISIBLE_DEVICES) uses device 0. */
START_TEST(test_one_visible_device)
{
  struct pg_options o = PG_OPTIONS_INIT;
  pg_group *g = NULL;
  int err;

  if (fakecuda_is_fake)
    setenv("FAKECUDA_DEVICES", "1", 1);
  else if (probe_devices() != 1)
    return;  /* needs the fake, or a machine with one GPU */
  o.rank = 0;
  o.world_size = 1;
  o.local_rank = 3;
  o.backend = PG_BACKEND_NCCL;
  err = pg_init(&o, &g);
  ck_assert_msg(err == 0, "local rank 3, one device: %d (%s)", err,
                pg_last_error());
  ck_assert_str_eq(pg_backend_name(g), "nccl");
  pg_destroy(g);
}
END_TEST

/* Only member 0 of 2 ever joins: init must give up at the timeout. */
START_TEST(test_init_timeout)
{
  static const int ranks[] = { 0, 1 };
  struct pg__setup s = setup1(ranks, 2, 0, 0, 2);
  pg_store_server *srv;
  pg_store *st;
  struct pg__comm *c = NULL;
  int port = 0, err;
  double t0;

  ck_assert_int_eq(pg_store_server_start("127.0.0.1", &port, &srv), 0);
  ck_assert_int_eq(pg_store_connect("127.0.0.1", port, 10, &st), 0);
  s.store = st;
  t0 = pg__now();
  err = pg__nccl_create(&s, &c);
  ck_assert_msg(err == -ETIMEDOUT, "got %d (%s)", err, pg_last_error());
  ck_assert_ptr_null(c);
  ck_assert_double_lt(pg__now() - t0, 10);
  ck_assert_str_ne(pg_last_error(), "");
  pg_store_close(st);
  pg_store_server_stop(srv);
}
END_TEST

#endif /* PG_WITH_NCCL */

static Suite *pg_nccl_suite(int ndev)
{
#ifdef PG_WITH_NCCL
  int nrank = ndev;

  ndevices = ndev;
  /* One rank per device, on the fake too: NCCL refuses two ranks of one
   * communicator on one GPU ("Duplicate GPU detected"), so one fake
   * device is a one-GPU machine. */
  if (nrank > MAXRANKS)
    nrank = MAXRANKS;
#endif
  Suite *s = suite_create("pg_nccl");
  TCase *tc = tcase_create("build");

  tcase_add_test(tc, test_built_matches_build);
  tcase_add_test(tc, test_create_without_device);
  tcase_add_test(tc, test_create_bad_member);
  tcase_add_test(tc, test_device_rule);
  suite_add_tcase(s, tc);
#ifdef PG_WITH_NCCL
  if (ndev >= 1) {
    tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_collectives, 1, 2);
    tcase_add_test(tc, test_init_timeout);
    tcase_add_loop_test(tc, test_stream_order, 1, 2);
    tcase_add_test(tc, test_one_visible_device);
    tcase_add_loop_test(tc, test_mem_order, 1, nrank >= 2 ? 3 : 2);
    if (ndev >= 2)
      tcase_add_test(tc, test_other_device_buffer);
    if (ndev == 1)
      tcase_add_test(tc, test_duplicate_gpu);
    if (nrank >= 2) {
      tcase_add_loop_test(tc, test_collectives,
                          nrank < MAXRANKS ? nrank : MAXRANKS,
                          (nrank < MAXRANKS ? nrank : MAXRANKS) + 1);
      tcase_add_test(tc, test_op_timeout);
      tcase_add_loop_test(tc, test_stream_order, 2, 3);
      tcase_add_test(tc, test_group_p2p);
      if (nrank >= 3 && fakecuda_is_fake)
        tcase_add_test(tc, test_failure_spreads);
      tcase_add_loop_test(tc, test_barrier_syncs, 2, 4);
      tcase_add_test(tc, test_group_inplace_rs);
      tcase_add_test(tc, test_group_other_comm);
      tcase_add_test(tc, test_group_cross_order);
      tcase_add_test(tc, test_split_timeout);
      if (nrank >= 4)
        tcase_add_test(tc, test_split);
      tcase_add_test(tc, test_group_timeout);
      tcase_add_test(tc, test_wait_timeout_aborts);
      tcase_add_test(tc, test_torch_blocking_wait);
      if (fakecuda_is_fake) {
        tcase_add_loop_test(tc, test_failure_other_comm, 0, 2);
        tcase_add_test(tc, test_destroy_sees_peer);
        tcase_add_test(tc, test_submit_failure_spreads);
        tcase_add_loop_test(tc, test_in_progress, 1, 3);
        tcase_add_test(tc, test_in_progress_peer);
      }
    }
    if (fakecuda_is_fake) {
      tcase_add_test(tc, test_graph_capture);
      tcase_add_test(tc, test_host_pointer);
    }
    suite_add_tcase(s, tc);
    /* Issue 24: live recovery (the contract tests run on a GPU too). */
    tc = tcase_create("live");
    tcase_set_timeout(tc, 600);
    if (nrank >= 2) {
#ifdef HAVE_REVOKE
      tcase_add_test(tc, test_revoke_contract);
#endif
      tcase_add_test(tc, test_revoke_inflight);
      tcase_add_test(tc, test_live_timeout);
    }
    if (nrank >= 4) {
#ifdef HAVE_SHRINK
      tcase_add_test(tc, test_shrink_contract);
      if (fakecuda_is_fake) {
        tcase_add_test(tc, test_shrink_mismatch);
        tcase_add_test(tc, test_shrink_fail_spreads);
      }
      tcase_add_test(tc, test_shrink_timeout);
      tcase_add_test(tc, test_live_shrink);
#endif
      tcase_add_test(tc, test_live_grow);
    }
    suite_add_tcase(s, tc);
  }
#endif
  if (ndev < 1)
    printf("SKIP: no CUDA device; NCCL collective tests need a GPU\n");
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(pg_nccl_suite(probe_devices()));
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
