/* check_spawn.c -- unit tests for launcher/spawn.c.
 *
 * Each test process is made a child subreaper, so a worker orphaned by the
 * death of its parent comes back to it and can be reaped and checked with
 * waitpid.
 *
 * Nothing outlives a failed test: Check ends it with _exit() and SIGKILLs
 * its process group, which holds every helper process; the workers are
 * tied to their parents by spawn_worker's PR_SET_PDEATHSIG (and only ever
 * run sleep 30).  A test about to fail on a process that did not die
 * kills what it started first (CHECK_OR_CLEAN). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc_track.h"
#include "spawn.h"

static char tmpdir[64];

static void setup(void)
{
  memset(tracked, 0, sizeof tracked);
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/check_spawn.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_in_tmpdir(const char *name)
{
  char p[128];

  snprintf(p, sizeof p, "%s/%s", tmpdir, name);
  unlink(p);
}

static void teardown(void)
{
  rm_in_tmpdir("marker");
  rm_in_tmpdir("noexec");
  rmdir(tmpdir);
}

/* No child of ours is left, not even a zombie. */
static void expect_no_children(void)
{
  pid_t rc;
  int st, err;

  rc = waitpid(-1, &st, WNOHANG);
  err = errno;
  ck_assert_int_eq(rc, -1);
  ck_assert_int_eq(err, ECHILD);
}

/* Reads fd to EOF into buf (NUL-terminated). */
static size_t read_all(int fd, char *buf, size_t size)
{
  size_t len = 0;
  ssize_t n;

  for (;;) {
    n = read(fd, buf + len, size - 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    ck_assert_int_ge(n, 0);
    if (n == 0)
      break;
    len += (size_t)n;
    ck_assert_uint_lt(len, size - 1);
  }
  buf[len] = '\0';
  return len;
}

/* A field of /proc/<pid>/status holding a hex signal mask. */
static unsigned long long proc_sigmask(pid_t pid, const char *field)
{
  char path[64], line[256];
  size_t flen = strlen(field);
  unsigned long long mask = 0;
  bool found = false;
  FILE *f;

  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
      mask = strtoull(line + flen + 1, NULL, 16);
      found = true;
      break;
    }
  fclose(f);
  ck_assert_msg(found, "no %s in %s", field, path);
  return mask;
}

static unsigned long long sigbit(int sig)
{
  return 1ULL << (sig - 1);
}

static char *empty_env[] = { NULL };

static int spawn(char *const *argv, char *const *envp, int out_fd,
                 pid_t *pid)
{
  struct spawn_opts o = SPAWN_OPTS_INIT;
  int rc;

  o.argv = argv;
  o.envp = envp;
  o.stdout_fd = out_fd;
  *pid = -1;
  rc = spawn_worker(&o, pid);
  if (rc == 0)
    track(*pid);
  return rc;
}

/* ---- exec errors ----------------------------------------------------- */

START_TEST(test_enoent)
{
  char *argv1[] = { "/nonexistent/cdrun-check-no-such-program", NULL };
  char *argv2[] = { "cdrun-check-no-such-program-in-path", NULL };
  pid_t pid = 12345;

  ck_assert_int_eq(spawn(argv1, empty_env, -1, &pid), -ENOENT);
  /* The pid the failed child had, for the report (not 0). */
  ck_assert_int_gt(pid, 0);
  expect_no_children();
  ck_assert_int_eq(spawn(argv2, empty_env, -1, &pid), -ENOENT);
  expect_no_children();
}
END_TEST

START_TEST(test_eacces)
{
  char path[128];
  char *argv[] = { path, NULL };
  pid_t pid;
  int fd;

  snprintf(path, sizeof path, "%s/noexec", tmpdir);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, "#!/bin/sh\nexit 0\n", 17), 17);
  close(fd);
  ck_assert_int_eq(spawn(argv, empty_env, -1, &pid), -EACCES);
  expect_no_children();
}
END_TEST

