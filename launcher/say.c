/* say.c -- one-write messages on stderr; see say.h. */
#include "say.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

/* libuv's codes that are not errno values: UV_EAI_* from here down. */
#define UV_OWN_CODES (-3000)

static void vsay(const char *prefix, const char *fmt, va_list ap)
{
  char buf[1024];
  int n;

  n = snprintf(buf, sizeof buf, "cdrun: %s", prefix);
  n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  if (n > (int)sizeof buf - 2)
    n = (int)sizeof buf - 2;
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

int say_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
  va_list ap;

  if (err && errlen) {
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

const char *say_strerror(int err)
{
  if (err <= UV_OWN_CODES)
    return uv_strerror(err);
  return strerror(err < 0 ? -err : err);
}
