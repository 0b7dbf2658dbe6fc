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
struct guardian {
  pid_t pid;      /* the guardian process, 0 when not started */
  int fd;         /* write end of its command pipe, -1 when closed */
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
