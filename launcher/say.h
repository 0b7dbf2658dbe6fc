/* say.h -- the launcher's messages to the user. */
#ifndef CDRUN_SAY_H
#define CDRUN_SAY_H

/* Prints "cdrun: <message>\n" on stderr in one write(2), so that it never
 * interleaves with tee'd worker lines (long messages are cut at 1 KiB). */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
