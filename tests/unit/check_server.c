/* check_server.c -- rdzvd's libuv server with real sockets on loopback:
 * slow readers, many waiters, closes mid-round and during the exit
 * barrier, partial and oversized frames.
 *
 * The server runs on its own loop in a thread; the test is the clients,
 * with blocking sockets.  Every wait is for an observable event (a frame,
 * an end of file) with a generous bound, never a timing window. */
#include "server.h"

#include <arpa/inet.h>
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdzv_auth.h"
#include "rdzv_proto.h"

#define WAIT_MS 60000           /* bound on any wait: a hang, not a race */

/* ---- the server, in a thread ---- */

static struct {
  uv_loop_t loop;
  uv_async_t stop;
  struct rdzvd_server *s;
  pthread_t th;
  int port;
} S;

static void on_stop(uv_async_t *a)
{
  rdzvd_server_stop(S.s);
  uv_close((uv_handle_t *)a, NULL);
}

static void *serve(void *arg)
{
  (void)arg;
  uv_run(&S.loop, UV_RUN_DEFAULT);
  return NULL;
}

static void start_with(const struct rdzvd_server_opts *o)
{
  char err[256];
  int rc;

  ck_assert_int_eq(uv_loop_init(&S.loop), 0);
  rc = rdzvd_server_start(&S.loop, o, &S.s, err, sizeof err);
  ck_assert_msg(rc == 0, "server: %s", err);
  S.port = rdzvd_server_port(S.s);
  ck_assert_int_eq(uv_async_init(&S.loop, &S.stop, on_stop), 0);
  ck_assert_int_eq(pthread_create(&S.th, NULL, serve, NULL), 0);
}

static void teardown(void);

/* Restarts the server with other options (the fixture started one). */
static void restart_with(const struct rdzvd_server_opts *o)
{
  teardown();
  start_with(o);
}

static struct rdzvd_server_opts opts(void)
{
  struct rdzvd_server_opts o;

  memset(&o, 0, sizeof o);
  o.host = "127.0.0.1";
  return o;
}

static void setup(void)
{
  struct rdzvd_server_opts o;

  memset(&o, 0, sizeof o);
  o.host = "127.0.0.1";
  start_with(&o);
}

static void teardown(void)
{
  uv_async_send(&S.stop);
  pthread_join(S.th, NULL);
  ck_assert_int_eq(uv_loop_close(&S.loop), 0);
}

/* ---- clients ---- */

struct client {
  int fd;
  char *buf;
  size_t len, cap;
};

/* Connects; rcvbuf > 0 makes the socket's receive buffer that small (a
 * client that will not read). */
static struct client *cl_open(int rcvbuf)
{
  struct client *c = calloc(1, sizeof *c);
  struct sockaddr_in sa;
  int one = 1;

  ck_assert_ptr_nonnull(c);
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(c->fd, 0);
  if (rcvbuf > 0)
    setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)S.port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_msg(connect(c->fd, (struct sockaddr *)&sa, sizeof sa) == 0,
                "connect: %s", strerror(errno));
  return c;
}

static void cl_close(struct client *c)
{
  close(c->fd);
  free(c->buf);
  free(c);
}

/* Writes everything, or returns -errno (the server may have closed). */
static int cl_write(struct client *c, const void *p, size_t n)
{
  const char *b = p;

  while (n) {
    ssize_t k = send(c->fd, b, n, MSG_NOSIGNAL);

    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -errno;
    b += k;
    n -= (size_t)k;
  }
  return 0;
}

static void cl_send(struct client *c, const struct rdzv_proto_msg *m)
{
  char *data;
  size_t len;

  ck_assert_int_eq(rdzv_proto_encode(m, &data, &len), 0);
  ck_assert_int_eq(cl_write(c, data, len), 0);
  free(data);
}

/* The next frame: 0 and *m (free with rdzv_proto_msg_free), or -EPIPE at end of
 * file, -ETIMEDOUT after WAIT_MS. */
static int cl_recv(struct client *c, struct rdzv_proto_msg *m)
{
  char err[256];
  size_t flen;
  int rc;

  for (;;) {
    struct pollfd p = { c->fd, POLLIN, 0 };
    ssize_t k;

    rc = rdzv_proto_frame_peek(c->buf, c->len, &flen);
    ck_assert_int_ge(rc, 0);
    if (rc == 1) {
      rc =
          rdzv_proto_decode(c->buf + RDZV_PROTO_FRAME_HEADER,
                            flen - RDZV_PROTO_FRAME_HEADER, m, err, sizeof err);
      ck_assert_msg(rc == 0, "bad frame from the server: %s", err);
      memmove(c->buf, c->buf + flen, c->len - flen);
      c->len -= flen;
      return 0;
    }
    if (poll(&p, 1, WAIT_MS) <= 0)
      return -ETIMEDOUT;
    if (c->cap - c->len < 65536) {
      c->cap = c->cap * 2 + 65536;
      c->buf = realloc(c->buf, c->cap);
      ck_assert_ptr_nonnull(c->buf);
    }
    k = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (k <= 0)
      return -EPIPE;
    c->len += (size_t)k;
  }
}

