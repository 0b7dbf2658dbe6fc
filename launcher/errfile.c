/* errfile.c -- reads a worker's TORCHELASTIC_ERROR_FILE (JSON, cJSON). */
#include "errfile.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "num.h"
#include "say.h"

#define ERRFILE_MAX (4u << 20)

/* say.h's one helper, its return value unused here. */
#define set_err(err, errlen, ...) \
  ((void)err_set(err, errlen, 0, __VA_ARGS__))

/* Reads the whole file into a NUL-terminated heap buffer.  Reads up to one
 * byte past the limit instead of trusting st_size, so files that grow or
 * lie about their size (procfs, pipes) are still bounded. */
static int slurp(const char *path, char **buf, size_t *len,
                 char *err, size_t errlen)
{
  struct stat st;
  size_t cap, n = 0;
  char *p, *q;
  int fd, rc;

  *buf = NULL;
  *len = 0;
  /* O_NONBLOCK: a FIFO put there by a worker must not block the agent in
   * open() (it is refused below, before any read). */
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    rc = -errno;
    set_err(err, errlen, "cannot open %s: %s", path, say_strerror(-errno));
    return rc;
  }
  if (fstat(fd, &st) < 0) {
    rc = -errno;
    set_err(err, errlen, "cannot stat %s: %s", path, say_strerror(-errno));
    close(fd);
    return rc;
  }
  if (!S_ISREG(st.st_mode)) {
    set_err(err, errlen, "%s is not a regular file", path);
    close(fd);
    return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
  }
  if ((unsigned long long)st.st_size > ERRFILE_MAX) {
    set_err(err, errlen, "%s is larger than 4 MiB", path);
    close(fd);
    return -EFBIG;
  }
  cap = st.st_size > 0 ? (size_t)st.st_size + 2 : 4096;
  p = malloc(cap);
  if (!p) {
    close(fd);
    return -ENOMEM;
  }
  for (;;) {
    ssize_t r;

    if (n + 1 >= cap) {
      /* never grow past limit + 2: one byte to detect overflow, one NUL */
      if (cap >= ERRFILE_MAX + 2)
        break;
      cap = cap * 2 > ERRFILE_MAX + 2 ? ERRFILE_MAX + 2 : cap * 2;
      q = realloc(p, cap);
      if (!q) {
        free(p);
        close(fd);
        return -ENOMEM;
      }
      p = q;
    }
    r = read(fd, p + n, cap - 1 - n);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      rc = -errno;
      set_err(err, errlen, "cannot read %s: %s", path, say_strerror(-errno));
      free(p);
      close(fd);
      return rc;
    }
    if (r == 0)
      break;
    n += (size_t)r;
  }
  close(fd);
  if (n > ERRFILE_MAX) {
    set_err(err, errlen, "%s is larger than 4 MiB", path);
    free(p);
    return -EFBIG;
  }
  p[n] = '\0';
  *buf = p;
  *len = n;
  return 0;
}

/* s without the blanks around it (a string written by a script may end
 * in a newline) into buf; false when that does not fit. */
static bool trim_blanks(const char *s, char *buf, size_t size)
{
  size_t n;

  s += strspn(s, " \t\n");
  n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n'))
    n--;
  if (n >= size)
    return false;
  memcpy(buf, s, n);
  buf[n] = '\0';
  return true;
}

/* A timestamp is epoch seconds, as a JSON number or a numeric string (a
 * decimal, num.h's rule, blanks around it allowed).  Anything else (or a
 * negative / non-finite value) counts as absent. */
static double parse_ts(const cJSON *j)
{
  double v = 0;

  if (cJSON_IsNumber(j)) {
    v = j->valuedouble;
  } else if (cJSON_IsString(j) && j->valuestring) {
    char buf[64];

    if (!trim_blanks(j->valuestring, buf, sizeof buf) ||
        num_parse_double(buf, 0, DBL_MAX, &v) != 0)
      return 0;
  }
  if (!isfinite(v) || v < 0)
    return 0;
  return v;
}

/* errorCode as an int; a numeric string (num.h's rule) is accepted too. */
static int parse_code(const cJSON *j)
{
  double v;

  if (cJSON_IsNumber(j)) {
    v = j->valuedouble;
  } else if (cJSON_IsString(j) && j->valuestring) {
    long l;

    if (num_parse_long(j->valuestring, LONG_MIN, LONG_MAX, &l) != 0)
      return 0;
    v = (double)l;
  } else {
    return 0;
  }
  if (!isfinite(v))
    return 0;
  if (v > INT_MAX)
    return INT_MAX;
  if (v < INT_MIN)
    return INT_MIN;
  return (int)v;
}

