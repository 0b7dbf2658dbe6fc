/* args.c -- torchrun's command line and PET_* fallbacks, parsed for cdrun. */
#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "num.h"

/* How an option's value is checked and where it lands. */
enum kind {
  K_STR,          /* any string, kept as is */
  K_OPTSTR,       /* any string; "" means not given (NULL) */
  K_NNODES,       /* N or MIN:MAX into nnodes_min/nnodes_max */
  K_NPROC,        /* integer >= 1, cpu, gpu or auto */
  K_UINT,         /* integer >= 0 */
  K_PORT,         /* integer 1..65535 */
  K_POSSEC,       /* seconds > 0 */
  K_GRACE,        /* seconds >= 0 */
  K_CHOICE,       /* one of opt.choices */
  K_SIGNALS,      /* comma list of known signal names */
  K_UNSUPPORTED,  /* parsed, then refused with opt.note */
  K_BOOL,         /* no value on the command line; integer in PET_* */
  K_HELP,
  K_VERSION,
  K_COMPLETION,   /* like K_HELP, with a value in opt.choices */
};

struct opt {
  const char *name;             /* dest; "--" + name, '_' may be '-' */
  char shortc;                  /* -X alias, or 0 */
  enum kind kind;
  size_t off;                   /* field in struct cdrun_args */
  const char *def;              /* default, checked like a given value */
  const char *const *choices;   /* K_CHOICE: NULL-terminated */
  const char *note;             /* K_UNSUPPORTED: why */
};

/* What the command line said for one option. */
struct given {
  const char *val;              /* NULL: not on the command line */
  const char *label;            /* the flag as typed, for messages */
  int label_len;
};

static const char *const start_methods[] = {
  "spawn", "fork", "forkserver", NULL,
};
static const char *const log_handlers[] = { "null", "console", NULL };
static const char *const known_signals[] = {
  "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
  "SIGABRT", "SIGALRM", "SIGXCPU", NULL,
};
static const char *const numa_modes[] = {
  "node", "socket", "exclusive", "core-complex", NULL,
};
static const char *const completion_shells[] = { "bash", NULL };
static const char *const recovery_modes[] = { "restart", "live", NULL };

#define F(field) offsetof(struct cdrun_args, field)

static const struct opt opts[] = {
  { "nnodes", 0, K_NNODES, F(nnodes_min), "1", NULL, NULL },
  { "nproc_per_node", 0, K_NPROC, F(nproc_per_node), "1", NULL, NULL },
  { "rdzv_backend", 0, K_STR, F(rdzv_backend), "static", NULL, NULL },
  { "rdzv_endpoint", 0, K_STR, F(rdzv_endpoint), "", NULL, NULL },
  { "rdzv_id", 0, K_STR, F(rdzv_id), "none", NULL, NULL },
  { "rdzv_conf", 0, K_STR, F(rdzv_conf), "", NULL, NULL },
  { "standalone", 0, K_BOOL, F(standalone), NULL, NULL, NULL },
  { "max_restarts", 0, K_UINT, F(max_restarts), "0", NULL, NULL },
  { "monitor_interval", 0, K_POSSEC, F(monitor_interval), "0.1",
    NULL, NULL },
  { "recovery", 0, K_CHOICE, F(recovery), "restart", recovery_modes,
    NULL },
  { "start_method", 0, K_CHOICE, F(start_method), "spawn",
    start_methods, NULL },
  { "role", 0, K_STR, F(role), "default", NULL, NULL },
  { "module", 'm', K_BOOL, F(module), NULL, NULL, NULL },
  { "no_python", 0, K_BOOL, F(no_python), NULL, NULL, NULL },
  { "run_path", 0, K_BOOL, F(run_path), NULL, NULL, NULL },
  { "log_dir", 0, K_OPTSTR, F(log_dir), NULL, NULL, NULL },
  { "redirects", 'r', K_STR, F(redirects), "0", NULL, NULL },
  { "tee", 't', K_STR, F(tee), "0", NULL, NULL },
  { "local_ranks_filter", 0, K_OPTSTR, F(local_ranks_filter), NULL,
    NULL, NULL },
  { "node_rank", 0, K_UINT, F(node_rank), "0", NULL, NULL },
  { "master_addr", 0, K_OPTSTR, F(master_addr), NULL, NULL, NULL },
  { "master_port", 0, K_PORT, F(master_port), NULL, NULL, NULL },
  { "local_addr", 0, K_OPTSTR, F(local_addr), NULL, NULL, NULL },
  { "signals_to_handle", 0, K_SIGNALS, F(signals_to_handle),
    "SIGTERM,SIGINT,SIGHUP,SIGQUIT", NULL, NULL },
  { "shutdown_timeout", 0, K_GRACE, F(shutdown_timeout), "30", NULL, NULL },
  { "event_log_handler", 0, K_CHOICE, F(event_log_handler), "null",
    log_handlers, NULL },
  { "logs_specs", 0, K_UNSUPPORTED, 0, NULL, NULL,
    "not supported by cdrun (it loads a Python plugin)" },
  { "numa_binding", 0, K_CHOICE, F(numa_binding), NULL, numa_modes, NULL },
  { "log_line_prefix_template", 0, K_OPTSTR, F(log_line_prefix_template),
    NULL, NULL, NULL },
  { "duplicate_stdout_filters", 0, K_OPTSTR, F(duplicate_stdout_filters),
    NULL, NULL, NULL },
  { "duplicate_stderr_filters", 0, K_OPTSTR, F(duplicate_stderr_filters),
    NULL, NULL, NULL },
  { "virtual_local_rank", 0, K_BOOL, F(virtual_local_rank), NULL, NULL,
    NULL },
  { "worker_heartbeat_timeout", 0, K_GRACE, F(worker_heartbeat_timeout),
    "0", NULL, NULL },
  { "print_completion", 0, K_COMPLETION, F(print_completion), NULL,
    completion_shells, NULL },
  { "print_config", 0, K_BOOL, F(print_config), NULL, NULL, NULL },
  { "hostfile", 0, K_OPTSTR, F(hostfile), NULL, NULL, NULL },
  { "hosts", 0, K_OPTSTR, F(hosts), NULL, NULL, NULL },
  { "stdin_watchdog", 0, K_BOOL, F(stdin_watchdog), NULL, NULL, NULL },
  { "help", 'h', K_HELP, F(help), NULL, NULL, NULL },
  { "version", 0, K_VERSION, F(version), NULL, NULL, NULL },
};