/* Reads until a message of op arrives (others are skipped); fails the
 * test at end of file or after WAIT_MS. */
static void cl_expect(struct client *c, enum rdzv_proto_op op,
                      struct rdzv_proto_msg *out)
{
  struct rdzv_proto_msg m;
  int rc;

  for (;;) {
    rc = cl_recv(c, &m);
    ck_assert_msg(rc == 0, "waiting for %s: %s", rdzv_proto_op_name(op),
                  rc == -EPIPE ? "connection closed" : "timed out");
    if (m.op == op)
      break;
    ck_assert_msg(m.op != RDZV_PROTO_ERROR, "waiting for %s: error %s",
                  rdzv_proto_op_name(op), m.u.text.message);
    rdzv_proto_msg_free(&m);
  }
  if (out)
    *out = m;
  else
    rdzv_proto_msg_free(&m);
}

/* True once the server has closed c (whatever it sent before). */
static bool cl_closed_by_server(struct client *c)
{
  struct rdzv_proto_msg m;
  int rc;

  while ((rc = cl_recv(c, &m)) == 0)
    rdzv_proto_msg_free(&m);
  return rc == -EPIPE;
}

static void cl_join(struct client *c, const char *id, int i, int min,
                    int max)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  snprintf(m.u.join.id, sizeof m.u.join.id, "%s", id);
  snprintf(m.u.join.addr, sizeof m.u.join.addr, "127.0.0.1");
  snprintf(m.u.join.host, sizeof m.u.join.host, "h%d", i);
  m.u.join.pid = 1000 + i;
  m.u.join.nproc = 1;
  m.u.join.master_port = 29500 + i;
  rdzv_proto_conf_default(&m.u.join.conf);
  m.u.join.conf.min_nodes = min;
  m.u.join.conf.max_nodes = max;
  m.u.join.conf.last_call_timeout = 0;
  m.u.join.conf.keepalive_interval = 100;
  m.u.join.conf.keepalive_misses = 10;
  /* A restart left: a lost node starts a new round (with none, a 2:2 job
   * would end on it: Note [a lost node], rdzv_rules.h). */
  m.u.join.conf.max_restarts = 1;
  cl_send(c, &m);
}

static void cl_simple(struct client *c, enum rdzv_proto_op op)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = op;
  cl_send(c, &m);
}

/* Every message sent before this one has been handled: the server answers
 * in order. */
static void cl_sync(struct client *c)
{
  cl_simple(c, RDZV_PROTO_KEEPALIVE);
  cl_expect(c, RDZV_PROTO_PONG, NULL);
}

static void cl_kv(struct client *c, enum rdzv_proto_op op, const char *key,
                  const char *value, size_t len, double wait)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = op;
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "%s", key);
  m.u.kv.value = (char *)value;
  m.u.kv.value_len = len;
  m.u.kv.wait = wait;
  cl_send(c, &m);
}

static void cl_barrier(struct client *c, const char *name, int round)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_BARRIER;
  snprintf(m.u.barrier.name, sizeof m.u.barrier.name, "%s", name);
  m.u.barrier.round = round;
  cl_send(c, &m);
}

/* A fresh connection asks for the status: the server is up and answers.
 * Returns the parsed reply (cJSON_Delete it). */
static cJSON *status_now(void)
{
  struct client *c = cl_open(0);
  struct rdzv_proto_msg m;
  cJSON *st;

  cl_simple(c, RDZV_PROTO_STATUS);
  cl_expect(c, RDZV_PROTO_STATUS_REPLY, &m);
  st = cJSON_Parse(m.u.status_json);
  ck_assert_ptr_nonnull(st);
  rdzv_proto_msg_free(&m);
  cl_close(c);
  return st;
}

static double jnum(const cJSON *o, const char *k)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

  ck_assert_msg(cJSON_IsNumber(v), "no number %s", k);
  return v->valuedouble;
}

/* A figure of the server's own in the status reply. */
static double server_figure(const char *name)
{
  cJSON *st = status_now();
  double v = jnum(cJSON_GetObjectItemCaseSensitive(st, "server"), name);

  cJSON_Delete(st);
  return v;
}

static void server_alive(void)
{
  cJSON_Delete(status_now());
}

/* The same for a server with the shared secret k: a full handshake, then
 * a status query answered. */