/* ---- a successful exec ----------------------------------------------- */

START_TEST(test_session_leader)
{
  char *argv[] = { "/bin/sleep", "30", NULL };
  pid_t pid;

  ck_assert_int_eq(spawn(argv, empty_env, -1, &pid), 0);
  ck_assert_int_gt(pid, 0);
  ck_assert_int_eq(getpgid(pid), pid);
  ck_assert_int_eq(getsid(pid), pid);
  ck_assert_int_ne(getsid(pid), getsid(0));
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  expect_killed_by(pid, SIGKILL);
}
END_TEST

START_TEST(test_stdout_to_fd)
{
  char *argv[] = { "echo", "hello", NULL };   /* found through PATH */
  char buf[64];
  int p[2];
  pid_t pid;

  ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
  ck_assert_int_eq(spawn(argv, empty_env, p[1], &pid), 0);
  /* spawn_worker does not take the caller's fd. */
  ck_assert_int_ne(fcntl(p[1], F_GETFD), -1);
  close(p[1]);
  read_all(p[0], buf, sizeof buf);
  close(p[0]);
  ck_assert_str_eq(buf, "hello\n");
  expect_exit(pid, 0);
}
END_TEST

START_TEST(test_all_three_fds)
{
  char *argv[] = { "/bin/sh", "-c",
                   "read x; echo \"out:$x\"; echo \"err:$x\" >&2", NULL };
  struct spawn_opts o = SPAWN_OPTS_INIT;
  char out[64], err[64];
  int in[2], po[2], pe[2];
  pid_t pid;

  ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
  ck_assert_int_eq(pipe2(po, O_CLOEXEC), 0);
  ck_assert_int_eq(pipe2(pe, O_CLOEXEC), 0);
  o.argv = argv;
  o.envp = empty_env;
  o.stdin_fd = in[0];
  o.stdout_fd = po[1];
  o.stderr_fd = pe[1];
  ck_assert_int_eq(spawn_worker(&o, &pid), 0);
  track(pid);
  close(in[0]);
  close(po[1]);
  close(pe[1]);
  ck_assert_int_eq(write(in[1], "abc\n", 4), 4);
  close(in[1]);
  read_all(po[0], out, sizeof out);
  read_all(pe[0], err, sizeof err);
  close(po[0]);
  close(pe[0]);
  ck_assert_str_eq(out, "out:abc\n");
  ck_assert_str_eq(err, "err:abc\n");
  expect_exit(pid, 0);
}
END_TEST

START_TEST(test_exact_env)
{
  char *argv[] = { "/usr/bin/env", NULL };
  char *envp[] = { "CDRUN_A=1", "CDRUN_B=two words", NULL };
  char buf[256];
  int p[2];
  pid_t pid;

  ck_assert_int_eq(setenv("CDRUN_PARENT_ONLY", "x", 1), 0);
  ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
  ck_assert_int_eq(spawn(argv, envp, p[1], &pid), 0);
  close(p[1]);
  read_all(p[0], buf, sizeof buf);
  close(p[0]);
  ck_assert_str_eq(buf, "CDRUN_A=1\nCDRUN_B=two words\n");
  expect_exit(pid, 0);
}
END_TEST

/* ---- in_child -------------------------------------------------------- */

struct before {
  int calls;
  pid_t pid;
  int failed_calls;
  pid_t failed_pid;
  int ret;
  bool marker_existed;
  char exe[PATH_MAX];
  char marker[128];
};

/* Runs in the child, which shares our memory until it execs: system
 * calls only. */
static int in_child(void *ctx)
{
  struct before *b = ctx;
  ssize_t n;

  b->calls++;
  b->pid = getpid();
  b->marker_existed = access(b->marker, F_OK) == 0;
  n = readlink("/proc/self/exe", b->exe, sizeof b->exe - 1);
  b->exe[n > 0 ? n : 0] = '\0';
  return b->ret;
}

