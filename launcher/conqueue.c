/* conqueue.c -- see Note [console queue] in conqueue.h. */
#include "conqueue.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "monotime.h"

struct conqueue {
  int fd;
  size_t bound;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t more;          /* to the writer: lines, or stop */
  pthread_cond_t progress;      /* to close: bytes written, or drained */
  /* under mu: */
  char *buf;                    /* queued, not yet taken by the writer */
  size_t len, cap;
  uint64_t lines;               /* queued or being written */
  uint64_t dropped, reported;
  bool writing;                 /* the writer holds a batch */
  bool stop;
  bool gone;                    /* the console failed (EPIPE): drop all */
  double last_progress;         /* monotime_now() */
};

static size_t count_lines(const char *p, size_t n)
{
  size_t k = 0;
  const char *e = p + n;

  while (p < e && (p = memchr(p, '\n', (size_t)(e - p)))) {
    k++;
    p++;
  }
  return k;
}

/* false: the console failed for good. */
static bool write_all(int fd, const char *p, size_t n)
{
  while (n > 0) {
    ssize_t w = write(fd, p, n);

    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

static void *writer(void *arg)
{
  struct conqueue *q = arg;
  char *batch = NULL;
  size_t batch_cap = 0;

  pthread_mutex_lock(&q->mu);
  for (;;) {
    char note[96];
    size_t n, lines;
    uint64_t report = 0;
    bool ok;
    char *t;

    while (!q->len && !q->stop && q->dropped == q->reported)
      pthread_cond_wait(&q->more, &q->mu);
    if (!q->len && q->stop && q->dropped == q->reported)
      break;
    /* Take the whole queue: the loop goes on filling a fresh one. */
    t = batch;
    batch = q->buf;
    n = q->len;
    q->buf = t;
    t = NULL;
    {
      size_t c = batch_cap;

      batch_cap = q->cap;
      q->cap = c;
    }
    q->len = 0;
    q->writing = true;
    if (!n && q->dropped != q->reported) {
      report = q->dropped - q->reported;
      q->reported = q->dropped;
    }
    pthread_mutex_unlock(&q->mu);
    ok = !n || write_all(q->fd, batch, n);
    if (ok && report) {
      /* Drained after drops: say how many, on the console itself. */
      int k = snprintf(note, sizeof note, "cdrun: the console did not keep "
                       "up: %llu line%s dropped\n", (unsigned long long)report,
                       report == 1 ? "" : "s");
      ok = write_all(q->fd, note, (size_t)k);
    }
    lines = count_lines(batch, n);
    pthread_mutex_lock(&q->mu);
    q->writing = false;
    q->lines -= lines < q->lines ? lines : q->lines;
    q->last_progress = monotime_now();
    if (!ok)
      q->gone = true;
    pthread_cond_broadcast(&q->progress);
    if (q->gone) {
      q->dropped += q->lines;
      q->reported = q->dropped;
      q->lines = 0;
      q->len = 0;
    }
  }
  pthread_mutex_unlock(&q->mu);
  free(batch);
  return NULL;
}

int conqueue_create(int fd, size_t bound, struct conqueue **out)
{
  struct conqueue *q = calloc(1, sizeof *q);
  sigset_t all, old;
  int err;

  if (!q)
    return -ENOMEM;
  q->fd = fd;
  q->bound = bound ? bound : CONQUEUE_DEFAULT_BOUND;
  q->last_progress = monotime_now();
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->more, NULL);
  pthread_cond_init(&q->progress, NULL);
  /* Signals stay the loop thread's (libuv's handlers). */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  err = pthread_create(&q->thread, NULL, writer, q);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err) {
    pthread_cond_destroy(&q->progress);
    pthread_cond_destroy(&q->more);
    pthread_mutex_destroy(&q->mu);
    free(q);
    return -err;
  }
  *out = q;
  return 0;
}

void conqueue_put(struct conqueue *q, const char *buf, size_t len)
{
  pthread_mutex_lock(&q->mu);
  if (q->gone || q->len + len > q->bound) {
    q->dropped += !q->gone;
  } else {
    if (q->len + len > q->cap) {
      size_t cap = q->cap ? q->cap : 4096;
      char *p;

      while (cap < q->len + len)
        cap *= 2;
      if (cap > q->bound)
        cap = q->bound;
      p = realloc(q->buf, cap);
      if (!p) {
        q->dropped++;
        pthread_mutex_unlock(&q->mu);
        return;
      }
      q->buf = p;
      q->cap = cap;
    }
    memcpy(q->buf + q->len, buf, len);
    q->len += len;
    q->lines += count_lines(buf, len);
    if (q->len == len)
      pthread_cond_signal(&q->more);
  }
  pthread_mutex_unlock(&q->mu);
}

uint64_t conqueue_dropped(struct conqueue *q)
{
  uint64_t d;

  pthread_mutex_lock(&q->mu);
  d = q->dropped;
  pthread_mutex_unlock(&q->mu);
  return d;
}

uint64_t conqueue_close(struct conqueue *q, double stall_s)
{
  uint64_t dropped;
  bool drained;

  if (!q)
    return 0;
  pthread_mutex_lock(&q->mu);
  q->stop = true;
  pthread_cond_signal(&q->more);
  /* A writer that finished a batch counts as progress from now. */
  if (!q->writing)
    q->last_progress = monotime_now();
  while ((q->len || q->writing || q->dropped != q->reported) && !q->gone &&
         monotime_now() < q->last_progress + stall_s) {
    struct timespec ts;
    double until = q->last_progress + stall_s - monotime_now();

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)until;
    ts.tv_nsec += (long)((until - (double)(time_t)until) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&q->progress, &q->mu, &ts);
  }
  drained = !q->len && !q->writing;
  dropped = q->dropped + (drained ? 0 : q->lines);
  pthread_mutex_unlock(&q->mu);
  if (!drained) {
    /* The writer is stuck in write(2) on a console that stopped reading:
     * it and q stay behind, and go with the process. */
    pthread_detach(q->thread);
    return dropped;
  }
  pthread_join(q->thread, NULL);
  free(q->buf);
  pthread_cond_destroy(&q->progress);
  pthread_cond_destroy(&q->more);
  pthread_mutex_destroy(&q->mu);
  free(q);
  return dropped;
}