static void server_alive_secret(const struct rdzv_auth_secret *k)
{
  struct client *c = cl_open(0);
  struct rdzv_auth_client cs;
  struct rdzv_proto_msg m, reply;
  char err[256];
  int rc;

  ck_assert_int_eq(rdzv_auth_client_hello(&cs, &m), 0);
  cl_send(c, &m);
  do {
    ck_assert_int_eq(cl_recv(c, &m), 0);
    rc = rdzv_auth_client_step(&cs, k, &m, &reply, err, sizeof err);
    rdzv_proto_msg_free(&m);
    ck_assert_msg(rc >= 0, "%s", err);
    if (rc == 1)
      cl_send(c, &reply);
  } while (rc == 1);
  cl_simple(c, RDZV_PROTO_STATUS);
  cl_expect(c, RDZV_PROTO_STATUS_REPLY, NULL);
  cl_close(c);
}

/* Two nodes a, b of job id, round 0 running. */
static void pair(const char *id, struct client **a, struct client **b)
{
  *a = cl_open(0);
  *b = cl_open(0);
  cl_join(*a, id, 0, 2, 2);
  cl_expect(*a, RDZV_PROTO_WAITING, NULL);
  cl_join(*b, id, 1, 2, 2);
  cl_expect(*a, RDZV_PROTO_ROUND, NULL);
  cl_expect(*b, RDZV_PROTO_ROUND, NULL);
}

/* ---- tests ---- */

/* The use-after-free: while the machine answers 400 waiters of a
 * node that never reads, the node passes the output limit; its close must
 * wait until the machine is done walking its waiters. */
START_TEST(slow_reader_with_many_waiters)
{
  struct client *a, *b;
  char *value = malloc(RDZV_PROTO_MAX_VALUE);
  int i;

  ck_assert_ptr_nonnull(value);
  memset(value, 'v', RDZV_PROTO_MAX_VALUE);
  a = cl_open(4096);
  b = cl_open(0);
  cl_join(a, "uaf", 0, 2, 2);
  cl_expect(a, RDZV_PROTO_WAITING, NULL);
  cl_join(b, "uaf", 1, 2, 2);
  cl_expect(a, RDZV_PROTO_ROUND, NULL);
  cl_expect(b, RDZV_PROTO_ROUND, NULL);
  for (i = 0; i < 400; i++)
    cl_kv(a, RDZV_PROTO_KV_GET, "k", NULL, 0, 1000);
  cl_sync(a);
  /* From here on a never reads: 400 x 64 KiB exceed the output limit. */
  cl_kv(b, RDZV_PROTO_KV_SET, "k", value, RDZV_PROTO_MAX_VALUE, 0);
  cl_expect(b, RDZV_PROTO_RESTART, NULL);       /* a is gone: a lost node */
  server_alive();
  cl_close(a);
  cl_close(b);
  free(value);
}
END_TEST

/* Fifty nodes wait for one key; one SET answers them all. */
START_TEST(many_waiters_answered)
{
  enum { N = 50 };
  struct client *c[N];
  struct rdzv_proto_msg m;
  int i;

  for (i = 0; i < N; i++) {
    c[i] = cl_open(0);
    cl_join(c[i], "many", i, N + 1, N + 1);
    cl_expect(c[i], RDZV_PROTO_WAITING, NULL);
    cl_kv(c[i], RDZV_PROTO_KV_GET, "go", NULL, 0, 1000);
    cl_sync(c[i]);
  }
  cl_kv(c[0], RDZV_PROTO_KV_SET, "go", "yes", 3, 0);
  for (i = 0; i < N; i++) {
    cl_expect(c[i], RDZV_PROTO_KV_VALUE, &m);
    ck_assert(m.u.kv.found);
    ck_assert_str_eq(m.u.kv.value, "yes");
    rdzv_proto_msg_free(&m);
  }
  for (i = 0; i < N; i++)
    cl_close(c[i]);
  server_alive();
}
END_TEST

/* A node with waiters closes mid-round: the survivor restarts, and a SET
 * afterwards answers nobody's freed waiter. */
START_TEST(close_mid_round)
{
  struct client *a, *b;

  pair("mid", &a, &b);
  cl_kv(a, RDZV_PROTO_KV_GET, "k", NULL, 0, 1000);
  cl_sync(a);
  cl_close(a);
  cl_expect(b, RDZV_PROTO_RESTART, NULL);
  cl_kv(b, RDZV_PROTO_KV_SET, "k", "1", 1, 0);
  cl_sync(b);
  server_alive();
  cl_close(b);
}
END_TEST

/* A node closes while the other waits in the exit barrier: a lost node
 * before the barrier passed, so the waiting one restarts. */
START_TEST(close_during_exit_barrier)
{
  struct client *a, *b;

  pair("exit1", &a, &b);
  cl_barrier(a, "exit", 0);
  cl_sync(a);
  cl_close(b);
  cl_expect(a, RDZV_PROTO_RESTART, NULL);
  server_alive();
  cl_close(a);
}
END_TEST

