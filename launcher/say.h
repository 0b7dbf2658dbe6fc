/* say.h -- the launcher's messages to the user.
 *
 * Errors follow proto/util/err.h: a function that can fail with a message
 * fills (char *err, size_t errlen) with err_set and returns the negative
 * errno; the caller that talks to the user prints it once, with say or
 * say_error. */
#ifndef CDRUN_SAY_H
#define CDRUN_SAY_H

#include <stddef.h>

/* Prints "cdrun: <message>\n" on stderr in one write(2), so that it never
 * interleaves with tee'd worker lines (long messages are cut at 1 KiB).
 * The message is one line: control bytes in it are escaped ("\n",
 * "\x1b": peer_text.h), since it may quote what a peer sent. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The same as "cdrun: error: <message>": a user error. */
void say_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The text for a negative errno (libc's wording, "No such file or
 * directory"), or libuv's for its own codes (UV_EOF, UV_EAI_*). */
const char *say_strerror(int err);

#endif
