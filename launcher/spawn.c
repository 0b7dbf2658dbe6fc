/* spawn.c -- clone/exec of a worker; see Note [spawn without fork]. */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
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
  const sigset_t *caught;       /* Note [resetting the handlers] */
  pid_t agent;
  int err;
  int in_child_done;    /* in_child returned 0: exec_failed undoes it */
  int enter_cgroup;     /* not born in o->cgroup_fd: move there */
  int ran;              /* the child ran at all */
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

/* Stores the first of several children's failures (Note [born in the
 * cgroup]'s *cgroup_err). */
CHILD_CODE static void cgroup_failed(const struct spawn_opts *o, int err)
{
  if (o->cgroup_err)
    __atomic_store_n(o->cgroup_err, err, __ATOMIC_RELAXED);
}

/* The fallback of Note [born in the cgroup]: the child moves itself. */
CHILD_CODE static void enter_cgroup(const struct spawn_opts *o)
{
  int fd = openat(o->cgroup_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);

  if (fd < 0 || write(fd, "0", 1) < 0)
    cgroup_failed(o, -errno);
  if (fd >= 0)
    close(fd);
}

CHILD_CODE static int child_main(void *arg)
{
  struct child_args *args = arg;
  const struct spawn_opts *o = args->o;
  struct sigaction sa;
  sigset_t none;
  int sig, err, fd;

  args->ran = 1;
  if (args->enter_cgroup)
    enter_cgroup(o);
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

  /* No handler of the agent's may run here once signals are unblocked:
   * Note [resetting the handlers]. */
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (sig = 1; sig < NSIG; sig++)
    if (sigismember(args->caught, sig) == 1)
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

/* Note [resetting the handlers]: the child must not run a handler of the
 * agent's (it shares the agent's memory) once it unblocks its signals
 * before exec, and the worker must not inherit a disposition the agent
 * set (SIG_IGN survives exec).  Resetting all 64 in every child cost 64
 * system calls per worker while its spawning thread waited (CLONE_VFORK);
 * the dispositions that are not SIG_DFL are read once per batch instead,
 * in the parent, and only those are reset: the same worker, 8 of them
 * here (libuv's handlers and SIGPIPE).  A signal is set to SIG_DFL where
 * the read failed, as before. */
static void caught_signals(sigset_t *set)
{
  struct sigaction sa;
  int sig;

  sigemptyset(set);
  for (sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP &&
        (sigaction(sig, NULL, &sa) < 0 || sa.sa_handler != SIG_DFL ||
         (sa.sa_flags & SA_SIGINFO)))
      sigaddset(set, sig);
}

/* clone3(2)'s arguments (linux/sched.h's struct clone_args, whose header
 * clashes with glibc's <sched.h>); CLONE_ARGS_SIZE_VER2. */
struct spawn_clone_args {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack,
      stack_size, tls, set_tid, set_tid_size, cgroup;
};
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

#if defined(__x86_64__)
/* clone3 with a function to run on the new stack, as glibc's clone does
 * for clone(2) (glibc 2.36 exports no clone3): the child cannot return
 * from the system call into C, its stack holds no frame.  fn and arg ride
 * in r8 and r9, which the system call leaves alone in both processes.
 * Returns the child's pid or -errno. */
long spawn_clone3(struct spawn_clone_args *ca, size_t size,
                  int (*fn)(void *), void *arg)
    __attribute__((visibility("hidden")));
__asm__(".text\n"
        ".globl spawn_clone3\n"
        ".hidden spawn_clone3\n"
        ".type spawn_clone3, @function\n"
        "spawn_clone3:\n"
        "  movq %rdx, %r8\n"
        "  movq %rcx, %r9\n"
        "  movl $435, %eax\n"          /* SYS_clone3 */
        "  syscall\n"
        "  testq %rax, %rax\n"
        "  jz 1f\n"
        "  ret\n"                      /* the caller: pid or -errno */
        "1:\n"
        "  xorl %ebp, %ebp\n"          /* the child: the outermost frame */
        "  movq %r9, %rdi\n"
        "  callq *%r8\n"
        "  movl %eax, %edi\n"
        "  movl $60, %eax\n"           /* SYS_exit */
        "  syscall\n"
        "  hlt\n"
        ".size spawn_clone3, .-spawn_clone3\n");
#define HAVE_SPAWN_CLONE3 1
#endif

/* Set once clone3 turned out to lack CLONE_INTO_CGROUP (Linux < 5.7):
 * children move themselves from then on. */
static int clone3_cgroup_missing;

/* The child, born in o->cgroup_fd where the kernel allows it (Note [born
 * in the cgroup]).  Returns its pid or -errno; on -errno nothing was
 * started. */
static pid_t clone_child(struct child_args *args, char *stack,
                         size_t stack_size)
{
  const struct spawn_opts *o = args->o;
  pid_t pid;

#ifdef HAVE_SPAWN_CLONE3
  if (o->cgroup_fd >= 0 &&
      !__atomic_load_n(&clone3_cgroup_missing, __ATOMIC_RELAXED)) {
    struct spawn_clone_args ca;

    memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP;
    ca.exit_signal = SIGCHLD;
    ca.stack = (uintptr_t)stack;
    ca.stack_size = stack_size;
    ca.cgroup = (uint64_t)o->cgroup_fd;
    pid = (pid_t)spawn_clone3(&ca, sizeof ca, child_main, args);
    if (pid > 0 && !args->ran) {
      /* Killed before its first instruction: the cgroup was killed
       * (cgroup.kill) before, and the kernel kills what is born in it
       * since (Note [no cgroup.kill while spawning] in contain.c).
       * Moving there still works. */
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
      pid = -EINVAL;
    }
    if (pid >= 0 || pid == -EAGAIN || pid == -ENOMEM || pid == -ENOSPC)
      return pid;
    if (pid == -ENOSYS || pid == -EINVAL || pid == -E2BIG) {
      __atomic_store_n(&clone3_cgroup_missing, 1, __ATOMIC_RELAXED);
      args->enter_cgroup = 1;
    } else {
      cgroup_failed(o, pid);    /* the cgroup is not ours to use */
    }
  } else {
    args->enter_cgroup = o->cgroup_fd >= 0;
  }
#else
  args->enter_cgroup = o->cgroup_fd >= 0;
#endif
  pid = clone(child_main, stack + stack_size,
              CLONE_VM | CLONE_VFORK | SIGCHLD, args);
  return pid < 0 ? -errno : pid;
}

/* The child's stack: one mapping reused for the spawns of one thread
 * (each child is done with it once clone returns: CLONE_VFORK), so that
 * a launch does not map and unmap it per worker; an unmap in a process
 * with several threads costs every CPU a TLB flush. */
struct child_stack {
  char *base;
  size_t size;
};

static int child_stack_fit(struct child_stack *s, size_t size)
{
  if (s->base && s->size >= size)
    return 0;
  if (s->base)
    munmap(s->base, s->size);
  s->base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (s->base == MAP_FAILED) {
    s->base = NULL;
    return -errno;
  }
  s->size = size;
  return 0;
}

static void child_stack_free(struct child_stack *s)
{
  if (s->base)
    munmap(s->base, s->size);
  s->base = NULL;
}

static int spawn_on(const struct spawn_opts *o, const sigset_t *caught,
                    struct child_stack *cs, pid_t *pid_out)
{
  struct child_args args = { o, caught, getpid(), 0, 0, 0, 0 };
  size_t stack_size = child_stack_size(o->argv);
  sigset_t all, old;
  char *stack;
  pid_t pid;
  int err, status;

  err = child_stack_fit(cs, stack_size);
  if (err)
    return err;
  stack = cs->base;
  stack_size = cs->size;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  /* Returns once the child has exec'd or exited (CLONE_VFORK); the stack
   * grows down from its end. */
  pid = clone_child(&args, stack, stack_size);
  if (pid < 0)
    err = pid;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
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

int spawn_worker(const struct spawn_opts *o, pid_t *pid_out)
{
  struct child_stack cs = { NULL, 0 };
  sigset_t caught;
  int err;

  caught_signals(&caught);
  err = spawn_on(o, &caught, &cs, pid_out);

  child_stack_free(&cs);
  return err;
}

/* Note [spawning threads]: PR_SET_PDEATHSIG fires when the *thread* that
 * made the child ends, not the process, so the threads live as long as
 * the workers they start: a pool, stopped only when the agent ends. */
struct spawner {
  pthread_mutex_t mu;
  pthread_cond_t work;          /* a batch was posted, or stop */
  pthread_cond_t idle;          /* a thread left the batch */
  pthread_cond_t more;          /* the batch's ready count grew, or ended */
  struct spawn_batch *batch;    /* the current one, or NULL */
  unsigned long gen;            /* batches posted */
  int busy;                     /* threads inside the current batch */
  bool stop;
  int nthreads;
  pthread_t th[SPAWN_THREADS_MAX];
};

/* Waits until opts[i] is ready (true) or the stream ended short of it
 * (false).  The caller's own share runs after the end: no wait. */
static bool batch_wait_ready(struct spawn_batch *b, size_t i)
{
  struct spawner *sp = b->sp;
  bool ok;

  if (!sp)
    return i < b->ready;        /* only the caller, after the end */
  pthread_mutex_lock(&sp->mu);
  while (i >= b->ready && !b->ended)
    pthread_cond_wait(&sp->more, &sp->mu);
  ok = i < b->ready;
  pthread_mutex_unlock(&sp->mu);
  return ok;
}

static void batch_run(struct spawn_batch *b)
{
  struct child_stack cs = { NULL, 0 };
  size_t i;

  while ((i = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED)) < b->cap &&
         batch_wait_ready(b, i)) {
    b->pids[i] = 0;
    b->errs[i] = spawn_on(&b->opts[i], &b->caught, &cs, &b->pids[i]);
  }
  child_stack_free(&cs);
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

/* Note [as many spawning threads as CPUs]: a spawning thread sleeps
 * while its child execs (CLONE_VFORK), and the child needs a CPU for
 * that.  On an idle machine, the caller's thread and one more per further
 * CPU keep every CPU busy with an exec, and more threads only take turns
 * on the same CPUs: on 2 CPUs, 8 x /bin/true took 6.57 ms with one
 * thread beside the caller's against 6.97 with three (median of 41, load
 * 0.8), and 1.2 ms less CPU.  On a busy machine the spawns wait for a
 * CPU instead, and each thread in flight is one more task in the
 * scheduler's queue: there one thread took 11.5-12.7 ms where three took
 * 9.1 (load 5.6).  So the cap applies while no more tasks are runnable
 * now than CPUs beside this one: /proc/loadavg's running count, the
 * instant's, not its averages, which a launch's own short-lived children
 * push above the CPUs within seconds on an idle machine.  At least one
 * thread (the caller may block elsewhere). */
static bool machine_idle(int cpus)
{
  char buf[128];
  long running = -1;
  ssize_t len;
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);

  if (fd < 0)
    return false;
  len = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (len <= 0)
    return false;
  buf[len] = '\0';
  /* "0.35 2.09 3.30 1/123 4567": runnable/total, this thread included. */
  if (sscanf(buf, "%*s %*s %*s %ld/", &running) != 1)
    return false;
  return running >= 1 && running - 1 < cpus;
}

static int spawn_threads_cap(int nthreads)
{
  cpu_set_t set;
  int n;

  if (sched_getaffinity(0, sizeof set, &set) < 0)
    return nthreads;
  n = CPU_COUNT(&set);
  if (n < 2)
    n = 2;
  if (!machine_idle(n))
    return nthreads;
  return nthreads < n - 1 ? nthreads : n - 1;
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
  pthread_cond_init(&sp->more, NULL);
  if (nthreads > SPAWN_THREADS_MAX)
    nthreads = SPAWN_THREADS_MAX;
  nthreads = spawn_threads_cap(nthreads);   /* Note [as many spawning...] */
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

void spawn_stream_begin(struct spawner *sp, struct spawn_batch *b,
                        const struct spawn_opts *opts, size_t n,
                        pid_t *pids, int *errs)
{
  memset(b, 0, sizeof *b);
  caught_signals(&b->caught);
  b->opts = opts;
  b->cap = n;
  b->pids = pids;
  b->errs = errs;
  if (sp && sp->nthreads > 0 && n > 1) {
    b->sp = sp;
    pthread_mutex_lock(&sp->mu);
    sp->batch = b;
    sp->gen++;
    pthread_cond_broadcast(&sp->work);
    pthread_mutex_unlock(&sp->mu);
  }
}

void spawn_stream_ready(struct spawn_batch *b, size_t ready)
{
  struct spawner *sp = b->sp;

  if (!sp)
    return;
  pthread_mutex_lock(&sp->mu);
  b->ready = ready;
  pthread_cond_broadcast(&sp->more);
  pthread_mutex_unlock(&sp->mu);
}

void spawn_stream_end(struct spawn_batch *b, size_t n)
{
  struct spawner *sp = b->sp;
  sigset_t all, old;

  if (n > b->cap)
    n = b->cap;
  if (sp) {
    pthread_mutex_lock(&sp->mu);
    b->ready = n;       /* a thread waiting for an index beyond it leaves */
    b->ended = true;
    pthread_cond_broadcast(&sp->more);
    pthread_mutex_unlock(&sp->mu);
  } else {
    b->ready = n;
  }
  /* The caller's share, with signals blocked like the threads'. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  batch_run(b);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (sp) {
    /* b belongs to the caller: no thread may hold it once we return. */
    pthread_mutex_lock(&sp->mu);
    while (sp->busy > 0)
      pthread_cond_wait(&sp->idle, &sp->mu);
    sp->batch = NULL;
    pthread_mutex_unlock(&sp->mu);
  }
}

void spawn_many(struct spawner *sp, const struct spawn_opts *opts, size_t n,
                pid_t *pids, int *errs)
{
  struct spawn_batch b;

  spawn_stream_begin(sp, &b, opts, n, pids, errs);
  spawn_stream_end(&b, n);
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
  pthread_cond_destroy(&sp->more);
  free(sp);
}