#define NOPTS (sizeof opts / sizeof opts[0])
_Static_assert(NOPTS <= sizeof ((struct cdrun_args *)0)->origin,
               "struct cdrun_args.origin is too small");

/* torchrun reads this for the SIGTERM->SIGKILL grace period. */
#define SHUTDOWN_ENV "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"

/* err.h's helpers: a message in err, -EINVAL or -ENOMEM returned. */
#define nomem(err, errlen) err_set(err, errlen, -ENOMEM, "out of memory")

static void *field(struct cdrun_args *a, const struct opt *o)
{
  return (char *)a + o->off;
}

/* "--nproc_per_node" and "--nproc-per-node", but not a mix of both. */
static bool name_is(const char *s, size_t len, const char *dest, char sep)
{
  if (strlen(dest) != len)
    return false;
  for (size_t i = 0; i < len; i++)
    if (s[i] != (dest[i] == '_' ? sep : dest[i]))
      return false;
  return true;
}

static const struct opt *find_long(const char *s, size_t len)
{
  for (size_t i = 0; i < NOPTS; i++)
    if (name_is(s, len, opts[i].name, '_') ||
        name_is(s, len, opts[i].name, '-'))
      return &opts[i];
  return NULL;
}

/* Edit distance between s[0..len) and name, '-' and '_' alike; stops
 * counting at 3 (only near misses matter). */
static int distance(const char *s, size_t len, const char *name)
{
  size_t n = strlen(name), i, j;
  int row[64], prev, cur, best;

  if (len >= 63 || n >= 63)
    return 3;
  for (j = 0; j <= n; j++)
    row[j] = (int)j;
  for (i = 1; i <= len; i++) {
    prev = row[0];
    row[0] = (int)i;
    best = row[0];
    for (j = 1; j <= n; j++) {
      char a = s[i - 1] == '-' ? '_' : s[i - 1];
      int sub = prev + (a != name[j - 1]);

      cur = row[j] + 1 < row[j - 1] + 1 ? row[j] + 1 : row[j - 1] + 1;
      if (sub < cur)
        cur = sub;
      prev = row[j];
      row[j] = cur;
      if (cur < best)
        best = cur;
    }
    if (best >= 3)
      return 3;
  }
  return row[n] < 3 ? row[n] : 3;
}

/* The option s[0..len) was probably meant to be (distance 1 or 2, in the
 * spelling s uses), or NULL. */
static const char *nearest_option(const char *s, size_t len, char *buf,
                                  size_t buflen)
{
  const struct opt *best = NULL;
  int d, best_d = 3;
  char sep = memchr(s, '-', len) ? '-' : '_';

  for (size_t i = 0; i < NOPTS; i++) {
    d = distance(s, len, opts[i].name);
    if (d < best_d) {
      best_d = d;
      best = &opts[i];
    }
  }
  if (!best)
    return NULL;
  snprintf(buf, buflen, "--%s", best->name);
  for (char *p = buf + 2; *p; p++)
    if (*p == '_')
      *p = sep;
  return buf;
}

/* argparse's allow_abbrev: s[0..len) is a strict prefix of dest in one
 * spelling. */
static bool prefix_of(const char *s, size_t len, const char *dest, char sep)
{
  if (len >= strlen(dest))
    return false;
  for (size_t i = 0; i < len; i++)
    if (s[i] != (dest[i] == '_' ? sep : dest[i]))
      return false;
  return true;
}

/* The option a unique prefix names (both spellings of one option count
 * once), or NULL with the candidates listed in err when there are several
 * (*ambiguous set). */
