/* failures.c -- one attempt's failures, the root cause, the summary and
 * cdrun's exit status; see failures.h. */
#include "failures.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "errfile.h"
#include "say.h"
#include "signames.h"

void failures_clear(struct failures *fs)
{
  size_t i;

  for (i = 0; i < fs->n; i++) {
    free((char *)fs->list[i].error_file);
    free((char *)fs->list[i].message);
    free((char *)fs->list[i].traceback);
  }
  free(fs->list);
  fs->list = NULL;
  fs->n = 0;
}

void failures_record(struct failures *fs, const struct worker_failure *seen,
                     bool *error_files_read)
{
  struct worker_failure *f, *grown;
  struct errfile_info info;
  char why[PATH_MAX + 128], text[PATH_MAX + 160];
  int err;

  grown = realloc(fs->list, (fs->n + 1) * sizeof *grown);
  if (!grown)
    return;     /* the summary will miss it; nothing else depends on it */
  fs->list = grown;
  f = &fs->list[fs->n++];
  memset(f, 0, sizeof *f);
  if (fs->n == 1)
    fs->first_time = seen->time;
  f->local_rank = seen->local_rank;
  f->rank = seen->rank;
  f->pid = seen->pid;
  f->exitcode = seen->exitcode;
  f->time = seen->time;
  if (seen->message) {
    f->message = strdup(seen->message);
  } else if ((err = errfile_read(seen->error_file, &info, why,
                                 sizeof why)) == 0) {
    if (error_files_read)
      *error_files_read = true;
    f->error_file = strdup(seen->error_file);
    f->message = info.message;
    f->traceback = info.traceback;
    if (info.timestamp > 0)
      f->time = info.timestamp;
    info.message = info.traceback = NULL;
    errfile_free(&info);
  } else if (err != -ENOENT) {
    /* The worker wrote something that is not an error file: say so
     * instead of a silent <N/A>. */
    snprintf(text, sizeof text, "cannot use error file: %s", why);
    say("worker %d: %s", seen->rank, text);
    if (error_files_read)
      *error_files_read = true;
    f->error_file = strdup(seen->error_file);
    f->message = strdup(text);
  }
}

const struct worker_failure *failures_root(const struct failures *fs)
{
  return fs->n ? &fs->list[summary_root_cause(fs->list, fs->n)] : NULL;
}

/* Note [simultaneous failures]: workers often fail together (the same
 * bad input, a dead peer).  torchrun, polling every --monitor_interval
 * (0.1 s), lists all the failures one poll finds; we are told of each exit
 * at once, so an exit within one monitor interval of the first failure
 * that our stop signal did not cause is listed too.  A SIGKILL is ours
 * only once the stop has escalated to it: a worker that died of one
 * before (the OOM killer, a peer, itself) but was reaped after the first
 * failure, as a busy machine reaps them, failed. */
bool failures_is_cofailure(const struct failures *fs, int code,
                           int stop_signal, bool sigkill_sent,
                           double window_s, double now)
{
  if (code == 0 || fs->n == 0)
    return false;
  if (code == -stop_signal || (code == -SIGKILL && sigkill_sent))
    return false;
  return now - fs->first_time < window_s;
}

void failures_describe(const struct worker_failure *f, char *buf,
                       size_t len)
{
  char sig[16];
  int n;

  if (f->exitcode < 0)
    n = snprintf(buf, len, "killed by %s",
                 sig_name(-f->exitcode, sig, sizeof sig));
  else
    n = snprintf(buf, len, "exited with status %d", f->exitcode);
  if (f->message && *f->message && n >= 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, ": %.*s",
             (int)strcspn(f->message, "\n"), f->message);
}

void failures_local_cause(const struct failures *fs, const char *host,
                          double now, struct rdzv_cause *lc)
{
  const struct worker_failure *root = failures_root(fs);

  memset(lc, 0, sizeof *lc);
  if (!root)
    return;
  lc->exited_at = root->time > 0 && root->time < 1e11 ? root->time : now;
  lc->rank = root->rank;
  lc->local_rank = root->local_rank;
  lc->exitcode = root->exitcode < -255 || root->exitcode > 255
                 ? 255 : root->exitcode;
  lc->pid = (long)root->pid;
  snprintf(lc->host, sizeof lc->host, "%s", host);
}

void failures_report_text(const struct failures *fs, int rank, int code,
                          char *buf, size_t len)
{
  const struct worker_failure *f = fs->n ? &fs->list[fs->n - 1] : NULL;
  char sig[16];

  if (f && f->message)
    snprintf(buf, len, "rank %d: %s", rank, f->message);
  else if (code < 0)
    snprintf(buf, len, "rank %d was killed by %s", rank,
             sig_name(-code, sig, sizeof sig));
  else
    snprintf(buf, len, "rank %d exited with status %d", rank, code);
}

void failures_print_summary(const struct failures *fs,
                            const struct rdzv_cause *jc,
                            const char *target, const char *host)
{
  struct worker_failure root;

  if (jc && jc->exited_at <= 0)
    jc = NULL;
  if (fs->n == 0 && !jc)
    return;
  fflush(stdout);
  if (jc) {
    memset(&root, 0, sizeof root);
    root.rank = jc->rank;
    root.local_rank = jc->local_rank;
    root.pid = (pid_t)jc->pid;
    root.exitcode = jc->exitcode;
    root.time = jc->exited_at;
    root.message = "the job's first failure, reported by its node (its "
                   "log and error file are there)";
    if (summary_local_index(fs->list, fs->n, &root) == fs->n)
      say("the job's root cause: rank %d on %s (%s %d)", jc->rank,
          jc->host[0] ? jc->host : "another node",
          jc->exitcode < 0 ? "signal" : "exit code",
          jc->exitcode < 0 ? -jc->exitcode : jc->exitcode);
  }
  summary_print_job(stderr, target, host, fs->list, fs->n,
                    jc ? &root : NULL, jc && jc->host[0] ? jc->host : NULL);
  fflush(stderr);
}

int failures_exit_status(const struct failures *fs,
                         const struct rdzv_cause *jc)
{
  const struct worker_failure *root = failures_root(fs);
  int code;

  if (jc && jc->exited_at > 0)
    code = jc->exitcode;                    /* Note [root cause] */
  else if (!root)
    return AGENT_EXIT_INTERNAL;
  else
    code = root->exitcode;
  if (code < 0)
    return 128 + (-code & 0x7f);
  return code > 255 ? AGENT_EXIT_INTERNAL : code;
}
