/* spawn.h -- start one worker process: its own session and process group,
 * tied to the agent's life, exec errors reported back synchronously. */
#ifndef CDRUN_SPAWN_H
#define CDRUN_SPAWN_H

#include <sched.h>
#include <stddef.h>
#include <sys/types.h>

/* What to run and how.  The fd fields follow git's convention: -1 means
 * inherit the agent's, >= 0 means dup2 onto the worker's 0/1/2.  The
 * caller keeps ownership of every fd (they are not closed here). */
struct spawn_opts {
  char *const *argv;      /* argv[0] is looked up in PATH like execvp */
  char *const *envp;      /* the complete environment */
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;
  /* Called in the parent after fork and before the child may exec, with
   * the child's pid (== its process group id).  The child waits for this
   * to return, so whatever it records (the guardian's watch list) is in
   * place before the worker can start grandchildren.  May be NULL. */
  int (*before_exec)(void *ctx, pid_t pid);
  void *ctx;
  /* --numa_binding, applied in the child before exec: its CPU affinity
   * (NULL: inherited) and memory policy (set_mempolicy(2) mode with nodes
   * and maxnode; mode 0, MPOL_DEFAULT, leaves the policy alone). */
  const cpu_set_t *cpus;
  int mempolicy;
  const unsigned long *nodes;
  unsigned long maxnode;
  /* Called when the exec failed after before_exec succeeded, with the
   * same pid (reaped by then): undoes what before_exec recorded.  May be
   * NULL. */
  void (*exec_failed)(void *ctx, pid_t pid);
};

#define SPAWN_OPTS_INIT \
  { NULL, NULL, -1, -1, -1, NULL, NULL, NULL, 0, NULL, 0, NULL }

/* Forks and execs.  The child calls setsid() (so the worker leads a new
 * process group, as torchrun's start_new_session), asks the kernel for
 * SIGKILL when the agent dies (PR_SET_PDEATHSIG), resets every signal
 * disposition and the signal mask, then execs.
 *
 * Returns 0 with *pid set once the exec succeeded; -errno of the failed
 * execvp (for example -ENOENT, -EACCES) after reaping the child; or another
 * negative errno if fork or pipe failed.  Safe to call from a libuv loop
 * that handles signals: all signals are blocked around fork so no handler
 * runs in the child. */
int spawn_worker(const struct spawn_opts *o, pid_t *pid);

/* spawn_worker in two halves, so that several workers exec in parallel:
 * spawn_start forks and releases the child (0, or an error after reaping
 * it); spawn_finish waits for its exec and returns what spawn_worker
 * would.  Every successful spawn_start needs its spawn_finish. */
struct spawn_pending {
  pid_t pid;
  int errfd;      /* read end of the exec-error pipe */
  void (*exec_failed)(void *ctx, pid_t pid);
  void *ctx;
};

int spawn_start(const struct spawn_opts *o, struct spawn_pending *p);
int spawn_finish(struct spawn_pending *p, pid_t *pid);

#endif