/* Both pass the exit barrier, then close without LEAVE: the job finishes
 * and the daemon forgets nobody twice. */
START_TEST(close_after_exit_barrier)
{
  struct client *a, *b;
  cJSON *st;

  pair("exit2", &a, &b);
  cl_barrier(a, "exit", 0);
  cl_barrier(b, "exit", 0);
  cl_expect(a, RDZV_PROTO_BARRIER_DONE, NULL);
  cl_expect(b, RDZV_PROTO_BARRIER_DONE, NULL);
  cl_close(a);
  cl_close(b);
  /* The nodes are gone once the daemon has seen both closes. */
  for (;;) {
    st = status_now();
    if (jnum(st, "nodes") == 0)
      break;
    cJSON_Delete(st);
    usleep(10000);
  }
  cJSON_Delete(st);
}
END_TEST

/* A final failure closes the job while one of its nodes never reads: the
 * CLOSED loop drops nodes it is still walking. */
START_TEST(final_failure_with_slow_reader)
{
  struct client *a, *b;
  struct rdzv_proto_msg m;
  char *value = malloc(RDZV_PROTO_MAX_VALUE);
  int i;

  ck_assert_ptr_nonnull(value);
  memset(value, 'w', RDZV_PROTO_MAX_VALUE);
  a = cl_open(4096);
  b = cl_open(0);
  cl_join(a, "fin", 0, 2, 2);
  cl_expect(a, RDZV_PROTO_WAITING, NULL);
  cl_join(b, "fin", 1, 2, 2);
  cl_expect(a, RDZV_PROTO_ROUND, NULL);
  cl_expect(b, RDZV_PROTO_ROUND, NULL);
  cl_kv(b, RDZV_PROTO_KV_SET, "big", value, RDZV_PROTO_MAX_VALUE, 0);
  for (i = 0; i < 200; i++)
    cl_kv(a, RDZV_PROTO_KV_GET, "big", NULL, 0, 0);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_FAILURE;
  m.u.failure.final = true;
  snprintf(m.u.failure.message, sizeof m.u.failure.message, "boom");
  cl_send(b, &m);
  cl_expect(b, RDZV_PROTO_CLOSED, NULL);
  ck_assert(cl_closed_by_server(b));
  server_alive();
  cl_close(a);
  cl_close(b);
  free(value);
}
END_TEST

/* A frame sent one byte at a time is one frame. */
START_TEST(partial_frames_reassembled)
{
  struct client *c = cl_open(0);
  struct rdzv_proto_msg m;
  char *data;
  size_t len, i;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_STATUS;
  ck_assert_int_eq(rdzv_proto_encode(&m, &data, &len), 0);
  for (i = 0; i < len; i++) {
    ck_assert_int_eq(cl_write(c, data + i, 1), 0);
    if (i % 3 == 0)
      usleep(1000);               /* separate reads, most of the time */
  }
  free(data);
  cl_expect(c, RDZV_PROTO_STATUS_REPLY, &m);
  rdzv_proto_msg_free(&m);
  cl_close(c);
}
END_TEST

/* A header announcing more than the frame limit: ERROR, then closed. */
START_TEST(oversized_frame_refused)
{
  struct client *c = cl_open(0);
  unsigned char hdr[4] = { 0x7f, 0xff, 0xff, 0xff };
  struct rdzv_proto_msg m;

  ck_assert_int_eq(cl_write(c, hdr, sizeof hdr), 0);
  cl_expect(c, RDZV_PROTO_ERROR, &m);
  ck_assert_int_eq(m.u.text.code, RDZV_PROTO_ERR_BAD_REQUEST);
  ck_assert(cl_closed_by_server(c));
  cl_close(c);
  server_alive();
}
END_TEST

/* Half a frame, then the client goes: nothing leaks (ASan), the server
 * stays. */
START_TEST(partial_frame_then_close)
{
  struct client *c = cl_open(0);
  unsigned char hdr[4] = { 0, 0, 0x10, 0 };
  char body[100];

  memset(body, '{', sizeof body);
  ck_assert_int_eq(cl_write(c, hdr, sizeof hdr), 0);
  ck_assert_int_eq(cl_write(c, body, sizeof body), 0);
  server_alive();
  cl_close(c);
  server_alive();
}
END_TEST

/* ---- limits (Note [budgets]) ---- */

