/* rdzv_load.c -- rendezvous load client: N agents on N sockets, 1 job. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdzv_auth.h"
#include "rdzv_proto.h"

#define NPROC 8
#define CONNECT_WINDOW 256      /* connects in flight at once */
#define BACKLOG_HIGH 512        /* pause connecting above this queue */
#define PHASE_TIMEOUT 60.0      /* seconds for ROUND, barrier */
#define READ_SCRATCH 65536
#define MAX_EVENTS 1024
/* The real agent's reconnection (launcher/rdzv_client_conn.c
 * schedule_retry, rdzv_client__start_connect): 0.1 s doubling to 5 s, each attempt bounded by 5 s. */
#define BACKOFF_FIRST 0.1
#define BACKOFF_CAP 5.0
#define ATTEMPT_TIMEOUT 5.0

static const char usage[] =
  "usage: rdzv_load --host H --port P --nodes N --id ID [--leave-only]\n"
  "                 [--secret-file PATH] [--perf-ctl FIFO]\n"
  "       rdzv_load --soak [--minutes M] [--rdzvd-pid PID] --host H\n"
  "                 --port P --nodes N --id ID [--secret-file PATH]\n"
  "       rdzv_load --restart --rdzvd-pid PID [--rdzvd-log PATH] --host H\n"
  "                 --port P --nodes N --id ID [--secret-file PATH]\n"
  "\n"
  "Connects N agents to one rdzvd (paced, not timed), authenticates each\n"
  "with the shared secret when given (untimed too: auth_ms), sends every\n"
  "JOIN as fast as it can, reads until each agent has its ROUND and\n"
  "checks the assignment.  Prints complete_ms = last ROUND received - last\n"
  "JOIN written.  Then every agent enters the exit barrier and LEAVEs\n"
  "(with --leave-only: LEAVE at once, as a node lost mid-round would).\n"
  "--perf-ctl: writes 'enable' to FIFO (perf record --control=fifo:FIFO)\n"
  "before the first JOIN and 'disable' after the last ROUND: a profile of\n"
  "the timed window only.\n"
  "\n"
  "--soak: for M minutes (default 10), over and over: N agents connect,\n"
  "join a fresh job, get their ROUND; one reports a failure, the others\n"
  "get RESTART; all re-join and get the next ROUND; all pass the exit\n"
  "barrier and leave.  Prints soak minutes=M rounds=R rss_start_kb=A\n"
  "rss_end_kb=B, the RSS of rdzvd (--rdzvd-pid) after the first cycle and\n"
  "after the last.\n"
  "\n"
  "--restart: once every agent has its ROUND, says 'rdzv_load: running\n"
  "round R with N nodes: kill rdzvd now' on stderr and waits for the\n"
  "daemon (--rdzvd-pid) to die.  Each agent then reconnects as cdrun's\n"
  "does (0.1 s doubling to 5 s, each delay drawn between half and all of\n"
  "it) and re-asserts its ROUND with RESUME (phase running, its token).\n"
  "Prints restart nodes=N auth=A rebuilt_ms=T ...: T from the new daemon\n"
  "listening (probed every ms once the old one is gone) to its log\n"
  "(--rdzvd-log: the new daemon's, not --quiet) saying the round was\n"
  "rebuilt by all N nodes, or without --rdzvd-log to the last PONG after\n"
  "a RESUME; then the exit barrier (barrier_ms) on the rebuilt round, and\n"
  "LEAVE.\n";

/* PH_UP: --restart, the round runs, the daemon is about to be killed;
 * PH_RESUME: --restart, the agents reconnect and re-assert it. */
enum phase { PH_ROUND, PH_BARRIER, PH_RESTART, PH_UP, PH_RESUME };

/* --restart: where one agent is in its reconnection (Note [restart]). */
enum rstate {
  RS_UP = 0,      /* connected to the first daemon, running the round */
  RS_WAIT,        /* lost it: waiting for its next attempt (backoff) */
  RS_CONNECTING,  /* connect in flight, bounded by ATTEMPT_TIMEOUT */
  RS_AUTH,        /* the shared-secret handshake */
  RS_RESUMED,     /* RESUME and KEEPALIVE sent, waiting for the PONG */
  RS_BACK,        /* PONG: the daemon took the RESUME */
};

struct conn {
  int fd;
  int idx;
  char *in;                   /* bytes read, not yet a whole frame */
  size_t in_len, in_cap;
  char *out;                  /* encoded frame being written */
  size_t out_len, out_off;
  bool connected;
  bool got_round;
  bool got_barrier;
  bool got_restart;
  bool broken;                /* --restart: a write failed (reset) */
  int waitings;
  struct rdzv_proto_round round; /* with its token: what RESUME re-asserts */
  /* --restart */
  enum rstate rs;
  double due;                 /* RS_WAIT: next attempt; RS_CONNECTING: its
                                 deadline; else 0 */
  double backoff;
  uint64_t rng;               /* the backoff's jitter, per agent */
  struct rdzv_auth_client auth;
};

struct timer_ev {             /* --restart: a min-heap entry */
  double due;
  int idx;
};

struct load {
  const char *host;
  int port;
  int nodes;
  const char *id;
  bool leave_only;
  bool soak;
  double minutes;
  int rdzvd_pid;
  const char *secret_file;
  const char *perf_ctl;       /* perf record's control FIFO, or NULL */
  struct rdzv_auth_secret secret;
  const char *cycle_id;       /* the job of this cycle (soak) */
  int restarts;
  int ep;
  struct conn *c;
  struct sockaddr_storage addr;
  socklen_t addrlen;
  int rounds, barriers;
  long waitings;
  double t_first_round, t_last_round, t_barrier_done;
  double t_last_write;        /* a write that had to wait for EPOLLOUT */
  /* --restart */
  bool restart;
  const char *rdzvd_log;      /* the new daemon's log, watched */
  struct timer_ev *heap;
  size_t heap_len, heap_cap;
  int lost, back, attempts, failed_attempts;
  double t_lost, t_listen, t_last_pong, t_rebuilt, t_probe, t_log;
  int log_fd;
  char log_tail[256];         /* the last bytes read, for a line cut in two */
  size_t log_tail_len;
};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2),
                                                     noreturn));
static void on_resume_msg(struct load *L, struct conn *c,
                          const struct rdzv_proto_msg *m);

