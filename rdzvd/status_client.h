/* status_client.h -- `rdzvd --status host[:port]`: ask a running rdzvd
 * what it knows and print it. */
#ifndef RDZVD_STATUS_CLIENT_H
#define RDZVD_STATUS_CLIENT_H

#include <stdbool.h>

#include "rdzv_auth.h"

/* Connects to endpoint ("host", "host:port", "[v6]:port"; port 29400 by
 * default), authenticates when secret is not empty, sends STATUS, prints
 * the reply (a table with a notice of what was left out, or the JSON when
 * json), and returns the process exit status (0, or 1 with a message on
 * stderr). */
/* job: NULL or "" for a summary of the first limit jobs (0: the
 * daemon's default), else that job with its nodes. */
int status_query(const char *endpoint, bool json, const char *job,
                 int limit, const struct rdzv_auth_secret *secret);

#endif