static void exec_failed(void *ctx, pid_t pid)
{
  struct before *b = ctx;

  b->failed_calls++;
  b->failed_pid = pid;
}

static void run_before(struct before *b, int want_rc, pid_t *pid)
{
  char *argv[] = { "/bin/sh", "-c", "echo x > \"$0\"", b->marker, NULL };
  struct spawn_opts o = SPAWN_OPTS_INIT;

  snprintf(b->marker, sizeof b->marker, "%s/marker", tmpdir);
  o.argv = argv;
  o.envp = empty_env;
  o.in_child = in_child;
  o.exec_failed = exec_failed;
  o.ctx = b;
  *pid = -1;
  ck_assert_int_eq(spawn_worker(&o, pid), want_rc);
  ck_assert_int_eq(b->calls, 1);
  ck_assert_int_gt(b->pid, 0);
  ck_assert(!b->marker_existed);
}

START_TEST(test_in_child_ok)
{
  struct before b;
  char self[PATH_MAX];
  ssize_t n;
  pid_t pid;

  memset(&b, 0, sizeof b);
  run_before(&b, 0, &pid);
  track(pid);
  ck_assert_int_eq(b.pid, pid);
  /* At that point the child was still a copy of us, not yet exec'd. */
  n = readlink("/proc/self/exe", self, sizeof self - 1);
  ck_assert_int_gt(n, 0);
  self[n] = '\0';
  ck_assert_str_eq(b.exe, self);
  expect_exit(pid, 0);
  ck_assert_int_eq(access(b.marker, F_OK), 0);
  ck_assert_int_eq(b.failed_calls, 0);
}
END_TEST

/* An exec failure undoes what in_child recorded (the agent's guardian
 * must not keep a dead worker's process group on its list). */
START_TEST(test_exec_failure_undoes_in_child)
{
  char *argv[] = { "/nonexistent/cdrun-test-program", NULL };
  struct spawn_opts o = SPAWN_OPTS_INIT;
  struct before b;
  pid_t pid = -1;

  memset(&b, 0, sizeof b);
  o.argv = argv;
  o.envp = empty_env;
  o.in_child = in_child;
  o.exec_failed = exec_failed;
  o.ctx = &b;
  ck_assert_int_eq(spawn_worker(&o, &pid), -ENOENT);
  ck_assert_int_eq(b.calls, 1);
  ck_assert_int_eq(b.failed_calls, 1);
  ck_assert_int_eq(b.failed_pid, b.pid);
  expect_no_children();
}
END_TEST

START_TEST(test_in_child_error)
{
  struct before b;
  pid_t pid;
  int rc, err;

  memset(&b, 0, sizeof b);
  b.ret = -ECANCELED;
  run_before(&b, -ECANCELED, &pid);
  /* Reaped, and the program never ran. */
  expect_no_children();
  rc = access(b.marker, F_OK);
  err = errno;
  ck_assert_int_eq(rc, -1);
  ck_assert_int_eq(err, ENOENT);
}
END_TEST

/* ---- the cgroup (Note [born in the cgroup]) -------------------------- */

/* A cgroup of our own below ours, as contain.c makes one; "" where the
 * system delegates none (the test then only says so). */
static void make_test_cgroup(char *out, size_t len)
{
  char line[4096], mnt[PATH_MAX] = "", own[PATH_MAX] = "";
  FILE *f = fopen("/proc/self/mountinfo", "r");

  out[0] = '\0';
  if (f) {
    while (fgets(line, sizeof line, f)) {
      char root[PATH_MAX], m[PATH_MAX];

      if (strstr(line, " - cgroup2 ") &&
          sscanf(line, "%*s %*s %*s %4095s %4095s", root, m) == 2 &&
          strcmp(root, "/") == 0) {
        snprintf(mnt, sizeof mnt, "%s", m);
        break;
      }
    }
    fclose(f);
  }
  f = fopen("/proc/self/cgroup", "r");
  if (f) {
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "0::", 3) == 0) {
        line[strcspn(line, "\n")] = '\0';
        snprintf(own, sizeof own, "%s", strcmp(line + 3, "/") ? line + 3
                                                               : "");
      }
    fclose(f);
  }
  if (!mnt[0])
    return;
  snprintf(out, len, "%s%s/check_spawn-%d", mnt, own, (int)getpid());
  if (mkdir(out, 0755) < 0)
    out[0] = '\0';
}

