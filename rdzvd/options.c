/* options.c -- see options.h. */
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "num.h"
#include "rdzv_proto.h"

/* The most seconds any duration flag takes: num.h's bound. */
#define MAX_SECS NUM_SECONDS_MAX
/* Byte counts beyond this are typing mistakes (1 PiB). */
#define MAX_SIZE ((size_t)1 << 50)

enum flag_kind { F_STR, F_INT, F_SIZE, F_SECS };

/* One flag that takes a value: its name as matched (with '_'), as named
 * in messages, and where its value goes. */
struct flag {
  const char *name;
  const char *shown;            /* NULL: "--" name */
  enum flag_kind kind;
  void *dst;                    /* const char **, int *, size_t *, double * */
  long lo, hi;                  /* F_INT's bounds */
};

/* argv[*i] is --name=value or --name (then the value is the next
 * argument), '-' and '_' alike.  Returns 1 with *v set, 0 when it is
 * another flag, or -EINVAL when the value is missing. */
static int flag_value(int argc, char **argv, int *i, const char *name,
                      const char **v, char *err, size_t errlen)
{
  const char *a = argv[*i];
  size_t n = strlen(name);
  size_t k;

  if (strncmp(a, "--", 2) != 0)
    return 0;
  a += 2;
  for (k = 0; k < n; k++) {
    char c = a[k], want = name[k];

    if (c == '-')
      c = '_';
    if (c != want)
      return 0;
  }
  if (a[n] == '=') {
    *v = a + n + 1;
    return 1;
  }
  if (a[n] != '\0')
    return 0;
  if (*i + 1 >= argc)
    return err_invalid(err, errlen, "--%s: expected a value", name);
  *v = argv[++*i];
  return 1;
}

/* v as the flag's value, into f->dst. */
static int flag_set(const struct flag *f, const char *v, char *err,
                    size_t errlen)
{
  char shown[64];
  long l;
  double d;

  snprintf(shown, sizeof shown, "%s%s", f->shown ? "" : "--",
           f->shown ? f->shown : f->name);
  switch (f->kind) {
  case F_STR:
    *(const char **)f->dst = v;
    return 0;
  case F_INT:
    if (num_parse_long(v, f->lo, f->hi, &l))
      return err_invalid(err, errlen, "%s: invalid value '%s' (expected an "
                         "integer %ld..%ld)", shown, v, f->lo, f->hi);
    *(int *)f->dst = (int)l;
    return 0;
  case F_SIZE:
    if (num_parse_size(v, 1, MAX_SIZE, f->dst))
      return err_invalid(err, errlen, "%s: invalid size '%s' (expected a "
                         "positive byte count, optionally with K, M or G)",
                         shown, v);
    return 0;
  case F_SECS:
    if (num_parse_double(v, 0, MAX_SECS, &d) || !(d > 0))
      return err_invalid(err, errlen, "%s: invalid duration '%s' (expected "
                         "seconds, > 0 and <= 1e7)", shown, v);
    *(double *)f->dst = d;
    return 0;
  }
  return -EINVAL;
}

/* A switch without a value: 1 when argv[i] is one (and o is set). */
static int switch_set(const char *a, struct options *o)
{
  if (strcmp(a, "--json") == 0)
    o->json = true;
  else if (strcmp(a, "--quiet") == 0)
    o->quiet = true;
  else if (strcmp(a, "--version") == 0)
    o->action = OPTIONS_VERSION;
  else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
    o->action = OPTIONS_HELP;
  else
    return 0;
  return 1;
}

int options_parse(int argc, char **argv, struct options *o, char *err,
                  size_t errlen)
{
  struct rdzvd_server_opts *s = &o->server;
  const struct flag flags[] = {
    { "host", NULL, F_STR, &s->host, 0, 0 },
    { "port", NULL, F_INT, &s->port, 0, 65535 },
    { "max_jobs", NULL, F_INT, &s->limits.max_jobs, 1, 10000000 },
    { "max_jobs_per_peer", NULL, F_INT, &s->limits.max_jobs_per_peer, 1,
      10000000 },
    { "max_waiting_per_peer", NULL, F_INT, &s->limits.max_waiting_per_peer,
      1, 10000000 },
    { "metrics", NULL, F_STR, &o->metrics_ep, 0, 0 },
    { "log_file", NULL, F_STR, &o->log_path, 0, 0 },
    { "secret_file", NULL, F_STR, &o->secret_file, 0, 0 },
    { "token_key_file", NULL, F_STR, &o->token_key_file, 0, 0 },
    { "max_conns", NULL, F_INT, &s->io.max_conns, 1, 10000000 },
    { "max_conns_per_peer", NULL, F_INT, &s->io.max_conns_per_peer, 1,
      10000000 },
    { "hello_timeout", NULL, F_SECS, &s->io.hello_timeout, 0, 0 },
    { "metrics_header_timeout", NULL, F_SECS, &o->metrics_header_timeout,
      0, 0 },
    { "prejoin_frame_max", NULL, F_SIZE, &s->io.prejoin_frame, 0, 0 },
    { "input_budget", NULL, F_SIZE, &s->io.input_budget, 0, 0 },
    { "output_budget", NULL, F_SIZE, &s->io.output_budget, 0, 0 },
    { "conn_output_max", NULL, F_SIZE, &s->io.conn_output, 0, 0 },
    { "kv_budget", NULL, F_SIZE, &s->limits.max_kv_total, 0, 0 },
    { "max_join_timeout", NULL, F_SECS, &s->limits.max_join_timeout, 0, 0 },
    { "max_last_call", NULL, F_SECS, &s->limits.max_last_call, 0, 0 },
    { "max_close_timeout", NULL, F_SECS, &s->limits.max_close_timeout,
      0, 0 },
    { "max_keepalive", NULL, F_SECS, &s->limits.max_keepalive, 0, 0 },
    { "resume_grace", "--resume-grace", F_SECS, &s->limits.resume_grace,
      0, 0 },
    { "job", NULL, F_STR, &o->status_job, 0, 0 },
    { "limit", NULL, F_INT, &o->status_limit, 1, RDZV_PROTO_MAX_STATUS_JOBS },
    { "status", NULL, F_STR, &o->status, 0, 0 },
  };
  size_t k, nflags = sizeof flags / sizeof flags[0];
  const char *v = NULL;
  int i, rc = 0;

  memset(o, 0, sizeof *o);
  s->port = 29400;
  o->secret_file = getenv("RDZVD_SECRET_FILE");
  o->token_key_file = getenv("RDZVD_TOKEN_KEY_FILE");
  for (i = 1; i < argc; i++) {
    for (k = 0; k < nflags; k++) {
      rc = flag_value(argc, argv, &i, flags[k].name, &v, err, errlen);
      if (rc)
        break;
    }
    if (rc < 0)
      return rc;
    if (rc > 0) {
      rc = flag_set(&flags[k], v, err, errlen);
      if (rc)
        return rc;
      if (flags[k].dst == &o->status_job &&
          (!*v || strlen(v) > RDZV_PROTO_MAX_ID))
        return err_invalid(err, errlen, "--job: expected a job id of 1 to "
                           "%d bytes", RDZV_PROTO_MAX_ID);
      continue;
    }
    if (!switch_set(argv[i], o))
      return err_invalid(err, errlen, "unrecognized argument '%s'",
                         argv[i]);
    if (o->action != OPTIONS_SERVE)
      return 0;                 /* --help, --version: nothing else */
  }
  if (o->status)
    o->action = OPTIONS_STATUS;
  return 0;
}