static const struct opt *find_prefix(const char *s, size_t len,
                                     bool *ambiguous, char *err,
                                     size_t errlen)
{
  const struct opt *found = NULL;
  char sep = memchr(s, '-', len) ? '-' : '_';
  size_t n = 0, used;

  *ambiguous = false;
  for (size_t i = 0; i < NOPTS; i++)
    if (prefix_of(s, len, opts[i].name, '_') ||
        prefix_of(s, len, opts[i].name, '-')) {
      found = &opts[i];
      n++;
    }
  if (n <= 1)
    return found;
  *ambiguous = true;
  used = (size_t)snprintf(err, errlen, "ambiguous option: --%.*s could "
                          "match", (int)len, s);
  for (size_t i = 0, k = 0; i < NOPTS && used < errlen; i++) {
    if (!prefix_of(s, len, opts[i].name, '_') &&
        !prefix_of(s, len, opts[i].name, '-'))
      continue;
    used += (size_t)snprintf(err + used, errlen - used, "%s --", k++ ? ","
                             : "");
    for (const char *c = opts[i].name; *c && used + 1 < errlen; c++)
      err[used++] = *c == '_' ? sep : *c;
    if (used < errlen)
      err[used] = '\0';
  }
  return NULL;
}

static const struct opt *find_short(char c)
{
  for (size_t i = 0; i < NOPTS; i++)
    if (opts[i].shortc && opts[i].shortc == c)
      return &opts[i];
  return NULL;
}

/* argparse lets "-1" or "-.5" be a value; anything else with a leading
 * dash (bar a lone "-") is the next flag, so the value is missing. */
static bool looks_like_flag(const char *s)
{
  if (s[0] != '-' || s[1] == '\0')
    return false;
  const char *p = s + 1;
  while (isdigit((unsigned char)*p))
    p++;
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p))
      return true;
    while (isdigit((unsigned char)*p))
      p++;
  }
  return *p != '\0';
}

/* A whole base-10 integer (num.h's rule); the caller checks the range. */
static bool parse_long(const char *s, long *out)
{
  return num_parse_long(s, LONG_MIN, LONG_MAX, out) == 0;
}

/* "a, b or c" */
static void join(char *buf, size_t n, const char *const *list,
                 const char *sep, const char *last)
{
  size_t len = 0;

  buf[0] = '\0';
  for (size_t i = 0; list[i] && len < n; i++) {
    const char *s = i == 0 ? "" : list[i + 1] ? sep : last;
    int w = snprintf(buf + len, n - len, "%s%s", s, list[i]);
    if (w < 0)
      break;
    len += (size_t)w;
  }
}

static bool in_list(const char *const *list, const char *s, size_t len)
{
  for (size_t i = 0; list[i]; i++)
    if (strlen(list[i]) == len && memcmp(list[i], s, len) == 0)
      return true;
  return false;
}

static int set_str(char **dst, const char *v, char *err, size_t errlen)
{
  *dst = strdup(v);
  return *dst ? 0 : nomem(err, errlen);
}

/* Checks and normalizes "SIGTERM, SIGUSR1" into "SIGTERM,SIGUSR1". */
static int store_signals(char **dst, const char *v, const char *label,
                         int ll, char *err, size_t errlen)
{
  char names[128];
  char *out = malloc(strlen(v) + 1);
  size_t len = 0;
  const char *p = v;

  if (!out)
    return nomem(err, errlen);
  join(names, sizeof names, known_signals, " ", " ");
  for (;;) {
    const char *end = p + strcspn(p, ",");
    const char *s = p, *e = end;

    while (s < e && isspace((unsigned char)*s))
      s++;
    while (e > s && isspace((unsigned char)e[-1]))
      e--;
    if (s == e) {
      free(out);
      return err_invalid(err, errlen, "%.*s: invalid value '%s' (empty signal "
                         "name; expected a comma list of: %s)", ll, label, v,
                         names);
    }
    if (!in_list(known_signals, s, (size_t)(e - s))) {
      free(out);
      return err_invalid(err, errlen, "%.*s: invalid value '%s' (unknown "
                         "signal '%.*s'; supported: %s)", ll, label, v,
                         (int)(e - s), s, names);
    }
    if (len)
      out[len++] = ',';
    memcpy(out + len, s, (size_t)(e - s));
    len += (size_t)(e - s);
    if (!*end)
      break;
    p = end + 1;
  }
  out[len] = '\0';
  *dst = out;
  return 0;
}

static bool parse_nnodes(const char *v, int *min, int *max)
{
  char buf[64];
  const char *colon = strchr(v, ':');
  long lo, hi;

  if (!colon) {
    if (!parse_long(v, &lo))
      return false;
    hi = lo;
  } else {
    size_t n = (size_t)(colon - v);
    if (n >= sizeof buf)
      return false;
    memcpy(buf, v, n);
    buf[n] = '\0';
    if (!parse_long(buf, &lo) || !parse_long(colon + 1, &hi))
      return false;
  }
  if (lo < 1 || hi < lo || hi > INT_MAX)
    return false;
  *min = (int)lo;
  *max = (int)hi;
  return true;
}