struct cg_probe {
  char seen[256];       /* the child's /proc/self/cgroup, in in_child */
};

/* in_child: what cgroup the child is in before it runs anything. */
static int read_own_cgroup(void *ctx)
{
  struct cg_probe *p = ctx;
  int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, p->seen, sizeof p->seen - 1) : -1;

  if (fd >= 0)
    close(fd);
  p->seen[n > 0 ? n : 0] = '\0';
  return 0;
}

/* Spawns /bin/true with cgroup_fd = cg: it must be in cg before it runs
 * anything (in_child), and cg be no error; then removes cg. */
static void expect_born_in(const char *cg)
{
  char *argv[] = { "/bin/true", NULL };
  struct spawn_opts o = SPAWN_OPTS_INIT;
  struct cg_probe probe;
  char want[64];
  int err = 0, rc, st = 0;
  bool reaped = false;
  pid_t pid = -1;

  memset(&probe, 0, sizeof probe);
  o.argv = argv;
  o.envp = empty_env;
  o.cgroup_fd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  o.cgroup_err = &err;
  o.in_child = read_own_cgroup;
  o.ctx = &probe;
  ck_assert_int_ge(o.cgroup_fd, 0);
  rc = spawn_worker(&o, &pid);
  /* The cgroup goes first, whatever the outcome (it would outlive a
   * failed test): the worker has left it once reaped. */
  if (rc == 0) {
    track(pid);
    reaped = reap_within(pid, &st, LIMIT_MS);
  }
  close(o.cgroup_fd);
  rmdir(cg);
  ck_assert_int_eq(rc, 0);
  ck_assert_msg(reaped && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "pid %d: status 0x%x, want exit 0", (int)pid, st);
  ck_assert_int_eq(err, 0);
  snprintf(want, sizeof want, "/check_spawn-%d\n", (int)getpid());
  ck_assert_msg(strstr(probe.seen, want), "the child was in '%s' before "
                "it ran anything, not in %s", probe.seen, cg);
}

START_TEST(test_cgroup_born_in)
{
  char cg[PATH_MAX];

  make_test_cgroup(cg, sizeof cg);
  if (!cg[0]) {
    fprintf(stderr, "note: no delegated cgroup v2 here; not tested\n");
    return;
  }
  expect_born_in(cg);
}
END_TEST

/* A cgroup that was killed (cgroup.kill) before: some kernels kill every
 * child born in it afterwards (Note [no cgroup.kill while spawning] in
 * contain.c); the worker must run all the same, in the cgroup. */
START_TEST(test_cgroup_killed_before)
{
  char cg[PATH_MAX], kill_path[PATH_MAX + 16];
  int fd;

  make_test_cgroup(cg, sizeof cg);
  if (!cg[0]) {
    fprintf(stderr, "note: no delegated cgroup v2 here; not tested\n");
    return;
  }
  snprintf(kill_path, sizeof kill_path, "%s/cgroup.kill", cg);
  fd = open(kill_path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    rmdir(cg);
    fprintf(stderr, "note: no cgroup.kill here; not tested\n");
    return;
  }
  ck_assert_int_eq(write(fd, "1", 1), 1);
  close(fd);
  expect_born_in(cg);
}
END_TEST

/* A cgroup the kernel will not have (here: not a cgroup at all): the
 * worker starts anyway, and the caller learns why. */
