/* main.c -- rdzvd: the rendezvous daemon, and its status query. */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "endpoint.h"
#include "log_file.h"
#include "metrics.h"
#include "metrics_http.h"
#include "rdzv_auth.h"
#include "rdzv_proto.h"
#include "rdzv_token.h"
#include "sd_notify.h"
#include "server.h"
#include "status_client.h"

#define EXIT_USAGE 2

static const char usage[] =
  "usage: rdzvd [--host ADDR] [--port PORT] [--max_jobs N] [--quiet]\n"
  "             [--metrics HOST:PORT] [--log-file PATH] [--secret-file PATH]\n"
  "             [--token-key-file PATH]\n"
  "             [--max_conns N] [--kv_budget BYTES] [...limits: see below]\n"
  "       rdzvd --status HOST[:PORT] [--json] [--job ID | --limit N]\n"
  "             [--secret-file PATH]\n"
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
  "  --metrics H:P    serve Prometheus metrics at http://H:P/metrics\n"
  "                   (':P' or '[::]:P': every address; port 0 picks one,\n"
  "                   printed as 'rdzvd: metrics on ...')\n"
  "  --log-file PATH  append the log to PATH instead of stderr (the first\n"
  "                   lines go to both); SIGHUP reopens it\n"
  "  --secret-file PATH  a shared secret (16..1024 bytes, mode 600): only\n"
  "                   clients that prove they know it are served, and\n"
  "                   --status proves it (env RDZVD_SECRET_FILE)\n"
  "  --token-key-file PATH  this daemon's own key for node tokens, created\n"
  "                   (mode 600) if missing: a restarted daemon with the\n"
  "                   same file checks every re-asserted rank (env\n"
  "                   RDZVD_TOKEN_KEY_FILE)\n"
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
  "  --metrics_header_timeout SECS  time a scrape has to send its\n"
  "                           request (2); idle scrapes are evicted\n"
  "  --prejoin_frame_max SIZE frame limit until joined (16K)\n"
  "  --input_budget SIZE      partial frames, all connections (64M)\n"
  "  --output_budget SIZE     unwritten replies, all connections (256M)\n"
  "  --conn_output_max SIZE   unwritten replies of one connection (8M)\n"
  "  --kv_budget SIZE         key-value bytes, all jobs (256M)\n"
  "  --max_join_timeout SECS  ceiling on a job's join_timeout (86400)\n"
  "  --max_last_call SECS     ceiling on last_call_timeout (3600)\n"
  "  --max_close_timeout SECS ceiling on close_timeout (3600)\n"
  "  --max_keepalive SECS     ceiling on the keepalive window (300)\n"
  "\n"
  "Soft state (man rdzvd, SOFT STATE):\n"
  "  --resume-grace SECS      after a restart, how long a job rebuilt from\n"
  "                           re-assertions waits for its missing nodes\n"
  "                           before a new round without them (10; at\n"
  "                           least the job's keepalive window)\n";

struct daemon {
  uv_loop_t *loop;
  struct rdzvd_server *server;
  uv_signal_t sigterm, sigint, sighup;
  bool quiet;
  /* --log-file; log.f NULL: stderr */
  struct log_file log;
  const char *log_path;
  /* --metrics */
  struct rdzvd_metrics metrics;
  struct metrics_http *http;
  const char *metrics_ep;
  char metrics_host[256];
  double metrics_header_timeout;  /* 0: the default */
  uv_timer_t trim;
};

/* Memory that peers made the daemon hold and then gave up (a job's key-
 * value store, 10,000 jobs forgotten) goes back to the system: glibc
 * keeps freed chunks in its arenas otherwise, and the daemon's RSS would
 * stay at its peak for ever.  Checked every TRIM_PERIOD_MS; the timer does
 * not keep the loop alive. */
#define TRIM_PERIOD_MS 2000
#define TRIM_FREE_BYTES ((size_t)1 << 20)

static void trim_fire(uv_timer_t *t)
{
  (void)t;
  if (mallinfo2().fordblks > TRIM_FREE_BYTES)
    malloc_trim(0);
}

/* Job log lines: a timestamp, then what happened (escaped: log_file.h). */
static void log_line(void *ctx, const char *line)
{
  struct daemon *d = ctx;

  if (!d->quiet)
    log_file_line(&d->log, line);
}

/* The first lines: on stderr, where scripts read the port, and in the
 * log file when there is one. */
