/* failures.h -- what failed in one attempt of the local worker group, and
 * what cdrun says and returns about it.
 *
 * The agent records each failed worker as it reaps it (with what its
 * error file says); from the records come the root cause (the earliest
 * failure: Note [root cause]), the line the rendezvous passes to the other
 * nodes, the failure summary on stderr (summary.h's format) and the exit
 * status cdrun returns.  Nothing here keeps time or touches the loop: the
 * caller passes the time in.  Out of memory only ever loses a record (the
 * summary misses it; nothing else depends on it). */
#ifndef CDRUN_FAILURES_H
#define CDRUN_FAILURES_H

#include <stdbool.h>
#include <stddef.h>

#include "rdzv.h"
#include "summary.h"

/* One attempt's failures; zeroed is empty.  Read-only for the caller. */
struct failures {
  struct worker_failure *list;  /* in the order recorded; strings owned */
  size_t n;
  double first_time;            /* when the first was recorded (epoch
                                   seconds); valid when n > 0 */
};

/* Forgets every record (a new attempt starts); fs stays usable. */
void failures_clear(struct failures *fs);

/* Records a failed worker: seen's local_rank, rank, pid, exitcode (> 0
 * status, -signum) and time (when it was reaped, epoch seconds).  When
 * seen->message is set (an exec failure, a watchdog's kill) it is the
 * failure's message; otherwise the error file seen->error_file is read
 * (errfile.h): its message, traceback and timestamp (which replaces the
 * time) go into the record; a file that is not an error file is said on
 * stderr and its problem becomes the message; a missing one leaves the
 * message empty.  *error_files_read (may be NULL) is set when the record
 * points at an error file.  The strings are copied. */
void failures_record(struct failures *fs, const struct worker_failure *seen,
                     bool *error_files_read);

/* The root cause (summary_root_cause's order), or NULL when n is 0. */
const struct worker_failure *failures_root(const struct failures *fs);

/* Note [simultaneous failures]: whether an exit with code (0 is no
 * failure) at `now`, while the group is stopped with stop_signal
 * (sigkill_sent: the stop escalated to SIGKILL), is a failure of its own
 * rather than one the stop caused: it came within window_s of the first
 * failure and not of our signals. */
bool failures_is_cofailure(const struct failures *fs, int code,
                           int stop_signal, bool sigkill_sent,
                           double window_s, double now);

/* What failure f was, without its rank (a crash loop moves from rank to
 * rank): "exited with status 1: <the error file's first line>" or "killed
 * by SIGKILL", into buf (always NUL-terminated). */
void failures_describe(const struct worker_failure *f, char *buf,
                       size_t len);

/* Note [root cause]: this node's root cause for the job's, into *lc (all
 * zero when there is no failure): its time (the error file's, else when
 * it was reaped; now when that is not a plausible epoch time), its ranks,
 * its exit code clamped to -255..255, its pid, and host. */
void failures_local_cause(const struct failures *fs, const char *host,
                          double now, struct rdzv_cause *lc);

/* The line the rendezvous passes to every node for the failure of worker
 * `rank` with code (the last record's message when it has one, else "rank
 * 3 exited with status 1" or "rank 3 was killed by SIGKILL"). */
void failures_report_text(const struct failures *fs, int rank, int code,
                          char *buf, size_t len);

/* Prints the failure summary of target on host on stderr (stdout flushed
 * first, so it comes after the workers' output).  Note [root cause]: the
 * job's root cause job_cause (NULL or exited_at 0: none known), when the
 * rendezvous named one, heads it; this node's failures are listed above
 * it.  Prints nothing when there are neither. */
void failures_print_summary(const struct failures *fs,
                            const struct rdzv_cause *job_cause,
                            const char *target, const char *host);

/* cdrun's exit status for a group that failed for good (agent.h): the
 * root cause's exit code (job_cause's when known, else this node's), 128
 * + signal when it was killed, AGENT_EXIT_INTERNAL when there is no
 * failure or the code does not fit an exit status. */
int failures_exit_status(const struct failures *fs,
                         const struct rdzv_cause *job_cause);

#endif