START_TEST(test_cgroup_refused)
{
  char *argv[] = { "echo", "hello", NULL };
  struct spawn_opts o = SPAWN_OPTS_INIT;
  char buf[64];
  int p[2], err = 0;
  pid_t pid;

  ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
  o.argv = argv;
  o.envp = empty_env;
  o.stdout_fd = p[1];
  o.cgroup_fd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  o.cgroup_err = &err;
  ck_assert_int_ge(o.cgroup_fd, 0);
  ck_assert_int_eq(spawn_worker(&o, &pid), 0);
  track(pid);
  close(p[1]);
  close(o.cgroup_fd);
  read_all(p[0], buf, sizeof buf);
  close(p[0]);
  ck_assert_str_eq(buf, "hello\n");
  expect_exit(pid, 0);
  ck_assert_int_lt(err, 0);
}
END_TEST

/* ---- signals --------------------------------------------------------- */

START_TEST(test_signals_reset)
{
  char *argv[] = { "/bin/sleep", "30", NULL };
  sigset_t usr1, old;
  pid_t a, b;

  ck_assert(signal(SIGTERM, SIG_IGN) != SIG_ERR);
  ck_assert(signal(SIGHUP, SIG_IGN) != SIG_ERR);
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ck_assert_int_eq(sigprocmask(SIG_BLOCK, &usr1, &old), 0);

  ck_assert_int_eq(spawn(argv, empty_env, -1, &a), 0);
  ck_assert_int_eq(spawn(argv, empty_env, -1, &b), 0);
  ck_assert_uint_eq(proc_sigmask(a, "SigIgn") &
                    (sigbit(SIGTERM) | sigbit(SIGHUP)), 0);
  ck_assert_uint_eq(proc_sigmask(a, "SigBlk") & sigbit(SIGUSR1), 0);
  ck_assert_int_eq(kill(a, SIGTERM), 0);
  ck_assert_int_eq(kill(b, SIGUSR1), 0);
  expect_killed_by(a, SIGTERM);
  expect_killed_by(b, SIGUSR1);

  /* Our own dispositions are untouched. */
  ck_assert(signal(SIGTERM, SIG_DFL) == SIG_IGN);
  ck_assert_uint_ne(proc_sigmask(getpid(), "SigBlk") & sigbit(SIGUSR1), 0);
  signal(SIGHUP, SIG_DFL);
  sigprocmask(SIG_SETMASK, &old, NULL);
}
END_TEST

/* A batch reads the dispositions once (spawn.c's Note [resetting the
 * handlers]): what the agent ignores or catches when the batch begins is
 * SIG_DFL in every worker of it, on every spawning thread. */
static void usr2_handler(int sig)
{
  (void)sig;
}

START_TEST(test_signals_reset_many)
{
  char *argv[] = { "/bin/sleep", "30", NULL };
  struct spawn_opts o[3];
  struct spawner *sp;
  int errs[3], i;
  pid_t pids[3];

  ck_assert(signal(SIGHUP, SIG_IGN) != SIG_ERR);
  ck_assert(signal(SIGUSR2, usr2_handler) != SIG_ERR);
  ck_assert_int_eq(spawner_start(2, &sp), 0);
  for (i = 0; i < 3; i++) {
    o[i] = (struct spawn_opts)SPAWN_OPTS_INIT;
    o[i].argv = argv;
    o[i].envp = empty_env;
  }
  spawn_many(sp, o, 3, pids, errs);
  for (i = 0; i < 3; i++) {
    ck_assert_int_eq(errs[i], 0);
    track(pids[i]);
    ck_assert_uint_eq(proc_sigmask(pids[i], "SigIgn") & sigbit(SIGHUP), 0);
    ck_assert_int_eq(kill(pids[i], i == 0 ? SIGHUP : SIGUSR2), 0);
    expect_killed_by(pids[i], i == 0 ? SIGHUP : SIGUSR2);
  }
  spawner_stop(sp);
  ck_assert(signal(SIGHUP, SIG_DFL) == SIG_IGN);
  ck_assert(signal(SIGUSR2, SIG_DFL) == usr2_handler);
}
END_TEST

/* The middle process of the parent-death test: spawns sleep, reports its
 * pid, waits to be killed. */