/* Checks one value and stores it in *a.  label/ll name its source. */
static int store(struct cdrun_args *a, const struct opt *o, const char *v,
                 const char *label, int ll, char *err, size_t errlen)
{
  char buf[128];
  long n;
  double d;

#define INVALID(what) \
  err_invalid(err, errlen, "%.*s: invalid value '%s' (expected %s)", ll, \
              label, v, what)

  switch (o->kind) {
  case K_STR:
    return set_str(field(a, o), v, err, errlen);
  case K_OPTSTR:
    return *v ? set_str(field(a, o), v, err, errlen) : 0;
  case K_NNODES:
    if (!parse_nnodes(v, &a->nnodes_min, &a->nnodes_max))
      return INVALID("N or MIN:MAX with 0 < MIN <= MAX");
    return 0;
  case K_NPROC:
    if (!strcmp(v, "cpu") || !strcmp(v, "gpu") || !strcmp(v, "auto"))
      return set_str(field(a, o), v, err, errlen);
    if (num_parse_long(v, 1, NUM_NPROC_MAX, &n))
      return INVALID("an integer 1..65536, cpu, gpu or auto");
    /* Canonical digits, so "+04" does not surprise the agent. */
    snprintf(buf, sizeof buf, "%ld", n);
    return set_str(field(a, o), buf, err, errlen);
  case K_UINT:
    if (num_parse_long(v, 0, INT_MAX, &n))
      return INVALID("an integer 0..2147483647");
    *(int *)field(a, o) = (int)n;
    return 0;
  case K_PORT:
    if (num_parse_long(v, 1, 65535, &n))
      return INVALID("a port number 1..65535");
    *(int *)field(a, o) = (int)n;
    return 0;
  case K_POSSEC:
    if (num_parse_double(v, 0, NUM_SECONDS_MAX, &d) || d == 0)
      return INVALID("a number of seconds > 0, at most 10000000");
    *(double *)field(a, o) = d;
    return 0;
  case K_GRACE:
    if (num_parse_double(v, 0, NUM_SECONDS_MAX, &d))
      return INVALID("a number of seconds 0..10000000");
    *(double *)field(a, o) = d;
    return 0;
  case K_CHOICE:
    if (!in_list(o->choices, v, strlen(v))) {
      join(buf, sizeof buf, o->choices, ", ", " or ");
      return INVALID(buf);
    }
    return set_str(field(a, o), v, err, errlen);
  case K_SIGNALS:
    return store_signals(field(a, o), v, label, ll, err, errlen);
  case K_UNSUPPORTED:
    return err_invalid(err, errlen, "%.*s: %s", ll, label, o->note);
  case K_BOOL:
  case K_HELP:
  case K_VERSION:
  case K_COMPLETION:
    break;
  }
  return 0;
#undef INVALID
}

static const char *env_get(char **env, const char *name)
{
  size_t n = strlen(name);

  for (char **e = env; e && *e; e++)
    if (!strncmp(*e, name, n) && (*e)[n] == '=')
      return *e + n + 1;
  return NULL;
}

/* Fills every field: the command line, else PET_<NAME>, else the
 * default.  With env NULL and nothing given it yields the defaults. */
static int resolve(struct cdrun_args *a, const struct given *g, char **env,
                   char *err, size_t errlen)
{
  for (size_t i = 0; i < NOPTS; i++) {
    const struct opt *o = &opts[i];
    const char *v = g[i].val, *label = g[i].label;
    int ll = g[i].label_len;
    char envname[64];
    int rc;

    if (o->kind == K_HELP || o->kind == K_VERSION ||
        o->kind == K_COMPLETION)
      continue;
    a->origin[i] = v ? ARGS_FLAG : ARGS_DEFAULT;
    if (o->kind == K_BOOL && v) {
      *(bool *)field(a, o) = true;
      continue;
    }
    if (!v) {
      snprintf(envname, sizeof envname, "PET_%s", o->name);
      for (char *c = envname; *c; c++)
        *c = (char)toupper((unsigned char)*c);
      label = envname;
      v = env_get(env, envname);
      if (!v && o->kind == K_GRACE && (v = env_get(env, SHUTDOWN_ENV)))
        label = SHUTDOWN_ENV;
      ll = (int)strlen(label);
      if (v)
        a->origin[i] = ARGS_ENV;
    }
    if (o->kind == K_BOOL) {
      long n = 0;

      /* torchrun's check_env: bool(int(value)). */
      if (v && !parse_long(v, &n))
        return err_invalid(err, errlen, "%s: invalid value '%s' (expected an "
                           "integer, nonzero = on)", label, v);
      *(bool *)field(a, o) = n != 0;
      continue;
    }
    if (!v)
      v = o->def;
    if (!v)
      continue;
    rc = store(a, o, v, label, ll, err, errlen);
    if (rc)
      return rc;
  }
  return 0;
}

/* arg (a flag) as an option: which one (*o), the length of its name as
 * typed (*ll, for messages) and its value when it comes in the same
 * argument (*val: "--a=1", "-r3"; NULL otherwise).  Returns 0, or
 * -EINVAL (an ambiguous prefix) or -ENOENT (no such option) with a
 * message in err. */
