/* main.c -- rdzvd: the rendezvous daemon, and its status query. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "rdzv_proto.h"
#include "server.h"
#include "status_client.h"

#define EXIT_USAGE 2

static const char usage[] =
  "usage: rdzvd [--host ADDR] [--port PORT] [--max_jobs N] [--quiet]\n"
  "       rdzvd --status HOST[:PORT] [--json] [--job ID | --limit N]\n"
  "\n"
  "The cdrun rendezvous daemon: many jobs at once, keyed by rdzv_id.\n"
  "\n"
  "  --host ADDR      address to listen on (default: every IPv6 and IPv4\n"
  "                   address)\n"
  "  --port PORT      TCP port (default 29400; 0 picks a free one, printed\n"
  "                   on the first line as 'rdzvd: listening on ...')\n"
  "  --max_jobs N     at most N jobs (default 10000); when full, the job\n"
  "                   longest without a node is forgotten, else refused\n"
  "  --quiet          do not log what happens to each job\n"
  "  --status H[:P]   print the jobs, rounds, phases and nodes of the rdzvd\n"
  "                   at H:P (default port 29400) and exit\n"
  "  --json           with --status: print the raw JSON\n"
  "  --job ID         with --status: that job only, with its nodes\n"
  "  --limit N        with --status: at most N jobs (default 100)\n"
  "  --version, -h/--help\n"
  "\n"
  "Limits (man rdzvd, LIMITS; sizes take K, M, G suffixes):\n"
  "  --max_conns N            open connections (default 65536)\n"
  "  --hello_timeout SECS     time a new connection has to join (10)\n"
  "  --prejoin_frame_max SIZE frame limit until joined (16K)\n"
  "  --input_budget SIZE      partial frames, all connections (64M)\n"
  "  --output_budget SIZE     unwritten replies, all connections (256M)\n"
  "  --conn_output_max SIZE   unwritten replies of one connection (8M)\n"
  "  --kv_budget SIZE         key-value bytes, all jobs (256M)\n"
  "  --max_join_timeout SECS  ceiling on a job's join_timeout (86400)\n"
  "  --max_last_call SECS     ceiling on last_call_timeout (3600)\n"
  "  --max_close_timeout SECS ceiling on close_timeout (3600)\n"
  "  --max_keepalive SECS     ceiling on the keepalive window (300)\n";

struct daemon {
  uv_loop_t *loop;
  struct rdzvd_server *server;
  uv_signal_t sigterm, sigint;
  bool quiet;
};

/* Job log lines: a timestamp, then what happened. */
static void log_line(void *ctx, const char *line)
{
  struct daemon *d = ctx;
  struct timeval tv;
  struct tm tm;
  char stamp[32];

  if (d->quiet)
    return;
  gettimeofday(&tv, NULL);
  localtime_r(&tv.tv_sec, &tm);
  strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  fprintf(stderr, "%s.%03d rdzvd: %s\n", stamp, (int)(tv.tv_usec / 1000),
          line);
}

static void close_walk(uv_handle_t *h, void *arg)
{
  (void)arg;
  if (!uv_is_closing(h))
    uv_close(h, NULL);
}

static void on_signal(uv_signal_t *h, int signum)
{
  struct daemon *d = h->data;

  log_line(d, signum == SIGTERM ? "SIGTERM: shutting down"
                                : "SIGINT: shutting down");
  rdzvd_server_stop(d->server);
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
}

static int parse_int(const char *flag, const char *v, long lo, long hi)
{
  char *end;
  long n;

  errno = 0;
  n = strtol(v, &end, 10);
  if (errno || end == v || *end || n < lo || n > hi) {
    fprintf(stderr, "rdzvd: error: %s: invalid value '%s' (expected an "
            "integer %ld..%ld)\n", flag, v, lo, hi);
    exit(EXIT_USAGE);
  }
  return (int)n;
}

/* A byte count: digits and an optional K, M or G (powers of 1024). */
static size_t parse_size(const char *flag, const char *v)
{
  unsigned long long n, mul = 1;
  char *end;

  errno = 0;
  n = strtoull(v, &end, 10);
  if (*end == 'K' || *end == 'k')
    mul = 1ull << 10;
  else if (*end == 'M' || *end == 'm')
    mul = 1ull << 20;
  else if (*end == 'G' || *end == 'g')
    mul = 1ull << 30;
  if (mul > 1)
    end++;
  if (errno || end == v || *end || v[0] == '-' || n == 0 ||
      n > (1ull << 50) / mul) {
    fprintf(stderr, "rdzvd: error: %s: invalid size '%s' (expected a "
            "positive byte count, optionally with K, M or G)\n", flag, v);
    exit(EXIT_USAGE);
  }
  return (size_t)(n * mul);
}

/* Seconds: a positive finite number. */
static double parse_secs(const char *flag, const char *v)
{
  char *end;
  double d;

  errno = 0;
  d = strtod(v, &end);
  if (errno || end == v || *end || !(d > 0) || d > 1e7) {
    fprintf(stderr, "rdzvd: error: %s: invalid duration '%s' (expected "
            "seconds, > 0 and <= 1e7)\n", flag, v);
    exit(EXIT_USAGE);
  }
  return d;
}

