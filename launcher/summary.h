/* summary.h -- torchrun's failure summary: root cause = earliest failure. */
#ifndef CDRUN_SUMMARY_H
#define CDRUN_SUMMARY_H

#include <stdio.h>
#include <sys/types.h>


/* One failed worker, as the agent observed it. */
struct worker_failure {
  int local_rank;
  int rank;              /* global rank */
  pid_t pid;
  int exitcode;          /* > 0 exit status, or -signum when killed */
  double time;           /* epoch seconds the failure was observed, or the
                            error file's timestamp when it has one */
  const char *error_file;   /* path given to the worker, may be NULL */
  const char *message;      /* error file message, or NULL */
  const char *traceback;    /* error file traceback, or NULL */
};

/* Index of the root cause: the failure with the smallest time (ties: the
 * lowest global rank).  n must be > 0. */
size_t summary_root_cause(const struct worker_failure *f, size_t n);

/* Prints torchrun's summary for the failures f[0..n-1] of target (the
 * script name as the user typed it) on host, in torchrun's format: the
 * "Failures:" block lists every failure but the root cause (or
 * <NO_OTHER_FAILURES>), then "Root Cause (first observed failure):".
 * Times print as %Y-%m-%d_%H:%M:%S local time; a signal as its name
 * ("exitcode  : -9 (pid: 123)" plus "Signal 9 (SIGKILL) received by PID
 * 123" as the message when the error file gave none); a missing error file
 * as "<N/A>" with torchrun's hint. */
void summary_print(FILE *out, const char *target, const char *host,
                   const struct worker_failure *f, size_t n);

/* Note [root cause] (rdzvd/rdzv_state.h): the summary of a job whose
 * root cause the rendezvous named.  job_root (its host: root_host) heads
 * it as the "Root Cause"; this node's failures f[0..n-1] are listed above
 * it under "Failures:", but the one that is job_root itself (the same
 * rank and pid: this node's failure was the job's root cause), which is
 * printed as the root cause with its error file.  job_root NULL: as
 * summary_print.  Prints nothing when there is neither. */
void summary_print_job(FILE *out, const char *target, const char *host,
                       const struct worker_failure *f, size_t n,
                       const struct worker_failure *job_root,
                       const char *root_host);

/* The index in f[0..n-1] of job_root (the same rank and pid), or n. */
size_t summary_local_index(const struct worker_failure *f, size_t n,
                           const struct worker_failure *job_root);

#endif
