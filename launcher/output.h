/* output.h -- a worker's output, from its fd to where the user reads it.
 *
 * Each of a worker's two streams goes where torchrun's options say
 * (logs.h parses them): inherited from cdrun (the console), into its log
 * file (--redirects), to /dev/null (--local_ranks_filter), or tee'd
 * (--tee): then the worker writes into a pipe that the agent's loop reads
 * as bytes arrive; the bytes are copied to the log file as they come, and
 * cut into whole lines, each prefixed ("[default0]:") and written to the
 * console in one write(2), so lines of different workers never split or
 * interleave; lines that match --duplicate_*_filters also go, prefixed,
 * to the attempt's filtered_std{out,err}.log.
 *
 * Everything runs on the caller's libuv loop; nothing here blocks but the
 * final drain (output_stream_drain_close) and a console written in place
 * (without a conqueue.h queue).  A stream tells its owner once,
 * through a callback, that its pipe is closed: that and the line sink are
 * the only calls out of this file. */
#ifndef CDRUN_OUTPUT_H
#define CDRUN_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

/* What decides where the workers' streams go, per local rank: the
 * agent's options (agent.h), borrowed for the agent's run. */
struct output_conf {
  const unsigned char *redirects; /* per local rank, LOGS_STDOUT|STDERR */
  const unsigned char *tee;       /* per local rank */
  const bool *console;            /* per local rank: may reach the console */
  const char *prefix_template;    /* NULL: "[<role><local_rank>]:" */
  const char *role;
  char *const *stdout_filters;    /* --duplicate_stdout_filters or NULL */
  char *const *stderr_filters;
};

/* ---- line prefixes and the line assembler ------------------------------ */

/* Expands a line prefix template such as TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
 * ("${role_name}", "${local_rank}", "${rank}", "${hostname}" are replaced)
 * into out.
 * A NULL template gives torchrun's default "[<role><local_rank>]:".
 * Returns the length written (always NUL-terminated, truncated to outlen). */
size_t output_format_prefix(const char *tmpl, const char *role, int local_rank,
                            int rank, char *out, size_t outlen);

/* A line assembler: bytes come in arbitrary chunks, whole lines go out,
 * each prefixed, through one call of the sink (so one write(2) per line and
 * lines never split or interleave).  A line longer than the cap is emitted
 * in cap-sized pieces, each prefixed and newline-terminated. */
struct output_liner;

typedef void (*output_sink_fn)(void *ctx, const char *buf, size_t len);

/* Creates a liner that calls sink(ctx, "<prefix><line>\n", len) per line.
 * Returns NULL when out of memory. */
struct output_liner *output_liner_new(const char *prefix, size_t cap,
                                      output_sink_fn sink, void *ctx);

/* Feeds len bytes. */
void output_liner_feed(struct output_liner *l, const char *buf, size_t len);

/* Emits a final unterminated line (with a newline added), if any. */
void output_liner_flush(struct output_liner *l);

void output_liner_free(struct output_liner *l);

/* ---- one stream of one worker ------------------------------------------ */

/* Called once, on the loop, when a tee'd stream's pipe is closed (every
 * writer is gone, or output_stream_drain_close). */
typedef void (*output_closed_fn)(void *ctx);

enum output_stream_state {
  OUTPUT_NONE,                  /* no pipe: nothing to wait for */
  OUTPUT_OPEN,                  /* reading the worker's pipe */
  OUTPUT_CLOSING,               /* the pipe's close callback is due */
};

/* Embedded in its owner (the agent's worker); the fields are private. */
struct conqueue;

struct output_stream {
  uv_pipe_t pipe;
  enum output_stream_state state;
  int file_fd;                  /* -1: no file */
  int console_fd;               /* -1: not shown */
  struct conqueue *console_q;   /* NULL: written in place */
  struct output_liner *liner;
  /* --duplicate_*_filters: matching lines, prefixed, to filtered_fd. */
  char *const *filters;
  struct output_liner *filter_liner;
  int filtered_fd;              /* -1: no filter */
  size_t prefix_len;
  output_closed_fn closed;
  void *ctx;
};

/* Decides where the stream bit (LOGS_STDOUT or LOGS_STDERR) of worker
 * local_rank (global rank `rank`, log folder dir: attempt_<k>/<local_rank>,
 * which exists) goes, and prepares it.  console: the queue of the
 * console's fd for that stream (Note [console queue], conqueue.h), or
 * NULL to write tee'd lines to it in place (which may block the loop).  *child_fd receives the fd to give
 * the worker (-1: inherit cdrun's); *close_after an fd to close once the
 * worker has started (-1: none), so that EOF on a pipe comes from the
 * worker's side only.
 * Returns 1 when the stream is tee'd: it is read on loop from now on, and
 * closed(ctx) is called once when it is closed; 0 when there is nothing to
 * read (closed is never called); or a negative errno, with nothing left
 * open. */
int output_stream_open(struct output_stream *s, uv_loop_t *loop,
                       const struct output_conf *c, int bit, int local_rank,
                       int rank, const char *dir, struct conqueue *console,
                       output_closed_fn closed, void *ctx, int *child_fd,
                       int *close_after);

/* Reads what is left in an open stream's pipe without blocking, then
 * closes it (closed(ctx) follows from the loop): for a pipe that a
 * straggler outside the worker's group keeps open, and at the agent's
 * end.  Nothing happens for a stream that is not open. */
void output_stream_drain_close(struct output_stream *s);

#endif