static int option_of(const char *arg, const struct opt **o, int *ll,
                     const char **val, char *err, size_t errlen)
{
  *val = NULL;
  if (arg[1] == '-') {
    const char *eq = strchr(arg + 2, '=');
    size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);

    *o = find_long(arg + 2, len);
    if (!*o) {
      bool ambiguous;

      *o = find_prefix(arg + 2, len, &ambiguous, err, errlen);
      if (ambiguous)
        return -EINVAL;
    }
    *ll = (int)len + 2;
    if (eq)
      *val = eq + 1;
  } else {
    /* argparse takes -r3, -r=3 and -r 3 alike. */
    *o = find_short(arg[1]);
    *ll = 2;
    if (arg[2])
      *val = arg + (arg[2] == '=' ? 3 : 2);
  }
  if (!*o) {
    char near[80];
    const char *guess = arg[1] == '-'
        ? nearest_option(arg + 2, strcspn(arg + 2, "="), near, sizeof near)
        : NULL;

    return err_set(err, errlen, -ENOENT, "unrecognized argument '%s'%s%s%s",
                   arg, guess ? " (did you mean " : "", guess ? guess : "",
                   guess ? "?)" : "");
  }
  return 0;
}

/* --help, --version, --print-completion=SHELL (o, with val): the rest of
 * the line does not matter.  *out gets the defaults and o, so that the
 * caller can treat it like any parsed struct. */
static int parse_stop(struct cdrun_args *a, const struct opt *o,
                      const char *val, struct cdrun_args *out, char *err,
                      size_t errlen)
{
  struct given none[NOPTS];
  int rc;

  memset(none, 0, sizeof none);
  rc = resolve(a, none, NULL, err, errlen);
  if (!rc) {
    if (o->kind == K_COMPLETION)
      rc = set_str(field(a, o), val, err, errlen);
    else
      *(bool *)field(a, o) = true;
  }
  if (rc) {
    args_free(a);
    return rc;
  }
  *out = *a;
  return 0;
}

int args_parse(struct cdrun_args *out, int argc, char **argv, char **env,
               char *err, size_t errlen)
{
  struct cdrun_args a;
  struct given g[NOPTS];
  int i, rc;

  memset(&a, 0, sizeof a);
  memset(g, 0, sizeof g);
  memset(out, 0, sizeof *out);
  if (err && errlen)
    err[0] = '\0';

  for (i = 1; i < argc; i++) {
    const char *arg = argv[i], *val;
    const struct opt *o;
    int ll;

    if (!strcmp(arg, "--")) {
      i++;
      break;
    }
    if (arg[0] != '-' || arg[1] == '\0')
      break;                            /* the target */
    rc = option_of(arg, &o, &ll, &val, err, errlen);
    if (rc)
      return rc;
    if (o->kind == K_BOOL || o->kind == K_HELP || o->kind == K_VERSION) {
      if (val)
        return err_invalid(err, errlen, "%.*s: does not take a value (got "
                           "'%s')", ll, arg, val);
      /* Stop at once. */
      if (o->kind == K_HELP || o->kind == K_VERSION)
        return parse_stop(&a, o, NULL, out, err, errlen);
      val = "";
    } else if (!val) {
      if (i + 1 >= argc || looks_like_flag(argv[i + 1]))
        return err_invalid(err, errlen, "%.*s: expected a value", ll, arg);
      val = argv[++i];
    }
    if (o->kind == K_COMPLETION) {
      /* Like --help: the rest of the line does not matter. */
      if (!in_list(o->choices, val, strlen(val)))
        return err_invalid(err, errlen, "%.*s: invalid value '%s' (expected "
                           "bash)", ll, arg, val);
      return parse_stop(&a, o, val, out, err, errlen);
    }
    g[o - opts] = (struct given){ val, arg, ll };
  }

  if (i < argc) {
    a.target_argv = argv + i;
    a.target_argc = argc - i;
  }

  rc = resolve(&a, g, env, err, errlen);
  if (!rc && !a.target_argc && !a.print_config)
    rc = err_invalid(err, errlen, "missing the training script (the "
                     "program to run)");
  if (!rc && a.module && a.no_python)
    rc = err_invalid(err, errlen, "--module and --no_python are mutually "
                     "exclusive");
  if (rc) {
    args_free(&a);
    return rc;
  }
  *out = a;
  return 0;
}

void args_free(struct cdrun_args *a)
{
  if (!a)
    return;

  char **strs[] = {
    &a->nproc_per_node, &a->rdzv_backend, &a->rdzv_endpoint, &a->rdzv_id,
    &a->rdzv_conf, &a->start_method, &a->role, &a->log_dir,
    &a->redirects, &a->tee, &a->local_ranks_filter, &a->master_addr,
    &a->local_addr, &a->signals_to_handle, &a->event_log_handler,
    &a->log_line_prefix_template, &a->duplicate_stdout_filters,
    &a->duplicate_stderr_filters, &a->numa_binding, &a->print_completion,
    &a->hostfile, &a->hosts, &a->recovery,
  };

  /* NULL each pointer so that a second call is harmless. */
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    free(*strs[i]);
    *strs[i] = NULL;
  }
}