/* A KEEPALIVE frame of about body bytes (an ignored "pad" field). */
static char *padded_keepalive(size_t body, size_t *len)
{
  const char *head = "{\"v\":2,\"op\":\"keepalive\",\"pad\":\"";
  size_t hl = strlen(head), pad = body - hl - 2;
  char *f = malloc(RDZV_PROTO_FRAME_HEADER + body);

  ck_assert_ptr_nonnull(f);
  f[0] = (char)(body >> 24);
  f[1] = (char)(body >> 16);
  f[2] = (char)(body >> 8);
  f[3] = (char)body;
  memcpy(f + 4, head, hl);
  memset(f + 4 + hl, 'p', pad);
  memcpy(f + 4 + hl + pad, "\"}", 2);
  *len = RDZV_PROTO_FRAME_HEADER + body;
  return f;
}

START_TEST(too_many_connections)
{
  struct rdzvd_server_opts o = opts();
  struct client *a, *b, *c;
  struct rdzv_proto_msg m;
  int tries;

  o.io.max_conns = 2;
  o.io.hello_timeout = 1e6;             /* only the limit may close c */
  restart_with(&o);
  a = cl_open(0);
  b = cl_open(0);
  cl_simple(a, RDZV_PROTO_STATUS);
  cl_expect(a, RDZV_PROTO_STATUS_REPLY, NULL);
  cl_simple(b, RDZV_PROTO_STATUS);
  cl_expect(b, RDZV_PROTO_STATUS_REPLY, NULL);
  c = cl_open(0);                       /* the third: closed at once */
  ck_assert(cl_closed_by_server(c));
  cl_close(c);
  cl_close(a);
  /* Once the daemon has seen a go, there is room again. */
  for (tries = 0;; tries++) {
    ck_assert_int_lt(tries, 1000);
    c = cl_open(0);
    cl_simple(c, RDZV_PROTO_STATUS);
    if (cl_recv(c, &m) == 0) {
      ck_assert_int_eq(m.op, RDZV_PROTO_STATUS_REPLY);
      rdzv_proto_msg_free(&m);
      cl_close(c);
      break;
    }
    cl_close(c);
    usleep(10000);
  }
  cl_close(b);
}
END_TEST

/* Note [tenant share]: one peer address holds at most
 * max_conns_per_peer connections; the next is told why ("error limit"
 * naming the flag) and closed; another address is not affected. */
START_TEST(too_many_connections_per_peer)
{
  struct rdzvd_server_opts o = opts();
  struct client *a, *b, *c, *d;
  struct sockaddr_in me, sa;
  struct rdzv_proto_msg m;

  o.io.max_conns_per_peer = 2;
  o.io.hello_timeout = 1e6;
  restart_with(&o);
  a = cl_open(0);
  b = cl_open(0);
  cl_simple(a, RDZV_PROTO_STATUS);
  cl_expect(a, RDZV_PROTO_STATUS_REPLY, NULL);
  cl_simple(b, RDZV_PROTO_STATUS);
  cl_expect(b, RDZV_PROTO_STATUS_REPLY, NULL);
  c = cl_open(0);
  ck_assert_int_eq(cl_recv(c, &m), 0);
  ck_assert_int_eq(m.op, RDZV_PROTO_ERROR);
  ck_assert_int_eq(m.u.text.code, RDZV_PROTO_ERR_LIMIT);
  ck_assert_msg(strstr(m.u.text.message, "too many connections from "
                       "127.0.0.1 (2: rdzvd --max-conns-per-peer)"), "%s",
                m.u.text.message);
  rdzv_proto_msg_free(&m);
  ck_assert(cl_closed_by_server(c));
  cl_close(c);
  /* Another address (127.0.0.2) is served. */
  d = calloc(1, sizeof *d);
  ck_assert_ptr_nonnull(d);
  d->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  memset(&me, 0, sizeof me);
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(0x7f000002);
  ck_assert_int_eq(bind(d->fd, (struct sockaddr *)&me, sizeof me), 0);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)S.port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(d->fd, (struct sockaddr *)&sa, sizeof sa), 0);
  cl_simple(d, RDZV_PROTO_STATUS);
  cl_expect(d, RDZV_PROTO_STATUS_REPLY, NULL);
  cl_close(d);
  cl_close(b);
  cl_close(a);
}
END_TEST

/* A connection that does not join within hello_timeout is closed; one
 * that joined stays. */
START_TEST(hello_timeout_drops_silent)
{
  struct rdzvd_server_opts o = opts();
  struct client *joined, *silent;

  o.io.hello_timeout = 0.3;
  restart_with(&o);
  joined = cl_open(0);
  silent = cl_open(0);
  cl_join(joined, "hello", 0, 2, 2);
  cl_expect(joined, RDZV_PROTO_WAITING, NULL);
  ck_assert(cl_closed_by_server(silent));
  cl_sync(joined);
  cl_close(silent);
  cl_close(joined);
}
END_TEST

/* Until it joins, a connection's frames are small; after, they may be
 * as large as the protocol allows. */