static void die(const char *fmt, ...)
{
  va_list ap;

  fputs("rdzv_load: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

static double now_s(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static long parse_long(const char *flag, const char *v, long lo, long hi)
{
  char *end;
  long n;

  errno = 0;
  n = strtol(v, &end, 10);
  if (errno || end == v || *end || n < lo || n > hi)
    die("%s: expected an integer %ld..%ld, got '%s'", flag, lo, hi, v);
  return n;
}

static void parse_args(struct load *L, int argc, char **argv)
{
  int i;

  for (i = 1; i < argc; i++) {
    const char *a = argv[i];

    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(usage, stdout);
      exit(0);
    }
    if (strcmp(a, "--leave-only") == 0) {
      L->leave_only = true;
      continue;
    }
    if (strcmp(a, "--soak") == 0) {
      L->soak = true;
      continue;
    }
    if (strcmp(a, "--restart") == 0) {
      L->restart = true;
      continue;
    }
    if (i + 1 >= argc)
      die("%s: unknown option or missing value\n%s", a, usage);
    if (strcmp(a, "--host") == 0)
      L->host = argv[++i];
    else if (strcmp(a, "--port") == 0)
      L->port = (int)parse_long(a, argv[++i], 1, 65535);
    else if (strcmp(a, "--nodes") == 0)
      L->nodes = (int)parse_long(a, argv[++i], 1, RDZV_PROTO_MAX_NODES);
    else if (strcmp(a, "--id") == 0)
      L->id = argv[++i];
    else if (strcmp(a, "--secret-file") == 0)
      L->secret_file = argv[++i];
    else if (strcmp(a, "--perf-ctl") == 0)
      L->perf_ctl = argv[++i];
    else if (strcmp(a, "--rdzvd-log") == 0)
      L->rdzvd_log = argv[++i];
    else if (strcmp(a, "--rdzvd-pid") == 0)
      L->rdzvd_pid = (int)parse_long(a, argv[++i], 1, 1L << 30);
    else if (strcmp(a, "--minutes") == 0) {
      char *end;

      L->minutes = strtod(argv[++i], &end);
      if (*end || !(L->minutes > 0 && L->minutes <= 10000))
        die("--minutes: expected a number > 0, got '%s'", argv[i]);
    }
    else
      die("unknown option '%s'\n%s", a, usage);
  }
  if (!L->host || !L->port || !L->nodes || !L->id)
    die("--host, --port, --nodes and --id are required\n%s", usage);
  if (strlen(L->id) == 0 || strlen(L->id) > RDZV_PROTO_MAX_ID - 16)
    die("--id: 1..%d bytes", RDZV_PROTO_MAX_ID - 16);
  if (L->secret_file) {
    char err[512];

    if (rdzv_auth_secret_load(L->secret_file, &L->secret, err, sizeof err) != 0)
      die("%s", err);
  }
  if (L->minutes == 0)
    L->minutes = 10;
  if (L->restart && (L->soak || L->leave_only))
    die("--restart goes with neither --soak nor --leave-only");
  if (L->rdzvd_log && !L->restart)
    die("--rdzvd-log goes with --restart");
  if (L->restart && !L->rdzvd_pid)
    die("--restart needs --rdzvd-pid: the daemon that will be killed");
}

/* Tells perf record (--control=fifo:FIFO) to start or stop sampling; a
 * blocking open: perf holds the FIFO open for reading. */
static void perf_ctl(const struct load *L, const char *cmd)
{
  int fd;

  if (!L->perf_ctl)
    return;
  fd = open(L->perf_ctl, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
    die("--perf-ctl %s: %s", L->perf_ctl, strerror(errno));
  close(fd);
}

/* N sockets plus a few: the soft limit goes up to the hard one. */
static void raise_nofile(int nodes)
{
  struct rlimit rl;

  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    die("getrlimit: %s", strerror(errno));
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    die("setrlimit: %s", strerror(errno));
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)nodes + 16)
    die("RLIMIT_NOFILE hard limit %llu is too low for %d connections",
        (unsigned long long)rl.rlim_cur, nodes);
}

static void resolve(struct load *L)
{
  struct addrinfo hints, *res;
  char port[16];
  int rc;

  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  snprintf(port, sizeof port, "%d", L->port);
  rc = getaddrinfo(L->host, port, &hints, &res);
  if (rc != 0)
    die("cannot resolve '%s': %s", L->host, gai_strerror(rc));
  memcpy(&L->addr, res->ai_addr, res->ai_addrlen);
  L->addrlen = res->ai_addrlen;
  freeaddrinfo(res);
}

/* The accept queue length of the local listener on port (rx_queue of the
 * LISTEN row in /proc/net/tcp{,6}), or -1 if not found (remote host). */
static long listen_queue(int port)
{
  static const char *const files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
  char line[512];
  size_t f;

  for (f = 0; f < sizeof files / sizeof files[0]; f++) {
    FILE *fp = fopen(files[f], "r");

    if (!fp)
      continue;
    while (fgets(line, sizeof line, fp)) {
      char local[128], rem[128], *colon, *end;
      unsigned st;
      unsigned long txq, rxq, lport;

      if (sscanf(line, " %*d: %127s %127s %x %lx:%lx", local, rem, &st,
                 &txq, &rxq) != 5 || st != 0x0A)
        continue;
      colon = strrchr(local, ':');
      if (!colon)
        continue;
      lport = strtoul(colon + 1, &end, 16);
      if (*end == '\0' && lport == (unsigned long)port) {
        fclose(fp);
        return (long)rxq;
      }
    }
    fclose(fp);
  }
  return -1;
}

static void ep_set(struct load *L, struct conn *c, int op, uint32_t ev)
{
  struct epoll_event e;

  memset(&e, 0, sizeof e);
  e.events = ev;
  e.data.ptr = c;
  if (epoll_ctl(L->ep, op, c->fd, &e) != 0)
    die("epoll_ctl: %s", strerror(errno));
}

static void start_connect(struct load *L, struct conn *c)
{
  int one = 1;

  c->fd = socket(L->addr.ss_family,
                 SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0)
    die("socket (connection %d): %s", c->idx, strerror(errno));
  /* Agents send small frames and wait for answers: no Nagle delay. */
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(c->fd, (struct sockaddr *)&L->addr, L->addrlen) != 0 &&
      errno != EINPROGRESS)
    die("connect (connection %d): %s", c->idx, strerror(errno));
  ep_set(L, c, EPOLL_CTL_ADD, EPOLLOUT);
}