bool args_describe(const struct cdrun_args *a, size_t i, const char **name,
                   char *val, size_t vlen, enum args_origin *origin,
                   char *envname, size_t envlen)
{
  const struct opt *o;
  const void *f;

  if (i >= NOPTS)
    return false;
  o = &opts[i];
  *name = NULL;
  val[0] = '\0';
  if (o->kind == K_UNSUPPORTED || o->kind == K_HELP || o->kind == K_VERSION)
    return true;
  f = (const char *)a + o->off;
  *name = o->name;
  *origin = (enum args_origin)a->origin[i];
  snprintf(envname, envlen, "PET_%s", o->name);
  for (char *c = envname; *c; c++)
    *c = (char)toupper((unsigned char)*c);
  if (o->kind == K_GRACE && *origin == ARGS_ENV &&
      !getenv(envname))
    snprintf(envname, envlen, "%s", SHUTDOWN_ENV);
  switch (o->kind) {
  case K_NNODES:
    snprintf(val, vlen, "%d:%d", a->nnodes_min, a->nnodes_max);
    break;
  case K_UINT:
  case K_PORT:
    snprintf(val, vlen, "%d", *(const int *)f);
    break;
  case K_POSSEC:
  case K_GRACE:
    snprintf(val, vlen, "%g", *(const double *)f);
    break;
  case K_BOOL:
    snprintf(val, vlen, "%d", *(const bool *)f ? 1 : 0);
    break;
  default:
    snprintf(val, vlen, "%s", *(char *const *)f ? *(char *const *)f : "");
    break;
  }
  return true;
}

enum args_origin args_origin_of(const struct cdrun_args *a,
                                const char *name)
{
  for (size_t i = 0; i < NOPTS; i++)
    if (strcmp(opts[i].name, name) == 0)
      return (enum args_origin)a->origin[i];
  return ARGS_DEFAULT;
}

