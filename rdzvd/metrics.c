/* metrics.c -- rdzvd's counters and their Prometheus text exposition. */
#include "metrics.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static const double round_bounds[METRICS_ROUND_BUCKETS] = {
  0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
};

void metrics_init(struct rdzvd_metrics *m)
{
  struct timeval tv;

  memset(m, 0, sizeof *m);
  gettimeofday(&tv, NULL);
  m->start_time = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

void metrics_round_completed(struct rdzvd_metrics *m, double seconds)
{
  size_t i;

  if (!m)
    return;
  if (!(seconds >= 0))          /* NaN too: a clock that went wrong */
    seconds = 0;
  m->rounds_completed++;
  for (i = 0; i < METRICS_ROUND_BUCKETS && seconds > round_bounds[i]; i++)
    ;
  m->round_buckets[i]++;
  m->round_seconds_sum += seconds;
  m->round_count++;
}

void metrics_restart(struct rdzvd_metrics *m)
{
  if (m)
    m->restarts++;
}

void metrics_join(struct rdzvd_metrics *m)
{
  if (m)
    m->joins++;
}

void metrics_refusal(struct rdzvd_metrics *m, enum rdzv_proto_error_code code)
{
  if (!m)
    return;
  if ((int)code <= 0 || code >= METRICS_REFUSAL_CODES ||
      !rdzv_proto_error_name(code))
    code = 0;
  m->refusals[code]++;
}

void metrics_auth_failure(struct rdzvd_metrics *m)
{
  if (m)
    m->auth_failures++;
}

void metrics_reconnect(struct rdzvd_metrics *m)
{
  if (m)
    m->reconnects++;
}

void metrics_conn_opened(struct rdzvd_metrics *m)
{
  if (!m)
    return;
  m->connections_accepted++;
  m->connections_open++;
}

void metrics_conn_closed(struct rdzvd_metrics *m)
{
  if (m && m->connections_open > 0)
    m->connections_open--;
}

void metrics_bytes_in(struct rdzvd_metrics *m, size_t n)
{
  if (m)
    m->bytes_in += n;
}

void metrics_bytes_out(struct rdzvd_metrics *m, size_t n)
{
  if (m)
    m->bytes_out += n;
}

void metrics_frame_error(struct rdzvd_metrics *m)
{
  if (m)
    m->frame_errors++;
}

/* ---- exposition ---- */

struct text {
  char *buf;
  size_t len, cap;
  bool failed;
};

static void put(struct text *t, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

static void put(struct text *t, const char *fmt, ...)
{
  va_list ap;
  int n;

  if (t->failed)
    return;
  for (;;) {
    va_start(ap, fmt);
    n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    {
      size_t cap = t->cap * 2 + (size_t)n;
      char *grown = realloc(t->buf, cap);

      if (!grown) {
        t->failed = true;
        return;
      }
      t->buf = grown;
      t->cap = cap;
    }
  }
}

/* The HELP and TYPE lines of one family. */
static void family(struct text *t, const char *name, const char *type,
                   const char *help)
{
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(struct text *t, const char *name, const char *help,
                    uint64_t v)
{
  family(t, name, "counter", help);
  put(t, "%s %llu\n", name, (unsigned long long)v);
}

static void gauge(struct text *t, const char *name, const char *help,
                  double v)
{
  family(t, name, "gauge", help);
  put(t, "%s %.17g\n", name, v);
}

int metrics_render(const struct rdzvd_metrics *m,
                   const struct metrics_gauges *g, char **out, size_t *len)
{
  struct text t = { .cap = 4096 };
  uint64_t cum = 0;
  int i;

  t.buf = malloc(t.cap);
  if (!t.buf)
    return -ENOMEM;
  t.buf[0] = '\0';

  family(&t, "rdzvd_build_info", "gauge",
         "Always 1; the version label says which rdzvd runs.");
  put(&t, "rdzvd_build_info{version=\"%s\"} 1\n", CDRUN_VERSION);
  gauge(&t, "rdzvd_start_time_seconds",
        "When this rdzvd started, in seconds since the Unix epoch.",
        m->start_time);

  family(&t, "rdzvd_jobs", "gauge",
         "Jobs the daemon knows, by phase of their current round.");
  for (i = 0; i < METRICS_PHASES; i++)
    if (g->phase_names[i])
      put(&t, "rdzvd_jobs{phase=\"%s\"} %d\n", g->phase_names[i],
          g->jobs_by_phase[i]);
  gauge(&t, "rdzvd_nodes", "Nodes (agents) that are members of a job.",
        g->nodes);
  gauge(&t, "rdzvd_peers",
        "Peer addresses that hold a job or a node (tenants).", g->peers);
  family(&t, "rdzvd_peer_refusals_total", "counter",
         "JOINs refused at one peer address's share, by limit.");
  put(&t, "rdzvd_peer_refusals_total{limit=\"jobs\"} %llu\n",
      (unsigned long long)g->peer_refused_jobs);
  put(&t, "rdzvd_peer_refusals_total{limit=\"waiting\"} %llu\n",
      (unsigned long long)g->peer_refused_waiting);
  put(&t, "rdzvd_peer_refusals_total{limit=\"connections\"} %llu\n",
      (unsigned long long)g->peer_refused_conns);

  counter(&t, "rdzvd_rounds_completed_total",
          "Rendezvous rounds completed (ranks assigned).",
          m->rounds_completed);
  counter(&t, "rdzvd_restarts_total",
          "Restarts counted against max_restarts (worker failures).",
          m->restarts);
  counter(&t, "rdzvd_joins_total", "JOIN requests received.", m->joins);

  family(&t, "rdzvd_refusals_total", "counter",
         "ERROR replies sent, by reason (the protocol's error code).");
  for (i = 1; i < METRICS_REFUSAL_CODES; i++) {
    const char *name = rdzv_proto_error_name((enum rdzv_proto_error_code)i);

    if (name)
      put(&t, "rdzvd_refusals_total{reason=\"%s\"} %llu\n", name,
          (unsigned long long)m->refusals[i]);
  }
  put(&t, "rdzvd_refusals_total{reason=\"other\"} %llu\n",
      (unsigned long long)m->refusals[0]);

  counter(&t, "rdzvd_auth_failures_total",
          "Connections refused because they failed authentication.",
          m->auth_failures);
  gauge(&t, "rdzvd_connections_open",
        "Rendezvous TCP connections open now.",
        (double)m->connections_open);
  counter(&t, "rdzvd_connections_accepted_total",
          "Rendezvous TCP connections accepted.", m->connections_accepted);
  counter(&t, "rdzvd_received_bytes_total",
          "Bytes read from rendezvous connections.", m->bytes_in);
  counter(&t, "rdzvd_sent_bytes_total",
          "Bytes queued for writing to rendezvous connections.",
          m->bytes_out);
  counter(&t, "rdzvd_frame_errors_total",
          "Frames refused as malformed (bad length, bad JSON, bad field); "
          "each closes its connection.", m->frame_errors);
  counter(&t, "rdzvd_reconnects_total",
          "Agents that reconnected and re-asserted a job they were in.",
          m->reconnects);

  family(&t, "rdzvd_round_completion_seconds", "histogram",
         "Time from the start of a round (job creation or RESTART) to its "
         "completion.");
  for (i = 0; i < METRICS_ROUND_BUCKETS; i++) {
    cum += m->round_buckets[i];
    put(&t, "rdzvd_round_completion_seconds_bucket{le=\"%g\"} %llu\n",
        round_bounds[i], (unsigned long long)cum);
  }
  cum += m->round_buckets[METRICS_ROUND_BUCKETS];
  put(&t, "rdzvd_round_completion_seconds_bucket{le=\"+Inf\"} %llu\n",
      (unsigned long long)cum);
  put(&t, "rdzvd_round_completion_seconds_sum %.17g\n",
      m->round_seconds_sum);
  put(&t, "rdzvd_round_completion_seconds_count %llu\n",
      (unsigned long long)m->round_count);

  if (t.failed) {
    free(t.buf);
    return -ENOMEM;
  }
  *out = t.buf;
  *len = t.len;
  return 0;
}
