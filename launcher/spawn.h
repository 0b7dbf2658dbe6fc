/* spawn.h -- start one worker process: its own session and process group,
 * tied to the agent's life, exec errors reported back synchronously. */
#ifndef CDRUN_SPAWN_H
#define CDRUN_SPAWN_H

#include <stdbool.h>
#include <sched.h>
#include <signal.h>
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
  /* Runs in the child before exec, so that whatever it records (the
   * guardian's watch list, the cgroup) is in place before the worker can
   * start grandchildren.  The child shares the caller's memory until it
   * execs, and the caller is suspended meanwhile (vfork semantics): the
   * hook may read and write the caller's data, but may only make
   * async-signal-safe calls (no malloc, stdio or locks).  Returns 0, or
   * -errno to abandon the spawn (spawn_worker then returns it and the
   * program never runs).  May be NULL. */
  int (*in_child)(void *ctx);
  void *ctx;
  /* --numa_binding, applied in the child before exec: its CPU affinity
   * (NULL: inherited) and memory policy (set_mempolicy(2) mode with nodes
   * and maxnode; mode 0, MPOL_DEFAULT, leaves the policy alone). */
  const cpu_set_t *cpus;
  int mempolicy;
  const unsigned long *nodes;
  unsigned long maxnode;
  /* Called in the caller when the exec failed after in_child succeeded,
   * with the child's pid (reaped by then): undoes what in_child
   * recorded.  May be NULL. */
  void (*exec_failed)(void *ctx, pid_t pid);
  /* A cgroup v2 directory (an open fd; -1: none) the child belongs to
   * before it runs anything of its own, in_child included: see Note
   * [born in the cgroup].  When it cannot be had, the worker still
   * starts, outside it, and *cgroup_err (when not NULL) gets the -errno
   * (stored atomically: several spawns may fail at once). */
  int cgroup_fd;
  int *cgroup_err;
};

#define SPAWN_OPTS_INIT \
  { NULL, NULL, -1, -1, -1, NULL, NULL, NULL, 0, NULL, 0, NULL, -1, NULL }

/* Starts the worker and returns once it has exec'd.  The child calls
 * setsid() (so the worker leads a new process group, as torchrun's
 * start_new_session), asks the kernel for SIGKILL when the agent dies
 * (PR_SET_PDEATHSIG), runs in_child, resets every signal disposition and
 * the signal mask, then execs.
 *
 * Note [spawn without fork]: the child is made with clone(CLONE_VM |
 * CLONE_VFORK), as posix_spawn does, not fork: a fork copies the agent's
 * page tables and makes its next writes copy-on-write faults, a cost that
 * grows with the agent's memory, which grows with the number of workers
 * (5,000 forks spent most of their time there).  The exec's outcome comes
 * back through the shared memory; no pipe is needed.
 *
 * Note [born in the cgroup]: with cgroup_fd the child is made by clone3
 * with CLONE_INTO_CGROUP: it is born in the cgroup.  Moving it there
 * after the clone (a write of its pid to cgroup.procs, what older kernels
 * leave as the only way, and the fallback here) takes the cgroup
 * threadgroup lock for writing, which waits for an RCU grace period and
 * stalls every fork and exit on the machine meanwhile: a few milliseconds
 * at random, per worker, on a small VM.
 *
 * Returns 0 with *pid set once the exec succeeded; -errno of the failed
 * execvp (for example -ENOENT, -EACCES) or of in_child after reaping the
 * child, with *pid set to the pid it had (for reports only: it may be
 * reused); or another negative errno if the clone failed.  Safe to call
 * from a libuv loop that handles signals: all signals are blocked around
 * the clone so no handler runs in the child. */
int spawn_worker(const struct spawn_opts *o, pid_t *pid);

/* Several spawns at once: spawn_worker suspends only its own thread until
 * its child has exec'd, and on a busy machine that time is mostly spent
 * waiting for a CPU, so a few spawns in flight hide it.  A spawner is a
 * pool of threads (at most 16) that start workers with the caller; since
 * a worker's PR_SET_PDEATHSIG fires when the thread that made it ends,
 * stop the spawner only when its workers are gone (the agent's end). */
struct spawner;

/* Starts nthreads threads (fewer if the system refuses some; then
 * spawns are only slower).  Returns 0 or -ENOMEM. */
int spawner_start(int nthreads, struct spawner **out);

/* spawn_worker for opts[0..n-1], on the caller's thread and the
 * spawner's (sp may be NULL: the caller's only); each result in pids[i]
 * and errs[i] (0, or what spawn_worker returned).  in_child and
 * exec_failed may run on several threads at once.  Every spawning thread
 * blocks all signals, so handlers run on the caller's thread only. */
void spawn_many(struct spawner *sp, const struct spawn_opts *opts, size_t n,
                pid_t *pids, int *errs);

/* A stream: spawn_many whose spawns start while the caller still
 * prepares the later ones (the first worker need not wait for the last
 * one's folders and environment).  The fields are spawn.c's. */
struct spawn_batch {
  const struct spawn_opts *opts;
  size_t cap;           /* at most this many */
  size_t ready;         /* opts[0..ready) may be spawned (under the lock) */
  bool ended;           /* none more become ready (under the lock) */
  size_t next;          /* the next index to take (atomic) */
  pid_t *pids;
  int *errs;
  struct spawner *sp;   /* NULL: the caller spawns them all at the end */
  sigset_t caught;      /* the signals the children reset (spawn.c) */
};

/* Starts a stream of at most n spawns over opts, pids and errs, which
 * the caller keeps until spawn_stream_end returns; nothing is spawned
 * yet.  sp may be NULL (the caller's thread only, at the end). */
void spawn_stream_begin(struct spawner *sp, struct spawn_batch *b,
                        const struct spawn_opts *opts, size_t n,
                        pid_t *pids, int *errs);

/* opts[0..ready) are filled in: the spawner's threads may start them. */
void spawn_stream_ready(struct spawn_batch *b, size_t ready);

/* opts[0..n) are all there will be (n may be less than begin's, after a
 * failed preparation): the caller spawns what no thread took, then waits
 * for the threads.  pids and errs of [0..n) are then set as spawn_many
 * sets them. */
void spawn_stream_end(struct spawn_batch *b, size_t n);

/* Ends the threads (see above: their workers get PR_SET_PDEATHSIG's
 * SIGKILL).  NULL is a no-op. */
void spawner_stop(struct spawner *sp);

#endif