/* Accepts --flag=value and --flag value, with - or _ spellings. */
static const char *flag_value(int argc, char **argv, int *i,
                              const char *name)
{
  const char *a = argv[*i];
  size_t n = strlen(name);
  size_t k;

  if (strncmp(a, "--", 2) != 0)
    return NULL;
  a += 2;
  for (k = 0; k < n; k++) {
    char c = a[k], want = name[k];

    if (c == '-')
      c = '_';
    if (c != want)
      return NULL;
  }
  if (a[n] == '=')
    return a + n + 1;
  if (a[n] != '\0')
    return NULL;
  if (*i + 1 >= argc) {
    fprintf(stderr, "rdzvd: error: --%s: expected a value\n", name);
    exit(EXIT_USAGE);
  }
  return argv[++*i];
}

int main(int argc, char **argv)
{
  struct rdzvd_server_opts o;
  struct daemon d;
  const char *status = NULL, *status_job = NULL, *v;
  int status_limit = 0;
  bool json = false;
  char err[256];
  int i, rc;

  memset(&o, 0, sizeof o);
  memset(&d, 0, sizeof d);
  o.port = 29400;
  for (i = 1; i < argc; i++) {
    if ((v = flag_value(argc, argv, &i, "host"))) {
      o.host = v;
    } else if ((v = flag_value(argc, argv, &i, "port"))) {
      o.port = parse_int("--port", v, 0, 65535);
    } else if ((v = flag_value(argc, argv, &i, "max_jobs"))) {
      o.limits.max_jobs = parse_int("--max_jobs", v, 1, 10000000);
    } else if ((v = flag_value(argc, argv, &i, "max_conns"))) {
      o.io.max_conns = parse_int("--max_conns", v, 1, 10000000);
    } else if ((v = flag_value(argc, argv, &i, "hello_timeout"))) {
      o.io.hello_timeout = parse_secs("--hello_timeout", v);
    } else if ((v = flag_value(argc, argv, &i, "prejoin_frame_max"))) {
      o.io.prejoin_frame = parse_size("--prejoin_frame_max", v);
    } else if ((v = flag_value(argc, argv, &i, "input_budget"))) {
      o.io.input_budget = parse_size("--input_budget", v);
    } else if ((v = flag_value(argc, argv, &i, "output_budget"))) {
      o.io.output_budget = parse_size("--output_budget", v);
    } else if ((v = flag_value(argc, argv, &i, "conn_output_max"))) {
      o.io.conn_output = parse_size("--conn_output_max", v);
    } else if ((v = flag_value(argc, argv, &i, "kv_budget"))) {
      o.limits.max_kv_total = parse_size("--kv_budget", v);
    } else if ((v = flag_value(argc, argv, &i, "max_join_timeout"))) {
      o.limits.max_join_timeout = parse_secs("--max_join_timeout", v);
    } else if ((v = flag_value(argc, argv, &i, "max_last_call"))) {
      o.limits.max_last_call = parse_secs("--max_last_call", v);
    } else if ((v = flag_value(argc, argv, &i, "max_close_timeout"))) {
      o.limits.max_close_timeout = parse_secs("--max_close_timeout", v);
    } else if ((v = flag_value(argc, argv, &i, "max_keepalive"))) {
      o.limits.max_keepalive = parse_secs("--max_keepalive", v);
    } else if ((v = flag_value(argc, argv, &i, "job"))) {
      if (!*v || strlen(v) > RP_MAX_ID) {
        fprintf(stderr, "rdzvd: error: --job: expected a job id of 1 to "
                "%d bytes\n", RP_MAX_ID);
        return EXIT_USAGE;
      }
      status_job = v;
    } else if ((v = flag_value(argc, argv, &i, "limit"))) {
      status_limit = parse_int("--limit", v, 1, RP_MAX_STATUS_JOBS);
    } else if ((v = flag_value(argc, argv, &i, "status"))) {
      status = v;
    } else if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--quiet") == 0) {
      d.quiet = true;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("rdzvd %s\n", CDRUN_VERSION);
      return 0;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage, stdout);
      return 0;
    } else {
      fprintf(stderr, "rdzvd: error: unrecognized argument '%s'\n",
              argv[i]);
      return EXIT_USAGE;
    }
  }
  if (status)
    return status_query(status, json, status_job, status_limit);

  signal(SIGPIPE, SIG_IGN);
  /* A daemon outlives the terminal that started it. */
  signal(SIGHUP, SIG_IGN);
  d.loop = uv_default_loop();
  /* --quiet: no logger at all, so no line is even formatted. */
  o.log = d.quiet ? NULL : log_line;
  o.log_ctx = &d;
  rc = rdzvd_server_start(d.loop, &o, &d.server, err, sizeof err);
  if (rc) {
    fprintf(stderr, "rdzvd: error: %s\n", err);
    return 1;
  }
  /* The first line is machine-readable: tests and scripts that asked for
   * port 0 read the port from it. */
  {
    const char *h = o.host && *o.host ? o.host : "::";
    bool v6 = strchr(h, ':') != NULL;

    fprintf(stderr, "rdzvd: listening on %s%s%s:%d (pid %d)\n",
            v6 ? "[" : "", h, v6 ? "]" : "", rdzvd_server_port(d.server),
            (int)getpid());
  }
  fflush(stderr);
  uv_signal_init(d.loop, &d.sigterm);
  uv_signal_init(d.loop, &d.sigint);
  d.sigterm.data = d.sigint.data = &d;
  uv_signal_start(&d.sigterm, on_signal, SIGTERM);
  uv_signal_start(&d.sigint, on_signal, SIGINT);
  uv_run(d.loop, UV_RUN_DEFAULT);
  uv_walk(d.loop, close_walk, NULL);
  uv_run(d.loop, UV_RUN_DEFAULT);
  uv_loop_close(d.loop);
  return 0;
}
