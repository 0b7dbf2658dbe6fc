/* conqueue.h -- lines for a console that may stop reading.
 *
 * Note [console queue]: the agent's loop must never wait on the console.
 * A reader that stops reading (a pager, `| sleep 30`, a stopped terminal)
 * would otherwise hold the loop in write(2): signals, reaping and
 * keepalives wait with it, and a multi-node job expels the node.  So
 * every line for one console fd goes into a queue, and a thread of its
 * own writes the queue out; the loop only copies.  The queue holds up to
 * a bound of bytes; a line past it is dropped whole and counted, and once
 * the console reads again the thread says how many
 * ("cdrun: the console did not keep up: 123 lines dropped").  Log files
 * are written by the loop as before (a file never stalls as a pipe does)
 * and lose nothing.  The fd is not made non-blocking: it is shared with
 * the shell and other processes, which set its flags, not cdrun.
 *
 * At the end the queue gets a short time to drain while the console makes
 * progress; a console that stalls is left behind, with what was not
 * written counted as dropped. */
#ifndef CDRUN_CONQUEUE_H
#define CDRUN_CONQUEUE_H

#include <stddef.h>
#include <stdint.h>

#define CONQUEUE_DEFAULT_BOUND (4u << 20)    /* bytes queued at most */

struct conqueue;

/* Starts the writer of fd (which stays the caller's) with room for bound
 * bytes (0: CONQUEUE_DEFAULT_BOUND).  Returns 0 or a negative errno. */
int conqueue_create(int fd, size_t bound, struct conqueue **out);

/* Queues one whole line (or any block written in one write(2)); drops it
 * and counts it when the queue is full.  Never blocks on the console. */
void conqueue_put(struct conqueue *q, const char *buf, size_t len);

/* Lines dropped so far. */
uint64_t conqueue_dropped(struct conqueue *q);

/* Waits while the queue drains and the console makes progress (no more
 * than stall_s without a byte written), then stops the writer and frees
 * q; returns the lines dropped in all, those never written included.
 * NULL: 0. */
uint64_t conqueue_close(struct conqueue *q, double stall_s);

#endif
