/* options.h -- rdzvd's command line: what the daemon (or its status
 * query) is asked to do.
 *
 * Every flag takes --flag=value and --flag value, with - or _ spellings
 * (--max-jobs, --max_jobs).  Parsing only reads: it opens no file and
 * exits nothing; a bad argument is a message in err and -EINVAL, which
 * main reports once (exit status 2). */
#ifndef RDZVD_OPTIONS_H
#define RDZVD_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "server.h"

enum options_action {
  OPTIONS_SERVE,                /* run the daemon */
  OPTIONS_STATUS,               /* --status: query a running daemon */
  OPTIONS_HELP,                 /* -h, --help */
  OPTIONS_VERSION,              /* --version */
};

struct options {
  enum options_action action;
  /* The server's address, port (29400 unless set) and limits; the rest of
   * it (secret, log, metrics) is main's to fill. */
  struct rdzvd_server_opts server;
  bool quiet;
  const char *metrics_ep;       /* --metrics HOST:PORT; NULL: none */
  double metrics_header_timeout;  /* 0: the default */
  const char *log_path;         /* --log-file; NULL: stderr */
  /* --secret-file, --token-key-file; default $RDZVD_SECRET_FILE,
   * $RDZVD_TOKEN_KEY_FILE.  NULL or "": none. */
  const char *secret_file, *token_key_file;
  /* --status HOST[:PORT] and its --json, --job ID, --limit N (0: the
   * daemon's default). */
  const char *status, *status_job;
  bool json;
  int status_limit;
};

/* Fills o from argv[1..argc) (the strings are argv's, not copied) and the
 * environment.  Stops at -h/--help or --version.  Returns 0, or -EINVAL
 * with a message in err ("--port: invalid value 'x' (expected an integer
 * 0..65535)"). */
int options_parse(int argc, char **argv, struct options *o, char *err,
                  size_t errlen);

#endif