static void middle_main(int wfd)
{
  char *argv[] = { "/bin/sleep", "30", NULL };
  struct spawn_opts o = SPAWN_OPTS_INIT;
  pid_t pid = -1;

  o.argv = argv;
  o.envp = empty_env;
  if (spawn_worker(&o, &pid) != 0)
    pid = -1;
  if (write(wfd, &pid, sizeof pid) != (ssize_t)sizeof pid)
    _exit(1);
  for (;;)
    pause();
}

START_TEST(test_parent_death_kills_worker)
{
  pid_t mid, worker = -1;
  int p[2];

  ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
  mid = fork();
  ck_assert_int_ge(mid, 0);
  if (mid == 0) {
    close(p[0]);
    middle_main(p[1]);
  }
  track(mid);
  close(p[1]);
  ck_assert_int_eq(read(p[0], &worker, sizeof worker),
                   (ssize_t)sizeof worker);
  close(p[0]);
  ck_assert_int_gt(worker, 0);
  track(worker);
  /* Alive and running sleep until its parent goes. */
  ck_assert_int_eq(kill(worker, 0), 0);
  ck_assert_int_eq(getsid(worker), worker);

  ck_assert_int_eq(kill(mid, SIGKILL), 0);
  expect_killed_by(mid, SIGKILL);
  /* Orphaned, it comes back to us (the subreaper): PR_SET_PDEATHSIG
   * must have killed it. */
  expect_killed_by(worker, SIGKILL);
}
END_TEST

/* ---- several at once -------------------------------------------------- */

#define MANY 12
#define MANY_BAD 5      /* this one cannot be executed */

/* A batch on a spawner's threads: results in order, the bad one's error
 * in its slot, and the workers outlive the batch (their parent-death
 * signal follows the thread that made them, which must not end). */
