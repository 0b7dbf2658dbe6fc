/* abuse_client.c -- hostile clients for scripts/bench/abuse: each attack
 * of issues 8 and 19 (and a few more) against a live rdzvd, one per run.
 * Blocking sockets; every wait is bounded. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdzv_auth.h"
#include "rdzv_proto.h"

static const char usage[] =
  "usage: abuse_client ATTACK --host H --port P [--secret-file PATH]\n"
  "                    [--rdzvd-pid PID] [--count N] [--wait S]\n"
  "                    [--keepalive S] [--metrics-port P]\n"
  "                    [--rdzvd PATH --log PATH]\n"
  "\n"
  "ATTACK: ping kv_waiters partial_frames lockout status_many\n"
  "        waiting_final silent junk kv_fill pong_flood\n"
  "        member_partial_frames waiting_list pipelined_hello\n"
  "        metrics_lockout metrics_flood (need --metrics-port)\n"
  "        connect_flood job_squat\n"
  "        control_bytes (needs --rdzvd, the binary for --status, and\n"
  "        --log, the daemon's log)\n"
  "\n"
  "Prints one line: attack=NAME survived=0|1 rss_kb=K note=\"...\" and\n"
  "exits 0 (survived), 1 (not survived) or 2 (the client itself failed).\n"
  "With --secret-file, the attacks that need a member of a job (an\n"
  "insider) authenticate; strangers (partial_frames, silent, junk,\n"
  "pipelined_hello, metrics_lockout) never do.\n";

static struct {
  const char *host;
  int port;
  struct rdzv_auth_secret secret;
  int rdzvd_pid;
  long count;
  double wait;
  double keepalive;
  long kv_send_failed;
  int metrics_port;
  const char *secret_file;
  const char *rdzvd_bin;      /* for --status */
  const char *log_path;       /* the daemon's log */
  struct sockaddr_storage addr;
  socklen_t addrlen;
  long rss_peak;
  char note[512];
} A;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2),
                                                     noreturn));