/* Untimed: every connection established and, where the listener is
 * local, accepted (its accept queue empty), so that the timed phase sees
 * only rendezvous work. */
static void connect_all(struct load *L)
{
  struct epoll_event ev[MAX_EVENTS];
  int next = 0, inflight = 0, done = 0, retries = 0, i, n;
  double deadline = now_s() + PHASE_TIMEOUT;
  long q;

  while (done < L->nodes) {
    while (next < L->nodes && inflight < CONNECT_WINDOW) {
      /* Pace against the daemon's accept loop, not just the handshake. */
      if (next % CONNECT_WINDOW == 0 && next > 0) {
        while ((q = listen_queue(L->port)) > BACKLOG_HIGH &&
               now_s() < deadline)
          sleep_ms(1);
      }
      start_connect(L, &L->c[next++]);
      inflight++;
    }
    n = epoll_wait(L->ep, ev, MAX_EVENTS, 1000);
    if (n < 0 && errno != EINTR)
      die("epoll_wait: %s", strerror(errno));
    for (i = 0; i < n; i++) {
      struct conn *c = ev[i].data.ptr;
      int err = 0;
      socklen_t len = sizeof err;

      getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err) {
        /* A refused or reset handshake under load: try again. */
        if (++retries > L->nodes)
          die("connect (connection %d): %s", c->idx, strerror(err));
        epoll_ctl(L->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        sleep_ms(1);
        start_connect(L, c);
        continue;
      }
      c->connected = true;
      ep_set(L, c, EPOLL_CTL_MOD, EPOLLIN);
      inflight--;
      done++;
    }
    if (now_s() > deadline)
      die("only %d of %d connections established in %.0f s", done,
          L->nodes, PHASE_TIMEOUT);
  }
  while ((q = listen_queue(L->port)) > 0 && now_s() < deadline)
    sleep_ms(1);
  if (q > 0)
    die("rdzvd has not accepted %ld connections after %.0f s", q,
        PHASE_TIMEOUT);
  sleep_ms(50 + L->nodes / 100);  /* uv_accept + read_start after that */
  if (retries)
    fprintf(stderr, "rdzv_load: %d connect retries\n", retries);
}

static void encode_or_die(const struct rdzv_proto_msg *m, struct conn *c)
{
  int rc = rdzv_proto_encode(m, &c->out, &c->out_len);

  if (rc)
    die("cannot encode %s: %s", rdzv_proto_op_name(m->op), strerror(-rc));
  c->out_off = 0;
}

/* Agent c's JOIN (a RESUME carries the same fields). */
static void fill_join(const struct load *L, const struct conn *c,
                      struct rdzv_proto_join *j)
{
  snprintf(j->id, sizeof j->id, "%s", L->cycle_id ? L->cycle_id : L->id);
  snprintf(j->host, sizeof j->host, "load%d", c->idx);
  j->pid = c->idx;
  j->nproc = NPROC;
  j->master_port = 29500 + c->idx % 1000;
  j->reason = !L->soak || L->restarts == 0 ? RDZV_PROTO_REASON_FIRST
              : c->idx == 0               ? RDZV_PROTO_REASON_FAILURE
                                          : RDZV_PROTO_REASON_MEMBERSHIP;
  rdzv_proto_conf_default(&j->conf);
  j->conf.min_nodes = L->nodes;
  j->conf.max_nodes = L->nodes;
  j->conf.join_timeout = 600;
  j->conf.last_call_timeout = 30;
  /* Long keepalives: none are sent, and none are needed (--restart: the
   * rebuilt job's resume grace is this window, 150 s). */
  j->conf.keepalive_interval = 30;
  j->conf.keepalive_misses = 5;
  if (L->soak) {
    j->conf.max_restarts = 1;
    j->conf.close_timeout = 1;  /* forgotten soon: memory stays flat */
  }
}

static void encode_join(const struct load *L, struct conn *c)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  fill_join(L, c, &m.u.join);
  encode_or_die(&m, c);
}

/* Appends m's frame to what c has still to write. */
static void append_msg(struct conn *c, const struct rdzv_proto_msg *m)
{
  char *buf, *grown;
  size_t len;
  int rc = rdzv_proto_encode(m, &buf, &len);

  if (rc)
    die("cannot encode %s: %s", rdzv_proto_op_name(m->op), strerror(-rc));
  if (!c->out) {
    c->out = buf;
    c->out_len = len;
    c->out_off = 0;
    return;
  }
  grown = realloc(c->out, c->out_len + len);
  if (!grown)
    die("out of memory");
  memcpy(grown + c->out_len, buf, len);
  c->out = grown;
  c->out_len += len;
  free(buf);
}

/* Writes what is left of c->out; true when all of it is gone. */
static bool flush_out(struct load *L, struct conn *c)
{
  while (c->out_off < c->out_len) {
    ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);

    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        ep_set(L, c, EPOLL_CTL_MOD, EPOLLIN | EPOLLOUT);
        return false;
      }
      /* --restart: an attempt that reached the dying daemon's listener
       * is reset; the agent tries again. */
      if ((c->rs == RS_AUTH || c->rs == RS_RESUMED) &&
          (errno == EPIPE || errno == ECONNRESET)) {
        c->broken = true;
        return false;
      }
      die("write (connection %d): %s", c->idx, strerror(errno));
    }
    c->out_off += (size_t)n;
  }
  free(c->out);
  c->out = NULL;
  c->out_len = c->out_off = 0;
  return true;
}

/* Sends every connection's c->out; returns how many are still pending
 * (finished by the read loop on EPOLLOUT). */
static int send_all(struct load *L)
{
  int i, pending = 0;

  for (i = 0; i < L->nodes; i++)
    if (!flush_out(L, &L->c[i]))
      pending++;
  return pending;
}

