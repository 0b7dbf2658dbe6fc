/* spawn.c -- clone/exec of a worker; see Note [spawn without fork]. */
#include "spawn.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The child's stack: room for execvpe's PATH buffer and, for a script
 * without "#!", its copy of argv; untouched pages cost nothing. */
#define CHILD_STACK_MIN (256 * 1024)
#define SPAWN_THREADS_MAX 16

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
  int sig, err, fd;

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
  /* The worker gets 0, 1 and 2 only: what cdrun's own parent left open
   * (a CI runner's pipes, a lock) is none of its business, and torchrun's
   * workers do not get it either.  cdrun's own fds are close-on-exec. */
  if (close_range(3, ~0U, 0) < 0)
    for (fd = 3; fd < 1024; fd++)
      close(fd);
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
    *pid_out = pid;     /* for the failure's report; already reaped */
    return -args.err;
  }
  *pid_out = pid;
  return 0;
}

/* The work of one spawn_many call, shared by the threads. */
struct spawn_batch {
  const struct spawn_opts *opts;
  size_t n;
  size_t next;          /* the next index to take (atomic) */
  pid_t *pids;
  int *errs;
};

/* Note [spawning threads]: PR_SET_PDEATHSIG fires when the *thread* that
 * made the child ends, not the process, so the threads live as long as
 * the workers they start: a pool, stopped only when the agent ends. */
struct spawner {
  pthread_mutex_t mu;
  pthread_cond_t work;          /* a batch was posted, or stop */
  pthread_cond_t idle;          /* a thread left the batch */
  struct spawn_batch *batch;    /* the current one, or NULL */
  unsigned long gen;            /* batches posted */
  int busy;                     /* threads inside the current batch */
  bool stop;
  int nthreads;
  pthread_t th[SPAWN_THREADS_MAX];
};

static void batch_run(struct spawn_batch *b)
{
  size_t i;

  while ((i = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED)) < b->n) {
    b->pids[i] = 0;
    b->errs[i] = spawn_worker(&b->opts[i], &b->pids[i]);
  }
}

static void *spawner_main(void *arg)
{
  struct spawner *sp = arg;
  unsigned long seen = 0;
  struct spawn_batch *b;

  pthread_mutex_lock(&sp->mu);
  for (;;) {
    while (!sp->stop && (!sp->batch || sp->gen == seen))
      pthread_cond_wait(&sp->work, &sp->mu);
    if (sp->stop)
      break;
    seen = sp->gen;
    b = sp->batch;
    sp->busy++;
    pthread_mutex_unlock(&sp->mu);
    batch_run(b);
    pthread_mutex_lock(&sp->mu);
    sp->busy--;
    pthread_cond_signal(&sp->idle);
  }
  pthread_mutex_unlock(&sp->mu);
  return NULL;
}

int spawner_start(int nthreads, struct spawner **out)
{
  struct spawner *sp = calloc(1, sizeof *sp);
  sigset_t all, old;
  int k;

  *out = NULL;
  if (!sp)
    return -ENOMEM;
  pthread_mutex_init(&sp->mu, NULL);
  pthread_cond_init(&sp->work, NULL);
  pthread_cond_init(&sp->idle, NULL);
  if (nthreads > SPAWN_THREADS_MAX)
    nthreads = SPAWN_THREADS_MAX;
  /* Signals stay with the caller's thread: the threads block them all. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (k = 0; k < nthreads; k++)
    if (pthread_create(&sp->th[sp->nthreads], NULL, spawner_main, sp) == 0)
      sp->nthreads++;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  *out = sp;
  return 0;
}

void spawn_many(struct spawner *sp, const struct spawn_opts *opts, size_t n,
                pid_t *pids, int *errs)
{
  struct spawn_batch b = { opts, n, 0, pids, errs };
  sigset_t all, old;

  if (sp && sp->nthreads > 0 && n > 1) {
    pthread_mutex_lock(&sp->mu);
    sp->batch = &b;
    sp->gen++;
    pthread_cond_broadcast(&sp->work);
    pthread_mutex_unlock(&sp->mu);
  }
  /* The caller's share, with signals blocked like the threads'. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  batch_run(&b);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (sp && sp->batch == &b) {
    /* b lives on this stack: no thread may hold it once we return. */
    pthread_mutex_lock(&sp->mu);
    while (sp->busy > 0)
      pthread_cond_wait(&sp->idle, &sp->mu);
    sp->batch = NULL;
    pthread_mutex_unlock(&sp->mu);
  }
}

void spawner_stop(struct spawner *sp)
{
  int k;

  if (!sp)
    return;
  pthread_mutex_lock(&sp->mu);
  sp->stop = true;
  pthread_cond_broadcast(&sp->work);
  pthread_mutex_unlock(&sp->mu);
  for (k = 0; k < sp->nthreads; k++)
    pthread_join(sp->th[k], NULL);
  pthread_mutex_destroy(&sp->mu);
  pthread_cond_destroy(&sp->work);
  pthread_cond_destroy(&sp->idle);
  free(sp);
}
