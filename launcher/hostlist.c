/* hostlist.c -- Slurm hostlist expansion (see hostlist.h). */
#include "hostlist.h"
#include "err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BRACKETS 8
#define MAX_DIGITS 18           /* every lo-hi fits an unsigned long long */

/* One item ("rack[1-2]-node[01-02]"): brackets[i] is the text between
 * '[' and ']', lit[i] the literal text before it.  The literal after the
 * last bracket is always empty (Slurm refuses one). */
struct item {
  const char *lit[MAX_BRACKETS + 1];
  size_t lit_len[MAX_BRACKETS + 1];
  const char *br[MAX_BRACKETS];
  size_t br_len[MAX_BRACKETS];
  unsigned long long count[MAX_BRACKETS];   /* saturates at ~0ULL */
  int nbr;
};

/* A bad value: the message in err, -EINVAL. */
static bool is_sep(char c)
{
  return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool parse_num(const char *s, size_t len, unsigned long long *v)
{
  unsigned long long n = 0;
  size_t i;

  if (len == 0 || len > MAX_DIGITS)
    return false;
  for (i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    n = n * 10 + (unsigned long long)(s[i] - '0');
  }
  *v = n;
  return true;
}

/* One "lo" or "lo-hi" inside a bracket. */
static bool parse_range(const char *s, size_t len, unsigned long long *lo,
                        unsigned long long *hi, int *width)
{
  const char *dash = memchr(s, '-', len);

  if (!dash) {
    if (!parse_num(s, len, lo))
      return false;
    *hi = *lo;
  } else if (!parse_num(s, (size_t)(dash - s), lo) ||
             !parse_num(dash + 1, len - (size_t)(dash - s) - 1, hi) ||
             *hi < *lo) {
    return false;
  }
  *width = dash ? (int)(dash - s) : (int)len;
  return true;
}

/* Checks a bracket's text and counts its values (saturating). */
static int check_bracket(const char *s, size_t len, unsigned long long *count,
                         const char *item, int ilen, char *err,
                         size_t errlen)
{
  unsigned long long lo, hi, n = 0, c;
  size_t i = 0, e;
  int width;

  if (len == 0)
    return err_set(err, errlen, -EINVAL,
                   "hostlist '%.*s': empty brackets", ilen, item);
  while (i <= len) {
    e = i;
    while (e < len && s[e] != ',')
      e++;
    if (!parse_range(s + i, e - i, &lo, &hi, &width))
      return err_set(err, errlen, -EINVAL,
                     "hostlist '%.*s': invalid range '%.*s' (expected N "
                     "or LO-HI with LO <= HI, at most %d digits)",
                     ilen, item, (int)(e - i), s + i, MAX_DIGITS);
    c = hi - lo + 1;
    n = n + c < n ? ~0ULL : n + c;
    i = e + 1;
  }
  *count = n;
  return 0;
}

/* The idx-th value of a bracket, and its zero-padded width. */
static void bracket_value(const char *s, size_t len, unsigned long long idx,
                          unsigned long long *v, int *width)
{
  unsigned long long lo = 0, hi = 0;
  size_t i = 0, e;

  while (i <= len) {
    e = i;
    while (e < len && s[e] != ',')
      e++;
    parse_range(s + i, e - i, &lo, &hi, width);
    if (idx <= hi - lo) {
      *v = lo + idx;
      return;
    }
    idx -= hi - lo + 1;
    i = e + 1;
  }
  *v = lo;      /* not reached: idx < the bracket's count */
}

static int parse_item(const char *s, size_t len, struct item *it, char *err,
                      size_t errlen)
{
  size_t i = 0, start = 0, close;
  int ilen = (int)len;

  memset(it, 0, sizeof *it);
  while (i < len) {
    if (s[i] == ']')
      return err_set(err, errlen, -EINVAL,
                     "hostlist '%.*s': ']' without '['", ilen, s);
    if (s[i] != '[') {
      i++;
      continue;
    }
    if (it->nbr == MAX_BRACKETS)
      return err_set(err, errlen, -EINVAL,
                     "hostlist '%.*s': more than %d brackets in "
                     "one name", ilen, s, MAX_BRACKETS);
    for (close = i + 1; close < len && s[close] != ']'; close++)
      if (s[close] == '[')
        return err_set(err, errlen, -EINVAL,
                       "hostlist '%.*s': nested '['", ilen, s);
    if (close == len)
      return err_set(err, errlen, -EINVAL,
                     "hostlist '%.*s': '[' without ']'", ilen, s);
    it->lit[it->nbr] = s + start;
    it->lit_len[it->nbr] = i - start;
    it->br[it->nbr] = s + i + 1;
    it->br_len[it->nbr] = close - i - 1;
    if (check_bracket(it->br[it->nbr], it->br_len[it->nbr],
                      &it->count[it->nbr], s, ilen, err, errlen))
      return -EINVAL;
    it->nbr++;
    i = start = close + 1;
  }
  if (it->nbr > 0 && start < len)
    return err_set(err, errlen, -EINVAL,
                   "hostlist '%.*s': text '%.*s' after the last "
                   "']' (Slurm does not allow a suffix there)", ilen, s,
                   (int)(len - start), s + start);
  it->lit[it->nbr] = s + start;
  it->lit_len[it->nbr] = len - start;
  return 0;
}

/* Writes the name whose per-bracket indexes are idx[] into out. */
static int format_name(const struct item *it, const unsigned long long *idx,
                       char *out, size_t outlen, char *err, size_t errlen,
                       const char *s, int ilen)
{
  size_t n = 0;
  int b, w, width;
  unsigned long long v;

  for (b = 0; b <= it->nbr; b++) {
    w = snprintf(out + n, outlen - n, "%.*s", (int)it->lit_len[b],
                 it->lit[b]);
    if (w < 0 || (size_t)w >= outlen - n)
      goto long_name;
    n += (size_t)w;
    if (b == it->nbr)
      break;
    bracket_value(it->br[b], it->br_len[b], idx[b], &v, &width);
    w = snprintf(out + n, outlen - n, "%0*llu", width, v);
    if (w < 0 || (size_t)w >= outlen - n)
      goto long_name;
    n += (size_t)w;
  }
  return 0;
long_name:
  return err_set(err, errlen, -EINVAL,
                 "hostlist '%.*s': a host name longer than %d "
                 "characters", ilen, s, (int)outlen - 1);
}

/* Calls fn for each item of list (outside brackets, split at separators);
 * stops at the first nonzero return. */
static int each_item(const char *list, int (*fn)(const char *, size_t,
                                                 void *),
                     void *arg, char *err, size_t errlen)
{
  const char *p = list, *start;
  int depth, rc;

  for (;;) {
    while (*p && is_sep(*p))
      p++;
    if (!*p)
      return 0;
    start = p;
    depth = 0;
    while (*p && (depth || !is_sep(*p))) {
      if (*p == '[')
        depth = 1;
      else if (*p == ']')
        depth = 0;
      else if (depth && (*p == ' ' || *p == '\t' || *p == '\n'))
        return err_set(err, errlen, -EINVAL,
                       "hostlist '%s': blank inside brackets", list);
      p++;
    }
    rc = fn(start, (size_t)(p - start), arg);
    if (rc)
      return rc;
  }
}

struct expand_state {
  size_t max, n, cap;
  char **hosts;
  char *err;
  size_t errlen;
};

static int expand_item(const char *s, size_t len, void *arg)
{
  struct expand_state *st = arg;
  unsigned long long idx[MAX_BRACKETS], total = 1, k, rest;
  char name[HOSTLIST_MAX_NAME + 1];
  struct item it;
  int b, rc;

  rc = parse_item(s, len, &it, st->err, st->errlen);
  if (rc)
    return rc;
  for (b = 0; b < it.nbr; b++) {
    if (total <= st->max && it.count[b] <= st->max &&
        total <= st->max / it.count[b])
      total *= it.count[b];
    else
      total = ~0ULL;
  }
  if (total > st->max - st->n) {
    if (st->err && st->errlen)
      snprintf(st->err, st->errlen, "hostlist: more than %zu hosts "
               "(at '%.*s')", st->max, (int)len, s);
    return -E2BIG;
  }
  if (st->n + total > st->cap) {
    size_t cap = st->cap ? st->cap : 16;
    char **h;

    while (cap < st->n + total)
      cap *= 2;
    h = realloc(st->hosts, cap * sizeof *h);
    if (!h)
      return -ENOMEM;
    st->hosts = h;
    st->cap = cap;
  }
  /* Slurm's order: the last bracket varies fastest, then the first, the
   * second, ..., the second-to-last slowest. */
  for (k = 0; k < total; k++) {
    rest = k;
    if (it.nbr > 0) {
      idx[it.nbr - 1] = rest % it.count[it.nbr - 1];
      rest /= it.count[it.nbr - 1];
      for (b = 0; b < it.nbr - 1; b++) {
        idx[b] = rest % it.count[b];
        rest /= it.count[b];
      }
    }
    rc = format_name(&it, idx, name, sizeof name, st->err, st->errlen, s,
                     (int)len);
    if (rc)
      return rc;
    st->hosts[st->n] = strdup(name);
    if (!st->hosts[st->n])
      return -ENOMEM;
    st->n++;
  }
  return 0;
}

int hostlist_expand(const char *list, size_t max_hosts, char ***hosts,
                    size_t *count, char *err, size_t errlen)
{
  struct expand_state st = { max_hosts, 0, 0, NULL, err, errlen };
  int rc;

  *hosts = NULL;
  *count = 0;
  if (err && errlen)
    err[0] = '\0';
  rc = each_item(list, expand_item, &st, err, errlen);
  if (rc == -ENOMEM)
    err_set(err, errlen, rc, "hostlist: out of memory");
  if (rc) {
    hostlist_free(st.hosts, st.n);
    return rc;
  }
  *hosts = st.hosts;
  *count = st.n;
  return 0;
}

struct first_state {
  char *out;
  size_t outlen;
  bool found;
  char *err;
  size_t errlen;
};

static int first_item(const char *s, size_t len, void *arg)
{
  struct first_state *st = arg;
  unsigned long long idx[MAX_BRACKETS] = { 0 };
  char name[HOSTLIST_MAX_NAME + 1];
  struct item it;
  int rc;

  rc = parse_item(s, len, &it, st->err, st->errlen);
  if (rc)
    return rc;
  rc = format_name(&it, idx, name, sizeof name, st->err, st->errlen, s,
                   (int)len);
  if (rc || st->found)
    return rc;
  if (strlen(name) >= st->outlen)
    return err_set(st->err, st->errlen, -EINVAL,
                   "hostlist: host name '%s' too long", name);
  memcpy(st->out, name, strlen(name) + 1);
  st->found = true;
  return 0;
}

int hostlist_first(const char *list, char *out, size_t outlen, char *err,
                   size_t errlen)
{
  struct first_state st = { out, outlen, false, err, errlen };
  int rc;

  if (err && errlen)
    err[0] = '\0';
  rc = each_item(list, first_item, &st, err, errlen);
  if (rc)
    return rc;
  if (!st.found)
    return err_set(err, errlen, -EINVAL,
                   "hostlist '%s': no host", list);
  return 0;
}

void hostlist_free(char **hosts, size_t count)
{
  size_t i;

  for (i = 0; i < count && hosts; i++)
    free(hosts[i]);
  free(hosts);
}