static void check_round(struct load *L, struct conn *c)
{
  const struct rdzv_proto_round *r = &c->round;

  if (c->got_round)
    die("connection %d: a second ROUND", c->idx);
  if (r->group_rank < 0 || r->group_rank >= L->nodes)
    die("connection %d: group_rank %d out of 0..%d", c->idx,
        r->group_rank, L->nodes - 1);
  if (r->group_world_size != L->nodes)
    die("connection %d: group_world_size %d, expected %d", c->idx,
        r->group_world_size, L->nodes);
  if ((long)r->world_size != (long)NPROC * L->nodes)
    die("connection %d: world_size %d, expected %ld", c->idx,
        r->world_size, (long)NPROC * L->nodes);
  if ((long)r->rank_offset != (long)NPROC * r->group_rank)
    die("connection %d: rank_offset %d for group_rank %d, expected %ld",
        c->idx, r->rank_offset, r->group_rank,
        (long)NPROC * r->group_rank);
}

/* Handles one decoded message for c in the given phase. */
static void on_msg(struct load *L, struct conn *c,
                   const struct rdzv_proto_msg *m, enum phase ph)
{
  if (ph == PH_UP || ph == PH_RESUME) {
    on_resume_msg(L, c, m);
    return;
  }
  switch (m->op) {
  case RDZV_PROTO_WAITING:
    c->waitings++;
    L->waitings++;
    return;
  case RDZV_PROTO_ROUND:
    if (ph != PH_ROUND)
      die("connection %d: unexpected ROUND (round %d) after the round",
          c->idx, m->u.round.round);
    c->round = m->u.round;
    check_round(L, c);
    c->got_round = true;
    L->t_last_round = now_s();
    if (L->rounds++ == 0)
      L->t_first_round = L->t_last_round;
    return;
  case RDZV_PROTO_BARRIER_DONE:
    if (ph != PH_BARRIER || c->got_barrier)
      die("connection %d: unexpected BARRIER_DONE", c->idx);
    c->got_barrier = true;
    L->barriers++;
    L->t_barrier_done = now_s();
    return;
  case RDZV_PROTO_ERROR:
    die("connection %d: ERROR %s: %s", c->idx,
        rdzv_proto_error_name(m->u.text.code), m->u.text.message);
  case RDZV_PROTO_RESTART:
    if (ph == PH_RESTART && !c->got_restart) {
      c->got_restart = true;
      L->restarts++;
      return;
    }
    die("connection %d: unexpected %s: %s", c->idx, rdzv_proto_op_name(m->op),
        m->u.text.message);
  case RDZV_PROTO_CLOSED:
    die("connection %d: unexpected %s: %s", c->idx, rdzv_proto_op_name(m->op),
        m->u.text.message);
  default:
    die("connection %d: unexpected %s", c->idx, rdzv_proto_op_name(m->op));
  }
}

/* Decodes every whole frame in buf; returns the bytes consumed. */
static size_t parse_frames(struct load *L, struct conn *c, const char *buf,
                           size_t len, enum phase ph)
{
  size_t off = 0, flen;
  struct rdzv_proto_msg m;
  char err[256];
  int rc;

  for (;;) {
    rc = rdzv_proto_frame_peek(buf + off, len - off, &flen);
    if (rc == 0)
      return off;
    if (rc < 0)
      die("connection %d: bad frame from rdzvd: %s", c->idx,
          strerror(-rc));
    rc = rdzv_proto_decode(buf + off + RDZV_PROTO_FRAME_HEADER,
                           flen - RDZV_PROTO_FRAME_HEADER, &m, err, sizeof err);
    if (rc)
      die("connection %d: undecodable frame from rdzvd: %s", c->idx, err);
    on_msg(L, c, &m, ph);
    rdzv_proto_msg_free(&m);
    off += flen;
  }
}

static void keep_rest(struct conn *c, const char *buf, size_t len)
{
  if (len > c->in_cap) {
    char *p = realloc(c->in, len);

    if (!p)
      die("out of memory");
    c->in = p;
    c->in_cap = len;
  }
  memmove(c->in, buf, len);
  c->in_len = len;
}

/* Reads everything available on c and handles the whole frames.  Returns
 * false when the daemon closed or reset the connection in PH_UP or
 * PH_RESUME (--restart: the agent reconnects); elsewhere that is fatal. */
static bool read_conn(struct load *L, struct conn *c, enum phase ph)
{
  static char scratch[READ_SCRATCH];
  size_t used;
  ssize_t n;

  for (;;) {
    if (c->fd < 0)
      return true;              /* --restart: a handler dropped it */
    n = read(c->fd, scratch, sizeof scratch);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return true;
      if (ph == PH_UP || ph == PH_RESUME)
        return false;
      die("read (connection %d): %s", c->idx, strerror(errno));
    }
    if (n == 0 && (ph == PH_UP || ph == PH_RESUME))
      return false;
    if (n == 0)
      die("connection %d: closed by rdzvd while waiting for %s", c->idx,
          ph == PH_ROUND ? "ROUND" : ph == PH_RESTART ? "RESTART"
                                                      : "BARRIER_DONE");
    if (c->in_len == 0) {
      /* The common case: frames straight from the scratch buffer. */
      used = parse_frames(L, c, scratch, (size_t)n, ph);
      if (used < (size_t)n)
        keep_rest(c, scratch + used, (size_t)n - used);
    } else {
      if (c->in_len + (size_t)n > c->in_cap) {
        char *p = realloc(c->in, c->in_len + (size_t)n);

        if (!p)
          die("out of memory");
        c->in = p;
        c->in_cap = c->in_len + (size_t)n;
      }
      memcpy(c->in + c->in_len, scratch, (size_t)n);
      c->in_len += (size_t)n;
      used = parse_frames(L, c, c->in, c->in_len, ph);
      memmove(c->in, c->in + used, c->in_len - used);
      c->in_len -= used;
    }
    if ((size_t)n < sizeof scratch)
      return true;
  }
}

/* Runs the event loop until *count reaches N, or the phase times out. */
static void wait_for(struct load *L, const int *count, int pending,
                     enum phase ph, double t0)
{
  struct epoll_event ev[MAX_EVENTS];
  int i, n;

