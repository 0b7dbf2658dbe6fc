/* signames.h -- signal names as Python's signal.Signals spells them (the
 * failure summary, --signals_to_handle, the agent's messages). */
#ifndef CDRUN_SIGNAMES_H
#define CDRUN_SIGNAMES_H

#include <stddef.h>

/* "SIGKILL" for 9 etc.; for a number not in the table, glibc's
 * abbreviation ("SIGPWR") or "SIG<n>" written to buf (at most buflen
 * bytes), or "SIG?" without a buffer.  Never NULL. */
const char *sig_name(int signum, char *buf, size_t buflen);

/* The number of the signal named name[0..len) ("SIGTERM"), or -1. */
int sig_number(const char *name, size_t len);

#endif