static char *dup_or_print(const cJSON *j)
{
  if (cJSON_IsString(j) && j->valuestring)
    return strdup(j->valuestring);
  return cJSON_PrintUnformatted(j);
}

/* Format (a): "message" is an object with message/extraInfo/errorCode. */
static int parse_object_msg(const cJSON *root, const cJSON *m,
                            struct errfile_info *out,
                            char *err, size_t errlen)
{
  const cJSON *text = cJSON_GetObjectItemCaseSensitive(m, "message");
  const cJSON *extra = cJSON_GetObjectItemCaseSensitive(m, "extraInfo");
  const cJSON *cs = NULL, *ts = NULL;

  if (!m->child) {
    set_err(err, errlen, "\"message\" is an empty object");
    return -EINVAL;
  }
  /* a missing or odd message.message still yields something readable:
   * the value itself, or the whole message object, compactly printed */
  if (text && !cJSON_IsNull(text))
    out->message = dup_or_print(text);
  else
    out->message = cJSON_PrintUnformatted(m);
  if (!out->message)
    return -ENOMEM;

  if (cJSON_IsObject(extra)) {
    cs = cJSON_GetObjectItemCaseSensitive(extra, "py_callstack");
    ts = cJSON_GetObjectItemCaseSensitive(extra, "timestamp");
  }
  if (cJSON_IsString(cs) && cs->valuestring) {
    out->traceback = strdup(cs->valuestring);
    if (!out->traceback)
      return -ENOMEM;
  }
  if (!ts)
    ts = cJSON_GetObjectItemCaseSensitive(root, "timestamp");
  out->timestamp = parse_ts(ts);
  if (cJSON_HasObjectItem(m, "errorCode"))
    out->error_code =
      parse_code(cJSON_GetObjectItemCaseSensitive(m, "errorCode"));
  else
    out->error_code =
      parse_code(cJSON_GetObjectItemCaseSensitive(root, "errorCode"));
  return 0;
}

static int parse_root(const cJSON *root, struct errfile_info *out,
                      char *err, size_t errlen)
{
  const cJSON *m;

  if (!cJSON_IsObject(root)) {
    set_err(err, errlen, "error file is JSON but not an object");
    return -EINVAL;
  }
  m = cJSON_GetObjectItemCaseSensitive(root, "message");
  if (!m) {
    set_err(err, errlen, "error file has no \"message\" key");
    return -EINVAL;
  }
  if (cJSON_IsObject(m))
    return parse_object_msg(root, m, out, err, errlen);
  if (!cJSON_IsString(m) || !m->valuestring) {
    set_err(err, errlen, "\"message\" is neither a string nor an object");
    return -EINVAL;
  }
  /* format (b): plain string message with a top-level timestamp */
  out->message = strdup(m->valuestring);
  if (!out->message)
    return -ENOMEM;
  out->timestamp =
    parse_ts(cJSON_GetObjectItemCaseSensitive(root, "timestamp"));
  out->error_code =
    parse_code(cJSON_GetObjectItemCaseSensitive(root, "errorCode"));
  return 0;
}

int errfile_read(const char *path, struct errfile_info *out,
                 char *err, size_t errlen)
{
  const char *end = NULL;
  cJSON *root;
  char *buf;
  size_t len;
  int rc;

  if (err && errlen)
    err[0] = '\0';
  if (!out)
    return -EINVAL;
  memset(out, 0, sizeof(*out));
  if (!path || !*path) {
    set_err(err, errlen, "no error file path");
    return -EINVAL;
  }
  rc = slurp(path, &buf, &len, err, errlen);
  if (rc < 0)
    return rc;
  if (len == 0) {
    free(buf);
    set_err(err, errlen, "empty error file");
    return -EINVAL;
  }
  root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
  if (!root) {
    size_t off = (end && end >= buf && end <= buf + len) ?
                 (size_t)(end - buf) : 0;

    set_err(err, errlen, "invalid JSON near byte %zu", off);
    free(buf);
    return -EINVAL;
  }
  /* only whitespace may follow the value */
  while (end && end < buf + len &&
         (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
    end++;
  if (end && end < buf + len) {
    set_err(err, errlen, "trailing data after JSON at byte %zu",
            (size_t)(end - buf));
    rc = -EINVAL;
  } else {
    rc = parse_root(root, out, err, errlen);
  }
  cJSON_Delete(root);
  free(buf);
  if (rc < 0) {
    if (rc == -ENOMEM)
      set_err(err, errlen, "out of memory");
    errfile_free(out);
  }
  return rc;
}

void errfile_free(struct errfile_info *e)
{
  if (!e)
    return;
  free(e->message);
  free(e->traceback);
  memset(e, 0, sizeof(*e));
}
