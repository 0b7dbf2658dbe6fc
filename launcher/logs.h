/* logs.h -- torchrun's log layout, redirect/tee specs and line prefixes. */
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

/* Expands a line prefix template such as TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
 * ("${role_name}", "${local_rank}", "${rank}", "${hostname}" are replaced)
 * into out.
 * A NULL template gives torchrun's default "[<role><local_rank>]:".
 * Returns the length written (always NUL-terminated, truncated to outlen). */
size_t logs_format_prefix(const char *tmpl, const char *role, int local_rank,
                          int rank, char *out, size_t outlen);

/* --duplicate_stdout_filters / --duplicate_stderr_filters: splits "a,b"
 * into a NULL-terminated heap array of filters, ",," standing for a
 * literal comma; empty filters are dropped (one would match every line).
 * NULL or "" gives NULL (no filter).  *err is set to -ENOMEM when out of
 * memory (NULL returned), else 0.  Free with logs_filters_free. */
char **logs_parse_filters(const char *spec, int *err);

void logs_filters_free(char **filters);

/* True when line[0..len) contains any of the filters. */
bool logs_filter_match(char *const *filters, const char *line, size_t len);

/* A line assembler: bytes come in arbitrary chunks, whole lines go out,
 * each prefixed, through one call of the sink (so one write(2) per line and
 * lines never split or interleave).  A line longer than the cap is emitted
 * in cap-sized pieces, each prefixed and newline-terminated. */
struct logs_liner;

typedef void (*logs_sink_fn)(void *ctx, const char *buf, size_t len);

/* Creates a liner that calls sink(ctx, "<prefix><line>\n", len) per line.
 * Returns NULL when out of memory. */
struct logs_liner *logs_liner_new(const char *prefix, size_t cap,
                                  logs_sink_fn sink, void *ctx);

/* Feeds len bytes. */
void logs_liner_feed(struct logs_liner *l, const char *buf, size_t len);

/* Emits a final unterminated line (with a newline added), if any. */
void logs_liner_flush(struct logs_liner *l);

void logs_liner_free(struct logs_liner *l);

/* Creates dir and its parents (mode 0755); existing directories are fine.
 * Returns 0 or a negative errno. */
int logs_mkdirs(const char *dir);

/* Removes a directory tree (used for a reused attempt_<k> folder and for
 * the temporary log dir).  Returns 0 or a negative errno. */
int logs_rmtree(const char *dir);

#endif