  while (*count < L->nodes || pending > 0) {
    double left = t0 + PHASE_TIMEOUT - now_s();

    if (left <= 0)
      break;
    n = epoll_wait(L->ep, ev, MAX_EVENTS, (int)(left * 1000) + 1);
    if (n < 0 && errno != EINTR)
      die("epoll_wait: %s", strerror(errno));
    for (i = 0; i < n; i++) {
      struct conn *c = ev[i].data.ptr;

      if ((ev[i].events & EPOLLOUT) && c->out) {
        if (flush_out(L, c)) {
          ep_set(L, c, EPOLL_CTL_MOD, EPOLLIN);
          L->t_last_write = now_s();
          pending--;
        }
      }
      if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        (void)read_conn(L, c, ph);
    }
  }
  if (*count < L->nodes) {
    for (i = 0; i < L->nodes; i++) {
      const struct conn *c = &L->c[i];

      if (ph == PH_ROUND     ? !c->got_round
          : ph == PH_RESTART ? !c->got_restart && i != 0
                             : !c->got_barrier)
        break;
    }
    die("%d of %d connections got no %s within %.0f s (first: connection "
        "%d, %d WAITING seen)", L->nodes - *count, L->nodes,
        ph == PH_ROUND ? "ROUND" : ph == PH_RESTART ? "RESTART"
                                                    : "BARRIER_DONE",
        PHASE_TIMEOUT, i,
        i < L->nodes ? L->c[i].waitings : 0);
  }
  if (pending > 0)
    die("%d writes still pending after %.0f s", pending, PHASE_TIMEOUT);
}

/* Every node got a distinct rank 0..N-1, one round, one master. */
static void check_assignment(const struct load *L)
{
  const struct conn *c0 = NULL;
  unsigned char *seen = calloc((size_t)L->nodes, 1);
  int i;

  if (!seen)
    die("out of memory");
  for (i = 0; i < L->nodes; i++) {
    const struct rdzv_proto_round *r = &L->c[i].round;

    if (seen[r->group_rank]++)
      die("group_rank %d assigned twice (connection %d)", r->group_rank,
          i);
    if (r->group_rank == 0)
      c0 = &L->c[i];
  }
  free(seen);
  for (i = 0; i < L->nodes; i++) {
    const struct rdzv_proto_round *r = &L->c[i].round;

    if (r->round != c0->round.round ||
        r->restart_count != c0->round.restart_count)
      die("connection %d: round %d/restarts %d, rank 0's %d/%d", i,
          r->round, r->restart_count, c0->round.round,
          c0->round.restart_count);
    if (strcmp(r->master_addr, c0->round.master_addr) != 0 ||
        r->master_port != c0->round.master_port)
      die("connection %d: master %s:%d, rank 0's %s:%d", i,
          r->master_addr, r->master_port, c0->round.master_addr,
          c0->round.master_port);
  }
  if (c0->round.master_port != 29500 + c0->idx % 1000)
    die("master_port %d is not the one the rank-0 node offered (%d)",
        c0->round.master_port, 29500 + c0->idx % 1000);
}

static void barrier_all(struct load *L)
{
  struct rdzv_proto_msg m;
  double t0;
  int i;

  for (i = 0; i < L->nodes; i++) {
    memset(&m, 0, sizeof m);
    m.op = RDZV_PROTO_BARRIER;
    snprintf(m.u.barrier.name, sizeof m.u.barrier.name, "exit");
    m.u.barrier.round = L->c[i].round.round;
    encode_or_die(&m, &L->c[i]);
  }
  t0 = now_s();
  wait_for(L, &L->barriers, send_all(L), PH_BARRIER, t0);
  if (!L->soak)
    printf(" barrier_ms=%.1f", (L->t_barrier_done - t0) * 1000.0);
}

/* LEAVE everywhere, then close: a blocking write is fine here. */
static void leave_all(struct load *L)
{
  struct rdzv_proto_msg m;
  int i;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_LEAVE;
  for (i = 0; i < L->nodes; i++) {
    struct conn *c = &L->c[i];

    encode_or_die(&m, c);
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK);
    flush_out(L, c);
    shutdown(c->fd, SHUT_WR);
  }
  for (i = 0; i < L->nodes; i++) {
    close(L->c[i].fd);
    free(L->c[i].in);
    L->c[i].in = NULL;
    L->c[i].in_len = L->c[i].in_cap = 0;
  }
}

/* The handshake on every connection, one after the other, blocking: part
 * of connecting, not of the timed rendezvous.  Returns the time taken. */
static double authenticate_all(struct load *L)
{
  double t0 = now_s();
  char err[512];
  int i, fl;

  if (L->secret.len == 0)
    return 0;
  for (i = 0; i < L->nodes; i++) {
    struct conn *c = &L->c[i];

    fl = fcntl(c->fd, F_GETFL);
    fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
    if (rdzv_auth_handshake_fd(c->fd, &L->secret, (int)(PHASE_TIMEOUT * 1000),
                               err, sizeof err) != 0)
      die("connection %d: %s", c->idx, err);
    fcntl(c->fd, F_SETFL, fl);
  }
  return now_s() - t0;
}

/* Fresh connection slots (soak: every cycle). */
static void reset_conns(struct load *L)
{
  int i;

  for (i = 0; i < L->nodes; i++) {
    free(L->c[i].in);
    free(L->c[i].out);
    memset(&L->c[i], 0, sizeof L->c[i]);
    L->c[i].idx = i;
    L->c[i].fd = -1;
  }
  L->rounds = L->barriers = L->restarts = 0;
  L->waitings = 0;
}

/* Every agent JOINs (again) and gets its ROUND. */
static void join_all(struct load *L)
{
  int i;

  for (i = 0; i < L->nodes; i++) {
    L->c[i].got_round = false;
    encode_join(L, &L->c[i]);
  }
  L->rounds = 0;
  wait_for(L, &L->rounds, send_all(L), PH_ROUND, now_s());
  check_assignment(L);
}

/* ---- --restart (Note [restart]) ---------------------------------------- */

/* Note [restart]: the round runs (every agent has its ROUND and its
 * token); rdzv_load says so on stderr ("rdzv_load: running ...") and the
 * caller SIGKILLs rdzvd and starts a new one on the same port.  Each agent
 * sees its connection die and does what launcher/rdzv_client_conn.c does:
 * waits 0.1 s, doubling to 5 s, each delay drawn uniformly between half
 * and all of it; connects (an attempt bounded by 5 s; refused or reset:
 * the next delay); passes the handshake when there is a secret; sends
 * RESUME (phase running, its ROUND's assignment and token) and KEEPALIVE.
 * The PONG says the daemon took the RESUME (a refusal is an ERROR and a
 * close before it).  The clock starts when the new daemon listens (a probe
 * connection every millisecond once the old daemon, --rdzvd-pid, is a
 * zombie or gone: until then its own listener may answer) and
 * stops when its log says "round R rebuilt: all N nodes re-asserted it"
 * (--rdzvd-log, read every millisecond; without it, the last PONG). */