static const char usage[] =
  "usage: cdrun [options] training_script [training_script_args ...]\n"
  "\n"
  "Starts nproc_per_node workers running training_script on this node and\n"
  "supervises them, like torchrun.  Every option is accepted as --a_b or\n"
  "--a-b, and as --option=VALUE or --option VALUE.\n"
  "A unique prefix of an option names it (--nproc, --max_rest=3).\n"
  "\n"
  "positional arguments:\n"
  "  training_script       the Python script, the module (-m) or the\n"
  "                        program (--no_python) the workers run\n"
  "  training_script_args  passed to every worker untouched, even when they\n"
  "                        look like cdrun options\n"
  "\n"
  "worker / launch options:\n"
  "  --nproc_per_node N    workers on this node: an integer, cpu, gpu or\n"
  "                        auto (default: 1)\n"
  "  --max_restarts N      restarts of the worker group before failing,\n"
  "                        counted per job across nodes (default: 0); a\n"
  "                        crash loop backs off, 1 s doubling to 60 s (env\n"
  "                        CDRUN_RESTART_BACKOFF=INITIAL:MAX:HEALTHY, 0 off)\n"
  "  --recovery MODE       restart (default): a failure restarts every\n"
  "                        worker; live: a failed worker is replaced alone\n"
  "                        and nodes leave or join without stopping the\n"
  "                        others, for workers that opt in (see LIVE\n"
  "                        RECOVERY in cdrun(1))\n"
  "  --role NAME           role name of the workers (default: default)\n"
  "  -m, --module          run the target as a Python module (python -m)\n"
  "  --no_python           exec the target itself, without python\n"
  "  --run_path            run the target like a Python script\n"
  "                        (as torchrun's runpy.run_path)\n"
  "  --monitor_interval S  failures within S of the first are listed with\n"
  "                        it, as one torchrun poll would find them; exits\n"
  "                        are seen at once, never polled (default: 0.1)\n"
  "  --start_method M      spawn, fork or forkserver; accepted for\n"
  "                        compatibility and unused: cdrun always execs a\n"
  "                        program (default: spawn)\n"
  "  --virtual_local_rank  every worker gets LOCAL_RANK=0 and a\n"
  "                        CUDA_VISIBLE_DEVICES naming only its own GPU\n"
  "  --numa_binding MODE   bind each worker's CPUs and memory: node,\n"
  "                        socket, exclusive or core-complex (see\n"
  "                        NUMA BINDING in cdrun(1))\n"
  "\n"
  "hang detection:\n"
  "  --worker_heartbeat_timeout S\n"
  "                        kill a worker (a failure) that has not touched\n"
  "                        its CDRUN_HEARTBEAT_FILE for S seconds; libpg's\n"
  "                        pg_heartbeat() does (default: 0, off)\n"
  "  TORCHELASTIC_ENABLE_FILE_TIMER=1 serves torch's file timer\n"
  "                        (FileTimerClient, expires()) on the FIFO named by\n"
  "                        TORCHELASTIC_TIMER_FILE\n"
  "\n"
  "rendezvous options:\n"
  "  --nnodes N|MIN:MAX    number of nodes, or an elastic range (default: 1)\n"
  "  --standalone          one node, local rendezvous, random rdzv_id;\n"
  "                        --rdzv_backend/--rdzv_endpoint/--rdzv_id and\n"
  "                        --node_rank are ignored\n"
  "  --rdzv_backend NAME   static (default): ranks from --node_rank, no\n"
  "                        elasticity; c10d or rdzvd: the rdzvd rendezvous\n"
  "                        at --rdzv_endpoint (served by this cdrun when the\n"
  "                        endpoint is this host and nothing listens there)\n"
  "                        etcd or etcd-v3: the same rendezvous kept in an\n"
  "                        etcd cluster (v3 API), --rdzv_endpoint=H1:2379,...\n"
  "  --rdzv_endpoint HOST[:PORT]\n"
  "                        rendezvous endpoint, [v6addr]:port for IPv6\n"
  "                        (c10d port 29400; static: MASTER_ADDR:PORT)\n"
  "  --rdzv_id ID          job id shared by all nodes (default: none)\n"
  "  --rdzv_conf K=V,...   join_timeout (600), last_call_timeout (30),\n"
  "                        close_timeout (30), keepalive_interval (1),\n"
  "                        keepalive_misses (5), is_host (auto); torch's\n"
  "                        keep_alive_interval, keep_alive_max_attempt\n"
  "                        name the keepalive ones;\n"
  "                        secret_file (a mode-600 shared secret; env\n"
  "                        CDRUN_RDZV_SECRET_FILE);\n"
  "                        reconnect_timeout (60: seconds to keep the\n"
  "                        workers and reconnect when the rendezvous is\n"
  "                        lost; 0: fail at once; a lost embedded host\n"
  "                        whose job cannot go on without it: one\n"
  "                        keepalive window and 2 s, then exit 75);\n"
  "                        lost_node_grace (30: seconds a fixed-size job\n"
  "                        under srun or --hostfile waits for a lost node,\n"
  "                        then exits 75); etcd: protocol=https,\n"
  "                        cacert, cert, key, user, password_file,\n"
  "                        etcd_prefix (give each job a user whose role\n"
  "                        may read/write only PREFIX/ID/: man cdrun)\n"
  "  --node_rank N         static: this node's rank (default: 0)\n"
  "  --master_addr ADDR    static: address of the rank 0 node\n"
  "                        (default: --local_addr, else 127.0.0.1)\n"
  "  --master_port PORT    static: MASTER_PORT, 1..65535 (default: a free\n"
  "                        port for one node, 29500 for several)\n"
  "  --local_addr ADDR     this node's address, given to the rendezvous and\n"
  "                        used as MASTER_ADDR when it gets rank 0\n"
  "\n"
  "log options:\n"
  "  --log_dir DIR         base directory for worker logs\n"
  "                        (default: a new temporary directory)\n"
  "  -r, --redirects SPEC  send worker output to files in the log directory:\n"
  "                        0 none, 1 stdout, 2 stderr, 3 both, or per local\n"
  "                        rank as 0:1,1:3 (default: 0)\n"
  "  -t, --tee SPEC        like --redirects, but also print to the console\n"
  "                        (default: 0)\n"
  "  --local_ranks_filter RANKS\n"
  "                        show only these local ranks on the console,\n"
  "                        e.g. 0,2 (default: all)\n"
  "  --event_log_handler H null or console (default: null)\n"
  "  --logs_specs NAME     not supported by cdrun (it loads a Python plugin)\n"
  "  --log_line_prefix_template T\n"
  "                        prefix of tee'd console lines, with ${role_name}\n"
  "                        ${local_rank} ${rank} ${hostname}; env\n"
  "                        TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE\n"
  "                        (default: [<role><local_rank>]:)\n"
  "  --duplicate_stdout_filters F1,F2\n"
  "  --duplicate_stderr_filters F1,F2\n"
  "                        tee'd lines of the workers' stdout (stderr) that\n"
  "                        hold any of these strings (,, is a comma) are\n"
  "                        also written, prefixed, to the log directory's\n"
  "                        attempt_<k>/filtered_stdout.log (_stderr.log)\n"
  "\n"
  "signal options:\n"
  "  --signals_to_handle LIST\n"
  "                        signals forwarded to the workers, a comma list\n"
  "                        of SIGTERM SIGINT SIGHUP SIGQUIT SIGUSR1 SIGUSR2\n"
  "                        SIGABRT SIGALRM SIGXCPU\n"
  "                        (default: SIGTERM,SIGINT,SIGHUP,SIGQUIT)\n"
  "  --shutdown_timeout S  grace period in seconds between SIGTERM and\n"
  "                        SIGKILL when stopping the workers; env\n"
  "                        TORCH_ELASTIC_SHUTDOWN_TIMEOUT (default: 30)\n"
  "  A second Ctrl-C (SIGINT) kills the workers at once; a repeated\n"
  "  SIGTERM, or one after another handled signal, does not.\n"
  "\n"
  "Slurm, ssh hosts, Kubernetes (see RUNNING ON CLUSTERS in cdrun(1)):\n"
  "  --print-config        print every setting, its value and where it came\n"
  "                        from (flag, PET_* env, Slurm, default), and exit\n"
  "  --hostfile FILE       start one agent per host of FILE over ssh (one\n"
  "                        host per line, optional slots=N, # comments)\n"
  "  --hosts H1,H2,...     the same with the hosts on the command line\n"
  "  --stdin_watchdog      stop (as on SIGTERM) when stdin closes; the\n"
  "                        head node gives it to every remote agent\n"
  "  Under srun (one task per node) --nnodes, the endpoint, the job id and\n"
  "  --nproc_per_node=gpu come from Slurm's environment; CDRUN_SLURM=0\n"
  "  ignores it.\n"
  "\n"
  "other options:\n"
  "  -h, --help            show this help and exit\n"
  "  --version             show the version and exit\n"
  "  --print_completion bash\n"
  "                        print a bash completion script and exit\n"
  "\n"
  "Every option not on the command line is read from PET_<OPTION> in the\n"
  "environment (PET_NPROC_PER_NODE=4, PET_STANDALONE=1, ...); the command\n"
  "line wins.\n";