START_TEST(test_spawn_many)
{
  char *sh[] = { "/bin/sh", "-c", "read x && echo \"$x\" > \"$0\"", NULL,
                 NULL };
  char *bad[] = { "/nonexistent/cdrun-test-program", NULL };
  char files[MANY][128], *argvs[MANY][5], buf[16];
  struct spawn_opts o[MANY];
  struct spawner *sp;
  int in[MANY][2], errs[MANY], i, j;
  pid_t pids[MANY];

  signal(SIGPIPE, SIG_IGN);     /* a killed worker: EPIPE, not death */
  ck_assert_int_eq(spawner_start(3, &sp), 0);
  for (i = 0; i < MANY; i++) {
    o[i] = (struct spawn_opts)SPAWN_OPTS_INIT;
    snprintf(files[i], sizeof files[i], "%s/w%d", tmpdir, i);
    for (j = 0; j < 5; j++)
      argvs[i][j] = sh[j];
    argvs[i][3] = files[i];
    ck_assert_int_eq(pipe2(in[i], O_CLOEXEC), 0);
    o[i].argv = i == MANY_BAD ? bad : argvs[i];
    o[i].envp = empty_env;
    o[i].stdin_fd = in[i][0];
  }
  spawn_many(sp, o, MANY, pids, errs);
  for (i = 0; i < MANY; i++) {
    close(in[i][0]);
    if (i != MANY_BAD) {
      ck_assert_int_eq(errs[i], 0);
      track(pids[i]);
    }
  }
  ck_assert_int_eq(errs[MANY_BAD], -ENOENT);
  /* Only now may they go on: a worker killed when its thread left the
   * batch never reads this. */
  for (i = 0; i < MANY; i++) {
    if (i != MANY_BAD)
      ck_assert_int_eq(write(in[i][1], "go\n", 3), 3);
    close(in[i][1]);
  }
  for (i = 0; i < MANY; i++) {
    int fd;

    if (i == MANY_BAD)
      continue;
    expect_exit(pids[i], 0);
    fd = open(files[i], O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    read_all(fd, buf, sizeof buf);
    close(fd);
    unlink(files[i]);
    ck_assert_str_eq(buf, "go\n");
  }
  spawner_stop(sp);
  signal(SIGPIPE, SIG_DFL);
  expect_no_children();
}
END_TEST

#define STREAM_CAP 6
#define STREAM_END 4    /* the preparation "failed" at this one */

/* A stream: the first worker runs before the second is marked ready, and
 * an end short of the cap spawns only what was ready; the threads leave
 * the slots beyond it untouched. */
START_TEST(test_spawn_stream)
{
  char *sh[] = { "/bin/sh", "-c", ": > \"$0\"", NULL, NULL };
  char files[STREAM_CAP][128], *argvs[STREAM_CAP][5];
  struct spawn_opts o[STREAM_CAP];
  struct spawn_batch b;
  struct spawner *sp;
  int errs[STREAM_CAP], i, j, tries;
  pid_t pids[STREAM_CAP];

  ck_assert_int_eq(spawner_start(3, &sp), 0);
  for (i = 0; i < STREAM_CAP; i++) {
    o[i] = (struct spawn_opts)SPAWN_OPTS_INIT;
    snprintf(files[i], sizeof files[i], "%s/s%d", tmpdir, i);
    for (j = 0; j < 5; j++)
      argvs[i][j] = sh[j];
    argvs[i][3] = files[i];
    o[i].argv = argvs[i];
    o[i].envp = empty_env;
    errs[i] = 12345;
    pids[i] = -7;
  }
  spawn_stream_begin(sp, &b, o, STREAM_CAP, pids, errs);
  spawn_stream_ready(&b, 1);
  /* Worker 0 runs while nothing else is ready: its file appears. */
  for (tries = 0; tries < 2000 && access(files[0], F_OK) != 0; tries++)
    usleep(5000);
  ck_assert_msg(access(files[0], F_OK) == 0,
                "the first worker did not start before the end");
  for (i = 1; i < STREAM_END; i++)
    spawn_stream_ready(&b, (size_t)i + 1);
  spawn_stream_end(&b, STREAM_END);
  for (i = 0; i < STREAM_END; i++) {
    ck_assert_int_eq(errs[i], 0);
    track(pids[i]);
    expect_exit(pids[i], 0);
    ck_assert_int_eq(access(files[i], F_OK), 0);
    unlink(files[i]);
  }
  for (i = STREAM_END; i < STREAM_CAP; i++) {
    ck_assert_int_eq(errs[i], 12345);
    ck_assert_int_eq(pids[i], -7);
    ck_assert_int_ne(access(files[i], F_OK), 0);
  }
  spawner_stop(sp);
  expect_no_children();
}
END_TEST

static Suite *spawn_suite(void)
{
  Suite *s = suite_create("spawn");
  TCase *tc = tcase_create("errors");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_enoent);
  tcase_add_test(tc, test_eacces);
  suite_add_tcase(s, tc);

  tc = tcase_create("exec");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_session_leader);
  tcase_add_test(tc, test_stdout_to_fd);
  tcase_add_test(tc, test_all_three_fds);
  tcase_add_test(tc, test_exact_env);
  suite_add_tcase(s, tc);

  tc = tcase_create("in_child");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_in_child_ok);
  tcase_add_test(tc, test_in_child_error);
  tcase_add_test(tc, test_exec_failure_undoes_in_child);
  suite_add_tcase(s, tc);

  tc = tcase_create("many");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_spawn_many);
  tcase_add_test(tc, test_spawn_stream);
  suite_add_tcase(s, tc);

  tc = tcase_create("cgroup");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_cgroup_born_in);
  tcase_add_test(tc, test_cgroup_killed_before);
  tcase_add_test(tc, test_cgroup_refused);
  suite_add_tcase(s, tc);

  tc = tcase_create("signals");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_signals_reset);
  tcase_add_test(tc, test_signals_reset_many);
  tcase_add_test(tc, test_parent_death_kills_worker);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(spawn_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
