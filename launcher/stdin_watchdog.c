/* stdin_watchdog.c -- the remote agent's end of the head's ssh link
 * (stdin_watchdog.h; Notes [remote lifetime] and [dead links] in
 * multihost.c).
 *
 * A thread of its own, not the agent's loop: it starts before the loop
 * exists, and what it does at the end is to signal the agent, which then
 * stops its workers exactly as on a SIGTERM from the user. */
#include "stdin_watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "num.h"
#include "say.h"

static int watchdog_fd = -1;
static double watchdog_window;  /* CDRUN_HEAD_BEAT; 0: EOF only */

static void *watch(void *arg)
{
  struct pollfd pf = { .fd = watchdog_fd, .events = POLLIN };
  int ms = watchdog_window > 0 ? (int)(watchdog_window * 1000) : -1;
  char buf[256];
  ssize_t n;
  int rc;

  (void)arg;
  for (;;) {
    /* Note [dead links] (multihost.c): the head beats every keepalive
     * interval. */
    rc = poll(&pf, 1, ms);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc == 0) {
      say("no word from the head node for %g s (%s; its link or machine "
          "is down?): stopping", watchdog_window, STDIN_WATCHDOG_BEAT_ENV);
      kill(getpid(), SIGTERM);
      return NULL;
    }
    n = read(watchdog_fd, buf, sizeof buf);
    if (n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN)))
      continue;
    break;
  }
  say("stdin closed (the head node or its connection is gone): stopping");
  kill(getpid(), SIGTERM);
  return NULL;
}

int stdin_watchdog_start(void)
{
  pthread_t t;
  pthread_attr_t attr;
  const char *beat;
  int fd, null, rc;

  fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) {
    int err = -errno;

    say_error("--stdin_watchdog: no stdin: %s", say_strerror(err));
    return err;
  }
  /* The workers must not read (or hold) the head's pipe. */
  null = open("/dev/null", O_RDONLY);
  if (null >= 0) {
    dup2(null, 0);
    close(null);
  }
  watchdog_fd = fd;
  /* Set by a head that beats (Note [dead links], multihost.c); a bad
   * value is none. */
  beat = getenv(STDIN_WATCHDOG_BEAT_ENV);
  if (!beat || num_parse_double(beat, 0.5, NUM_SECONDS_MAX,
                                &watchdog_window))
    watchdog_window = 0;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  rc = pthread_create(&t, &attr, watch, NULL);
  pthread_attr_destroy(&attr);
  if (rc) {
    say_error("--stdin_watchdog: cannot start a thread: %s",
              say_strerror(-rc));
    return -rc;
  }
  return 0;
}
