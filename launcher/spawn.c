/* spawn.c -- fork/exec of a worker with exec errors through a CLOEXEC pipe. */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Note [child side of spawn]: between fork and exec only async-signal-safe
 * calls are allowed (the agent may hold malloc's lock in another thread of a
 * future version, and libuv's state must not be touched).  Everything the
 * child needs (argv, envp, fds) is prepared before fork. */
static void child_fail(int errpipe, int err)
{
  ssize_t n;

  do
    n = write(errpipe, &err, sizeof err);
  while (n < 0 && errno == EINTR);
  _exit(127);
}

static int move_fd(int from, int to)
{
  if (from < 0 || from == to)
    return 0;
  return dup2(from, to) < 0 ? -1 : 0;
}

static void child_main(const struct spawn_opts *o, pid_t agent, int errpipe,
                       int gopipe)
{
  struct sigaction sa;
  sigset_t none;
  char go;
  ssize_t n;
  int sig;

  if (setsid() < 0)
    child_fail(errpipe, errno);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    child_fail(errpipe, errno);
  /* The agent may have died before prctl took effect. */
  if (getppid() != agent)
    _exit(127);

  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (sig = 1; sig < NSIG; sig++)
    sigaction(sig, &sa, NULL);
  sigemptyset(&none);

  /* Wait until the agent has recorded our process group (see before_exec).
   * EOF means the agent died first: do not start at all. */
  do
    n = read(gopipe, &go, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1)
    _exit(127);

  if (move_fd(o->stdin_fd, 0) || move_fd(o->stdout_fd, 1) ||
      move_fd(o->stderr_fd, 2))
    child_fail(errpipe, errno);
  /* Both are plain syscalls: async-signal-safe. */
  if (o->cpus && sched_setaffinity(0, sizeof *o->cpus, o->cpus) < 0)
    child_fail(errpipe, errno);
  if (o->mempolicy &&
      syscall(SYS_set_mempolicy, o->mempolicy, o->nodes, o->maxnode) < 0)
    child_fail(errpipe, errno);

  sigprocmask(SIG_SETMASK, &none, NULL);
  execvpe(o->argv[0], o->argv, o->envp);
  child_fail(errpipe, errno);
}

int spawn_start(const struct spawn_opts *o, struct spawn_pending *p)
{
  int errpipe[2], gopipe[2];
  sigset_t all, old;
  pid_t agent = getpid(), pid;
  int err = 0, status;
  ssize_t n;

  p->pid = 0;
  p->errfd = -1;
  p->exec_failed = NULL;
  p->ctx = NULL;
  if (pipe2(errpipe, O_CLOEXEC) < 0)
    return -errno;
  if (pipe2(gopipe, O_CLOEXEC) < 0) {
    err = -errno;
    goto fail_gopipe;
  }

  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid = fork();
  if (pid == 0) {
    close(errpipe[0]);
    close(gopipe[1]);
    child_main(o, agent, errpipe[1], gopipe[0]);
  }
  if (pid < 0)
    err = -errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  close(errpipe[1]);
  close(gopipe[0]);
  if (pid < 0)
    goto fail_fork;

  if (o->before_exec)
    err = o->before_exec(o->ctx, pid);
  if (err == 0) {
    do
      n = write(gopipe[1], "g", 1);
    while (n < 0 && errno == EINTR);
  }
  close(gopipe[1]);   /* on error the child reads EOF and exits */
  if (err) {
    close(errpipe[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
      ;
    return err;
  }
  p->pid = pid;
  p->errfd = errpipe[0];
  p->exec_failed = o->exec_failed;
  p->ctx = o->ctx;
  return 0;

fail_fork:
  close(gopipe[1]);
  close(errpipe[0]);
  return err;
fail_gopipe:
  close(errpipe[0]);
  close(errpipe[1]);
  return err;
}

int spawn_finish(struct spawn_pending *p, pid_t *pid_out)
{
  int child_err = 0, status, err = 0;
  ssize_t n;

  /* EOF: exec succeeded (the CLOEXEC end closed); an int: it failed. */
  do
    n = read(p->errfd, &child_err, sizeof child_err);
  while (n < 0 && errno == EINTR);
  close(p->errfd);
  p->errfd = -1;
  if (n == (ssize_t)sizeof child_err)
    err = -child_err;
  else if (n != 0)
    err = -EPROTO;
  if (err) {
    while (waitpid(p->pid, &status, 0) < 0 && errno == EINTR)
      ;
    if (p->exec_failed)
      p->exec_failed(p->ctx, p->pid);
    return err;
  }
  *pid_out = p->pid;
  return 0;
}

int spawn_worker(const struct spawn_opts *o, pid_t *pid_out)
{
  struct spawn_pending p;
  int err = spawn_start(o, &p);

  return err ? err : spawn_finish(&p, pid_out);
}
