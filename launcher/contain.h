/* contain.h -- nothing a worker starts outlives its worker group.
 *
 * Note [containment]: a worker leads its own process group, but a
 * descendant that calls setsid() (or double-forks into a daemon) leaves
 * that group.  Two mechanisms catch it:
 *
 *  - cdrun is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever a
 *    worker leaves behind is re-parented to cdrun, not to init, so once
 *    the workers are reaped every survivor is a child of cdrun, and
 *    contain_kill_all kills them (and, as they die, their own children,
 *    which are re-parented to cdrun in turn).
 *  - where the system delegates a cgroup v2 (a writable cgroup of ours),
 *    the workers start in a cgroup of their own (spawn.h's Note [born in
 *    the cgroup]), cdrun-<pid>, created next to cdrun's, which
 *    descendants cannot leave;
 *    cgroup.kill stops all of it at once.  The guardian (guardian.h)
 *    knows the cgroup, so this holds even when cdrun itself is SIGKILLed.
 *  - without a cgroup, a SIGKILL of cdrun re-parents what is left to init,
 *    and only the environment still ties it to the job: every worker gets
 *    CDRUN_CONTAIN=<token>, unique to this cdrun, which its descendants
 *    inherit; the guardian kills every process whose /proc/PID/environ
 *    holds it.  A descendant that execs with a cleaned environment after
 *    leaving its process group escapes this last net (not the cgroup).
 *
 * CDRUN_CGROUP=0 in cdrun's environment turns the cgroup off. */
#ifndef CDRUN_CONTAIN_H
#define CDRUN_CONTAIN_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#define CONTAIN_ENV "CDRUN_CONTAIN"

struct contain {
  char cgroup[PATH_MAX];        /* our cgroup's directory, "" if none */
  char token[48];               /* CONTAIN_ENV's value for our workers */
  int dir_fd;                   /* the cgroup's directory, -1 if none:
                                 * spawn_opts' cgroup_fd */
  int enter_err;                /* spawn_opts' *cgroup_err */
  bool subreaper;
};

/* Makes the calling process a child subreaper and creates the worker
 * cgroup where one can be had.  Neither is fatal: *c says what holds.
 * Returns 0, or -errno when not even the subreaper could be set. */
int contain_init(struct contain *c);

/* The workers enter the cgroup through their spawn_opts: cgroup_fd =
 * c->dir_fd, cgroup_err = &c->enter_err (a failure is not fatal: the
 * subreaper remains).  In the agent after a spawn: if a child could not
 * enter the cgroup (not delegated after all, or not to us), gives the
 * cgroup up and returns the error (to be reported once); 0 otherwise. */
int contain_check(struct contain *c);

/* Kills everything of the worker group that is left: the cgroup's
 * processes, then every child of this process but spare (the guardian),
 * reaping them, until none is left.  Call it once the workers themselves
 * are reaped (their statuses would be consumed here otherwise). */
void contain_kill_all(struct contain *c, pid_t spare);

/* SIGKILLs every process whose initial environment holds
 * CONTAIN_ENV=token, round after round until none is left.  For the
 * guardian, after the agent died.  Returns how many were killed. */
int contain_kill_token(const char *token);

/* Kills what is left and removes the cgroup.  Idempotent. */
void contain_destroy(struct contain *c);

/* Writes "1" to <cgroup>/cgroup.kill, or kills its cgroup.procs one by one
 * on kernels without cgroup.kill.  Async-signal-safe enough for the
 * guardian (no malloc).  Returns 0 or -errno. */
int contain_cgroup_kill(const char *cgroup);

/* Kills what is in the cgroup and below it, and removes it (and the
 * cgroups a worker made below it) once empty (Note [cgroup removal] in
 * contain.c): waits for cgroup.events' "populated 0", killing again
 * meanwhile, at most 30 s in all.  Returns 0 (removed, or already gone)
 * or -errno (-EBUSY: still not empty after the wait). */
int contain_cgroup_remove(const char *cgroup);

/* Note [stale cgroups] (contain.c): removes the empty cdrun-<pid>
 * siblings of cgroup whose pid is gone.  The guardian runs it. */
void contain_sweep_stale(const char *cgroup);

#endif
