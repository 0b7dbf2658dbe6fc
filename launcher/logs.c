/* logs.c -- redirect/tee specs, rank filter, duplicate filters. */
#include "logs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "num.h"

#define SPEC_HINT "expected 0..3 or local_rank:mask pairs like 0:3,1:1"
#define FILTER_HINT "expected comma-separated local ranks like 0,2,3"
/* Longest piece of user input echoed into an error message. */
#define ECHO_MAX 64

/* say.h's one helper, its return value unused here. */
#define set_err(err, errlen, ...) \
  ((void)err_set(err, errlen, 0, __VA_ARGS__))

/* Width for "%.*s" of an input piece, clamped so messages stay one line. */
static int echo_len(size_t n)
{
  return n > ECHO_MAX ? ECHO_MAX : (int)n;
}

/* s[0..n) as an int, by num.h's one rule.  Returns 0 or -errno. */
static int parse_int(const char *s, size_t n, long *out)
{
  return num_parse_long_n(s, n, INT_MIN, INT_MAX, out);
}

/* A work array of nproc bytes (at least one, so malloc(0) is no issue). */
static unsigned char *alloc_bytes(int nproc)
{
  return malloc(nproc > 0 ? (size_t)nproc : 1);
}

/* Parses one "lr:mask" entry of a spec map into tmp (0xff = unset). */
static int parse_pair(const char *spec, const char *p, size_t n, int nproc,
                      unsigned char *tmp, char *err, size_t errlen)
{
  const char *colon = memchr(p, ':', n);
  size_t rlen, mlen;
  long lr;

  if (!colon) {
    set_err(err, errlen, "invalid entry '%.*s' in '%.*s' (%s)",
            echo_len(n), p, echo_len(strlen(spec)), spec, SPEC_HINT);
    return -EINVAL;
  }
  rlen = (size_t)(colon - p);
  mlen = n - rlen - 1;
  if (parse_int(p, rlen, &lr) < 0) {
    set_err(err, errlen, "invalid local rank '%.*s' in entry '%.*s' (%s)",
            echo_len(rlen), p, echo_len(n), p, SPEC_HINT);
    return -EINVAL;
  }
  if (lr < 0 || lr >= nproc) {
    set_err(err, errlen,
            "local rank %ld in entry '%.*s' out of range (0..%d)",
            lr, echo_len(n), p, nproc - 1);
    return -EINVAL;
  }
  if (mlen != 1 || colon[1] < '0' || colon[1] > '3') {
    set_err(err, errlen, "invalid mask '%.*s' in entry '%.*s' (%s)",
            echo_len(mlen), colon + 1, echo_len(n), p, SPEC_HINT);
    return -EINVAL;
  }
  if (tmp[lr] != 0xff) {
    set_err(err, errlen, "duplicate local rank %ld in '%.*s'",
            lr, echo_len(strlen(spec)), spec);
    return -EINVAL;
  }
  tmp[lr] = (unsigned char)(colon[1] - '0');
  return 0;
}

int logs_parse_std_spec(const char *spec, int nproc, unsigned char *mask,
                        char *err, size_t errlen)
{
  unsigned char *tmp;
  const char *p;
  int rc = 0;

  if (nproc < 0 || (nproc > 0 && !mask)) {
    set_err(err, errlen, "invalid number of local ranks %d", nproc);
    return -EINVAL;
  }
  /* Empty or absent means "no redirect", as torchrun's default "0". */
  if (!spec || !*spec) {
    if (nproc > 0)
      memset(mask, 0, (size_t)nproc);
    return 0;
  }
  if (!strchr(spec, ':')) {
    if (spec[0] < '0' || spec[0] > '3' || spec[1] != '\0') {
      set_err(err, errlen, "invalid value '%.*s' (%s)",
              echo_len(strlen(spec)), spec, SPEC_HINT);
      return -EINVAL;
    }
    if (nproc > 0)
      memset(mask, spec[0] - '0', (size_t)nproc);
    return 0;
  }

  /* Map form: fill a copy so mask is untouched on error. */
  tmp = alloc_bytes(nproc);
  if (!tmp)
    return -ENOMEM;
  if (nproc > 0)
    memset(tmp, 0xff, (size_t)nproc);
  p = spec;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);

    if (n == 0) {
      set_err(err, errlen, "empty entry in '%.*s' (%s)",
              echo_len(strlen(spec)), spec, SPEC_HINT);
      rc = -EINVAL;
      break;
    }
    rc = parse_pair(spec, p, n, nproc, tmp, err, errlen);
    if (rc < 0 || !comma)
      break;
    p = comma + 1;
  }
  if (rc == 0) {
    for (int i = 0; i < nproc; i++)
      mask[i] = tmp[i] == 0xff ? 0 : tmp[i];
  }
  free(tmp);
  return rc;
}

