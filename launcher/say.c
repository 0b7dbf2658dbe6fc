/* say.c -- one-write messages on stderr; see say.h. */
#include "say.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "peer_text.h"

/* The message is escaped (peer_text.h): it may quote what the rendezvous
 * server or a peer sent (a restart reason, an error), and that must not
 * forge lines or reach the terminal as control bytes. */
static void vsay(const char *prefix, const char *fmt, va_list ap)
{
  char msg[1024], buf[1024];
  int n;

  vsnprintf(msg, sizeof msg, fmt, ap);
  n = snprintf(buf, sizeof buf, "cdrun: %s", prefix);
  n += (int)peer_text_escape(buf + n, sizeof buf - (size_t)n - 1, msg,
                             strlen(msg), 0);
  buf[n++] = '\n';
  if (write(2, buf, (size_t)n) < 0) {
    /* Nothing better to do when stderr is gone. */
  }
}

void say(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vsay("", fmt, ap);
  va_end(ap);
}

void say_error(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vsay("error: ", fmt, ap);
  va_end(ap);
}

const char *say_strerror(int err)
{
  return err_str(err);
}