START_TEST(prejoin_frame_limit)
{
  struct rdzvd_server_opts o = opts();
  struct client *c;
  struct rdzv_proto_msg m;
  char *f;
  size_t len;

  o.io.prejoin_frame = 1000;
  restart_with(&o);
  c = cl_open(0);
  f = padded_keepalive(2000, &len);
  ck_assert_int_eq(cl_write(c, f, RDZV_PROTO_FRAME_HEADER),
                   0); /* header only */
  cl_expect(c, RDZV_PROTO_ERROR, &m);
  ck_assert_msg(strstr(m.u.text.message, "frame too large") != NULL, "%s",
                m.u.text.message);
  ck_assert(cl_closed_by_server(c));
  cl_close(c);
  c = cl_open(0);
  cl_join(c, "big", 0, 2, 2);
  cl_expect(c, RDZV_PROTO_WAITING, NULL);
  ck_assert_int_eq(cl_write(c, f, len), 0);
  cl_expect(c, RDZV_PROTO_PONG, NULL);
  free(f);
  cl_close(c);
}
END_TEST

/* Two partial frames larger together than the input budget: the second
 * waits (reading paused), is not dropped, and completes once the first
 * has. */
START_TEST(input_budget_pauses)
{
  struct rdzvd_server_opts o = opts();
  struct client *a, *b;
  char *f;
  size_t len, half;

  o.io.input_budget = 100 << 10;
  restart_with(&o);
  pair("budget", &a, &b);
  f = padded_keepalive(80 << 10, &len);
  half = len / 2;
  ck_assert_int_eq(cl_write(a, f, half), 0);
  ck_assert_int_eq(cl_write(b, f, half), 0);
  server_alive();
  ck_assert_int_eq(cl_write(a, f + half, len - half), 0);
  ck_assert_int_eq(cl_write(b, f + half, len - half), 0);
  cl_expect(a, RDZV_PROTO_PONG, NULL);
  cl_expect(b, RDZV_PROTO_PONG, NULL);
  free(f);
  cl_close(a);
  cl_close(b);
}
END_TEST

/* Replies nobody reads, below one connection's limit but above the
 * daemon's output budget: that connection goes, the daemon stays. */
START_TEST(output_budget_drops_slow_reader)
{
  struct rdzvd_server_opts o = opts();
  struct client *a, *b;
  char *value = malloc(RDZV_PROTO_MAX_VALUE);
  int i;

  ck_assert_ptr_nonnull(value);
  memset(value, 'v', RDZV_PROTO_MAX_VALUE);
  o.io.output_budget = 1 << 20;
  restart_with(&o);
  a = cl_open(4096);
  b = cl_open(0);
  cl_join(a, "out", 0, 2, 2);
  cl_expect(a, RDZV_PROTO_WAITING, NULL);
  cl_join(b, "out", 1, 2, 2);
  cl_expect(a, RDZV_PROTO_ROUND, NULL);
  cl_expect(b, RDZV_PROTO_ROUND, NULL);
  for (i = 0; i < 60; i++)              /* 60 x 64 KiB < 8 MiB */
    cl_kv(a, RDZV_PROTO_KV_GET, "k", NULL, 0, 1000);
  cl_sync(a);
  cl_kv(b, RDZV_PROTO_KV_SET, "k", value, RDZV_PROTO_MAX_VALUE, 0);
  cl_expect(b, RDZV_PROTO_RESTART, NULL);
  server_alive();
  cl_close(a);
  cl_close(b);
  free(value);
}
END_TEST

/* A member that never reads and floods tiny requests is dropped by what
 * its unwritten replies cost the daemon (each one a write request and an
 * allocation besides its bytes), not by their bytes alone: 1500 pongs
 * are some 36 KiB of bytes, under conn_output, but far more memory. */
START_TEST(tiny_replies_count_their_cost)
{
  struct rdzvd_server_opts o = opts();
  struct client *a;
  struct rdzv_proto_msg m;
  char *frame, *batch;
  size_t flen;
  int i;

  o.io.conn_output = 64 << 10;
  restart_with(&o);
  a = cl_open(4096);
  cl_join(a, "tiny", 0, 1, 1);
  cl_expect(a, RDZV_PROTO_ROUND, NULL);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KEEPALIVE;
  ck_assert_int_eq(rdzv_proto_encode(&m, &frame, &flen), 0);
  ck_assert_uint_lt(1500 * flen, 64 << 10);
  batch = malloc(1500 * flen);
  ck_assert_ptr_nonnull(batch);
  for (i = 0; i < 1500; i++)
    memcpy(batch + (size_t)i * flen, frame, flen);
  cl_write(a, batch, 1500 * flen);
  ck_assert(cl_closed_by_server(a));
  server_alive();
  cl_close(a);
  free(batch);
  free(frame);
}
END_TEST

