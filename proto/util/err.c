/* err.c -- see err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <uv.h>

/* libuv's codes that are not errno values: UV_EAI_* from here down. */
#define UV_OWN_CODES (-3000)

int err_vset(char *err, size_t errlen, int code, const char *fmt,
             va_list ap)
{
  if (err && errlen)
    vsnprintf(err, errlen, fmt, ap);
  return code;
}

int err_set(char *err, size_t errlen, int code, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  code = err_vset(err, errlen, code, fmt, ap);
  va_end(ap);
  return code;
}

const char *err_str(int code)
{
  if (code <= UV_OWN_CODES)
    return uv_strerror(code);
  return strerror(code < 0 ? -code : code);
}
