/* contain.c -- see Note [containment] in contain.h. */
#include "contain.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "num.h"

/* Rounds of contain_kill_all: each kills the children of the last. */
#define KILL_ROUNDS 1000
#define STRAYS_MAX 4096
/* contain_cgroup_remove: how long it waits for the cgroup to empty, and
 * how often it kills again meanwhile. */
#define REMOVE_WAIT_MS 30000
#define REMOVE_REKILL_MS 100
#define REMOVE_DEPTH_MAX 32

static int write_str(const char *path, const char *s)
{
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t n;
  int err = 0;

  if (fd < 0)
    return -errno;
  n = write(fd, s, strlen(s));
  if (n < 0)
    err = -errno;
  close(fd);
  return err;
}

static void nap_ms(long ms)
{
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

/* The cgroup2 mount point and its root, from /proc/self/mountinfo (mnt
 * and root: PATH_MAX bytes each).  Note [small frames]: each buffer on
 * the stack that is written to is a page of cdrun's peak RSS. */
static int cgroup2_mount(char mnt[PATH_MAX], char root[PATH_MAX])
{
  char line[4096];
  FILE *f = fopen("/proc/self/mountinfo", "re");
  int found = -ENOENT;

  if (!f)
    return -errno;
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, " - cgroup2 ") &&
        sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) == 2) {
      found = 0;
      break;
    }
  }
  fclose(f);
  return found;
}

/* This process's cgroup v2 path ("0::/a/b"), relative to the hierarchy. */
static int own_cgroup(char *out, size_t len)
{
  char line[4096];
  FILE *f = fopen("/proc/self/cgroup", "re");
  int found = -ENOENT;

  if (!f)
    return -errno;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "0::", 3) != 0)
      continue;
    line[strcspn(line, "\n")] = '\0';
    snprintf(out, len, "%s", line + 3);
    found = 0;
    break;
  }
  fclose(f);
  return found;
}

/* Note [stale cgroups]: a cdrun SIGKILLed together with its guardian (a
 * batch system killing the whole job step at once, as Slurm does) leaves
 * its empty cdrun-<pid> behind, with nobody left to remove it.  The next
 * cdrun in the same cgroup removes the siblings whose pid is gone: rmdir
 * takes only an empty cgroup without children, so one still in use
 * stays, and a live cdrun's pid exists.  (cdruns of different pid
 * namespaces sharing one cgroup would see each other's pids as gone; an
 * empty cgroup of such a cdrun could go before its workers start, and
 * that cdrun would then fall back to the subreaper.)  The guardian
 * sweeps, at its start: the launch does not wait for it. */
#define STALE_SWEEP_MAX 4096

void contain_sweep_stale(const char *cgroup)
{
  char parent[PATH_MAX];
  const char *self;
  struct dirent *e;
  long pid;
  int seen = 0;
  DIR *d;

  self = strrchr(cgroup, '/');
  if (!self || (size_t)(self - cgroup) >= sizeof parent)
    return;
  memcpy(parent, cgroup, (size_t)(self - cgroup));
  parent[self - cgroup] = '\0';
  self++;
  d = opendir(parent);
  if (!d)
    return;
  while ((e = readdir(d)) && seen < STALE_SWEEP_MAX) {
    if (strncmp(e->d_name, "cdrun-", 6) != 0)
      continue;
    seen++;
    if (strcmp(e->d_name, self) == 0 ||
        num_parse_long(e->d_name + 6, 1, INT_MAX, &pid) != 0)
      continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      continue;
    unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
  }
  closedir(d);
}

