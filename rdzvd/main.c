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
#include "err.h"
#include "log_file.h"
#include "metrics.h"
#include "metrics_http.h"
#include "notify.h"
#include "num.h"
#include "options.h"
#include "rdzv_auth.h"
#include "rdzv_proto.h"
#include "job_ledger.h"
#include "live_stores.h"
#include "rdzv_token.h"
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
  "                   longest without a node is forgotten, else one that\n"
  "                   never ran (of the peer holding most), else refused\n"
  "  --max-jobs-per-peer N  jobs holding a node that one peer address may\n"
  "                   create (default 1000)\n"
  "  --max-waiting-per-peer N  nodes of one peer address on waiting lists\n"
  "                   (default 1000)\n"
  "  --max-conns-per-peer N  connections of one peer address (default a\n"
  "                   quarter of --max_conns)\n"
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
  /* --token-key-file's job ledger (Note [job ledger]); NULL: none */
  struct job_ledger *ledger;
  struct rdzv_ledger ledger_calls;
  /* The live jobs' stores (Note [live store in rdzvd]) */
  struct live_stores *live;
  struct rdzv_live_host live_calls;
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
             err_str(err));
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

  notify_send("STOPPING=1");
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

/* GET /metrics: the counters, and the gauges read from the registry. */
static int render_metrics(void *ctx, char **body, size_t *len)
{
  struct daemon *d = ctx;
  struct metrics_gauges g;

  _Static_assert(RDZV_STATE_PHASES == METRICS_PHASES, "one phase list");
  memset(&g, 0, sizeof g);
  rdzvd_server_jobs_by_phase(d->server, g.jobs_by_phase, g.phase_names);
  g.nodes = rdzvd_server_nodes(d->server);
  rdzvd_server_peer_counts(d->server, &g.peers, &g.peer_refused_jobs,
                           &g.peer_refused_waiting, &g.peer_refused_conns);
  return metrics_render(&d->metrics, &g, body, len);
}

/* --metrics HOST:PORT ("[v6]:PORT", ":PORT" for every address). */
static int start_metrics(struct daemon *d, char *err, size_t errlen)
{
  struct metrics_http_opts o = { 0 };
  char host[256] = "";
  int port = -1;

  if (d->metrics_ep[0] == ':') {
    long p;

    if (num_parse_long(d->metrics_ep + 1, 0, 65535, &p) == 0)
      port = (int)p;
  } else if (endpoint_parse(d->metrics_ep, -1, host, sizeof host,
                            &port) != 0) {
    port = -1;
  }
  if (port < 0)
    return err_set(err, errlen, UV_EINVAL, "--metrics: invalid value '%s' "
                   "(expected HOST:PORT, [IPV6]:PORT or :PORT)",
                   d->metrics_ep);
  snprintf(d->metrics_host, sizeof d->metrics_host, "%s", host);
  o.host = host;
  o.port = port;
  o.render = render_metrics;
  o.ctx = d;
  o.header_timeout = d->metrics_header_timeout;
  return metrics_http_start(d->loop, &o, &d->http, err, errlen);
}

/* The daemon's first steps, up to serving: its token key, its log, the
 * server and the metrics endpoint.  Returns 0, or non-zero with a message
 * in err (and nothing left open). */
static int daemon_start(struct daemon *d, const struct options *opt,
                        const struct rdzv_auth_secret *secret, char *err,
                        size_t errlen)
{
  struct rdzvd_server_opts o = opt->server;
  struct rdzv_auth_secret token_key;
  char why[200];
  int rc;

  d->quiet = opt->quiet;
  d->log_path = opt->log_path;
  d->metrics_ep = opt->metrics_ep;
  d->metrics_header_timeout = opt->metrics_header_timeout;
  o.secret = secret;
  memset(&token_key, 0, sizeof token_key);
  if (opt->token_key_file && *opt->token_key_file &&
      rdzv_token_key_file(opt->token_key_file, &token_key, why, sizeof why))
    return err_invalid(err, errlen, "--token-key-file: %s", why);
  o.token_key = &token_key;

  signal(SIGPIPE, SIG_IGN);
  /* A daemon outlives the terminal that started it. */
  signal(SIGHUP, SIG_IGN);
  d->loop = uv_default_loop();
  if (d->log_path) {
    rc = log_file_open(&d->log, d->log_path);
    if (rc) {
      rdzv_auth_secret_clear(&token_key);
      return err_set(err, errlen, rc, "--log-file: cannot open %s: %s",
                     d->log_path, err_str(rc));
    }
  }
  /* --quiet: no logger at all, so no line is even formatted. */
  o.log = d->quiet ? NULL : log_line;
  o.log_ctx = d;
  if (opt->token_key_file && *opt->token_key_file) {
    rc = job_ledger_open(opt->token_key_file, &d->ledger, why, sizeof why);
    if (rc) {
      rdzv_auth_secret_clear(&token_key);
      log_file_close(&d->log);
      return err_set(err, errlen, rc, "--token-key-file: %s", why);
    }
    /* A write error is logged (unless --quiet). */
    d->ledger_calls = job_ledger_calls(d->ledger, log_line, d);
    o.ledger = &d->ledger_calls;
  }
  d->live = live_stores_create(o.host, log_line, d);
  if (!d->live) {
    rdzv_auth_secret_clear(&token_key);
    job_ledger_close(d->ledger);
    log_file_close(&d->log);
    return err_set(err, errlen, UV_ENOMEM, "out of memory");
  }
  d->live_calls = live_stores_host(d->live);
  o.live = &d->live_calls;
  metrics_init(&d->metrics);
  o.metrics = &d->metrics;
  rc = rdzvd_server_start(d->loop, &o, &d->server, err, errlen);
  rdzv_auth_secret_clear(&token_key);   /* the server keeps its own copy */
  if (rc) {
    live_stores_destroy(d->live);
    job_ledger_close(d->ledger);
    log_file_close(&d->log);
    return rc;
  }
  if (d->metrics_ep) {
    rc = start_metrics(d, err, errlen);
    if (rc) {
      rdzvd_server_stop(d->server);
      uv_run(d->loop, UV_RUN_DEFAULT);
      live_stores_destroy(d->live);
      job_ledger_close(d->ledger);
      log_file_close(&d->log);
      return rc;
    }
  }
  return 0;
}