/* Large frames that never complete, holding all the input budget they
 * can get, still leave room for a newcomer's JOIN.  Each hog announces a
 * frame of half the budget and sends only its first bytes: the frame's
 * reservation is what it holds. */
START_TEST(stalled_large_frames_leave_room_for_joins)
{
  enum { HOGS = 2, BUDGET = 256 << 10 };
  struct rdzvd_server_opts o = opts();
  struct client *hog[HOGS], *c;
  char *f;
  size_t len;
  int i;

  o.io.input_budget = BUDGET;
  restart_with(&o);
  f = padded_keepalive(BUDGET / 2 - RDZV_PROTO_FRAME_HEADER, &len);
  for (i = 0; i < HOGS; i++) {
    hog[i] = cl_open(0);
    cl_join(hog[i], "hogs", i, HOGS + 2, HOGS + 2);
    cl_expect(hog[i], RDZV_PROTO_WAITING, NULL);
    ck_assert_int_eq(cl_write(hog[i], f, 14), 0);
    while (server_figure("input_bytes") < i * (BUDGET / 2) + 14)
      usleep(10000);
    /* More bytes: the frame asks for its reservation. */
    ck_assert_int_eq(cl_write(hog[i], f + 14, 10), 0);
    /* Observed: the frame got its reservation, or had to wait. */
    while (server_figure("input_bytes") < (i + 1) * (BUDGET / 2) &&
           server_figure("reading_paused") < 1)
      usleep(10000);
  }
  c = cl_open(0);
  cl_join(c, "hogs", HOGS, HOGS + 2, HOGS + 2);
  cl_expect(c, RDZV_PROTO_WAITING, NULL);
  cl_close(c);
  for (i = 0; i < HOGS; i++)
    cl_close(hog[i]);
  free(f);
}
END_TEST


/* ---- pipelined frames and the shared-secret handshake (§4.3) ---- */

static struct rdzv_auth_secret test_secret(void)
{
  struct rdzv_auth_secret k;

  memset(&k, 0, sizeof k);
  memset(k.key, 's', 32);
  k.len = 32;
  return k;
}

/* A server with a shared secret (the fixture started one without). */
static void restart_with_secret(struct rdzv_auth_secret *k)
{
  struct rdzvd_server_opts o = opts();

  o.secret = k;
  o.io.hello_timeout = 1e6;     /* only the handshake may close anyone */
  restart_with(&o);
}

/* Appends m's frame to *buf (*len bytes so far). */
static void frame_append(char **buf, size_t *len,
                         const struct rdzv_proto_msg *m)
{
  char *f;
  size_t flen;

  ck_assert_int_eq(rdzv_proto_encode(m, &f, &flen), 0);
  *buf = realloc(*buf, *len + flen);
  ck_assert_ptr_nonnull(*buf);
  memcpy(*buf + *len, f, flen);
  *len += flen;
  free(f);
}

static void join_msg(struct rdzv_proto_msg *m, const char *id)
{
  memset(m, 0, sizeof *m);
  m->op = RDZV_PROTO_JOIN;
  snprintf(m->u.join.id, sizeof m->u.join.id, "%s", id);
  snprintf(m->u.join.addr, sizeof m->u.join.addr, "127.0.0.1");
  snprintf(m->u.join.host, sizeof m->u.join.host, "h0");
  m->u.join.pid = 1000;
  m->u.join.nproc = 1;
  m->u.join.master_port = 29500;
  rdzv_proto_conf_default(&m->u.join.conf);
  m->u.join.conf.min_nodes = 2;
  m->u.join.conf.max_nodes = 2;
}

/* Appends a frame of body json to *buf. */
static void raw_append(char **buf, size_t *len, const char *json)
{
  size_t n = strlen(json);

  *buf = realloc(*buf, *len + RDZV_PROTO_FRAME_HEADER + n);
  ck_assert_ptr_nonnull(*buf);
  (*buf)[*len] = (*buf)[*len + 1] = 0;
  (*buf)[*len + 2] = (char)(n >> 8);
  (*buf)[*len + 3] = (char)(n & 0xff);
  memcpy(*buf + *len + RDZV_PROTO_FRAME_HEADER, json, n);
  *len += RDZV_PROTO_FRAME_HEADER + n;
}

/* hello and then the frame second (its JSON body), in one write: the
 * challenge, then error auth (its message holding why) and the close,
 * with no more bytes sent (issue 19, item 7: the second frame used to
 * wait for more bytes). */