static void announce(struct daemon *d, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

static void announce(struct daemon *d, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fflush(stderr);
  if (d->log.f) {
    va_start(ap, fmt);
    vfprintf(d->log.f, fmt, ap);
    va_end(ap);
  }
}

/* SIGHUP (systemctl reload, logrotate): reopen the log file. */
static void on_sighup(uv_signal_t *h, int signum)
{
  struct daemon *d = h->data;
  char line[512];
  int err;

  (void)signum;
  if (!d->log.f) {
    log_line(d, "SIGHUP: no --log-file to reopen");
    return;
  }
  err = log_file_reopen(&d->log);
  if (err) {
    snprintf(line, sizeof line, "SIGHUP: cannot reopen %s: %s; still "
             "writing to the file opened before", d->log.path,
             strerror(-err));
    log_line(d, line);
    return;
  }
  snprintf(line, sizeof line, "SIGHUP: reopened %s", d->log.path);
  log_line(d, line);
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

  sd_notify_state("STOPPING=1");
  log_line(d, signum == SIGTERM ? "SIGTERM: shutting down"
                                : "SIGINT: shutting down");
  if (signum == SIGTERM)
    rdzvd_server_going_away(d->server, "rdzvd is stopping (SIGTERM)");
  else
    rdzvd_server_stop(d->server);
  if (d->http)
    metrics_http_stop(d->http);
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
  uv_close((uv_handle_t *)&d->sighup, NULL);
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

/* GET /metrics: the counters, and the gauges read from the registry. */
static int render_metrics(void *ctx, char **body, size_t *len)
{
  struct daemon *d = ctx;
  struct metrics_gauges g;

  _Static_assert(RDZV_STATE_PHASES == METRICS_PHASES, "one phase list");
  memset(&g, 0, sizeof g);
  rdzvd_server_jobs_by_phase(d->server, g.jobs_by_phase, g.phase_names);
  g.nodes = rdzvd_server_nodes(d->server);
  return metrics_render(&d->metrics, &g, body, len);
}

/* --metrics HOST:PORT ("[v6]:PORT", ":PORT" for every address). */
static int start_metrics(struct daemon *d, char *err, size_t errlen)
{
  struct metrics_http_opts o = { 0 };
  char host[256] = "";
  int port = -1;

  if (d->metrics_ep[0] == ':') {
    char *end;
    long p = strtol(d->metrics_ep + 1, &end, 10);

    if (end != d->metrics_ep + 1 && !*end && p >= 0 && p <= 65535)
      port = (int)p;
  } else if (endpoint_parse(d->metrics_ep, -1, host, sizeof host,
                            &port) != 0) {
    port = -1;
  }
  if (port < 0) {
    snprintf(err, errlen, "--metrics: invalid value '%s' (expected "
             "HOST:PORT, [IPV6]:PORT or :PORT)", d->metrics_ep);
    return UV_EINVAL;
  }
  snprintf(d->metrics_host, sizeof d->metrics_host, "%s", host);
  o.host = host;
  o.port = port;
  o.render = render_metrics;
  o.ctx = d;
  o.header_timeout = d->metrics_header_timeout;
  return metrics_http_start(d->loop, &o, &d->http, err, errlen);
}

int main(int argc, char **argv)
{
  struct rdzvd_server_opts o;
  struct daemon d;
  struct ra_secret secret, token_key;
  const char *status = NULL, *status_job = NULL, *v;
  const char *secret_file = getenv("RDZVD_SECRET_FILE");
  const char *token_key_file = getenv("RDZVD_TOKEN_KEY_FILE");
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
    } else if ((v = flag_value(argc, argv, &i, "metrics"))) {
      d.metrics_ep = v;
    } else if ((v = flag_value(argc, argv, &i, "log_file"))) {
      d.log_path = v;
    } else if ((v = flag_value(argc, argv, &i, "secret_file"))) {
      secret_file = v;
    } else if ((v = flag_value(argc, argv, &i, "token_key_file"))) {
      token_key_file = v;
    } else if ((v = flag_value(argc, argv, &i, "max_conns"))) {
      o.io.max_conns = parse_int("--max_conns", v, 1, 10000000);
    } else if ((v = flag_value(argc, argv, &i, "hello_timeout"))) {
      o.io.hello_timeout = parse_secs("--hello_timeout", v);
    } else if ((v = flag_value(argc, argv, &i, "metrics_header_timeout"))) {
      d.metrics_header_timeout = parse_secs("--metrics_header_timeout", v);
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
    } else if ((v = flag_value(argc, argv, &i, "resume_grace"))) {
      o.limits.resume_grace = parse_secs("--resume-grace", v);
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
  memset(&secret, 0, sizeof secret);
  if (secret_file && *secret_file &&
      ra_secret_load(secret_file, &secret, err, sizeof err) != 0) {
    fprintf(stderr, "rdzvd: error: %s\n", err);
    return 1;
  }
  if (status) {
    rc = status_query(status, json, status_job, status_limit,
                      &secret);
    ra_secret_clear(&secret);
    return rc;
  }
  o.secret = &secret;
  memset(&token_key, 0, sizeof token_key);
  if (token_key_file && *token_key_file &&
      rdzv_token_key_file(token_key_file, &token_key, err, sizeof err)) {
    fprintf(stderr, "rdzvd: error: --token-key-file: %s\n", err);
    ra_secret_clear(&secret);
    return 1;
  }
  o.token_key = &token_key;

  signal(SIGPIPE, SIG_IGN);
  /* A daemon outlives the terminal that started it. */
  signal(SIGHUP, SIG_IGN);
  d.loop = uv_default_loop();
  if (d.log_path) {
    rc = log_file_open(&d.log, d.log_path);
    if (rc) {
      fprintf(stderr, "rdzvd: error: --log-file: cannot open %s: %s\n",
              d.log_path, strerror(-rc));
      return 1;
    }
  }
  /* --quiet: no logger at all, so no line is even formatted. */
  o.log = d.quiet ? NULL : log_line;
  o.log_ctx = &d;
  metrics_init(&d.metrics);
  o.metrics = &d.metrics;
  rc = rdzvd_server_start(d.loop, &o, &d.server, err, sizeof err);
  ra_secret_clear(&secret);   /* the server keeps its own copy */
  ra_secret_clear(&token_key);
  if (rc) {
    fprintf(stderr, "rdzvd: error: %s\n", err);
    log_file_close(&d.log);
    return 1;
  }
  if (d.metrics_ep && start_metrics(&d, err, sizeof err)) {
    fprintf(stderr, "rdzvd: error: %s\n", err);
    rdzvd_server_stop(d.server);
    uv_run(d.loop, UV_RUN_DEFAULT);
    log_file_close(&d.log);
    return 1;
  }
  /* Handled before anyone learns the port: a SIGTERM right after the
   * first line is a clean stop. */
  uv_signal_init(d.loop, &d.sigterm);
  uv_signal_init(d.loop, &d.sigint);
  uv_signal_init(d.loop, &d.sighup);
  d.sigterm.data = d.sigint.data = d.sighup.data = &d;
  uv_signal_start(&d.sigterm, on_signal, SIGTERM);
  uv_signal_start(&d.sigint, on_signal, SIGINT);
  uv_signal_start(&d.sighup, on_sighup, SIGHUP);
  /* The first line is machine-readable: tests and scripts that asked for
   * port 0 read the port from it. */
  {
    const char *h = o.host && *o.host ? o.host : "::";
    bool v6 = strchr(h, ':') != NULL;

    announce(&d, "rdzvd: listening on %s%s%s:%d (pid %d)\n",
             v6 ? "[" : "", h, v6 ? "]" : "", rdzvd_server_port(d.server),
             (int)getpid());
  }
  if (d.http) {
    const char *h = d.metrics_host[0] ? d.metrics_host : "::";
    bool v6 = strchr(h, ':') != NULL;

    announce(&d, "rdzvd: metrics on http://%s%s%s:%d/metrics\n",
             v6 ? "[" : "", h, v6 ? "]" : "", metrics_http_port(d.http));
  }
  /* systemd (Type=notify): ready once every port listens. */
  {
    char state[64];

    snprintf(state, sizeof state, "READY=1\nSTATUS=listening on port %d",
             rdzvd_server_port(d.server));
    rc = sd_notify_state(state);
    if (rc < 0)
      announce(&d, "rdzvd: warning: cannot notify systemd through "
               "NOTIFY_SOCKET=%s: %s\n", getenv("NOTIFY_SOCKET"),
               strerror(-rc));
  }
  if (secret_file && *secret_file) {
    snprintf(err, sizeof err, "clients must prove they know the shared "
             "secret in %s", secret_file);
    log_line(&d, err);
    if (!(token_key_file && *token_key_file))
      log_line(&d, "warning: no --token-key-file: after a restart this "
               "daemon cannot check a re-asserted rank, and any client "
               "with the secret could claim one before its node returns "
               "(rdzvd(8), Node tokens)");
  }
  uv_timer_init(d.loop, &d.trim);
  uv_timer_start(&d.trim, trim_fire, TRIM_PERIOD_MS, TRIM_PERIOD_MS);
  uv_unref((uv_handle_t *)&d.trim);
  fflush(stderr);
  uv_run(d.loop, UV_RUN_DEFAULT);
  uv_walk(d.loop, close_walk, NULL);
  uv_run(d.loop, UV_RUN_DEFAULT);
  uv_loop_close(d.loop);
  log_file_close(&d.log);
  return 0;
}
