/* logs.h -- torchrun's log options and layout: the redirect/tee specs,
 * the rank filter, the duplicate filters (the log folders are
 * logdir.h's).  Where a
 * worker's output goes at run time is output.h's. */
#ifndef CDRUN_LOGS_H
#define CDRUN_LOGS_H

#include <stdbool.h>
#include <stddef.h>

/* Bits of a redirect or tee spec, as torchrun's Std enum. */
enum {
  LOGS_STDOUT = 1,
  LOGS_STDERR = 2,
};

/* Parses a --redirects / --tee value for nproc local ranks into
 * mask[0..nproc-1] (each 0..3).  Accepts "N" (0..3, same for every rank)
 * and "lr:N,lr:N" (ranks not named get 0).  Returns 0, or -EINVAL with a
 * message naming the bad part in err. */
int logs_parse_std_spec(const char *spec, int nproc, unsigned char *mask,
                        char *err, size_t errlen);

/* Parses --local_ranks_filter ("0,2,3") into keep[0..nproc-1] (true = the
 * rank reaches the console).  NULL or "" keeps every rank.  A rank outside
 * 0..nproc-1 or a malformed list gives -EINVAL and a message in err. */
int logs_parse_ranks_filter(const char *spec, int nproc, bool *keep,
                            char *err, size_t errlen);

/* --duplicate_stdout_filters / --duplicate_stderr_filters: splits "a,b"
 * into a NULL-terminated heap array of filters, ",," standing for a
 * literal comma; empty filters are dropped (one would match every line).
 * NULL or "" gives NULL (no filter).  *err is set to -ENOMEM when out of
 * memory (NULL returned), else 0.  Free with logs_filters_free. */
char **logs_parse_filters(const char *spec, int *err);

void logs_filters_free(char **filters);

/* True when line[0..len) contains any of the filters. */
bool logs_filter_match(char *const *filters, const char *line, size_t len);

#endif
