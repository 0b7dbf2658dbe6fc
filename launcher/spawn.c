/* spawn.c -- clone/exec of a worker; see Note [spawn without fork]. */
#include "spawn.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The child's stack: room for execvpe's PATH buffer and, for a script
 * without "#!", its copy of argv; untouched pages cost nothing. */
#define CHILD_STACK_MIN (256 * 1024)

/* What the child needs, and where it leaves the error that stopped it.
 * Lives on the caller's stack, which the child shares. */
struct child_args {
  const struct spawn_opts *o;
  pid_t agent;
  int err;
  int in_child_done;    /* in_child returned 0: exec_failed undoes it */
};

/* Note [child side of spawn]: the child runs in the agent's memory while
 * the agent is suspended, so between clone and exec only async-signal-safe
 * calls are allowed, and nothing the agent owns may change except
 * args->err (and what in_child documents).  Everything the child needs
 * (argv, envp, fds) is prepared before the clone. */
/* The child's frames live on a stack the caller unmaps once the child has
 * exec'd; they are never unwound, so no sanitizer may poison them (nor
 * complain of the switch of stacks before _exit). */
#define CHILD_CODE __attribute__((no_sanitize_address))

CHILD_CODE static void child_fail(struct child_args *args, int err)
{
  args->err = err ? err : EINVAL;
  _exit(127);
}

CHILD_CODE static int move_fd(int from, int to)
{
  if (from < 0 || from == to)
    return 0;
  return dup2(from, to) < 0 ? -1 : 0;
}

CHILD_CODE static int child_main(void *arg)
{
  struct child_args *args = arg;
  const struct spawn_opts *o = args->o;
  struct sigaction sa;
  sigset_t none;
  int sig, err;

  if (setsid() < 0)
    child_fail(args, errno);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    child_fail(args, errno);
  /* The agent may have died before prctl took effect. */
  if (getppid() != args->agent)
    child_fail(args, ECHILD);
  if (o->in_child) {
    err = o->in_child(o->ctx);
    if (err)
      child_fail(args, -err);
    args->in_child_done = 1;
  }

  /* No handler of the agent's may run here once signals are unblocked. */
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (sig = 1; sig < NSIG; sig++)
    sigaction(sig, &sa, NULL);
  sigemptyset(&none);

  if (move_fd(o->stdin_fd, 0) || move_fd(o->stdout_fd, 1) ||
      move_fd(o->stderr_fd, 2))
    child_fail(args, errno);
  /* Both are plain syscalls: async-signal-safe. */
  if (o->cpus && sched_setaffinity(0, sizeof *o->cpus, o->cpus) < 0)
    child_fail(args, errno);
  if (o->mempolicy &&
      syscall(SYS_set_mempolicy, o->mempolicy, o->nodes, o->maxnode) < 0)
    child_fail(args, errno);

  sigprocmask(SIG_SETMASK, &none, NULL);
  execvpe(o->argv[0], o->argv, o->envp);
  child_fail(args, errno);
  return 127;
}

static size_t child_stack_size(char *const *argv)
{
  size_t argc = 0, page = (size_t)sysconf(_SC_PAGESIZE), size;

  while (argv[argc])
    argc++;
  size = CHILD_STACK_MIN + (argc + 2) * sizeof(char *) + 2 * PATH_MAX;
  return (size + page - 1) / page * page;
}

int spawn_worker(const struct spawn_opts *o, pid_t *pid_out)
{
  struct child_args args = { o, getpid(), 0, 0 };
  size_t stack_size = child_stack_size(o->argv);
  sigset_t all, old;
  char *stack;
  pid_t pid;
  int err = 0, status;

  stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED)
    return -errno;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  /* Returns once the child has exec'd or exited (CLONE_VFORK); the stack
   * grows down from its end. */
  pid = clone(child_main, stack + stack_size,
              CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  if (pid < 0)
    err = -errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  munmap(stack, stack_size);
  if (err)
    return err;
  if (args.err) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
      ;
    if (args.in_child_done && o->exec_failed)
      o->exec_failed(o->ctx, pid);
    return -args.err;
  }
  *pid_out = pid;
  return 0;
}
