/* guardian.h -- a small process that kills the workers' process groups
 * when the agent dies, however it dies (SIGKILL included). */
#ifndef CDRUN_GUARDIAN_H
#define CDRUN_GUARDIAN_H

#include <sys/types.h>

struct contain;

/* Note [no orphans]: each worker gets PR_SET_PDEATHSIG(SIGKILL), which
 * covers the worker itself but not its children.  Workers lead their own
 * process groups, so killing a group reaches the grandchildren; the
 * guardian holds the list of groups and is told of the agent's death by
 * EOF on a pipe that only the agent holds.  It then SIGKILLs every group
 * it knows and exits.  It runs in its own session, ignoring the terminal's
 * signals, so a Ctrl-C or a SIGKILL of the agent cannot take it along. */
struct guardian_exits;

struct guardian {
  pid_t pid;      /* the guardian process, 0 when not started */
  int fd;         /* write end of its command pipe, -1 when closed */
  struct guardian_exits *exits;   /* Note [exit time]; NULL: none */
};

/* Forks the guardian.  Call it before the event loop exists (the child
 * inherits nothing it needs besides the pipe).  c, when not NULL, is the
 * workers' containment (contain.h): when the agent dies, the guardian also
 * kills its cgroup and every process carrying its token.  temp_dir, when
 * not NULL, is a directory the guardian removes (with its contents) if the
 * agent dies without guardian_stop (cdrun's temporary log directory).
 * Returns 0 or -errno. */
int guardian_start(struct guardian *g, const struct contain *c,
                   const char *temp_dir);

/* Adds / removes a process group on the guardian's list.  Returns 0 or
 * -errno (for example -EPIPE when the guardian is gone). */
int guardian_watch(struct guardian *g, pid_t pgid);
int guardian_forget(struct guardian *g, pid_t pgid);

/* Note [exit time]: the root cause of a job is its earliest failure by
 * the time the worker exited (Note [root cause], rdzvd/rdzv_state.h).
 * The agent learns of an exit when it reaps the worker, which may be
 * seconds late: an agent stopped (SIGSTOP, a loaded host, a debugger) or
 * busy reaps late, and another node's later failure would be taken for
 * the first.  So the guardian, a process of its own that does nothing
 * else, holds a pidfd for each watched worker (a group leader) and stamps
 * the wall clock when it becomes readable (the worker exited), into a
 * table shared with the agent.  The stamp is as exact as the guardian's
 * wake-up: tens of microseconds on an idle host, a scheduling delay on a
 * loaded one (measured in cdrun(1), The root cause of a multi-node
 * failure), against the agent's reap time, which waits for whatever the
 * agent is doing.  The kernel's own accounting (taskstats) would be
 * exact but needs CAP_NET_ADMIN; an error file's timestamp exists only
 * where the worker writes one.  Without pidfds (Linux < 5.3) there is no
 * stamp and the reap time stays.
 *
 * When the guardian saw pid exit: wall-clock epoch seconds, or 0. */
double guardian_exit_time(const struct guardian *g, pid_t pid);

/* Asks the guardian to remove temp_dir now, while the agent does other
 * work (Note [overlapped exit], agent.c); the agent removes what is left
 * after guardian_wait.  Returns 0 or -errno. */
int guardian_remove_temp(struct guardian *g);

/* Tells the guardian that the agent quits in order (temp_dir stays) and
 * closes the pipe: the guardian SIGKILLs what is left on its list and in
 * the cgroup, and exits; then waits for it.  It skips the scan for the
 * token when the agent is a subreaper: such an agent has killed what left
 * the groups itself (contain_kill_all).  Idempotent. */
void guardian_stop(struct guardian *g);

/* guardian_stop in two halves, for a caller with other work meanwhile:
 * the message and the close (the guardian starts its last work), then the
 * wait for its exit.  Each is idempotent. */
void guardian_release(struct guardian *g);
void guardian_wait(struct guardian *g);

#endif