static bool is_blank(char c)
{
  return c == ' ' || c == '\t';
}

int logs_parse_ranks_filter(const char *spec, int nproc, bool *keep,
                            char *err, size_t errlen)
{
  unsigned char *tmp;
  const char *p;
  int rc = 0;

  if (nproc < 0 || (nproc > 0 && !keep)) {
    set_err(err, errlen, "invalid number of local ranks %d", nproc);
    return -EINVAL;
  }
  if (!spec || !*spec) {
    for (int i = 0; i < nproc; i++)
      keep[i] = true;
    return 0;
  }
  tmp = alloc_bytes(nproc);
  if (!tmp)
    return -ENOMEM;
  if (nproc > 0)
    memset(tmp, 0, (size_t)nproc);
  p = spec;
  for (;;) {
    const char *comma = strchr(p, ',');
    const char *e = comma ? comma : p + strlen(p);
    const char *s = p;
    long lr;

    /* torchrun uses int(), which tolerates surrounding blanks. */
    while (s < e && is_blank(*s))
      s++;
    while (e > s && is_blank(e[-1]))
      e--;
    if (s == e) {
      set_err(err, errlen, "empty entry in '%.*s' (%s)",
              echo_len(strlen(spec)), spec, FILTER_HINT);
      rc = -EINVAL;
      break;
    }
    if (parse_int(s, (size_t)(e - s), &lr) < 0) {
      set_err(err, errlen, "invalid local rank '%.*s' (%s)",
              echo_len((size_t)(e - s)), s, FILTER_HINT);
      rc = -EINVAL;
      break;
    }
    if (lr < 0 || lr >= nproc) {
      set_err(err, errlen, "local rank %ld out of range (0..%d)",
              lr, nproc - 1);
      rc = -EINVAL;
      break;
    }
    tmp[lr] = 1;
    if (!comma)
      break;
    p = comma + 1;
  }
  if (rc == 0) {
    for (int i = 0; i < nproc; i++)
      keep[i] = tmp[i] != 0;
  }
  free(tmp);
  return rc;
}

char **logs_parse_filters(const char *spec, int *err)
{
  char **out, *cur;
  size_t n = 0, len = 0;

  *err = 0;
  if (!spec || !*spec)
    return NULL;
  /* At most one filter per comma, plus one, plus the NULL. */
  out = calloc(strlen(spec) + 2, sizeof *out);
  cur = malloc(strlen(spec) + 1);
  if (!out || !cur)
    goto nomem;
  for (const char *p = spec;; p++) {
    if (*p == ',' && p[1] == ',') {
      cur[len++] = ',';
      p++;
      continue;
    }
    if (*p && *p != ',') {
      cur[len++] = *p;
      continue;
    }
    if (len) {
      cur[len] = '\0';
      out[n] = strdup(cur);
      if (!out[n])
        goto nomem;
      n++;
      len = 0;
    }
    if (!*p)
      break;
  }
  free(cur);
  if (n == 0) {
    free(out);
    return NULL;
  }
  return out;

nomem:
  free(cur);
  logs_filters_free(out);
  *err = -ENOMEM;
  return NULL;
}

void logs_filters_free(char **filters)
{
  if (!filters)
    return;
  for (size_t i = 0; filters[i]; i++)
    free(filters[i]);
  free(filters);
}

bool logs_filter_match(char *const *filters, const char *line, size_t len)
{
  for (size_t i = 0; filters && filters[i]; i++)
    if (memmem(line, len, filters[i], strlen(filters[i])))
      return true;
  return false;
}