/* "[v6]" or "v4" for the announcements; "::" when host is every address. */
static void announce_endpoint(struct daemon *d, const char *what,
                              const char *host, int port, const char *path)
{
  const char *h = host && *host ? host : "::";
  bool v6 = strchr(h, ':') != NULL;

  announce(d, "rdzvd: %s%s%s%s:%d%s", what, v6 ? "[" : "", h,
           v6 ? "]" : "", port, path);
}

/* Serving: signals handled, then the first lines (machine-readable:
 * tests and scripts that asked for port 0 read the port from them), then
 * systemd told, then what the operator should know about the secret. */
static void daemon_announce(struct daemon *d, const struct options *opt)
{
  char line[512];
  int rc;

  /* Handled before anyone learns the port: a SIGTERM right after the
   * first line is a clean stop. */
  uv_signal_init(d->loop, &d->sigterm);
  uv_signal_init(d->loop, &d->sigint);
  uv_signal_init(d->loop, &d->sighup);
  d->sigterm.data = d->sigint.data = d->sighup.data = d;
  uv_signal_start(&d->sigterm, on_signal, SIGTERM);
  uv_signal_start(&d->sigint, on_signal, SIGINT);
  uv_signal_start(&d->sighup, on_sighup, SIGHUP);
  snprintf(line, sizeof line, " (pid %d)\n", (int)getpid());
  announce_endpoint(d, "listening on ", opt->server.host,
                    rdzvd_server_port(d->server), line);
  if (d->http)
    announce_endpoint(d, "metrics on http://", d->metrics_host,
                      metrics_http_port(d->http), "/metrics\n");
  /* systemd (Type=notify): ready once every port listens. */
  snprintf(line, sizeof line, "READY=1\nSTATUS=listening on port %d",
           rdzvd_server_port(d->server));
  rc = notify_send(line);
  if (rc < 0)
    announce(d, "rdzvd: warning: cannot notify systemd through "
             "NOTIFY_SOCKET=%s: %s\n", getenv("NOTIFY_SOCKET"),
             err_str(rc));
  if (opt->secret_file && *opt->secret_file) {
    snprintf(line, sizeof line, "clients must prove they know the shared "
             "secret in %s", opt->secret_file);
    log_line(d, line);
    if (!(opt->token_key_file && *opt->token_key_file))
      log_line(d, "warning: no --token-key-file: after a restart this "
               "daemon cannot check a re-asserted rank, and any client "
               "with the secret could claim one before its node returns "
               "(rdzvd(8), Node tokens)");
  }
}

/* Serves until a signal stops the server, then closes what is left. */
static void daemon_run(struct daemon *d)
{
  uv_timer_init(d->loop, &d->trim);
  uv_timer_start(&d->trim, trim_fire, TRIM_PERIOD_MS, TRIM_PERIOD_MS);
  uv_unref((uv_handle_t *)&d->trim);
  fflush(stderr);
  uv_run(d->loop, UV_RUN_DEFAULT);
  uv_walk(d->loop, close_walk, NULL);
  uv_run(d->loop, UV_RUN_DEFAULT);
  uv_loop_close(d->loop);
  live_stores_destroy(d->live);
  job_ledger_close(d->ledger);
  log_file_close(&d->log);
}

int main(int argc, char **argv)
{
  struct options opt;
  struct daemon d;
  struct rdzv_auth_secret secret;
  char err[256];
  int rc;

  if (options_parse(argc, argv, &opt, err, sizeof err)) {
    fprintf(stderr, "rdzvd: error: %s\n", err);
    return EXIT_USAGE;
  }
  if (opt.action == OPTIONS_HELP) {
    fputs(usage, stdout);
    return 0;
  }
  if (opt.action == OPTIONS_VERSION) {
    printf("rdzvd %s\n", CDRUN_VERSION);
    return 0;
  }
  memset(&secret, 0, sizeof secret);
  if (opt.secret_file && *opt.secret_file &&
      rdzv_auth_secret_load(opt.secret_file, &secret, err, sizeof err) != 0) {
    fprintf(stderr, "rdzvd: error: %s\n", err);
    return 1;
  }
  if (opt.action == OPTIONS_STATUS) {
    rc = status_query(opt.status, opt.json, opt.status_job,
                      opt.status_limit, &secret);
    rdzv_auth_secret_clear(&secret);
    return rc;
  }
  memset(&d, 0, sizeof d);
  rc = daemon_start(&d, &opt, &secret, err, sizeof err);
  rdzv_auth_secret_clear(&secret);     /* the server keeps its own copy */
  if (rc) {
    fprintf(stderr, "rdzvd: error: %s\n", err);
    return 1;
  }
  daemon_announce(&d, &opt);
  daemon_run(&d);
  return 0;
}
