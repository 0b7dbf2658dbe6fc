/* filetimer.c -- torch's file timer protocol, served on the agent's loop. */
#include "filetimer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "say.h"

/* Longest wait for one arming of the expiry timer; a later expiration is
 * simply re-armed then (keeps the milliseconds in range). */
#define MAX_ARM_MS (3600 * 1000.0)

struct filetimer {
  struct filetimer_request *timers;
  size_t n, max;
  filetimer_expired_cb cb;
  void *ctx;
  /* The line being assembled; a line that overflows it is dropped. */
  char line[FILETIMER_MAX_LINE + 1];
  size_t len;
  bool overlong;
  unsigned warnings;
  /* Serving (filetimer_listen). */
  uv_pipe_t pipe;
  uv_timer_t timer;
  bool listening;
  int open_handles;
  char *path;
};

static double now_epoch(void)
{
  struct timeval tv;

  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void warn(struct filetimer *t, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

static void warn(struct filetimer *t, const char *fmt, ...)
{
  char msg[512];
  va_list ap;

  if (t->warnings >= FILETIMER_MAX_WARNINGS)
    return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  say("file timer: %s%s", msg, ++t->warnings == FILETIMER_MAX_WARNINGS
                                   ? " (further warnings suppressed)" : "");
}

/* An integer-valued JSON number within [lo, hi]. */
static bool int_in(const cJSON *j, double lo, double hi, long *out)
{
  double d;

  if (!cJSON_IsNumber(j))
    return false;
  d = j->valuedouble;
  if (!isfinite(d) || d != floor(d) || d < lo || d > hi)
    return false;
  *out = (long)d;
  return true;
}

int filetimer_parse(const char *line, size_t len,
                    struct filetimer_request *out, char *err,
                    size_t errlen)
{
  const cJSON *version, *pid, *scope, *exp, *sig;
  cJSON *root;
  long v;
  int rc = -EINVAL;

  memset(out, 0, sizeof *out);
  root = cJSON_ParseWithLength(line, len);
  if (!cJSON_IsObject(root)) {
    snprintf(err, errlen, "not a JSON object");
    goto out;
  }
  version = cJSON_GetObjectItemCaseSensitive(root, "version");
  pid = cJSON_GetObjectItemCaseSensitive(root, "pid");
  scope = cJSON_GetObjectItemCaseSensitive(root, "scope_id");
  exp = cJSON_GetObjectItemCaseSensitive(root, "expiration_time");
  sig = cJSON_GetObjectItemCaseSensitive(root, "signal");
  if (version && (!int_in(version, 1, 1, &v))) {
    snprintf(err, errlen, "unsupported version (expected 1)");
    goto out;
  }
  /* pid 0 or -1 would signal the agent's own group, or everything. */
  if (!int_in(pid, 1, 4194304, &v)) {
    snprintf(err, errlen, "'pid' must be a process id > 0");
    goto out;
  }
  out->pid = (pid_t)v;
  if (!cJSON_IsString(scope) || !scope->valuestring ||
      strlen(scope->valuestring) > FILETIMER_MAX_SCOPE) {
    snprintf(err, errlen, "'scope_id' must be a string of at most %d "
             "bytes", FILETIMER_MAX_SCOPE);
    goto out;
  }
  snprintf(out->scope_id, sizeof out->scope_id, "%s", scope->valuestring);
  if (!cJSON_IsNumber(exp) || !isfinite(exp->valuedouble)) {
    snprintf(err, errlen, "'expiration_time' must be a number");
    goto out;
  }
  out->expiration_time = exp->valuedouble;
  if (!sig) {
    out->signal = 0;
  } else if (int_in(sig, 0, 64, &v)) {
    out->signal = (int)v;
  } else {
    snprintf(err, errlen, "'signal' must be a signal number 0..64");
    goto out;
  }
  rc = 0;
out:
  cJSON_Delete(root);
  return rc;
}

struct filetimer *filetimer_new(size_t max_timers, filetimer_expired_cb cb,
                                void *ctx)
{
  struct filetimer *t = calloc(1, sizeof *t);

  if (!t)
    return NULL;
  t->max = max_timers ? max_timers : FILETIMER_DEFAULT_MAX;
  t->cb = cb;
  t->ctx = ctx;
  return t;
}

size_t filetimer_count(const struct filetimer *t)
{
  return t->n;
}

double filetimer_next(const struct filetimer *t)
{
  double next = -1;

  for (size_t i = 0; i < t->n; i++)
    if (next < 0 || t->timers[i].expiration_time < next)
      next = t->timers[i].expiration_time;
  return next;
}

void filetimer_clear(struct filetimer *t, pid_t pid)
{
  size_t i = 0;

  while (i < t->n) {
    if (pid == 0 || t->timers[i].pid == pid)
      t->timers[i] = t->timers[--t->n];
    else
      i++;
  }
}

static void apply(struct filetimer *t, const struct filetimer_request *r)
{
  struct filetimer_request *grown;
  size_t i;

  for (i = 0; i < t->n; i++)
    if (t->timers[i].pid == r->pid &&
        strcmp(t->timers[i].scope_id, r->scope_id) == 0)
      break;
  if (r->expiration_time < 0) {
    if (i < t->n)
      t->timers[i] = t->timers[--t->n];
    return;
  }
  if (i < t->n) {
    t->timers[i] = *r;
    return;
  }
  if (t->n == t->max) {
    warn(t, "%zu timers held already; ignoring '%s' of pid %d", t->max,
         r->scope_id, (int)r->pid);
    return;
  }
  grown = realloc(t->timers, (t->n + 1) * sizeof *grown);
  if (!grown) {
    warn(t, "out of memory; ignoring '%s' of pid %d", r->scope_id,
         (int)r->pid);
    return;
  }
  t->timers = grown;
  t->timers[t->n++] = *r;
}

static void handle_line(struct filetimer *t, double now)
{
  struct filetimer_request r;
  char why[128];

  if (t->len == 0)
    return;
  if (filetimer_parse(t->line, t->len, &r, why, sizeof why)) {
    warn(t, "ignoring a malformed request (%s): '%.*s'", why,
         t->len > 80 ? 80 : (int)t->len, t->line);
    return;
  }
  r.received = now;
  apply(t, &r);
}

void filetimer_feed(struct filetimer *t, const char *buf, size_t len,
                    double now)
{
  while (len > 0) {
    const char *nl = memchr(buf, '\n', len);
    size_t seg = nl ? (size_t)(nl - buf) : len;

    if (!t->overlong) {
      if (t->len + seg > FILETIMER_MAX_LINE) {
        t->overlong = true;
      } else {
        memcpy(t->line + t->len, buf, seg);
        t->len += seg;
      }
    }
    buf += seg;
    len -= seg;
    if (nl) {
      if (t->overlong)
        warn(t, "ignoring a request longer than %d bytes",
             FILETIMER_MAX_LINE);
      else
        handle_line(t, now);
      t->len = 0;
      t->overlong = false;
      buf++;
      len--;
    }
  }
}

void filetimer_expire(struct filetimer *t, double now)
{
  for (;;) {
    struct filetimer_request fired;
    bool have = false;
    pid_t pid = 0;
    size_t i;

    memset(&fired, 0, sizeof fired);
    for (i = 0; i < t->n && !pid; i++)
      if (t->timers[i].expiration_time <= now)
        pid = t->timers[i].pid;
    if (!pid)
      return;
    /* torch: the first expired timer with a signal, in expiration order. */
    for (i = 0; i < t->n; i++) {
      const struct filetimer_request *r = &t->timers[i];

      if (r->pid == pid && r->expiration_time <= now && r->signal > 0 &&
          (!have || r->expiration_time < fired.expiration_time)) {
        fired = *r;
        have = true;
      }
    }
    filetimer_clear(t, pid);
    if (have && t->cb)
      t->cb(t->ctx, &fired);
  }
}

/* ---- serving on a loop ---------------------------------------------------- */

static void on_expiry(uv_timer_t *h);

static void rearm(struct filetimer *t)
{
  double next = filetimer_next(t), ms;

  if (!t->listening)
    return;
  if (next < 0) {
    uv_timer_stop(&t->timer);
    return;
  }
  ms = (next - now_epoch()) * 1000.0;
  if (ms < 0)
    ms = 0;
  if (ms > MAX_ARM_MS)
    ms = MAX_ARM_MS;
  /* +1: wake just after the deadline, not just before it. */
  uv_timer_start(&t->timer, on_expiry, (uint64_t)ms + 1, 0);
}

static void on_expiry(uv_timer_t *h)
{
  struct filetimer *t = h->data;

  filetimer_expire(t, now_epoch());
  rearm(t);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  static char chunk[FILETIMER_MAX_LINE];

  (void)h;
  (void)hint;
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
  struct filetimer *t = s->data;

  if (nread > 0) {
    filetimer_feed(t, buf->base, (size_t)nread, now_epoch());
    /* Expired on arrival (an "after" of 0) is handled at once. */
    filetimer_expire(t, now_epoch());
    rearm(t);
  } else if (nread < 0 && nread != UV_EAGAIN) {
    say("file timer: reading %s: %s; hang detection stops", t->path,
        uv_strerror((int)nread));
    uv_read_stop(s);
  }
}

int filetimer_listen(struct filetimer *t, uv_loop_t *loop, const char *path)
{
  struct stat st;
  int fd, err;

  if (lstat(path, &st) == 0) {
    if (!S_ISFIFO(st.st_mode))
      return -EEXIST;
    if (unlink(path) < 0)
      return -errno;
  }
  if (mkfifo(path, 0600) < 0)
    return -errno;
  t->path = strdup(path);
  if (!t->path) {
    err = -ENOMEM;
    goto fail_unlink;
  }
  fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    err = -errno;
    goto fail_unlink;
  }
  err = uv_pipe_init(loop, &t->pipe, 0);
  if (err) {
    close(fd);
    goto fail_unlink;
  }
  t->open_handles = 1;
  err = uv_pipe_open(&t->pipe, fd);
  if (err) {
    close(fd);
  } else {
    t->pipe.data = t;
    err = uv_read_start((uv_stream_t *)&t->pipe, on_alloc, on_read);
  }
  uv_timer_init(loop, &t->timer);
  t->timer.data = t;
  t->open_handles++;
  t->listening = true;
  return err;   /* on error filetimer_close cleans up */

fail_unlink:
  unlink(path);
  free(t->path);
  t->path = NULL;
  return err;
}

static void destroy(struct filetimer *t)
{
  free(t->timers);
  free(t->path);
  free(t);
}

static void on_closed(uv_handle_t *h)
{
  struct filetimer *t = h->data;

  if (--t->open_handles == 0)
    destroy(t);
}

void filetimer_close(struct filetimer *t)
{
  if (!t)
    return;
  if (t->path)
    unlink(t->path);
  if (!t->listening) {
    destroy(t);
    return;
  }
  t->listening = false;
  t->pipe.data = t;
  uv_close((uv_handle_t *)&t->pipe, on_closed);
  uv_close((uv_handle_t *)&t->timer, on_closed);
}
