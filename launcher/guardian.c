/* guardian.c -- the watcher process behind Note [no orphans]. */
#include "guardian.h"

#include <limits.h>

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "contain.h"
#include "logdir.h"
#include "logs.h"

#define GUARDIAN_MAX_GROUPS 65536
#define EXIT_SLOTS 65536        /* Note [exit time]: direct-mapped by pid */

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* Note [exit time]: written by the guardian (at, then pid), read by the
 * agent (pid, then at); a slot is pid % EXIT_SLOTS, the last writer's. */
struct guardian_exits {
  struct {
    int32_t pid;
    double at;
  } slot[EXIT_SLOTS];
};

static void exit_stamp(struct guardian_exits *x, pid_t pid)
{
  struct timespec ts;
  size_t k = (size_t)pid % EXIT_SLOTS;

  if (!x)
    return;
  clock_gettime(CLOCK_REALTIME, &ts);
  __atomic_store_n(&x->slot[k].pid, 0, __ATOMIC_RELEASE);
  x->slot[k].at = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  __atomic_store_n(&x->slot[k].pid, (int32_t)pid, __ATOMIC_RELEASE);
}

static void exit_clear(struct guardian_exits *x, pid_t pid)
{
  size_t k = (size_t)pid % EXIT_SLOTS;

  if (x && __atomic_load_n(&x->slot[k].pid, __ATOMIC_ACQUIRE) == pid)
    __atomic_store_n(&x->slot[k].pid, 0, __ATOMIC_RELEASE);
}

double guardian_exit_time(const struct guardian *g, pid_t pid)
{
  size_t k = (size_t)pid % EXIT_SLOTS;
  double at;

  if (!g->exits || pid <= 0 ||
      __atomic_load_n(&g->exits->slot[k].pid, __ATOMIC_ACQUIRE) != pid)
    return 0;
  at = g->exits->slot[k].at;
  /* The guardian may have rewritten the slot meanwhile (a new pid). */
  return __atomic_load_n(&g->exits->slot[k].pid, __ATOMIC_ACQUIRE) == pid
         ? at : 0;
}

/* One command on the pipe: 'w' (watch) or 'f' (forget) a process group,
 * 'r' (remove the temporary directory now: Note [overlapped exit],
 * agent.c), or 'q' (the agent quits in order: its temporary directory is
 * its own business).  Commands are smaller than PIPE_BUF, so each write is
 * atomic. */
struct guardian_msg {
  char op;
  int32_t pgid;
};