static void make_cgroup(struct contain *c)
{
  char mnt[PATH_MAX], root[PATH_MAX], own[PATH_MAX];
  char *path = c->cgroup;       /* Note [small frames] */
  const char *rel, *env = getenv("CDRUN_CGROUP");
  size_t rl;
  int n;

  if (env && strcmp(env, "0") == 0)
    return;
  if (cgroup2_mount(mnt, root) || own_cgroup(own, sizeof own))
    return;
  /* The mount may show only a subtree (a container's): drop its root. */
  rel = own;
  rl = strlen(root);
  if (strcmp(root, "/") != 0) {
    if (strncmp(own, root, rl) != 0 || (own[rl] && own[rl] != '/'))
      return;
    rel = own + rl;
  }
  n = snprintf(path, sizeof c->cgroup, "%s%s%scdrun-%d", mnt, rel,
               rel[0] && rel[strlen(rel) - 1] == '/' ? "" : "/",
               (int)getpid());
  /* One left by an earlier cdrun of the same pid (SIGKILLed with its
   * descendants stuck) goes if it is empty; else there is no cgroup. */
  if (n < 0 || (size_t)n >= sizeof c->cgroup ||
      (mkdir(path, 0755) < 0 &&
       (errno != EEXIST || rmdir(path) < 0 || mkdir(path, 0755) < 0)))
    path[0] = '\0';
}

static void make_token(struct contain *c)
{
  unsigned char b[8] = { 0 };
  struct timespec ts;

  if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
    memset(b, 0, sizeof b);
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(c->token, sizeof c->token, "%d.%02x%02x%02x%02x%02x%02x%02x%02x.%ld",
           (int)getpid(), b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
           (long)ts.tv_nsec);
}

static void close_dir(struct contain *c)
{
  if (c->dir_fd >= 0)
    close(c->dir_fd);
  c->dir_fd = -1;
}

/* Gives the cgroup up, leaving alone the workers that are in it: empty,
 * it goes now; else the guardian, which knows it from its start, removes
 * it at the end. */
static void drop_cgroup(struct contain *c)
{
  close_dir(c);
  if (c->cgroup[0])
    rmdir(c->cgroup);
  c->cgroup[0] = '\0';
}

int contain_init(struct contain *c)
{
  memset(c, 0, sizeof *c);
  c->dir_fd = -1;
  make_token(c);
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
    c->subreaper = true;
  make_cgroup(c);
  if (c->cgroup[0]) {
    c->dir_fd = open(c->cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->dir_fd < 0 ||
        faccessat(c->dir_fd, "cgroup.procs", W_OK, AT_EACCESS) < 0)
      drop_cgroup(c);
  }
  return c->subreaper || c->cgroup[0] ? 0 : -errno;
}

int contain_check(struct contain *c)
{
  int err = c->enter_err;

  if (!err)
    return 0;
  c->enter_err = 0;
  /* Those that entered before stay there; the subreaper covers all. */
  drop_cgroup(c);
  return err;
}

/* Kills the members of cgroup, and of the cgroups below it, one by one:
 * round after round until a round finds none to kill. */
static int kill_members(const char *cgroup, int depth)
{
  char path[PATH_MAX + 16], buf[4096];
  struct dirent *d;
  int fd, rounds, err = -EAGAIN;
  ssize_t n;
  DIR *dir;

  snprintf(path, sizeof path, "%s/cgroup.procs", cgroup);
  for (rounds = 0; rounds < KILL_ROUNDS; rounds++) {
    int killed = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return -errno;
    while ((n = read(fd, buf, sizeof buf - 1)) > 0) {
      const char *p = buf;

      buf[n] = '\0';
      while (*p) {
        size_t digits = strspn(p, "0123456789");
        long pid;

        if (num_parse_long_n(p, digits, 0, INT_MAX, &pid))
          break;
        if (pid > 0 && kill((pid_t)pid, SIGKILL) == 0)
          killed++;
        p += digits;
        p += *p == '\n';
      }
    }
    close(fd);
    if (!killed) {
      err = 0;
      break;
    }
  }
  if (depth >= REMOVE_DEPTH_MAX || !(dir = opendir(cgroup)))
    return err;
  while ((d = readdir(dir))) {
    if (d->d_type != DT_DIR || d->d_name[0] == '.')
      continue;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", cgroup, d->d_name) <
        sizeof path)
      kill_members(path, depth + 1);
  }
  closedir(dir);
  return err;
}

int contain_cgroup_kill(const char *cgroup)
{
  char path[PATH_MAX + 16];
  int err;

  snprintf(path, sizeof path, "%s/cgroup.kill", cgroup);
  err = write_str(path, "1");
  if (err != -ENOENT)
    return err;
  return kill_members(cgroup, 0);     /* kernels before 5.14 */
}