static void die(const char *fmt, ...)
{
  va_list ap;

  fputs("abuse_client: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(2);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void note(const char *fmt, ...)
{
  size_t n = strlen(A.note);
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(A.note + n, sizeof A.note - n, fmt, ap);
  va_end(ap);
}

static double now_s(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_kb(void)
{
  char path[64], line[256];
  long kb = -1;
  FILE *f;

  if (!A.rdzvd_pid)
    return -1;
  snprintf(path, sizeof path, "/proc/%d/status", A.rdzvd_pid);
  f = fopen(path, "r");
  if (!f)
    return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kb) == 1)
      break;
  fclose(f);
  if (kb > A.rss_peak)
    A.rss_peak = kb;
  return kb;
}

/* ---- connections ---- */

/* A connected blocking socket; rcvbuf > 0 shrinks the receive buffer
 * first (a client that does not read fills it quickly).  Returns -1 when
 * the connection is refused (the daemon is full or gone). */
static int dial_raw(int rcvbuf)
{
  int fd = socket(A.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

  if (fd < 0)
    die("socket: %s", strerror(errno));
  if (rcvbuf > 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, (struct sockaddr *)&A.addr, A.addrlen) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* An insider: connected and authenticated when there is a secret. */
static int dial(int rcvbuf)
{
  char err[512];
  int fd = dial_raw(rcvbuf);

  if (fd < 0)
    return -1;
  if (A.secret.len &&
      rdzv_auth_handshake_fd(fd, &A.secret, 5000, err, sizeof err) != 0) {
    close(fd);
    note("handshake: %s; ", err);
    return -1;
  }
  return fd;
}

static int write_all(int fd, const void *p, size_t n)
{
  const char *c = p;
  ssize_t w;

  while (n > 0) {
    w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int send_msg(int fd, const struct rdzv_proto_msg *m)
{
  char *frame;
  size_t len;
  int rc = rdzv_proto_encode(m, &frame, &len);

  if (rc)
    die("encode %s: %s", rdzv_proto_op_name(m->op), strerror(-rc));
  rc = write_all(fd, frame, len);
  free(frame);
  return rc;
}

static int read_full(int fd, char *buf, size_t n, double deadline)
{
  struct pollfd p = { fd, POLLIN, 0 };
  size_t len = 0;
  ssize_t r;
  int ms;

  while (len < n) {
    ms = (int)((deadline - now_s()) * 1000);
    if (ms <= 0 || poll(&p, 1, ms) <= 0)
      return -ETIMEDOUT;
    r = read(fd, buf + len, n - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -EIO;
    len += (size_t)r;
  }
  return 0;
}

/* One message within secs: 0, -ETIMEDOUT, -EIO (closed or garbage). */
static int recv_msg(int fd, struct rdzv_proto_msg *m, double secs)
{
  double deadline = now_s() + secs;
  unsigned char h[RDZV_PROTO_FRAME_HEADER];
  char err[256], *body;
  size_t n;
  int rc;

  rc = read_full(fd, (char *)h, sizeof h, deadline);
  if (rc)
    return rc;
  n = (size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
  if (n == 0 || n > RDZV_PROTO_MAX_FRAME)
    return -EIO;
  body = malloc(n);
  if (!body)
    die("out of memory");
  rc = read_full(fd, body, n, deadline);
  if (!rc && rdzv_proto_decode(body, n, m, err, sizeof err) != 0)
    rc = -EIO;
  free(body);
  return rc;
}

/* Reads until a message of op (returned in *m) or another that ends the
 * wait: ERROR or CLOSED (also returned).  WAITING, PONG are skipped. */
static int wait_op(int fd, enum rdzv_proto_op op, struct rdzv_proto_msg *m,
                   double secs)
{
  double deadline = now_s() + secs;
  int rc;

  for (;;) {
    rc = recv_msg(fd, m, deadline - now_s());
    if (rc)
      return rc;
    if (m->op == op || m->op == RDZV_PROTO_ERROR || m->op == RDZV_PROTO_CLOSED)
      return 0;
    rdzv_proto_msg_free(m);
  }
}

static void join_msg(struct rdzv_proto_msg *m, const char *id, int min, int max,
                     double close_timeout)
{
  memset(m, 0, sizeof *m);
  m->op = RDZV_PROTO_JOIN;
  snprintf(m->u.join.id, sizeof m->u.join.id, "%s", id);
  snprintf(m->u.join.host, sizeof m->u.join.host, "abuse");
  m->u.join.pid = getpid();
  m->u.join.nproc = 1;
  m->u.join.master_port = 29500;
  rdzv_proto_conf_default(&m->u.join.conf);
  m->u.join.conf.min_nodes = min;
  m->u.join.conf.max_nodes = max;
  m->u.join.conf.last_call_timeout = 0;
  m->u.join.conf.close_timeout = close_timeout;
  /* We send no keepalives: ask for the longest window the server allows
   * (an interval above its ceiling is refused; the misses are lowered to
   * fit the window). */
  m->u.join.conf.keepalive_interval = A.keepalive;
  m->u.join.conf.keepalive_misses = 1000;
}

static int join(int fd, const char *id, int min, int max,
                double close_timeout)
{
  struct rdzv_proto_msg m;

  join_msg(&m, id, min, max, close_timeout);
  return send_msg(fd, &m);
}

static void kv(int fd, enum rdzv_proto_op op, const char *key,
               const char *value, size_t value_len, double wait)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = op;
  snprintf(m.u.kv.key, sizeof m.u.kv.key, "%s", key);
  m.u.kv.value = (char *)value;
  m.u.kv.value_len = value_len;
  m.u.kv.wait = wait;
  if (send_msg(fd, &m) != 0)
    A.kv_send_failed++;         /* the daemon closed us: said once, in main */
}

/* The daemon answers: a fresh insider's keepalive gets some frame (pong or
 * not_joined) within 5 s. */
static bool daemon_answers(void)
{
  struct rdzv_proto_msg m;
  int fd = dial(0), rc;

  if (fd < 0)
    return false;
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KEEPALIVE;
  rc = send_msg(fd, &m) == 0 ? recv_msg(fd, &m, 5) : -EIO;
  if (rc == 0)
    rdzv_proto_msg_free(&m);
  close(fd);
  return rc == 0;
}

/* A fresh one-node job gets its round.  Each is a job of its own: a
 * fixed-size job whose node left is closed (Note [a lost node] in
 * rdzvd/rdzv_rules.h), and its id refused while the daemon remembers
 * it. */
static bool real_job_works(const char *tag)
{
  static int runs;
  char id[64];
  struct rdzv_proto_msg m;
  int fd = dial(0), rc;
  bool ok;

  if (fd < 0)
    return false;
  snprintf(id, sizeof id, "real-%s-%d-%d", tag, (int)getpid(), ++runs);
  /* A real job: cdrun's defaults (rdzv_proto_conf_default), one node. */
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  snprintf(m.u.join.id, sizeof m.u.join.id, "%s", id);
  snprintf(m.u.join.host, sizeof m.u.join.host, "real");
  m.u.join.pid = getpid();
  m.u.join.nproc = 1;
  m.u.join.master_port = 29500;
  rdzv_proto_conf_default(&m.u.join.conf);
  m.u.join.conf.min_nodes = m.u.join.conf.max_nodes = 1;
  rc = send_msg(fd, &m) == 0 ? wait_op(fd, RDZV_PROTO_ROUND, &m, 10) : -EIO;
  ok = rc == 0 && m.op == RDZV_PROTO_ROUND;
  if (rc == 0 && !ok)
    note("a real job got %s %s; ", rdzv_proto_op_name(m.op), m.u.text.message);
  if (rc == 0)
    rdzv_proto_msg_free(&m);
  close(fd);
  return ok;
}

static void raise_nofile(void)
{
  struct rlimit rl;

  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* ---- the attacks ---- */

/* A member whose receive buffer is full registers many kv_get waiters; a
 * second member sets the key to 64 KiB: the answers overflow the member's
 * output limit while the machine walks its waiters. */
static bool attack_kv_waiters(void)
{
  long n = A.count ? A.count : 400, i;
  char id[64], *value;
  struct rdzv_proto_msg m;
  int a, b;
  bool ok;

  snprintf(id, sizeof id, "kvw-%d", (int)getpid());
  a = dial(2048);
  b = dial(0);
  if (a < 0 || b < 0)
    die("cannot connect");
  join(a, id, 2, 2, 30);
  join(b, id, 2, 2, 30);
  if (wait_op(b, RDZV_PROTO_ROUND, &m, 10) != 0 || m.op != RDZV_PROTO_ROUND)
    die("kv_waiters: no round for the second member");
  for (i = 0; i < n; i++)
    kv(a, RDZV_PROTO_KV_GET, "k", NULL, 0, 600);
  /* Frames of one connection are handled in order: once b sees a's
   * marker, every waiter is registered. */
  kv(a, RDZV_PROTO_KV_SET, "a_done", "1", 1, 0);
  kv(b, RDZV_PROTO_KV_GET, "a_done", NULL, 0, 30);
  if (wait_op(b, RDZV_PROTO_KV_VALUE, &m, 30) != 0)
    die("kv_waiters: the marker never came");
  rdzv_proto_msg_free(&m);
  value = malloc(RDZV_PROTO_MAX_VALUE);
  memset(value, 'v', RDZV_PROTO_MAX_VALUE);
  kv(b, RDZV_PROTO_KV_SET, "k", value, RDZV_PROTO_MAX_VALUE, 0);
  free(value);
  kv(b, RDZV_PROTO_KV_GET, "after", NULL, 0, 0);
  ok = wait_op(b, RDZV_PROTO_KV_VALUE, &m, 10) == 0;
  if (ok)
    rdzv_proto_msg_free(&m);
  rss_kb();
  note("%ld waiters answered with 64 KiB each; ", n);
  close(a);
  close(b);
  return ok && daemon_answers();
}

/* Many strangers, each holding a 1 MiB frame but its last byte. */
static bool attack_partial_frames(void)
{
  long n = A.count ? A.count : 200, i, held = 0;
  size_t body = RDZV_PROTO_MAX_FRAME;
  unsigned char *frame = malloc(RDZV_PROTO_FRAME_HEADER + body);
  int *fds = calloc((size_t)n, sizeof *fds);
  struct timeval tv = { 2, 0 };
  long before = rss_kb(), peak;
  bool alive;

  if (!frame || !fds)
    die("out of memory");
  frame[0] = (unsigned char)(body >> 24);
  frame[1] = (unsigned char)(body >> 16);
  frame[2] = (unsigned char)(body >> 8);
  frame[3] = (unsigned char)body;
  memset(frame + RDZV_PROTO_FRAME_HEADER, ' ', body);
  for (i = 0; i < n; i++) {
    fds[i] = dial_raw(0);
    if (fds[i] < 0)
      continue;
    held++;                     /* open until seen closed, below */
    setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    write_all(fds[i], frame, RDZV_PROTO_FRAME_HEADER + body - 1);
  }
  usleep(500000);   /* let the daemon read what it accepts */
  peak = rss_kb();
  alive = daemon_answers();
  for (i = 0; i < n; i++) {
    struct pollfd p = { fds[i], POLLIN, 0 };
    char c;

    if (fds[i] < 0)
      continue;
    /* Closed by the daemon: readable, and EOF or a reset (an error frame
     * first does not count as open either). */
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR) ||
                                recv(fds[i], &c, 1, MSG_PEEK) >= 0))
      held--;
    close(fds[i]);
  }
  free(fds);
  free(frame);
  note("%ld of %ld connections still open, each with a 1 MiB frame but a "
       "byte; rss %ld -> %ld kB; ", held, n, before, peak);
  return alive;
}

/* Own attack: members (past the pre-join frame limit) each hold a 1 MiB
 * frame but its last byte: only the input budget bounds what the daemon
 * keeps; over it, it must stop reading, not grow. */
static bool attack_member_partial_frames(void)
{
  long n = A.count ? A.count : 200, i, joined = 0;
  size_t body = RDZV_PROTO_MAX_FRAME;
  unsigned char *frame = malloc(RDZV_PROTO_FRAME_HEADER + body);
  int *fds = calloc((size_t)n, sizeof *fds);
  struct timeval tv = { 0, 100000 };
  long before = rss_kb(), peak;
  char id[64];
  struct rdzv_proto_msg m;
  bool alive;

  if (!frame || !fds)
    die("out of memory");
  frame[0] = (unsigned char)(body >> 24);
  frame[1] = (unsigned char)(body >> 16);
  frame[2] = (unsigned char)(body >> 8);
  frame[3] = (unsigned char)body;
  memset(frame + RDZV_PROTO_FRAME_HEADER, ' ', body);
  for (i = 0; i < n; i++) {
    fds[i] = dial(0);
    if (fds[i] < 0)
      continue;
    snprintf(id, sizeof id, "mpf-%d-%ld", (int)getpid(), i);
    join(fds[i], id, 1, 1, 30);
    if (wait_op(fds[i], RDZV_PROTO_ROUND, &m, 10) != 0)
      continue;
    if (m.op == RDZV_PROTO_ROUND)
      joined++;
    rdzv_proto_msg_free(&m);
    /* A paused member's write stalls: 100 ms, then the next one. */
    setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    write_all(fds[i], frame, RDZV_PROTO_FRAME_HEADER + body - 1);
  }
  if (joined < n)
    die("member_partial_frames: only %ld of %ld members joined", joined, n);
  usleep(500000);   /* let the daemon read what it accepts */
  peak = rss_kb();
  alive = daemon_answers();
  for (i = 0; i < n; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  free(fds);
  free(frame);
  note("%ld members each sent a 1 MiB frame but a byte; rss %ld -> %ld kB; ",
       n, before, peak);
  return alive;
}

/* Own attack: one job of one node, and thousands of spares on its
 * waiting list (each a connection and a node): bounded by max_conns, and
 * the participant's job, and others, go on. */
static bool attack_waiting_list(void)
{
  long n = A.count ? A.count : 5000, i, waiting = 0;
  int *fds = calloc((size_t)n, sizeof *fds), a = dial(0);
  long before = rss_kb(), peak;
  char id[64];
  struct rdzv_proto_msg m;
  bool ok;

  if (!fds || a < 0)
    die("cannot connect");
  snprintf(id, sizeof id, "wl-%d", (int)getpid());
  join(a, id, 1, 1, 30);
  if (wait_op(a, RDZV_PROTO_ROUND, &m, 10) != 0 || m.op != RDZV_PROTO_ROUND)
    die("waiting_list: no round");
  rdzv_proto_msg_free(&m);
  for (i = 0; i < n; i++) {
    fds[i] = dial(0);
    if (fds[i] < 0)
      continue;
    join(fds[i], id, 1, 1, 30);
  }
  for (i = 0; i < n; i++) {
    if (fds[i] < 0)
      continue;
    if (wait_op(fds[i], RDZV_PROTO_WAITING, &m, 10) == 0) {
      waiting += m.op == RDZV_PROTO_WAITING;
      rdzv_proto_msg_free(&m);
    }
  }
  peak = rss_kb();
  kv(a, RDZV_PROTO_KV_GET, "anything", NULL, 0, 0);
  ok = wait_op(a, RDZV_PROTO_KV_VALUE, &m, 10) == 0 &&
       m.op == RDZV_PROTO_KV_VALUE;
  if (ok)
    rdzv_proto_msg_free(&m);
  ok = ok && real_job_works("waiting_list");
  for (i = 0; i < n; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  close(a);
  free(fds);
  note("%ld of %ld spares on one job's waiting list; the participant %s; "
       "rss %ld -> %ld kB; ", waiting, n, ok ? "runs on" : "is STUCK",
       before, peak);
  return ok && daemon_answers();
}

/* Fill max_jobs with abandoned jobs the client asks to keep for months. */
static bool attack_lockout(void)
{
  long n = A.count ? A.count : 10000, i, made = 0, refused = 0;
  char id[64];
  struct rdzv_proto_msg m;
  bool ok;
  int fd;

  for (i = 0; i < n; i++) {
    fd = dial(0);
    if (fd < 0) {
      refused++;
      continue;
    }
    snprintf(id, sizeof id, "lock-%d-%ld", (int)getpid(), i);
    if (join(fd, id, 1, 1, 1e7) == 0 &&
        wait_op(fd, RDZV_PROTO_ROUND, &m, 10) == 0) {
      if (m.op == RDZV_PROTO_ROUND)
        made++;
      else
        refused++;
      rdzv_proto_msg_free(&m);
    }
    close(fd);
  }
  rss_kb();
  ok = real_job_works("lockout");
  note("%ld abandoned jobs made, %ld refused; a real job %s; ", made,
       refused, ok ? "still works" : "is REFUSED");
  return ok;
}

/* The status query answers, whatever the number of jobs. */
static bool attack_status_many(void)
{
  struct rdzv_proto_msg m;
  double t0 = now_s();
  int fd = dial(0), rc;
  bool ok;

  if (fd < 0)
    return false;
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_STATUS;
  rc = send_msg(fd, &m) == 0 ? wait_op(fd, RDZV_PROTO_STATUS_REPLY, &m, 5)
                             : -EIO;
  ok = rc == 0 && m.op == RDZV_PROTO_STATUS_REPLY;
  note("status %s after %.0f ms", ok ? "answered" : "NOT answered",
       (now_s() - t0) * 1000);
  if (ok)
    note(" (%zu bytes); ", strlen(m.u.status_json));
  else
    note("; ");
  if (rc == 0)
    rdzv_proto_msg_free(&m);
  close(fd);
  rss_kb();
  return ok;
}

/* A node on the waiting list reports a final failure: the job must go on. */
static bool attack_waiting_final(void)
{
  char id[64];
  struct rdzv_proto_msg m;
  int a = dial(0), b = dial(0), rc;
  bool ok;

  if (a < 0 || b < 0)
    die("cannot connect");
  snprintf(id, sizeof id, "wf-%d", (int)getpid());
  join(a, id, 1, 1, 30);
  if (wait_op(a, RDZV_PROTO_ROUND, &m, 10) != 0 || m.op != RDZV_PROTO_ROUND)
    die("waiting_final: no round");
  join(b, id, 1, 1, 30);
  if (wait_op(b, RDZV_PROTO_WAITING, &m, 10) != 0 || m.op != RDZV_PROTO_WAITING)
    die("waiting_final: the spare is not waiting");
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_FAILURE;
  m.u.failure.final = true;
  snprintf(m.u.failure.message, sizeof m.u.failure.message, "sabotage");
  send_msg(b, &m);
  kv(a, RDZV_PROTO_KV_GET, "anything", NULL, 0, 0);
  rc = wait_op(a, RDZV_PROTO_KV_VALUE, &m, 10);
  ok = rc == 0 && m.op == RDZV_PROTO_KV_VALUE;
  note("the participant %s; ", ok ? "runs on"
                               : rc == 0 && m.op == RDZV_PROTO_CLOSED
                                   ? "was CLOSED by the spare's failure"
                                   : "got no answer");
  if (rc == 0)
    rdzv_proto_msg_free(&m);
  rss_kb();
  close(a);
  close(b);
  return ok;
}

/* Connections that never send anything must not live forever. */
static bool attack_silent(void)
{
  long n = A.count ? A.count : 1000, i, open_ = 0;
  double wait = A.wait > 0 ? A.wait : 20, deadline = now_s() + wait;
  struct pollfd *p = calloc((size_t)n, sizeof *p);
  char c;

  if (!p)
    die("out of memory");
  for (i = 0; i < n; i++) {
    p[i].fd = dial_raw(0);
    p[i].events = POLLIN;
    if (p[i].fd >= 0)
      open_++;
  }
  rss_kb();
  while (open_ > 0 && now_s() < deadline) {
    if (poll(p, (nfds_t)n, 200) < 0 && errno != EINTR)
      break;
    for (i = 0; i < n; i++) {
      if (p[i].fd < 0 || !p[i].revents)
        continue;
      if (read(p[i].fd, &c, 1) <= 0) {
        close(p[i].fd);
        p[i].fd = -1;
        open_--;
      }
    }
  }
  for (i = 0; i < n; i++)
    if (p[i].fd >= 0)
      close(p[i].fd);
  free(p);
  note("%ld of %ld silent connections still open after %.0f s; ", open_, n,
       wait);
  return open_ == 0 && daemon_answers();
}

/* Junk and oversized frames, many variants, each on its own connection:
 * each must be refused and closed, the daemon unharmed. */
static bool attack_junk(void)
{
  static const char *const bodies[] = {
    "not json", "{\"v\":2}", "{\"v\":99,\"op\":\"join\"}",
    "{\"v\":2,\"op\":\"martian\"}", "[1,2,3]", "{\"v\":2,\"op\":\"join\"}",
    "{\"v\":2,\"op\":\"kv_get\",\"key\":\"\\u0000\"}",
    "{\"v\":2,\"op\":\"auth\",\"mac\":\"zz\"}",
    "{\"v\":2,\"op\":\"challenge\",\"nonce\":"
    "\"0000000000000000000000000000000000000000000000000000000000000000\"}",
  };
  long n = A.count ? A.count : 500, i, closed = 0;
  unsigned char buf[8192];
  struct rdzv_proto_msg m;
  size_t len;
  int fd, k;

  for (i = 0; i < n; i++) {
    fd = dial_raw(0);
    if (fd < 0)
      continue;
    k = (int)(i % 13);
    if (k < 9) {
      len = strlen(bodies[k]);
      buf[0] = buf[1] = 0;
      buf[2] = (unsigned char)(len >> 8);
      buf[3] = (unsigned char)len;
      memcpy(buf + 4, bodies[k], len);
      len += 4;
    } else if (k == 9) {          /* zero length */
      memset(buf, 0, 4);
      len = 4;
    } else if (k == 10) {         /* 4 GiB announced */
      memset(buf, 0xff, 4);
      len = 4;
    } else if (k == 11) {         /* random bytes */
      for (len = 0; len < sizeof buf; len++)
        buf[len] = (unsigned char)rand();
    } else {                      /* deep nesting */
      len = 4 + 4000;
      buf[0] = buf[1] = 0;
      buf[2] = (unsigned char)(4000 >> 8);
      buf[3] = (unsigned char)(4000 & 0xff);
      memset(buf + 4, '[', 4000);
    }
    write_all(fd, buf, len);
    /* Refused: an error frame, then the close; or the close at once. */
    while (recv_msg(fd, &m, 5) == 0)
      rdzv_proto_msg_free(&m);
    closed++;
    close(fd);
  }
  rss_kb();
  note("%ld junk connections closed by the daemon; ", closed);
  return daemon_answers();
}

/* Own attack: jobs whose members fill their KV store (4096 keys x 64 KiB
 * in 16 MiB per job): nothing bounds the total over jobs but a global
 * budget. */
static bool attack_kv_fill(void)
{
  long jobs = A.count ? A.count : 16, j, k, refused = 0;
  char id[64], key[32], *value = malloc(RDZV_PROTO_MAX_VALUE);
  struct rdzv_proto_msg m;
  int *fds = calloc((size_t)jobs, sizeof *fds);
  long before = rss_kb(), peak;
  bool alive;

  if (!value || !fds)
    die("out of memory");
  memset(value, 'x', RDZV_PROTO_MAX_VALUE);
  for (j = 0; j < jobs; j++) {
    fds[j] = dial(0);
    if (fds[j] < 0)
      continue;
    snprintf(id, sizeof id, "kvfill-%d-%ld", (int)getpid(), j);
    join(fds[j], id, 1, 1, 30);
    if (wait_op(fds[j], RDZV_PROTO_ROUND, &m, 10) != 0)
      continue;
    rdzv_proto_msg_free(&m);
    for (k = 0; k < 255; k++) {
      snprintf(key, sizeof key, "k%ld", k);
      kv(fds[j], RDZV_PROTO_KV_SET, key, value, RDZV_PROTO_MAX_VALUE, 0);
    }
    /* A limit answers with an error: count the refusals. */
    kv(fds[j], RDZV_PROTO_KV_GET, "k0", NULL, 0, 0);
    while (wait_op(fds[j], RDZV_PROTO_KV_VALUE, &m, 10) == 0) {
      bool done = m.op != RDZV_PROTO_ERROR;

      refused += m.op == RDZV_PROTO_ERROR;
      rdzv_proto_msg_free(&m);
      if (done)
        break;
    }
  }
  peak = rss_kb();
  alive = daemon_answers();
  for (j = 0; j < jobs; j++)
    if (fds[j] >= 0)
      close(fds[j]);
  free(fds);
  free(value);
  note("%ld jobs x 16 MiB of values, %ld refusals; rss %ld -> %ld kB; ",
       jobs, refused, before, peak);
  return alive;
}

/* Own attack: members that never read flood keepalives; the pongs pile up
 * in the daemon (8 MiB per connection, no global budget). */
static bool attack_pong_flood(void)
{
  long conns = A.count ? A.count : 32, i, per = 300000, k;
  char id[64], *frame, *batch;
  size_t flen;
  struct rdzv_proto_msg m;
  int *fds = calloc((size_t)conns, sizeof *fds);
  /* A member the daemon stopped reading is given up after 200 ms. */
  struct timeval tv = { 0, 200000 };
  long before = rss_kb(), peak;
  bool alive;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KEEPALIVE;
  if (!fds || rdzv_proto_encode(&m, &frame, &flen) != 0)
    die("setup");
  batch = malloc(flen * 4096);
  if (!batch)
    die("out of memory");
  for (k = 0; k < 4096; k++)
    memcpy(batch + k * (long)flen, frame, flen);
  for (i = 0; i < conns; i++) {
    fds[i] = dial(2048);
    if (fds[i] < 0)
      continue;
    snprintf(id, sizeof id, "pong-%d-%ld", (int)getpid(), i);
    join(fds[i], id, 1, 1, 30);
    setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  for (k = 0; k < per; k += 4096)
    for (i = 0; i < conns; i++)
      if (fds[i] >= 0 && write_all(fds[i], batch, flen * 4096) != 0) {
        close(fds[i]);
        fds[i] = -1;
      }
  usleep(500000);
  peak = rss_kb();
  alive = daemon_answers();
  for (i = 0; i < conns; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  free(fds);
  free(batch);
  free(frame);
  note("%ld non-reading members x %ld keepalives; rss %ld -> %ld kB; ",
       conns, per, before, peak);
  return alive;
}


/* ---- issue 19 ---- */

/* Strangers send a frame in the same write as their hello: a join, or an
 * auth that cannot hold the proof (the challenge is not out yet).  Each
 * must be answered (error auth, then the close) without another byte from
 * the client: survived when every one is, and the daemon answers. */
static bool attack_pipelined_hello(void)
{
  /* A join small enough for the pre-auth frame limit (the daemon's
   * defaults fill in its conf). */
  static const char join_body[] = "{\"v\":2,\"op\":\"join\",\"id\":"
    "\"pipelined\",\"nproc\":1,\"master_port\":29500}";
  long n = A.count ? A.count : 100, i, answered = 0;
  struct rdzv_proto_msg hello, second, m;
  char *f1, *f2, *both;
  size_t l1, l2;
  int fd, rc;

  for (i = 0; i < n; i++) {
    memset(&hello, 0, sizeof hello);
    hello.op = RDZV_PROTO_HELLO;
    memset(hello.u.auth.nonce, (int)(i & 0xff), RDZV_PROTO_AUTH_BYTES);
    if (rdzv_proto_encode(&hello, &f1, &l1))
      die("encode");
    if (i % 2 == 0) {
      l2 = RDZV_PROTO_FRAME_HEADER + sizeof join_body - 1;
      f2 = malloc(l2);
      if (!f2)
        die("out of memory");
      f2[0] = f2[1] = 0;
      f2[2] = (char)((l2 - RDZV_PROTO_FRAME_HEADER) >> 8);
      f2[3] = (char)((l2 - RDZV_PROTO_FRAME_HEADER) & 0xff);
      memcpy(f2 + RDZV_PROTO_FRAME_HEADER, join_body, sizeof join_body - 1);
    } else {
      memset(&second, 0, sizeof second);
      second.op = RDZV_PROTO_AUTH;
      memset(second.u.auth.mac, 0xab, RDZV_PROTO_AUTH_BYTES);
      if (rdzv_proto_encode(&second, &f2, &l2))
        die("encode");
    }
    both = malloc(l1 + l2);
    if (!both)
      die("out of memory");
    memcpy(both, f1, l1);
    memcpy(both + l1, f2, l2);
    fd = dial_raw(0);
    if (fd >= 0 && write_all(fd, both, l1 + l2) == 0) {
      /* The challenge (with a secret) is skipped; the refusal counts,
       * then the close. */
      rc = wait_op(fd, RDZV_PROTO_ERROR, &m, 5);
      if (rc == 0) {
        bool refused =
            m.op == RDZV_PROTO_ERROR && m.u.text.code == RDZV_PROTO_ERR_AUTH;

        rdzv_proto_msg_free(&m);
        if (refused && recv_msg(fd, &m, 5) == -EIO)
          answered++;
      }
    }
    if (fd >= 0)
      close(fd);
    free(both);
    free(f1);
    free(f2);
  }
  rss_kb();
  note("%ld of %ld frames pipelined behind hello answered (error auth, "
       "close) with no more bytes sent; ", answered, n);
  return answered == n && daemon_answers();
}

static int dial_metrics(void)
{
  struct sockaddr_storage a = A.addr;
  int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if (fd < 0)
    die("socket: %s", strerror(errno));
  if (a.ss_family == AF_INET6)
    ((struct sockaddr_in6 *)&a)->sin6_port = htons((uint16_t)A.metrics_port);
  else
    ((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)A.metrics_port);
  if (connect(fd, (struct sockaddr *)&a, A.addrlen) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* One scrape: true when it got "200 OK" and the whole answer within 5 s
 * (the old header limit was 10 s: a locked-out scrape waited for it). */
static bool scrape(void)
{
  static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  double deadline = now_s() + 5;
  char buf[4096];
  size_t len = 0;
  ssize_t r;
  int fd = dial_metrics();
  bool ok = false;

  if (fd < 0)
    return false;
  if (write_all(fd, req, sizeof req - 1) == 0) {
    for (;;) {
      struct pollfd p = { fd, POLLIN, 0 };
      int ms = (int)((deadline - now_s()) * 1000);

      if (ms <= 0 || poll(&p, 1, ms) <= 0)
        break;
      r = read(fd, buf + len, sizeof buf - 1 - len);
      if (r <= 0) {
        ok = len > 0;           /* the end of a whole answer */
        break;
      }
      len += (size_t)r;
      if (len == sizeof buf - 1)
        len = 17;               /* keep the status line, drop the rest */
    }
  }
  buf[len] = '\0';
  close(fd);
  return ok && strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0;
}

/* Idle clients fill the metrics endpoint's slots (64) and more, and
 * reconnect: survived when every scrape in between is answered. */
static bool attack_metrics_lockout(void)
{
  long n = A.count ? A.count : 256, i, opened = 0;
  int *fds = calloc((size_t)n, sizeof *fds), round, scrapes = 0;
  int good = 0;

  if (!fds)
    die("out of memory");
  if (A.metrics_port <= 0)
    die("metrics_lockout: --metrics-port is required");
  for (round = 0; round < 5; round++) {
    for (i = 0; i < n; i++) {
      fds[i] = dial_metrics();
      opened += fds[i] >= 0;
    }
    scrapes++;
    good += scrape();
    for (i = 0; i < n; i++)
      if (fds[i] >= 0)
        close(fds[i]);
  }
  free(fds);
  rss_kb();
  note("%ld idle connections in 5 rounds; %d of %d scrapes answered; ",
       opened, good, scrapes);
  return good == scrapes && daemon_answers();
}

/* ---- floods (issue 32): a stranger opens idle connections as fast as
 * it can while legitimate work goes on ---- */

/* A child that keeps up to hold idle connections to port (the metrics
 * port when metrics, else the rendezvous port) open, reopening each one
 * the server closes, until killed.  Returns its pid. */
static pid_t flood_start(bool metrics, long hold)
{
  pid_t pid = fork();

  if (pid < 0)
    die("fork: %s", strerror(errno));
  if (pid == 0) {
    int *fds = calloc((size_t)hold, sizeof *fds);
    long i;

    if (!fds)
      _exit(2);
    for (i = 0; i < hold; i++)
      fds[i] = -1;
    for (;;) {
      for (i = 0; i < hold; i++) {
        char c;

        if (fds[i] >= 0 && recv(fds[i], &c, 1, MSG_DONTWAIT) != 0 &&
            errno == EAGAIN)
          continue;           /* still open, idle */
        if (fds[i] >= 0)
          close(fds[i]);
        fds[i] = metrics ? dial_metrics() : dial_raw(0);
      }
    }
  }
  return pid;
}

static void flood_stop(pid_t pid)
{
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* The rendezvous port flooded with idle strangers (held up to their
 * hello timeout, then reopened): a real job still gets its rounds. */
static bool attack_connect_flood(void)
{
  long hold = A.count ? A.count : 2000;
  pid_t f = flood_start(false, hold);
  int i, good = 0;

  usleep(500000);
  for (i = 0; i < 5; i++)
    good += real_job_works("connect_flood");
  rss_kb();
  flood_stop(f);
  note("%ld idle strangers held and reopened; %d of 5 real jobs got their "
       "round; ", hold, good);
  return good == 5 && daemon_answers();
}

/* The metrics port flooded the same way: every scrape is answered
 * (Note [idle eviction]: a just-accepted scrape is not idle). */
static bool attack_metrics_flood(void)
{
  long hold = A.count ? A.count : 200;
  pid_t f;
  int i, good = 0;

  if (A.metrics_port <= 0)
    die("metrics_flood: --metrics-port is required");
  f = flood_start(true, hold);
  usleep(500000);
  for (i = 0; i < 100; i++)
    good += scrape();
  flood_stop(f);
  note("%ld idle strangers on the metrics port; %d of 100 scrapes "
       "answered; ", hold, good);
  return good == 100 && daemon_answers();
}

/* One tenant (127.0.0.2) holds a waiting node in each of more jobs than
 * the table holds (min_nodes 2: they never run; the report's 10,050):
 * survived when a real job from 127.0.0.1 still gets its round (Note
 * [tenant share]: the squatter's share refuses it, and a full table
 * reclaims jobs that never ran before it refuses anyone). */
static bool attack_job_squat(void)
{
  long n = A.count ? A.count : 10050, i, sent = 0, refused = 0;
  long reclaimed = 0;
  int *fds = calloc((size_t)n, sizeof *fds);
  struct rdzv_proto_msg m;
  char id[64];
  bool ok;

  if (!fds)
    die("out of memory");
  if (A.addr.ss_family != AF_INET)
    die("job_squat: needs an IPv4 loopback --host (it squats from 127.0.0.2)");
  raise_nofile();
  for (i = 0; i < n; i++) {
    struct sockaddr_in me = { .sin_family = AF_INET };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    char err[512];

    fds[i] = -1;
    me.sin_addr.s_addr = htonl(0x7f000002);
    if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof me) != 0 ||
        connect(fd, (struct sockaddr *)&A.addr, A.addrlen) != 0 ||
        (A.secret.len && rdzv_auth_handshake_fd(fd, &A.secret, 5000, err,
                                                sizeof err) != 0)) {
      if (fd >= 0)
        close(fd);
      refused++;
      continue;
    }
    snprintf(id, sizeof id, "squat-%d-%ld", (int)getpid(), i);
    if (join(fd, id, 2, 2, 1e7) == 0)
      sent++;
    fds[i] = fd;
  }
  rss_kb();
  ok = real_job_works("job_squat");
  /* What each squatter heard: WAITING, or refused, or reclaimed. */
  for (i = 0; i < n; i++) {
    if (fds[i] < 0)
      continue;
    for (;;) {
      struct pollfd p = { fds[i], POLLIN, 0 };

      /* What has arrived only: WAITING may not have, CLOSED may never. */
      if (poll(&p, 1, 0) <= 0 || recv_msg(fds[i], &m, 1) != 0)
        break;
      bool done = m.op == RDZV_PROTO_ERROR || m.op == RDZV_PROTO_CLOSED;

      refused += m.op == RDZV_PROTO_ERROR;
      reclaimed += m.op == RDZV_PROTO_CLOSED;
      rdzv_proto_msg_free(&m);
      if (done)
        break;
    }
    close(fds[i]);
  }
  free(fds);
  note("%ld squatting joins from 127.0.0.2, %ld refused, %ld reclaimed; a "
       "real job %s; ", sent, refused, reclaimed,
       ok ? "still works" : "is REFUSED");
  return ok && daemon_answers();
}

/* Runs argv (no shell: the job id holds a newline), its stdout into buf
 * (NUL-terminated).  Returns its exit status, or -1. */
static int run_capture(char *const argv[], char *buf, size_t len)
{
  size_t got = 0;
  int p[2], st;
  ssize_t r;
  pid_t pid;

  if (pipe(p) != 0)
    return -1;
  pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(p[1]);
  while ((r = read(p[0], buf + got, len - 1 - got)) > 0 && got < len - 1)
    got += (size_t)r;
  buf[got] = '\0';
  close(p[0]);
  if (waitpid(pid, &st, 0) != pid)
    return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Where text holds a raw control byte (newlines and tabs aside) or a
 * forged "rdzvd: forged" line: a sentence, or NULL. */
static const char *dirty(const char *text)
{
  const char *l;

  for (l = text; *l; l++)
    if (((unsigned char)*l < 0x20 && *l != '\n' && *l != '\t') ||
        *l == 0x7f)
      return "a raw control byte";
  for (l = text; l; l = strchr(l, '\n')) {
    l += *l == '\n';
    if (strncmp(l, "rdzvd: forged", 13) == 0 ||
        (strlen(l) > 24 && strncmp(l + 24, "rdzvd: forged", 13) == 0))
      return "a forged line";
  }
  return NULL;
}

/* An insider joins with a job id and a host name that forge a log line
 * and carry terminal escapes; survived when the daemon's log and
 * `rdzvd --status` (the table, and --job with that id) show them
 * escaped: no raw control byte, no forged line. */
static bool attack_control_bytes(void)
{
  static const char id[] =
    "evil\n2026-01-01 00:00:00.000 rdzvd: forged\x1b[31m\x1b[2J";
  static char out[1 << 20];
  char ep[300], *argv[8], what[64] = "", *line = NULL;
  const char *bad = NULL;
  struct rdzv_proto_msg m;
  int fd = dial(0), k, ok_runs = 0;
  bool seen = false;
  size_t cap = 0;
  FILE *f;

  if (!A.rdzvd_bin || !A.log_path)
    die("control_bytes: --rdzvd and --log are required");
  if (fd < 0)
    die("cannot connect");
  join_msg(&m, id, 2, 2, 30);
  snprintf(m.u.join.host, sizeof m.u.join.host, "h\x1b]0;title\x07\r\n");
  if (send_msg(fd, &m) != 0 || wait_op(fd, RDZV_PROTO_WAITING, &m, 10) != 0)
    die("control_bytes: no answer to the join");
  if (m.op != RDZV_PROTO_WAITING)
    note("the join got %s %s; ", rdzv_proto_op_name(m.op), m.u.text.message);
  rdzv_proto_msg_free(&m);
  snprintf(ep, sizeof ep, "%s:%d", A.host, A.port);
  for (k = 0; k < 2 && !bad; k++) {
    int i = 0;

    argv[i++] = (char *)A.rdzvd_bin;
    argv[i++] = (char *)"--status";
    argv[i++] = ep;
    if (A.secret_file) {
      argv[i++] = (char *)"--secret-file";
      argv[i++] = (char *)A.secret_file;
    }
    if (k == 1) {
      argv[i++] = (char *)"--job";
      argv[i++] = (char *)id;
    }
    argv[i] = NULL;
    if (run_capture(argv, out, sizeof out) == 0)
      ok_runs++;
    bad = dirty(out);
    snprintf(what, sizeof what, "--status%s", k ? " --job" : "");
  }
  close(fd);
  if (!bad) {
    /* The whole log, line by line: every attack's lines are in it. */
    f = fopen(A.log_path, "r");
    if (!f)
      die("control_bytes: cannot read %s", A.log_path);
    snprintf(what, sizeof what, "the log");
    while (!bad && getline(&line, &cap, f) > 0) {
      bad = dirty(line);
      seen = seen || strstr(line, "job evil\\n2026-01-01 00:00:00.000 "
                                  "rdzvd: forged\\x1b[31m");
    }
    free(line);
    fclose(f);
    if (!bad && !seen)
      note("(the job's line is not in the log) ");
  }
  rss_kb();
  note("%d of 2 status queries answered; ", ok_runs);
  if (bad)
    note("%s in %s; ", bad, what);
  else
    note("the log and --status show the id escaped; ");
  return !bad && ok_runs == 2 && daemon_answers();
}

/* ---- who may speak for a node (Note [node tokens]) ---- */

/* True when the node on fd is still served as a member: a kv_get gets
 * its KV_VALUE.  Notes what happened to "the WHO". */
static bool still_member(int fd, const char *who)
{
  struct rdzv_proto_msg m;
  int rc;
  bool ok;

  kv(fd, RDZV_PROTO_KV_GET, "anything", NULL, 0, 0);
  rc = wait_op(fd, RDZV_PROTO_KV_VALUE, &m, 10);
  ok = rc == 0 && m.op == RDZV_PROTO_KV_VALUE;
  note("the %s %s; ", who, ok ? "is still a member"
                       : rc != 0 ? "got no answer"
                       : m.op == RDZV_PROTO_CLOSED ? "saw its job closed"
                                           : "was expelled");
  if (rc == 0)
    rdzv_proto_msg_free(&m);
  return ok;
}

/* A RESUME for a running round of job id, naming host/pid, with no
 * token (what anyone reading --status can write). */
static void resume_msg(struct rdzv_proto_msg *m, const char *id,
                       const char *host, int64_t pid, int round, int gws,
                       int max_nodes)
{
  join_msg(m, id, 1, max_nodes, 30);
  m->op = RDZV_PROTO_RESUME;
  m->u.resume.join.conf.max_restarts = 5;
  snprintf(m->u.resume.join.host, sizeof m->u.resume.join.host, "%s", host);
  m->u.resume.join.pid = pid;
  m->u.resume.phase = RDZV_PROTO_PHASE_RUNNING;
  m->u.resume.round.round = round;
  m->u.resume.round.group_rank = gws - 1;
  m->u.resume.round.group_world_size = gws;
  m->u.resume.round.rank_offset = gws - 1;
  m->u.resume.round.world_size = gws;
  snprintf(m->u.resume.round.master_addr,
           sizeof m->u.resume.round.master_addr, "6.6.6.6");
  m->u.resume.round.master_port = 6666;
}

/* Item 1: a stranger names a live node's host and pid in a RESUME, then
 * reports a final failure.  Survived when the node keeps its connection
 * and its job goes on. */
static bool attack_displace(void)
{
  char id[64];
  struct rdzv_proto_msg m;
  int a = dial(0), b = dial(0);
  bool ok;

  if (a < 0 || b < 0)
    die("cannot connect");
  snprintf(id, sizeof id, "dp-%d", (int)getpid());
  join_msg(&m, id, 1, 1, 30);
  snprintf(m.u.join.host, sizeof m.u.join.host, "victim");
  m.u.join.pid = 4242;
  send_msg(a, &m);
  if (wait_op(a, RDZV_PROTO_ROUND, &m, 10) != 0 || m.op != RDZV_PROTO_ROUND)
    die("displace: no round");
  resume_msg(&m, id, "victim", 4242, m.u.round.round, 1, 1);
  m.u.resume.round.group_rank = 0;
  m.u.resume.round.rank_offset = 0;
  send_msg(b, &m);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_FAILURE;
  m.u.failure.final = true;
  snprintf(m.u.failure.message, sizeof m.u.failure.message, "forged");
  send_msg(b, &m);
  /* b's answers, if any, come before the participant's own. */
  if (recv_msg(b, &m, 2) == 0)
    rdzv_proto_msg_free(&m);
  ok = still_member(a, "named node");
  rss_kb();
  close(a);
  close(b);
  return ok && daemon_answers();
}

/* Item 3: a resumed round at the top of the range, then a failure that
 * needs the next round.  Survived when the daemon answers and the job
 * ends cleanly (closed: round numbers spent; with a secret the claim is
 * refused first). */
static bool attack_round_overflow(void)
{
  char id[64];
  struct rdzv_proto_msg m;
  int a = dial(0), rc;
  bool ok;

  if (a < 0)
    die("cannot connect");
  snprintf(id, sizeof id, "ro-%d", (int)getpid());
  resume_msg(&m, id, "abuse", getpid(), RDZV_PROTO_MAX_ROUND, 1, 1);
  send_msg(a, &m);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_FAILURE;
  snprintf(m.u.failure.message, sizeof m.u.failure.message, "overflow");
  send_msg(a, &m);
  rc = wait_op(a, RDZV_PROTO_CLOSED, &m, 10);
  ok = rc == 0 && (m.op == RDZV_PROTO_CLOSED || (m.op == RDZV_PROTO_ERROR &&
                                         m.u.text.code == RDZV_PROTO_ERR_AUTH));
  note("%s; ", rc ? "no answer"
               : m.op == RDZV_PROTO_CLOSED ? m.u.text.message
                                   : "the claim was refused (no token)");
  if (rc == 0)
    rdzv_proto_msg_free(&m);
  rss_kb();
  close(a);
  return ok && daemon_answers() && real_job_works("ro");
}

/* Item 4: each of 1000 connections resumes a new job claiming a round of
 * 100,000 nodes.  Survived within the RSS budget: a claim costs what
 * arrived, not what it claims. */
static bool attack_huge_resume(void)
{
  long n = A.count ? A.count : 1000, i, held = 0;
  long before = rss_kb(), peak;
  int *fds = calloc((size_t)n, sizeof *fds);
  char id[64];
  struct rdzv_proto_msg m;

  if (!fds)
    die("out of memory");
  for (i = 0; i < n; i++) {
    fds[i] = dial(0);
    if (fds[i] < 0)
      break;
    snprintf(id, sizeof id, "hr-%d-%ld", (int)getpid(), i);
    resume_msg(&m, id, "abuse", getpid(), 0, RDZV_PROTO_MAX_NODES,
               RDZV_PROTO_MAX_NODES);
    if (send_msg(fds[i], &m) == 0)
      held++;
  }
  /* Every claim is in once the daemon answers a later request. */
  bool answers = daemon_answers();
  peak = rss_kb();
  for (i = 0; i < n; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  free(fds);
  note("%ld claims of 100000-node rounds sent%s; rdzvd %ld -> %ld kB; ",
       held, A.secret.len ? " (refused: no token)" : "", before, peak);
  return answers && daemon_answers() && real_job_works("hr");
}

/* Item 8: the first joiner of a job chooses the shortest keepalive window
 * the protocol allows and a 1 s join timeout, then goes silent.  Survived
 * when an honest node of the job, with cdrun's defaults and as silent for
 * 2 s, is still a member (each node is judged by its own window). */
static bool attack_squatter_keepalive(void)
{
  char id[64];
  struct rdzv_proto_msg m;
  int a = dial(0), b = dial(0);
  bool ok;

  if (a < 0 || b < 0)
    die("cannot connect");
  snprintf(id, sizeof id, "sq-%d", (int)getpid());
  join_msg(&m, id, 3, 3, 30);
  m.u.join.conf.keepalive_interval = RDZV_PROTO_MIN_KEEPALIVE;
  m.u.join.conf.keepalive_misses = 10;
  m.u.join.conf.join_timeout = RDZV_PROTO_MIN_JOIN_TIMEOUT;
  send_msg(a, &m);
  join_msg(&m, id, 3, 3, 30);
  m.u.join.conf.keepalive_interval = 1;
  m.u.join.conf.keepalive_misses = 5;
  m.u.join.conf.join_timeout = 600;
  send_msg(b, &m);
  if (wait_op(b, RDZV_PROTO_WAITING, &m, 10) != 0 || m.op != RDZV_PROTO_WAITING)
    die("squatter_keepalive: the honest node is not waiting");
  rdzv_proto_msg_free(&m);
  usleep(2000000);
  ok = still_member(b, "honest node");
  rss_kb();
  close(a);
  close(b);
  return ok && daemon_answers();
}

int main(int argc, char **argv)
{
  static const struct {
    const char *name;
    bool (*run)(void);
  } attacks[] = {
    { "ping", daemon_answers },
    { "kv_waiters", attack_kv_waiters },
    { "partial_frames", attack_partial_frames },
    { "lockout", attack_lockout },
    { "status_many", attack_status_many },
    { "waiting_final", attack_waiting_final },
    { "silent", attack_silent },
    { "junk", attack_junk },
    { "kv_fill", attack_kv_fill },
    { "pong_flood", attack_pong_flood },
    { "member_partial_frames", attack_member_partial_frames },
    { "waiting_list", attack_waiting_list },
    { "pipelined_hello", attack_pipelined_hello },
    { "metrics_lockout", attack_metrics_lockout },
    { "connect_flood", attack_connect_flood },
    { "metrics_flood", attack_metrics_flood },
    { "job_squat", attack_job_squat },
    { "control_bytes", attack_control_bytes },
    { "displace", attack_displace },
    { "round_overflow", attack_round_overflow },
    { "huge_resume", attack_huge_resume },
    { "squatter_keepalive", attack_squatter_keepalive },
  };
  const char *attack = argc > 1 ? argv[1] : NULL, *secret = NULL;
  struct addrinfo hints, *res;
  char port[16], err[512];
  size_t k;
  bool ok;
  int i;

  if (!attack || strcmp(attack, "-h") == 0 || strcmp(attack, "--help") == 0) {
    fputs(usage, attack ? stdout : stderr);
    return attack ? 0 : 2;
  }
  for (i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--host") == 0)
      A.host = argv[i + 1];
    else if (strcmp(argv[i], "--port") == 0)
      A.port = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--secret-file") == 0)
      secret = argv[i + 1];
    else if (strcmp(argv[i], "--rdzvd-pid") == 0)
      A.rdzvd_pid = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--count") == 0)
      A.count = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--wait") == 0)
      A.wait = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--keepalive") == 0)
      A.keepalive = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--metrics-port") == 0)
      A.metrics_port = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--rdzvd") == 0)
      A.rdzvd_bin = argv[i + 1];
    else if (strcmp(argv[i], "--log") == 0)
      A.log_path = argv[i + 1];
    else
      die("unknown option '%s'\n%s", argv[i], usage);
  }
  if (i != argc || !A.host || A.port <= 0)
    die("--host and --port are required\n%s", usage);
  if (!(A.keepalive > 0))
    A.keepalive = 300;          /* rdzvd's default --max_keepalive */
  if (secret && rdzv_auth_secret_load(secret, &A.secret, err, sizeof err) != 0)
    die("%s", err);
  A.secret_file = secret;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  snprintf(port, sizeof port, "%d", A.port);
  if (getaddrinfo(A.host, port, &hints, &res) != 0)
    die("cannot resolve %s", A.host);
  memcpy(&A.addr, res->ai_addr, res->ai_addrlen);
  A.addrlen = res->ai_addrlen;
  freeaddrinfo(res);
  raise_nofile();
  signal(SIGPIPE, SIG_IGN);
  for (k = 0; k < sizeof attacks / sizeof attacks[0]; k++) {
    if (strcmp(attacks[k].name, attack) != 0)
      continue;
    A.rss_peak = -1;
    ok = attacks[k].run();
    if (A.kv_send_failed)
      note("%ld kv sends failed (connection closed by the daemon); ",
           A.kv_send_failed);
    printf("attack=%s survived=%d rss_kb=%ld note=\"%s\"\n", attack, ok,
           A.rss_peak, A.note);
    return ok ? 0 : 1;
  }
  die("unknown attack '%s'\n%s", attack, usage);
}