const char *args_usage(void)
{
  return usage;
}

const char *args_usage_line(void)
{
  static char line[128];

  snprintf(line, sizeof line, "%.*s", (int)strcspn(usage, "\n"), usage);
  return line;
}

/* The bash completion script: option names in both spellings, the
 * choices of K_CHOICE options, and file names elsewhere. */
int args_print_completion(FILE *out, const char *shell)
{
  if (!shell || strcmp(shell, "bash") != 0)
    return -EINVAL;
  fputs("# bash completion for cdrun (cdrun --print-completion bash)\n"
        "_cdrun()\n{\n"
        "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
        "  local i\n"
        "  # Past the training script everything is its own.\n"
        "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
        "    case ${COMP_WORDS[i]} in\n"
        "      --) return 0 ;;\n"
        "      -*) ;;\n"
        "      =) ;;\n"
        "      *) case ${COMP_WORDS[i-1]} in\n"
        "           =) ;;\n"
        "           ", out);
  /* A word after a flag that takes no value is the training script. */
  for (size_t i = 0, k = 0; i < NOPTS; i++) {
    const struct opt *o = &opts[i];

    if (o->kind != K_BOOL)
      continue;
    fprintf(out, "%s--%s", k++ ? "|" : "", o->name);
    if (strchr(o->name, '_')) {
      fputs("|--", out);
      for (const char *c = o->name; *c; c++)
        fputc(*c == '_' ? '-' : *c, out);
    }
    if (o->shortc)
      fprintf(out, "|-%c", o->shortc);
  }
  fputs(") return 0 ;;\n"
        "           -*) ;;\n"
        "           *) return 0 ;;\n"
        "         esac ;;\n"
        "    esac\n"
        "  done\n"
        "  # --flag=<TAB>: bash split the word at '='.\n"
        "  if [[ $prev == = ]]; then\n"
        "    prev=${COMP_WORDS[COMP_CWORD-2]}\n"
        "  elif [[ $cur == = ]]; then\n"
        "    prev=${COMP_WORDS[COMP_CWORD-1]} cur=\n"
        "  fi\n"
        "  case $prev in\n", out);
  for (size_t i = 0; i < NOPTS; i++) {
    const struct opt *o = &opts[i];
    char dash[64];

    if (o->kind != K_CHOICE && o->kind != K_COMPLETION)
      continue;
    snprintf(dash, sizeof dash, "%s", o->name);
    for (char *c = dash; *c; c++)
      if (*c == '_')
        *c = '-';
    fprintf(out, "    --%s|--%s)\n      COMPREPLY=($(compgen -W \"", o->name,
            dash);
    for (size_t k = 0; o->choices[k]; k++)
      fprintf(out, "%s%s", k ? " " : "", o->choices[k]);
    fputs("\" -- \"$cur\")); return 0 ;;\n", out);
  }
  fputs("    --log[_-]dir) COMPREPLY=($(compgen -d -- \"$cur\")); return 0 ;;\n"
        "  esac\n"
        "  if [[ $cur == -* ]]; then\n"
        "    COMPREPLY=($(compgen -W \"", out);
  for (size_t i = 0; i < NOPTS; i++) {
    const struct opt *o = &opts[i];

    fprintf(out, "%s--%s", i ? " " : "", o->name);
    if (strchr(o->name, '_')) {
      fputs(" --", out);
      for (const char *c = o->name; *c; c++)
        fputc(*c == '_' ? '-' : *c, out);
    }
    if (o->shortc)
      fprintf(out, " -%c", o->shortc);
  }
  fputs("\" -- \"$cur\"))\n"
        "    return 0\n"
        "  fi\n"
        "  COMPREPLY=($(compgen -f -- \"$cur\"))\n"
        "}\n"
        "complete -o filenames -F _cdrun cdrun\n", out);
  return 0;
}