/* Whether <cgroup>/cgroup.events (open as fd) says "populated 0". */
static bool cgroup_empty(int fd)
{
  char buf[256];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);

  if (n <= 0)
    return false;
  buf[n] = '\0';
  return strstr(buf, "populated 0") != NULL;
}

/* Note [cgroup removal]: rmdir fails with EBUSY while a process is left
 * in the cgroup or in a cgroup below it, and both happen after a kill:
 *  - a SIGKILLed process leaves only once it has exited, which on a loaded
 *    machine takes as long as the scheduler wants;
 *  - a worker may make cgroups of its own below ours (ours is delegated):
 *    a cdrun run by a worker makes cdrun-<pid> inside it, and its guardian
 *    dies in our cgroup.kill before it can remove it.
 * A fixed number of rmdir attempts at fixed intervals (what this was) lost
 * the first race now and then and always the second, and left the cgroup
 * behind.  So: kill, wait for the event itself (cgroup.events' "populated
 * 0", which the kernel notifies as POLLPRI), kill again now and then in
 * case something was still being born into it, remove the empty cgroups
 * below, then rmdir; bounded (REMOVE_WAIT_MS) only so that a process stuck
 * in the kernel cannot hold the caller forever. */
static int cgroup_remove_tree(const char *cgroup, int depth,
                              const struct timespec *t0);

/* rmdir of every cgroup below cgroup (its subdirectories). */
static void remove_children(const char *cgroup, int depth,
                            const struct timespec *t0)
{
  char sub[PATH_MAX];
  struct dirent *d;
  DIR *dir;

  if (depth >= REMOVE_DEPTH_MAX || !(dir = opendir(cgroup)))
    return;
  while ((d = readdir(dir))) {
    if (d->d_type != DT_DIR || d->d_name[0] == '.')
      continue;
    if ((size_t)snprintf(sub, sizeof sub, "%s/%s", cgroup, d->d_name) <
        sizeof sub)
      cgroup_remove_tree(sub, depth + 1, t0);
  }
  closedir(dir);
}

static long ms_since(const struct timespec *t0)
{
  struct timespec now;

  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - t0->tv_sec) * 1000 +
         (now.tv_nsec - t0->tv_nsec) / 1000000;
}

static int cgroup_remove_tree(const char *cgroup, int depth,
                              const struct timespec *t0)
{
  char path[PATH_MAX + 16];
  int fd, err = 0;

  if (rmdir(cgroup) == 0 || errno == ENOENT)
    return 0;
  if (errno != EBUSY)
    return -errno;
  snprintf(path, sizeof path, "%s/cgroup.events", cgroup);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  for (;;) {
    contain_cgroup_kill(cgroup);    /* the cgroups below it too */
    if (fd >= 0 && !cgroup_empty(fd)) {
      struct pollfd p = { fd, POLLPRI, 0 };

      /* Woken by any change of cgroup.events; checked again after the
       * next kill. */
      if (poll(&p, 1, REMOVE_REKILL_MS) < 0 && errno != EINTR)
        nap_ms(REMOVE_REKILL_MS);
    } else {
      remove_children(cgroup, depth, t0);
    }
    if (rmdir(cgroup) == 0 || errno == ENOENT)
      break;
    if (errno != EBUSY) {
      err = -errno;
      break;
    }
    if (ms_since(t0) >= REMOVE_WAIT_MS) {
      err = -EBUSY;
      break;
    }
    if (fd < 0 || cgroup_empty(fd))
      nap_ms(10);       /* empty, yet busy a moment longer */
  }
  if (fd >= 0)
    close(fd);
  return err;
}

int contain_cgroup_remove(const char *cgroup)
{
  struct timespec t0;

  clock_gettime(CLOCK_MONOTONIC, &t0);
  return cgroup_remove_tree(cgroup, 0, &t0);
}