static void pipelined_behind_hello(const char *second, const char *why)
{
  struct rdzv_auth_secret k = test_secret();
  struct rdzv_auth_client cs;
  struct client *c;
  struct rdzv_proto_msg m;
  char *buf = NULL;
  size_t len = 0;

  restart_with_secret(&k);
  c = cl_open(0);
  ck_assert_int_eq(rdzv_auth_client_hello(&cs, &m), 0);
  frame_append(&buf, &len, &m);
  raw_append(&buf, &len, second);
  ck_assert_int_eq(cl_write(c, buf, len), 0);
  free(buf);
  ck_assert_int_eq(cl_recv(c, &m), 0);
  ck_assert_int_eq(m.op, RDZV_PROTO_CHALLENGE);
  rdzv_proto_msg_free(&m);
  ck_assert_msg(cl_recv(c, &m) == 0, "no answer to the frame behind hello");
  ck_assert_int_eq(m.op, RDZV_PROTO_ERROR);
  ck_assert_int_eq(m.u.text.code, RDZV_PROTO_ERR_AUTH);
  ck_assert_msg(strstr(m.u.text.message, why), "refused with '%s'",
                m.u.text.message);
  rdzv_proto_msg_free(&m);
  ck_assert(cl_closed_by_server(c));
  cl_close(c);
  server_alive_secret(&k);
}

START_TEST(join_behind_hello_refused_at_once)
{
  /* Small enough for the pre-auth frame limit. */
  pipelined_behind_hello("{\"v\":2,\"op\":\"join\",\"id\":\"pipelined\","
                         "\"nproc\":1,\"master_port\":29500}",
                         "handshake out of order");
}
END_TEST

/* An auth sent before the challenge was seen cannot hold the proof (it
 * needs the server's nonce): refused at once. */
START_TEST(auth_behind_hello_refused_at_once)
{
  pipelined_behind_hello("{\"v\":2,\"op\":\"auth\",\"mac\":\""
                         "abababababababababababababababab"
                         "abababababababababababababababab\"}",
                         "auth sent before the challenge");
}
END_TEST

/* Frames sent right behind a valid auth, in the same write, are the
 * session's first: handled as soon as the auth succeeds. */
START_TEST(join_behind_auth_served)
{
  struct rdzv_auth_secret k = test_secret();
  struct rdzv_auth_client cs;
  struct client *c;
  struct rdzv_proto_msg m, reply;
  char *buf = NULL, err[256];
  size_t len = 0;

  restart_with_secret(&k);
  c = cl_open(0);
  ck_assert_int_eq(rdzv_auth_client_hello(&cs, &m), 0);
  cl_send(c, &m);
  ck_assert_int_eq(cl_recv(c, &m), 0);
  ck_assert_int_eq(rdzv_auth_client_step(&cs, &k, &m, &reply, err, sizeof err),
                   1);
  rdzv_proto_msg_free(&m);
  frame_append(&buf, &len, &reply);
  join_msg(&m, "behind-auth");
  frame_append(&buf, &len, &m);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KEEPALIVE;
  frame_append(&buf, &len, &m);
  ck_assert_int_eq(cl_write(c, buf, len), 0);
  free(buf);
  ck_assert_int_eq(cl_recv(c, &m), 0);
  ck_assert_int_eq(rdzv_auth_client_step(&cs, &k, &m, &reply, err, sizeof err),
                   0);
  rdzv_proto_msg_free(&m);
  /* The PONG at once; the JOIN's WAITING once the JOINs settle (Note
   * [settled waiting], rdzvd/rdzv_waiting.c). */
  cl_expect(c, RDZV_PROTO_PONG, NULL);
  cl_expect(c, RDZV_PROTO_WAITING, NULL);
  cl_close(c);
}
END_TEST

static Suite *server_suite(void)
{
  Suite *s = suite_create("server");
  TCase *tc = tcase_create("server");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, slow_reader_with_many_waiters);
  tcase_add_test(tc, many_waiters_answered);
  tcase_add_test(tc, close_mid_round);
  tcase_add_test(tc, close_during_exit_barrier);
  tcase_add_test(tc, close_after_exit_barrier);
  tcase_add_test(tc, final_failure_with_slow_reader);
  tcase_add_test(tc, partial_frames_reassembled);
  tcase_add_test(tc, oversized_frame_refused);
  tcase_add_test(tc, partial_frame_then_close);
  tcase_add_test(tc, too_many_connections);
  tcase_add_test(tc, too_many_connections_per_peer);
  tcase_add_test(tc, hello_timeout_drops_silent);
  tcase_add_test(tc, prejoin_frame_limit);
  tcase_add_test(tc, input_budget_pauses);
  tcase_add_test(tc, output_budget_drops_slow_reader);
  tcase_add_test(tc, tiny_replies_count_their_cost);
  tcase_add_test(tc, stalled_large_frames_leave_room_for_joins);
  tcase_add_test(tc, join_behind_hello_refused_at_once);
  tcase_add_test(tc, auth_behind_hello_refused_at_once);
  tcase_add_test(tc, join_behind_auth_served);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(server_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
