/* say.c -- one-write messages on stderr. */
#include "say.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

void say(const char *fmt, ...)
{
  char buf[1024];
  va_list ap;
  int n;

  n = snprintf(buf, sizeof buf, "cdrun: ");
  va_start(ap, fmt);
  n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof buf - 2)
    n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  if (write(2, buf, (size_t)n) < 0) {
    /* Nothing better to do when stderr is gone. */
  }
}