/* Whether /proc/<pid>/environ holds the NUL-terminated entry want. */
static bool environ_has(const char *pid, const char *want, size_t wlen)
{
  static char buf[1 << 21];     /* the largest environment execve takes */
  char path[64 + 256];
  size_t n = 0;
  ssize_t r;
  int fd;

  snprintf(path, sizeof path, "/proc/%s/environ", pid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  while (n < sizeof buf - 1 &&
         (r = read(fd, buf + n, sizeof buf - 1 - n)) > 0)
    n += (size_t)r;
  close(fd);
  buf[n] = '\0';
  for (size_t i = 0; i + wlen <= n; i += strlen(buf + i) + 1)
    if (memcmp(buf + i, want, wlen) == 0)
      return true;
  return false;
}

int contain_kill_token(const char *token)
{
  char want[sizeof ((struct contain *)0)->token + 32];
  size_t wlen;
  struct dirent *d;
  int round, killed, total = 0;
  pid_t self = getpid();

  if (!token || !token[0])
    return 0;
  /* The entry with its NUL, so that a longer token never matches. */
  wlen = (size_t)snprintf(want, sizeof want, "%s=%s", CONTAIN_ENV, token) + 1;
  for (round = 0; round < KILL_ROUNDS; round++) {
    DIR *dir = opendir("/proc");

    if (!dir)
      return total;
    killed = 0;
    while ((d = readdir(dir))) {
      long pid;

      if (num_parse_long(d->d_name, 1, INT_MAX, &pid) || pid == self ||
          !environ_has(d->d_name, want, wlen))
        continue;
      if (kill((pid_t)pid, SIGKILL) == 0)
        killed++;
    }
    closedir(dir);
    total += killed;
    if (!killed)
      break;
    nap_ms(10);   /* let the killed die, or a zombie's environ still reads */
  }
  return total;
}

/* Appends the pids in /proc/self/task/<tid>/children to pids. */
static size_t list_children(pid_t *pids, size_t max)
{
  char path[64 + 256], buf[8192];
  struct dirent *d;
  size_t n = 0;
  DIR *dir = opendir("/proc/self/task");

  if (!dir)
    return 0;
  while ((d = readdir(dir)) && n < max) {
    ssize_t r;
    int fd;

    if (d->d_name[0] == '.')
      continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/children", d->d_name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0)
      continue;
    buf[r] = '\0';
    for (const char *p = buf; *p && n < max; p += *p == '\n') {
      size_t digits = strspn(p, "0123456789");
      long pid;

      if (num_parse_long_n(p, digits, 0, INT_MAX, &pid))
        break;
      pids[n++] = (pid_t)pid;
      p += digits;
    }
  }
  closedir(dir);
  return n;
}

void contain_kill_all(struct contain *c, pid_t spare)
{
  static pid_t pids[STRAYS_MAX];
  size_t n, i, strays;
  int round;

  /* Note [no cgroup.kill while spawning]: not cgroup.kill, which the
   * workers of the next round would die of: a cgroup that was killed so
   * kills every child later born in it (CLONE_INTO_CGROUP) on kernels
   * that compare the child's cgroup's kill count with its parent's (6.x,
   * up to 6.18 at least).  The guardian and contain_destroy, at the end,
   * use it. */
  if (c->cgroup[0])
    kill_members(c->cgroup, 0);
  if (!c->subreaper)
    return;
  /* Orphans of the workers are our children now (subreaper); killing
   * one re-parents its own children to us, hence the rounds. */
  for (round = 0; round < KILL_ROUNDS; round++) {
    n = list_children(pids, STRAYS_MAX);
    for (i = 0, strays = 0; i < n; i++) {
      if (pids[i] == spare)
        continue;
      kill(pids[i], SIGKILL);
      pids[strays++] = pids[i];
    }
    if (!strays)
      return;
    for (i = 0; i < strays; i++)
      while (waitpid(pids[i], NULL, __WALL) < 0 && errno == EINTR)
        ;
  }
}

void contain_destroy(struct contain *c)
{
  contain_kill_all(c, -1);
  close_dir(c);
  if (!c->cgroup[0])
    return;
  contain_cgroup_remove(c->cgroup);
  c->cgroup[0] = '\0';
}