static void heap_push(struct load *L, double due, int idx)
{
  size_t i;

  if (L->heap_len == L->heap_cap) {
    size_t cap = L->heap_cap ? L->heap_cap * 2 : 1024;
    struct timer_ev *h = realloc(L->heap, cap * sizeof *h);

    if (!h)
      die("out of memory");
    L->heap = h;
    L->heap_cap = cap;
  }
  i = L->heap_len++;
  while (i > 0 && L->heap[(i - 1) / 2].due > due) {
    L->heap[i] = L->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  L->heap[i].due = due;
  L->heap[i].idx = idx;
}

static struct timer_ev heap_pop(struct load *L)
{
  struct timer_ev top = L->heap[0], last = L->heap[--L->heap_len];
  size_t i = 0, k;

  while ((k = 2 * i + 1) < L->heap_len) {
    if (k + 1 < L->heap_len && L->heap[k + 1].due < L->heap[k].due)
      k++;
    if (L->heap[k].due >= last.due)
      break;
    L->heap[i] = L->heap[k];
    i = k;
  }
  if (L->heap_len)
    L->heap[i] = last;
  return top;
}

/* c's timer (an entry whose due is not c->due any more is stale). */
static void set_timer(struct load *L, struct conn *c, double due)
{
  c->due = due;
  heap_push(L, due, c->idx);
}

static void drop_fd(struct conn *c)
{
  c->broken = false;
  if (c->fd >= 0)
    close(c->fd);         /* leaves the epoll set with it */
  c->fd = -1;
  free(c->out);
  c->out = NULL;
  c->out_len = c->out_off = 0;
  c->in_len = 0;
}

/* rdzv_client_conn.c schedule_retry: the delay, then the next backoff. */
static void schedule_retry(struct load *L, struct conn *c)
{
  double delay;

  c->rng ^= c->rng << 13;         /* xorshift64 */
  c->rng ^= c->rng >> 7;
  c->rng ^= c->rng << 17;
  delay = c->backoff * (0.5 + 0.5 * (double)(c->rng >> 11) / 0x1p53);
  c->backoff = c->backoff <= 0 ? BACKOFF_FIRST : c->backoff * 2;
  if (c->backoff > BACKOFF_CAP)
    c->backoff = BACKOFF_CAP;
  c->rs = RS_WAIT;
  set_timer(L, c, now_s() + delay);
}

static void attempt_failed(struct load *L, struct conn *c)
{
  L->failed_attempts++;
  drop_fd(c);
  schedule_retry(L, c);
}

static void lost_conn(struct load *L, struct conn *c)
{
  if (L->lost++ == 0)
    L->t_lost = now_s();
  drop_fd(c);
  c->backoff = BACKOFF_FIRST;
  schedule_retry(L, c);
}

/* Writes c->out; EPOLLOUT while some is left.  A reset: the next attempt
 * (c->fd is then -1). */
static void send_out(struct load *L, struct conn *c)
{
  bool done = flush_out(L, c);

  if (c->broken) {
    attempt_failed(L, c);
    return;
  }
  ep_set(L, c, EPOLL_CTL_MOD, done ? EPOLLIN : EPOLLIN | EPOLLOUT);
}

/* Connected (and authenticated): RESUME, then KEEPALIVE for the PONG. */
static void send_resume(struct load *L, struct conn *c)
{
  struct rdzv_proto_msg m;
  struct rdzv_proto_resume *r = &m.u.resume;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_RESUME;
  fill_join(L, c, &r->join);
  r->phase = RDZV_PROTO_PHASE_RUNNING;
  r->round = c->round;          /* the assignment and its token */
  r->round.embedded = false;
  r->round.host_rank = 0;
  append_msg(c, &m);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_KEEPALIVE;
  append_msg(c, &m);
  c->rs = RS_RESUMED;
  c->due = 0;
  send_out(L, c);
}

static void on_connected(struct load *L, struct conn *c)
{
  struct rdzv_proto_msg m;

  if (L->secret.len == 0) {
    send_resume(L, c);
    return;
  }
  memset(&m, 0, sizeof m);
  if (rdzv_auth_client_hello(&c->auth, &m) != 0)
    die("connection %d: cannot make a hello nonce", c->idx);
  append_msg(c, &m);
  c->rs = RS_AUTH;
  c->due = 0;
  send_out(L, c);
}

static void start_attempt(struct load *L, struct conn *c)
{
  int one = 1;

  L->attempts++;
  c->fd = socket(L->addr.ss_family,
                 SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0)
    die("socket (connection %d): %s", c->idx, strerror(errno));
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->rs = RS_CONNECTING;
  if (connect(c->fd, (struct sockaddr *)&L->addr, L->addrlen) != 0) {
    if (errno != EINPROGRESS) {   /* refused: nobody listens yet */
      attempt_failed(L, c);
      return;
    }
    ep_set(L, c, EPOLL_CTL_ADD, EPOLLOUT);
    set_timer(L, c, now_s() + ATTEMPT_TIMEOUT);
    return;
  }
  ep_set(L, c, EPOLL_CTL_ADD, EPOLLIN);
  on_connected(L, c);
}

/* The daemon's answers on a reconnected connection. */
static void on_resume_msg(struct load *L, struct conn *c,
                          const struct rdzv_proto_msg *m)
{
  struct rdzv_proto_msg reply;
  char err[RDZV_PROTO_MAX_TEXT + 128];
  int rc;

  if (c->rs == RS_AUTH) {
    memset(&reply, 0, sizeof reply);
    rc =
        rdzv_auth_client_step(&c->auth, &L->secret, m, &reply, err, sizeof err);
    if (rc < 0)
      die("connection %d: %s", c->idx, err);
    if (rc == 1) {
      append_msg(c, &reply);
      send_out(L, c);
    } else {
      send_resume(L, c);
    }
    return;
  }
  if (c->rs == RS_RESUMED && m->op == RDZV_PROTO_PONG) {
    c->rs = RS_BACK;
    L->back++;
    L->t_last_pong = now_s();
    return;
  }
  if (m->op == RDZV_PROTO_ERROR)
    die("connection %d: the daemon refused its RESUME: ERROR %s: %s",
        c->idx, rdzv_proto_error_name(m->u.text.code), m->u.text.message);
  if (m->op == RDZV_PROTO_RESTART || m->op == RDZV_PROTO_CLOSED)
    die("connection %d: the round was not rebuilt: %s: %s", c->idx,
        rdzv_proto_op_name(m->op), m->u.text.message);
  die("connection %d: unexpected %s %s", c->idx, rdzv_proto_op_name(m->op),
      c->rs == RS_UP ? "while the round ran" : "after its RESUME");
}

/* True once the killed daemon (--rdzvd-pid) has closed its descriptors,
 * its listener among them: it is a zombie, or gone.  Its connections die
 * one by one while it exits (80 ms for 10,000), its listener maybe last. */
static bool old_daemon_gone(const struct load *L)
{
  char path[64], buf[512], *p;
  ssize_t n;
  int fd;

  if (!L->rdzvd_pid)
    return true;
  snprintf(path, sizeof path, "/proc/%d/stat", L->rdzvd_pid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return true;
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return true;
  buf[n] = '\0';
  p = strrchr(buf, ')');        /* "pid (comm) S ..." */
  return !p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X';
}

/* A connection to the port succeeds: the new daemon listens (probed only
 * once the old one is gone, whose listener would answer too). */
static void probe_listener(struct load *L)
{
  struct timeval tv = { 0, 100000 };
  int fd = socket(L->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if (fd < 0)
    die("socket (probe): %s", strerror(errno));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&L->addr, L->addrlen) == 0)
    L->t_listen = now_s();
  close(fd);
}

/* Reads what the new daemon logged since last time; sets t_rebuilt at
 * the line that says the round is whole again. */
static void watch_log(struct load *L, const char *needle)
{
  char buf[65536 + sizeof L->log_tail];
  size_t keep = strlen(needle) - 1;
  ssize_t n;

  if (L->log_fd < 0) {
    L->log_fd = open(L->rdzvd_log, O_RDONLY | O_CLOEXEC);
    if (L->log_fd < 0)
      return;                   /* not there yet */
  }
  for (;;) {
    memcpy(buf, L->log_tail, L->log_tail_len);
    n = read(L->log_fd, buf + L->log_tail_len, sizeof buf - L->log_tail_len
             - 1);
    if (n <= 0)
      return;
    n += (ssize_t)L->log_tail_len;
    buf[n] = '\0';
    if (strstr(buf, needle)) {
      L->t_rebuilt = now_s();
      return;
    }
    L->log_tail_len = (size_t)n < keep ? (size_t)n : keep;
    memcpy(L->log_tail, buf + n - L->log_tail_len, L->log_tail_len);
  }
}

/* Fires the timers that are due; returns ms until the next one (or -1). */
static int run_timers(struct load *L)
{
  double t = now_s();

  while (L->heap_len) {
    struct conn *c;

    if (L->heap[0].due > t)
      return (int)((L->heap[0].due - t) * 1000) + 1;
    {
      struct timer_ev e = heap_pop(L);

      c = &L->c[e.idx];
      if (c->due != e.due)
        continue;                 /* stale */
    }
    c->due = 0;
    if (c->rs == RS_WAIT)
      start_attempt(L, c);
    else if (c->rs == RS_CONNECTING)
      attempt_failed(L, c);       /* no answer within ATTEMPT_TIMEOUT */
    t = now_s();
  }
  return -1;
}

/* From the round running to every agent back and the round rebuilt. */
static void restart_round(struct load *L)
{
  struct epoll_event ev[MAX_EVENTS];
  char needle[128];
  double deadline = now_s() + 2 * PHASE_TIMEOUT;
  int i, n, wait_ms;

  snprintf(needle, sizeof needle, "round %d rebuilt: all %d nodes "
           "re-asserted it", L->c[0].round.round, L->nodes);
  L->log_fd = -1;
  signal(SIGPIPE, SIG_IGN);     /* a reset attempt: EPIPE, then again */
  for (i = 0; i < L->nodes; i++) {
    struct conn *c = &L->c[i];

    c->rs = RS_UP;
    c->rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid() ^
             ((uint64_t)(i + 1) * 0xbf58476d1ce4e5b9ULL);
  }
  fprintf(stderr, "rdzv_load: running round %d with %d nodes: kill rdzvd "
          "now\n", L->c[0].round.round, L->nodes);
  fflush(stderr);
  while (L->back < L->nodes || (L->rdzvd_log && !L->t_rebuilt)) {
    double t = now_s();

    if (t > deadline)
      die("after %.0f s: %d of %d agents lost the daemon, %d back, %s",
          2 * PHASE_TIMEOUT, L->lost, L->nodes, L->back,
          L->t_listen ? "the new daemon listens" : "no daemon listens");
    if (L->lost && !L->t_listen && t - L->t_probe >= 0.001) {
      L->t_probe = t;
      if (old_daemon_gone(L))
        probe_listener(L);
    }
    if (L->rdzvd_log && L->t_listen && !L->t_rebuilt &&
        t - L->t_log >= 0.001) {
      L->t_log = t;
      watch_log(L, needle);
    }
    wait_ms = run_timers(L);
    if (L->lost && (!L->t_listen || (L->rdzvd_log && !L->t_rebuilt)))
      wait_ms = 1;
    if (wait_ms < 0 || wait_ms > 100)
      wait_ms = 100;
    n = epoll_wait(L->ep, ev, MAX_EVENTS, wait_ms);
    if (n < 0 && errno != EINTR)
      die("epoll_wait: %s", strerror(errno));
    for (i = 0; i < n; i++) {
      struct conn *c = ev[i].data.ptr;

      if (c->fd < 0)
        continue;                 /* closed by an earlier event */
      if (c->rs == RS_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;

        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
          attempt_failed(L, c);
          continue;
        }
        on_connected(L, c);
        continue;
      }
      if ((ev[i].events & EPOLLOUT) && c->out)
        send_out(L, c);
      if (!(ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
        continue;
      if (read_conn(L, c, c->rs == RS_UP ? PH_UP : PH_RESUME))
        continue;
      if (c->rs == RS_UP)
        lost_conn(L, c);
      else if (c->rs == RS_BACK)
        die("connection %d: closed by the new daemon after its RESUME was "
            "taken", c->idx);
      else
        attempt_failed(L, c);     /* reset before the PONG: again */
    }
  }
  if (!L->rdzvd_log)
    L->t_rebuilt = L->t_last_pong;
  if (L->t_rebuilt < L->t_listen)
    die("the round was rebuilt before the new daemon was seen listening");
  if (L->log_fd >= 0)
    close(L->log_fd);
  free(L->heap);
  L->heap = NULL;
  L->heap_len = L->heap_cap = 0;
}

/* The dead daemon's closed connections are gone from the epoll set; the
 * barrier and LEAVE run on the new ones. */
static void restart(struct load *L)
{
  restart_round(L);
  printf("restart nodes=%d auth=%d rebuilt_ms=%.1f last_pong_ms=%.1f "
         "down_ms=%.1f attempts=%d failed_attempts=%d", L->nodes,
         L->secret.len > 0, (L->t_rebuilt - L->t_listen) * 1e3,
         (L->t_last_pong - L->t_listen) * 1e3,
         (L->t_listen - L->t_lost) * 1e3, L->attempts, L->failed_attempts);
  barrier_all(L);
  printf("\n");
  fflush(stdout);
  leave_all(L);
}

static long rss_kb(int pid)
{
  char path[64], line[256];
  long kb = -1;
  FILE *f;

  snprintf(path, sizeof path, "/proc/%d/status", pid);
  f = fopen(path, "r");
  if (!f)
    return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kb) == 1)
      break;
  fclose(f);
  return kb;
}

