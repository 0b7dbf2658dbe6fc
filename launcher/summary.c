/* summary.c -- prints torchrun's failure summary (ChildFailedError). */
#include "summary.h"
#include "signames.h"

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "peer_text.h"

#define RULE_WIDTH 60
#define ERRORS_HINT \
  "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"

/* NaN sorts last so a bogus time never becomes the root cause. */
static double sort_time(const struct worker_failure *w)
{
  return isnan(w->time) ? INFINITY : w->time;
}

/* Total order on failures: time, then global rank, then index. */
static bool before(const struct worker_failure *f, size_t a, size_t b)
{
  double ta = sort_time(&f[a]), tb = sort_time(&f[b]);

  if (ta != tb)
    return ta < tb;
  if (f[a].rank != f[b].rank)
    return f[a].rank < f[b].rank;
  return a < b;
}

size_t summary_root_cause(const struct worker_failure *f, size_t n)
{
  size_t best = 0;

  if (!f)
    return 0;
  for (size_t i = 1; i < n; i++)
    if (before(f, i, best))
      best = i;
  return best;
}

static void print_time(FILE *out, double t)
{
  char buf[64];
  struct tm tm;
  time_t secs;

  /* keep the cast to time_t defined */
  if (!isfinite(t) || t < -1e15 || t > 1e15) {
    fputs("<N/A>", out);
    return;
  }
  secs = (time_t)t;     /* floor(t), without libm (Note [cJSON on demand]) */
  if ((double)secs > t)
    secs--;
  if (!localtime_r(&secs, &tm) ||
      strftime(buf, sizeof(buf), "%Y-%m-%d_%H:%M:%S", &tm) == 0) {
    fputs("<N/A>", out);
    return;
  }
  fputs(buf, out);
}

/* Prints text, indenting every line after the first by two spaces the way
 * torchrun does (replace("\n", "\n  ")); trailing newlines are dropped so
 * the block does not end in a blank indented line.  Each line is escaped
 * (peer_text.h: its tabs kept, a CR before its newline dropped), so that
 * no byte in it acts on the terminal. */
static void print_indented(FILE *out, const char *text)
{
  size_t len = strlen(text), seg;
  const char *nl;

  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
    len--;
  for (;;) {
    nl = memchr(text, '\n', len);
    seg = nl ? (size_t)(nl - text) : len;
    peer_text_fwrite(text, seg > 0 && text[seg - 1] == '\r' ? seg - 1 : seg,
                     PEER_TEXT_LINES, out);
    if (!nl)
      break;
    fputs("\n  ", out);
    len -= seg + 1;
    text = nl + 1;
  }
}

/* A one-line field, escaped: it may name what a peer sent. */
static void print_field(FILE *out, const char *name, const char *value)
{
  fprintf(out, "  %-10s: ", name);
  peer_text_fputs(value, 0, out);
  fputc('\n', out);
}

static void print_failure(FILE *out, size_t idx, const char *host,
                          const struct worker_failure *w)
{
  const char *text = NULL;
  bool has_file;

  if (w->traceback && *w->traceback)
    text = w->traceback;
  else if (w->message)
    text = w->message;
  /* a path the worker never wrote is as good as none */
  has_file = text && w->error_file && *w->error_file;

  fprintf(out, "[%zu]:\n", idx);
  fputs("  time      : ", out);
  print_time(out, w->time);
  fputc('\n', out);
  print_field(out, "host", host ? host : "<N/A>");
  fprintf(out, "  rank      : %d (local_rank: %d)\n", w->rank,
          w->local_rank);
  fprintf(out, "  exitcode  : %d", w->exitcode);
  if (w->exitcode < 0) {
    char sig[32];

    fprintf(out, " (%s)", sig_name(-w->exitcode, sig, sizeof sig));
  }
  fprintf(out, " (pid: %d)\n", (int)w->pid);
  print_field(out, "error_file", has_file ? w->error_file : "<N/A>");
  fputs("  traceback : ", out);
  if (text) {
    print_indented(out, text);
  } else if (w->exitcode < 0) {
    char buf[32];

    fprintf(out, "Signal %d (%s) received by PID %d", -w->exitcode,
            sig_name(-w->exitcode, buf, sizeof(buf)),
            (int)w->pid);
  } else {
    fputs(ERRORS_HINT, out);
  }
  fputc('\n', out);
}

static void rule(FILE *out, char c)
{
  for (int i = 0; i < RULE_WIDTH; i++)
    fputc(c, out);
  fputc('\n', out);
}

/* The summary with f[0..n-1] below the root cause: f[root] (root < n),
 * or remote (printed with remote_host) when root == n. */
static void print_all(FILE *out, const char *target, const char *host,
                      const struct worker_failure *f, size_t n, size_t root,
                      const struct worker_failure *remote,
                      const char *remote_host)
{
  size_t prev = 0, idx = 1, others = root < n ? n - 1 : n;

  rule(out, '=');
  peer_text_fputs(target ? target : "<N/A>", 0, out);
  fputs(" FAILED\n", out);
  rule(out, '-');
  fputs("Failures:\n", out);
  if (others == 0)
    fputs("  <NO_OTHER_FAILURES>\n", out);
  /* others in time order without allocating: each round picks the
   * smallest failure that sorts after the previous one */
  for (size_t k = 0; k < others; k++) {
    size_t next = n;

    for (size_t i = 0; i < n; i++) {
      if (i == root || (k > 0 && !before(f, prev, i)))
        continue;
      if (next == n || before(f, i, next))
        next = i;
    }
    if (next == n)
      break;
    print_failure(out, idx++, host, &f[next]);
    prev = next;
  }
  rule(out, '-');
  fputs("Root Cause (first observed failure):\n", out);
  if (root < n)
    print_failure(out, 0, host, &f[root]);
  else
    print_failure(out, 0, remote_host, remote);
  rule(out, '=');
}

void summary_print(FILE *out, const char *target, const char *host,
                   const struct worker_failure *f, size_t n)
{
  if (!out || !f || n == 0)
    return;
  print_all(out, target, host, f, n, summary_root_cause(f, n), NULL, NULL);
}

size_t summary_local_index(const struct worker_failure *f, size_t n,
                           const struct worker_failure *job_root)
{
  for (size_t i = 0; f && i < n; i++)
    if (f[i].rank == job_root->rank && f[i].pid == job_root->pid)
      return i;
  return n;
}

void summary_print_job(FILE *out, const char *target, const char *host,
                       const struct worker_failure *f, size_t n,
                       const struct worker_failure *job_root,
                       const char *root_host)
{
  size_t local;

  if (!out || (!job_root && (!f || n == 0)))
    return;
  if (!job_root) {
    summary_print(out, target, host, f, n);
    return;
  }
  local = summary_local_index(f, n, job_root);
  print_all(out, target, host, f, n, local, job_root, root_host);
}
