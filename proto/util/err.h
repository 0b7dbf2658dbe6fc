/* err.h -- the one convention for errors, below every layer.
 *
 * An error is a negative errno value (libuv's codes are the same on Linux,
 * plus its own UV_EAI_* and UV_EOF below UV_OWN_CODES).  A function that
 * can fail with a message takes (char *err, size_t errlen) and fills it
 * with err_set, returning the code; the caller that talks to the user
 * reports the message once, with its context.  err_str is the one way to
 * turn a code into words. */
#ifndef UTIL_ERR_H
#define UTIL_ERR_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>

/* Formats a message into err (size errlen; nothing when err is NULL or
 * errlen is 0) and returns code, so that `return err_set(...)` reports
 * and fails at once. */
int err_set(char *err, size_t errlen, int code, const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));

/* err_set with the arguments in ap (for wrappers of err_set). */
int err_vset(char *err, size_t errlen, int code, const char *fmt,
             va_list ap) __attribute__((format(printf, 4, 0)));

/* The same for the commonest failure: input that is not valid. */
#define err_invalid(err, errlen, ...) \
  err_set(err, errlen, -EINVAL, __VA_ARGS__)

/* The text for a negative errno (libc's wording, "No such file or
 * directory"), or libuv's for its own codes (UV_EOF, UV_EAI_*).  A
 * positive errno is taken as its negative. */
const char *err_str(int code);

#endif