/* One soak cycle: connect, join, a failure and a restart, re-join, exit
 * barrier, leave. */
static void soak_cycle(struct load *L, int cycle)
{
  char id[RDZV_PROTO_MAX_ID + 1];
  struct rdzv_proto_msg m;
  int i;

  snprintf(id, sizeof id, "%s-%d", L->id, cycle);
  L->cycle_id = id;
  reset_conns(L);
  connect_all(L);
  authenticate_all(L);
  join_all(L);
  /* Node 0's workers fail: every other participant gets RESTART. */
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_FAILURE;
  snprintf(m.u.failure.message, sizeof m.u.failure.message,
           "soak cycle %d", cycle);
  encode_or_die(&m, &L->c[0]);
  L->c[0].got_restart = true;
  L->restarts = 1;
  wait_for(L, &L->restarts, send_all(L), PH_RESTART, now_s());
  join_all(L);
  for (i = 0; i < L->nodes; i++)
    if (L->c[i].round.restart_count != 1)
      die("cycle %d connection %d: restart_count %d after one failure",
          cycle, i, L->c[i].round.restart_count);
  barrier_all(L);
  leave_all(L);
  for (i = 0; i < L->nodes; i++)
    L->c[i].fd = -1;
  L->cycle_id = NULL;
}

static int soak(struct load *L)
{
  double t0 = now_s(), end = t0 + L->minutes * 60;
  long rss_start = -1, rss_end = -1;
  int cycles = 0, rounds = 0;
  double next_note = t0 + 60;

  while (cycles == 0 || now_s() < end) {
    soak_cycle(L, cycles);
    cycles++;
    rounds += 2;          /* the first round and the one after the restart */
    if (cycles == 1 && L->rdzvd_pid)
      rss_start = rss_kb(L->rdzvd_pid);
    if (now_s() >= next_note) {
      next_note += 60;
      fprintf(stderr, "rdzv_load: soak: %d cycles in %.0f s, rdzvd rss "
              "%ld kB\n", cycles, now_s() - t0,
              L->rdzvd_pid ? rss_kb(L->rdzvd_pid) : -1L);
    }
  }
  if (L->rdzvd_pid)
    rss_end = rss_kb(L->rdzvd_pid);
  printf("soak minutes=%.2f rounds=%d nodes=%d auth=%d rss_start_kb=%ld "
         "rss_end_kb=%ld\n", (now_s() - t0) / 60, rounds, L->nodes,
         L->secret.len > 0, rss_start, rss_end);
  return 0;
}

