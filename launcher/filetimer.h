/* filetimer.h -- the agent side of torch's file timer (hang watchdog).
 *
 * With TORCHELASTIC_ENABLE_FILE_TIMER=1 the agent creates a FIFO and tells
 * the workers its path in TORCHELASTIC_TIMER_FILE.  A worker (torch's
 * FileTimerClient / expires(), or any program) opens it O_WRONLY|O_NONBLOCK
 * and writes one JSON object per line, at most PIPE_BUF bytes:
 *
 *   {"version": 1, "pid": 4242, "scope_id": "all_reduce step 812",
 *    "expiration_time": 1790000030.5, "signal": 9}
 *
 * expiration_time is wall-clock epoch seconds; a negative one releases the
 * (pid, scope_id) timer.  When a timer expires, the owner learns of it once
 * (the earliest expired timer of that pid with a signal > 0) and every
 * timer of that pid is dropped, as torch's FileTimerServer does.
 *
 * Bounded: a line that is not such an object, or is longer than
 * FILETIMER_MAX_LINE, is ignored with a warning (at most
 * FILETIMER_MAX_WARNINGS of them are printed); at most max_timers timers
 * are held, further ones are refused with a warning. */
#ifndef CDRUN_FILETIMER_H
#define CDRUN_FILETIMER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

#define FILETIMER_MAX_LINE 4096     /* PIPE_BUF on Linux */
#define FILETIMER_MAX_SCOPE 255
#define FILETIMER_DEFAULT_MAX 1024
#define FILETIMER_MAX_WARNINGS 20

/* One request, or one held timer. */
struct filetimer_request {
  pid_t pid;
  char scope_id[FILETIMER_MAX_SCOPE + 1];
  double expiration_time;       /* epoch seconds; < 0: release */
  int signal;                   /* 0: expire without a signal */
  double received;              /* epoch seconds the agent read it */
};

/* Parses one line (without its newline).  Returns 0, or -EINVAL with the
 * reason in err. */
int filetimer_parse(const char *line, size_t len,
                    struct filetimer_request *out, char *err,
                    size_t errlen);

/* Called for an expired timer; the callee decides whether and how to send
 * its signal (the agent checks that pid is one of its workers). */
typedef void (*filetimer_expired_cb)(void *ctx,
                                     const struct filetimer_request *t);

struct filetimer;

/* A timer table without I/O (filetimer_feed and filetimer_expire drive
 * it).  max_timers 0 means FILETIMER_DEFAULT_MAX.  NULL when out of
 * memory. */
struct filetimer *filetimer_new(size_t max_timers, filetimer_expired_cb cb,
                                void *ctx);

/* Bytes read from the FIFO, in any chunks; now is the epoch time. */
void filetimer_feed(struct filetimer *t, const char *buf, size_t len,
                    double now);

/* Reports every pid with a timer expired at now, and drops its timers. */
void filetimer_expire(struct filetimer *t, double now);

/* The earliest expiration held, or a negative number when none. */
double filetimer_next(const struct filetimer *t);

size_t filetimer_count(const struct filetimer *t);

/* Drops the timers of pid (a worker that exited), or all (pid 0). */
void filetimer_clear(struct filetimer *t, pid_t pid);

/* Creates the FIFO at path (an existing FIFO there is replaced; anything
 * else is an error, -EEXIST), opens it O_RDWR|O_NONBLOCK (so the agent is
 * always a reader and there is always a writer: no EOF, no ENXIO for the
 * workers) and serves it on loop: requests as they arrive, expirations
 * from a timer armed for the earliest one.  Returns 0 or a negative
 * errno. */
int filetimer_listen(struct filetimer *t, uv_loop_t *loop, const char *path);

/* Stops serving, removes the FIFO, and frees t once its handles are
 * closed (the loop must run once more).  t may be NULL. */
void filetimer_close(struct filetimer *t);

#endif
