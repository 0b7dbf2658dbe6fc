/* output.c -- a worker's output: line prefixes, the line assembler, and
 * the tee'd streams the agent's loop reads; see output.h. */
#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conqueue.h"
#include "logs.h"

#define LINER_DEFAULT_CAP (64 * 1024)

/* ---- line prefixes ------------------------------------------------------ */

/* A bounded output buffer that truncates but always NUL-terminates. */
struct outbuf {
  char *out;
  size_t cap;
  size_t len;
};

static void ob_put(struct outbuf *ob, const char *s, size_t n)
{
  size_t room;

  if (ob->cap == 0)
    return;
  room = ob->cap - 1 - ob->len;
  if (n > room)
    n = room;
  memcpy(ob->out + ob->len, s, n);
  ob->len += n;
  ob->out[ob->len] = '\0';
}

static void ob_int(struct outbuf *ob, int v)
{
  char num[16];
  int n = snprintf(num, sizeof(num), "%d", v);

  if (n > 0)
    ob_put(ob, num, (size_t)n);
}

static bool id_start(char c)
{
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool id_char(char c)
{
  return id_start(c) || (c >= '0' && c <= '9');
}

/* socket.gethostname(), as torch fills ${hostname}. */
static void put_hostname(struct outbuf *ob)
{
  char host[256];

  if (gethostname(host, sizeof host) < 0)
    snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  ob_put(ob, host, strlen(host));
}

/* Writes the value of a template variable; false if the name is unknown. */
static bool put_var(struct outbuf *ob, const char *name, size_t n,
                    const char *role, int local_rank, int rank)
{
  if (n == 9 && memcmp(name, "role_name", 9) == 0)
    ob_put(ob, role, strlen(role));
  else if (n == 10 && memcmp(name, "local_rank", 10) == 0)
    ob_int(ob, local_rank);
  else if (n == 4 && memcmp(name, "rank", 4) == 0)
    ob_int(ob, rank);
  else if (n == 8 && memcmp(name, "hostname", 8) == 0)
    put_hostname(ob);
  else
    return false;
  return true;
}

/* Python string.Template.safe_substitute: "$$" -> "$", "$name" and
 * "${name}" are replaced when known, anything else stays as written. */
size_t output_format_prefix(const char *tmpl, const char *role, int local_rank,
                            int rank, char *out, size_t outlen)
{
  struct outbuf ob = { out, outlen, 0 };
  const char *p;

  if (outlen > 0)
    out[0] = '\0';
  if (!role)
    role = "";
  if (!tmpl) {
    ob_put(&ob, "[", 1);
    ob_put(&ob, role, strlen(role));
    ob_int(&ob, local_rank);
    ob_put(&ob, "]:", 2);
    return ob.len;
  }
  p = tmpl;
  while (*p) {
    const char *dollar = strchr(p, '$');
    const char *name, *end;

    if (!dollar) {
      ob_put(&ob, p, strlen(p));
      break;
    }
    ob_put(&ob, p, (size_t)(dollar - p));
    p = dollar + 1;
    if (*p == '$') {
      ob_put(&ob, "$", 1);
      p++;
      continue;
    }
    if (*p == '{' && id_start(p[1])) {
      name = p + 1;
      for (end = name; id_char(*end); end++)
        ;
      if (*end == '}') {
        if (!put_var(&ob, name, (size_t)(end - name), role, local_rank,
                     rank))
          ob_put(&ob, dollar, (size_t)(end + 1 - dollar));
        p = end + 1;
        continue;
      }
    } else if (id_start(*p)) {
      name = p;
      for (end = name; id_char(*end); end++)
        ;
      if (!put_var(&ob, name, (size_t)(end - name), role, local_rank, rank))
        ob_put(&ob, dollar, (size_t)(end - dollar));
      p = end;
      continue;
    }
    /* A lone '$' is kept literally. */
    ob_put(&ob, "$", 1);
  }
  return ob.len;
}


/* ---- the line assembler ------------------------------------------------ */

/* buf holds the prefix, then up to cap bytes of the pending line, then
 * room for the '\n', so each line leaves in one contiguous sink call and
 * every input byte is copied exactly once. */
struct output_liner {
  output_sink_fn sink;
  void *ctx;
  size_t plen;
  size_t cap;
  size_t len;
  char buf[];
};

struct output_liner *output_liner_new(const char *prefix, size_t cap,
                                      output_sink_fn sink, void *ctx)
{
  struct output_liner *l;
  size_t plen = prefix ? strlen(prefix) : 0;

  if (!sink)
    return NULL;
  if (cap == 0)
    cap = LINER_DEFAULT_CAP;
  /* Keeps sizeof + plen + cap + 1 from wrapping. */
  if (cap > SIZE_MAX / 4 || plen > SIZE_MAX / 4)
    return NULL;
  l = malloc(sizeof(*l) + plen + cap + 1);
  if (!l)
    return NULL;
  l->sink = sink;
  l->ctx = ctx;
  l->plen = plen;
  l->cap = cap;
  l->len = 0;
  if (plen > 0)
    memcpy(l->buf, prefix, plen);
  return l;
}

static void liner_emit(struct output_liner *l)
{
  l->buf[l->plen + l->len] = '\n';
  l->sink(l->ctx, l->buf, l->plen + l->len + 1);
  l->len = 0;
}

void output_liner_feed(struct output_liner *l, const char *buf, size_t len)
{
  while (len > 0) {
    const char *nl = memchr(buf, '\n', len);
    size_t seg = nl ? (size_t)(nl - buf) : len;

    len -= seg;
    while (seg > 0) {
      size_t n;

      /* Split only once more content follows, so a line of exactly cap
       * bytes plus its '\n' stays one line. */
      if (l->len == l->cap)
        liner_emit(l);
      n = l->cap - l->len;
      if (n > seg)
        n = seg;
      memcpy(l->buf + l->plen + l->len, buf, n);
      l->len += n;
      buf += n;
      seg -= n;
    }
    if (nl) {
      liner_emit(l);
      buf++;
      len--;
    }
  }
}

void output_liner_flush(struct output_liner *l)
{
  if (l->len > 0)
    liner_emit(l);
}

void output_liner_free(struct output_liner *l)
{
  free(l);
}

/* ---- tee'd streams ------------------------------------------------------ */

static int write_all(int fd, const char *buf, size_t len)
{
  ssize_t n;

  while (len > 0) {
    n = write(fd, buf, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -errno;
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

static void console_sink(void *ctx, const char *buf, size_t len)
{
  struct output_stream *s = ctx;

  if (s->console_q)
    conqueue_put(s->console_q, buf, len);
  else
    write_all(s->console_fd, buf, len);
}

static void filter_sink(void *ctx, const char *buf, size_t len)
{
  struct output_stream *s = ctx;

  /* buf is "<prefix><line>\n": match the line only. */
  if (logs_filter_match(s->filters, buf + s->prefix_len,
                        len - s->prefix_len - 1))
    write_all(s->filtered_fd, buf, len);
}

static void tee_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  static char chunk[65536];   /* one loop thread: the read copies it out */

  (void)h;
  (void)hint;
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void tee_closed(uv_handle_t *h)
{
  struct output_stream *s = h->data;

  s->state = OUTPUT_NONE;
  s->closed(s->ctx);
}

static void tee_close(struct output_stream *s)
{
  if (s->state != OUTPUT_OPEN)
    return;
  if (s->liner) {
    output_liner_flush(s->liner);
    output_liner_free(s->liner);
    s->liner = NULL;
  }
  if (s->filter_liner) {
    output_liner_flush(s->filter_liner);
    output_liner_free(s->filter_liner);
    s->filter_liner = NULL;
  }
  if (s->file_fd >= 0) {
    close(s->file_fd);
    s->file_fd = -1;
  }
  if (s->filtered_fd >= 0) {
    close(s->filtered_fd);
    s->filtered_fd = -1;
  }
  s->state = OUTPUT_CLOSING;
  uv_close((uv_handle_t *)&s->pipe, tee_closed);
}

static void tee_data(struct output_stream *s, const char *buf, size_t len)
{
  if (s->file_fd >= 0)
    write_all(s->file_fd, buf, len);
  if (s->liner)
    output_liner_feed(s->liner, buf, len);
  if (s->filter_liner)
    output_liner_feed(s->filter_liner, buf, len);
}

static void tee_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
  struct output_stream *s = st->data;

  if (nread > 0)
    tee_data(s, buf->base, (size_t)nread);
  else if (nread < 0)
    tee_close(s);       /* EOF: every writer is gone */
}

void output_stream_drain_close(struct output_stream *s)
{
  char buf[65536];
  uv_os_fd_t fd;
  ssize_t n;

  if (s->state != OUTPUT_OPEN)
    return;
  if (uv_fileno((uv_handle_t *)&s->pipe, &fd) == 0) {
    while ((n = read(fd, buf, sizeof buf)) > 0)
      tee_data(s, buf, (size_t)n);
  }
  tee_close(s);
}

/* Opens <dir>/<name> for a redirected stream. */
static int open_log(const char *dir, const char *name)
{
  char path[PATH_MAX + 16];

  snprintf(path, sizeof path, "%s/%s", dir, name);
  return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
              0644);
}

/* Opens attempt_<k>/<name>, shared by the attempt's workers (O_APPEND:
 * each line is one write, so lines of different workers never mix). */
static int open_filtered(const char *dir, const char *name)
{
  char path[PATH_MAX + 32];
  const char *slash = strrchr(dir, '/');

  snprintf(path, sizeof path, "%.*s/%s",
           slash ? (int)(slash - dir) : 1, slash ? dir : ".", name);
  return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

int output_stream_open(struct output_stream *s, uv_loop_t *loop,
                       const struct output_conf *c, int bit, int lr,
                       int rank, const char *dir, struct conqueue *console,
                       output_closed_fn closed, void *ctx, int *child_fd,
                       int *close_after)
{
  int console_fd = bit == LOGS_STDOUT ? 1 : 2;
  const char *name = bit == LOGS_STDOUT ? "stdout.log" : "stderr.log";
  bool tee = c->tee[lr] & bit, redirect = c->redirects[lr] & bit;
  /* torch duplicates the tee'd streams only. */
  char *const *filters = !tee ? NULL
                         : bit == LOGS_STDOUT ? c->stdout_filters
                                              : c->stderr_filters;
  char prefix[256];
  int p[2], err;

  *child_fd = -1;
  *close_after = -1;
  s->closed = closed;
  s->ctx = ctx;
  s->file_fd = -1;
  s->console_fd = -1;
  s->console_q = console;
  s->liner = NULL;
  s->filters = filters;
  s->filter_liner = NULL;
  s->filtered_fd = -1;
  if (!tee) {
    if (redirect || !c->console[lr]) {
      *child_fd = redirect ? open_log(dir, name)
                           : open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (*child_fd < 0)
        return -errno;
      *close_after = *child_fd;
    }
    return 0;
  }

  output_format_prefix(c->prefix_template, c->role, lr, rank, prefix,
                       sizeof prefix);
  s->file_fd = open_log(dir, name);
  if (s->file_fd < 0)
    return -errno;
  if (c->console[lr]) {
    s->console_fd = console_fd;
    s->liner = output_liner_new(prefix, 0, console_sink, s);
    if (!s->liner)
      goto undo_errno;
  }
  if (filters) {
    s->prefix_len = strlen(prefix);
    s->filtered_fd = open_filtered(dir, bit == LOGS_STDOUT
                                          ? "filtered_stdout.log"
                                          : "filtered_stderr.log");
    if (s->filtered_fd < 0)
      goto undo_errno;
    s->filter_liner = output_liner_new(prefix, 0, filter_sink, s);
    if (!s->filter_liner)
      goto undo_errno;
  }
  if (pipe2(p, O_CLOEXEC) < 0)
    goto undo_errno;
  err = uv_pipe_init(loop, &s->pipe, 0);
  if (err == 0)
    err = uv_pipe_open(&s->pipe, p[0]);
  if (err) {
    close(p[0]);
    close(p[1]);
    goto undo;
  }
  s->pipe.data = s;
  s->state = OUTPUT_OPEN;
  uv_read_start((uv_stream_t *)&s->pipe, tee_alloc, tee_read);
  *child_fd = p[1];
  *close_after = p[1];
  return 1;

undo_errno:
  err = -errno;
undo:
  if (s->liner)
    output_liner_free(s->liner);
  s->liner = NULL;
  if (s->filter_liner)
    output_liner_free(s->filter_liner);
  s->filter_liner = NULL;
  if (s->file_fd >= 0)
    close(s->file_fd);
  s->file_fd = -1;
  if (s->filtered_fd >= 0)
    close(s->filtered_fd);
  s->filtered_fd = -1;
  return err;
}