static void guardian_main(int rfd, const sigset_t *mask, const char *cgroup,
                          const char *token, bool subreaper,
                          const char *temp_dir, struct guardian_exits *exits)
{
  static pid_t groups[GUARDIAN_MAX_GROUPS];
  static int pidfds[GUARDIAN_MAX_GROUPS];       /* -1: none */
  static struct pollfd pfd[GUARDIAN_MAX_GROUPS + 1];
  static size_t at[GUARDIAN_MAX_GROUPS + 1];    /* pfd[k]: groups[at[k]] */
  struct guardian_msg m;
  size_t ngroups = 0, i, k, nfds;
  bool clean = false, removed = false;
  ssize_t n;
  int sig;

  setsid();
  for (sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP && sig != SIGCHLD)
      signal(sig, SIG_IGN);
  sigprocmask(SIG_SETMASK, mask, NULL);
  /* Keep only the pipe: the agent's stdout may be a pipe someone waits on
   * to reach EOF, and the guardian must not hold it open. */
  if (dup2(rfd, 3) < 0)
    _exit(1);
  for (i = 0; i < 3; i++) {
    int null = open("/dev/null", O_RDWR);
    if (null >= 0 && null != (int)i) {
      dup2(null, (int)i);
      close(null);
    }
  }
  if (close_range(4, ~0U, 0) < 0)
    for (i = 4; i < 1024; i++)
      close((int)i);

  /* Off the launch's path: the agent spawns meanwhile. */
  if (cgroup[0])
    contain_sweep_stale(cgroup);
  for (;;) {
    /* Note [exit time]: the pipe, and every watched worker's pidfd. */
    pfd[0].fd = 3;
    pfd[0].events = POLLIN;
    for (nfds = 1, i = 0; i < ngroups; i++)
      if (pidfds[i] >= 0) {
        pfd[nfds].fd = pidfds[i];
        pfd[nfds].events = POLLIN;
        at[nfds++] = i;
      }
    if (poll(pfd, (nfds_t)nfds, -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    for (k = 1; k < nfds; k++)
      if (pfd[k].revents) {
        i = at[k];
        exit_stamp(exits, groups[i]);
        close(pidfds[i]);
        pidfds[i] = -1;
      }
    if (!pfd[0].revents)
      continue;
    n = read(3, &m, sizeof m);
    if (n < 0 && errno == EINTR)
      continue;
    if (n != (ssize_t)sizeof m)
      break;              /* EOF (or garbage): the agent is gone */
    if (m.op == 'q') {
      clean = true;
    } else if (m.op == 'r' && !removed) {
      if (temp_dir[0])
        logdir_rmtree(temp_dir);
      removed = true;
    } else if (m.op == 'w' && ngroups < GUARDIAN_MAX_GROUPS) {
      /* A group's leader is its worker. */
      pidfds[ngroups] = (int)syscall(SYS_pidfd_open, m.pgid, 0);
      groups[ngroups++] = m.pgid;
    } else if (m.op == 'f') {
      exit_clear(exits, m.pgid);
      for (i = 0; i < ngroups; i++)
        if (groups[i] == m.pgid) {
          if (pidfds[i] >= 0)
            close(pidfds[i]);
          --ngroups;
          groups[i] = groups[ngroups];
          pidfds[i] = pidfds[ngroups];
          break;
        }
    }
  }
  for (i = 0; i < ngroups; i++)
    kill(-groups[i], SIGKILL);
  /* What left the groups (setsid, daemons) is still in the cgroup, and
   * carries the token in its environment.  An agent that quits in order
   * and is a subreaper has killed all of it already (contain_kill_all):
   * the scan of every process's environment is for its sudden death. */
  if (!clean || !subreaper)
    contain_kill_token(token);
  if (cgroup[0])
    contain_cgroup_remove(cgroup);
  /* The agent died without a word (SIGKILL, a crash): nobody else will
   * remove its temporary log directory, and nobody was told where it is. */
  if (!clean && !removed && temp_dir[0])
    logdir_rmtree(temp_dir);
  _exit(0);
}

int guardian_start(struct guardian *g, const struct contain *c,
                   const char *temp_dir)
{
  static char cg[PATH_MAX], token[sizeof c->token], tmp[PATH_MAX];
  int p[2];
  pid_t pid;

  sigset_t all, old;

  g->pid = 0;
  g->fd = -1;
  /* Note [exit time]: shared with the guardian; none: reap times. */
  g->exits = mmap(NULL, sizeof *g->exits, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g->exits == MAP_FAILED)
    g->exits = NULL;
  snprintf(cg, sizeof cg, "%s", c ? c->cgroup : "");
  snprintf(token, sizeof token, "%s", c ? c->token : "");
  snprintf(tmp, sizeof tmp, "%s", temp_dir ? temp_dir : "");
  if (pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  /* Signals stay blocked in the child until it ignores them: a Ctrl-C in
   * the first microseconds must not take the guardian down. */
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid = fork();
  if (pid < 0) {
    int err = -errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(p[0]);
    close(p[1]);
    return err;
  }
  if (pid == 0) {
    close(p[1]);
    guardian_main(p[0], &old, cg, token, c && c->subreaper, tmp, g->exits);
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  close(p[0]);
  g->pid = pid;
  g->fd = p[1];
  return 0;
}

static int guardian_send(struct guardian *g, char op, pid_t pgid)
{
  struct guardian_msg m;
  ssize_t n;

  if (g->fd < 0)
    return -EPIPE;
  memset(&m, 0, sizeof m);
  m.op = op;
  m.pgid = pgid;
  do
    n = write(g->fd, &m, sizeof m);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return -errno;
  return n == (ssize_t)sizeof m ? 0 : -EIO;
}

int guardian_watch(struct guardian *g, pid_t pgid)
{
  return guardian_send(g, 'w', pgid);
}

int guardian_forget(struct guardian *g, pid_t pgid)
{
  return guardian_send(g, 'f', pgid);
}

int guardian_remove_temp(struct guardian *g)
{
  return guardian_send(g, 'r', 0);
}

void guardian_release(struct guardian *g)
{
  if (g->fd >= 0) {
    guardian_send(g, 'q', 0);
    close(g->fd);
    g->fd = -1;
  }
}

void guardian_stop(struct guardian *g)
{
  guardian_release(g);
  guardian_wait(g);
}

void guardian_wait(struct guardian *g)
{
  if (g->pid > 0) {
    while (waitpid(g->pid, NULL, 0) < 0 && errno == EINTR)
      ;
    g->pid = 0;
  }
}
