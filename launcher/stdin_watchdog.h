/* stdin_watchdog.h -- `cdrun --stdin_watchdog`, the remote side of a head
 * node's agents over ssh (multihost.h): the agent stops, as on SIGTERM,
 * when its stdin (the head's pipe through ssh) closes, or when no byte
 * came on it within the window the head set in STDIN_WATCHDOG_BEAT_ENV
 * (Note [dead links] in multihost.c). */
#ifndef CDRUN_STDIN_WATCHDOG_H
#define CDRUN_STDIN_WATCHDOG_H

/* The seconds the watchdog waits for the head's next byte; unset or
 * invalid: it waits for EOF only. */
#define STDIN_WATCHDOG_BEAT_ENV "CDRUN_HEAD_BEAT"

/* Moves stdin away from the workers (they get /dev/null) and watches it
 * on a detached thread that sends this process SIGTERM at EOF or when the
 * window passes without a byte.  Returns 0 or a negative errno (reported
 * with say_error). */
int stdin_watchdog_start(void);

#endif