int main(int argc, char **argv)
{
  struct load L;
  double t_first_join, t_last_join, auth_s;
  int i, pending;

  memset(&L, 0, sizeof L);
  parse_args(&L, argc, argv);
  raise_nofile(L.nodes);
  resolve(&L);
  L.c = calloc((size_t)L.nodes, sizeof *L.c);
  L.ep = epoll_create1(EPOLL_CLOEXEC);
  if (!L.c || L.ep < 0)
    die("setup: %s", strerror(errno));
  for (i = 0; i < L.nodes; i++) {
    L.c[i].idx = i;
    L.c[i].fd = -1;
  }
  if (L.soak)
    return soak(&L);
  connect_all(&L);
  auth_s = authenticate_all(&L);
  /* Encoding is not the daemon's work: done before the clock starts. */
  for (i = 0; i < L.nodes; i++)
    encode_join(&L, &L.c[i]);

  perf_ctl(&L, "enable\n");
  t_first_join = now_s();
  pending = send_all(&L);
  t_last_join = now_s();
  wait_for(&L, &L.rounds, pending, PH_ROUND, t_last_join);
  perf_ctl(&L, "disable\n");
  if (pending > 0) {  /* a JOIN finished late: the clock starts there */
    fprintf(stderr, "rdzv_load: %d JOINs waited for socket space\n",
            pending);
    t_last_join = L.t_last_write;
  }
  check_assignment(&L);
  if (L.restart) {
    restart(&L);
    free(L.c);
    close(L.ep);
    return 0;
  }
  printf("rdzv_load nodes=%d auth=%d complete_ms=%.1f first_round_ms=%.1f "
         "join_send_ms=%.1f waiting_msgs=%ld auth_ms=%.1f", L.nodes,
         L.secret.len > 0, (L.t_last_round - t_last_join) * 1e3,
         (L.t_first_round - t_last_join) * 1e3,
         (t_last_join - t_first_join) * 1e3, L.waitings, auth_s * 1e3);
  if (!L.leave_only)
    barrier_all(&L);
  printf("\n");
  fflush(stdout);
  leave_all(&L);
  free(L.c);
  close(L.ep);
  return 0;
}
