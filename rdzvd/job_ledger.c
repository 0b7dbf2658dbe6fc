/* job_ledger.c -- rdzvd's per-job record beside its token key file
 * (job_ledger.h). */
#include "job_ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "sha256.h"

#define MAGIC "cdrun-job-ledger-1"
/* One record: fixed width, so that a short or longer file is torn. */
#define REC_FMT MAGIC " %016" PRIx64 " %11d %11d\n"
#define REC_LEN (sizeof MAGIC - 1 + 1 + 16 + 1 + 11 + 1 + 11 + 1)
/* A record being written (Note [ledger writes]); never a job's name,
 * which is 32 hex digits. */
#define TMP_PREFIX ".tmp-"

/* Note [ledger writes]: a record is written to a file of its own
 * (TMP_PREFIX and the job's name), fsynced, renamed over the job's, and
 * the folder fsynced: so after a crash of the daemon or of the machine
 * the job's file is the old record or the new one, whole, never torn or
 * gone (rename is atomic; the folder's fsync makes the rename last).  A
 * temporary file a crash left behind is removed when the ledger is
 * opened.  A record that is torn all the same (a disk, an editor) is
 * refused by job_ledger_get (-EPROTO) and logged once, naming the file:
 * the job's claims then cannot be proved, as if it had no record. */

struct job_ledger {
  int dirfd;
  char dir[PATH_MAX];
  void (*log)(void *ctx, const char *line);
  void *log_ctx;
  int last_err;         /* the last write error logged: once each */
};

/* Removes the temporary files a crash left in l's folder (Note [ledger
 * writes]); at most SWEEP_MAX entries are looked at. */
#define SWEEP_MAX 1000000
static void sweep_tmp(struct job_ledger *l)
{
  int fd = openat(l->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct dirent *e;
  DIR *d;
  long seen = 0;

  if (fd < 0)
    return;
  d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  while (seen++ < SWEEP_MAX && (e = readdir(d)))
    if (strncmp(e->d_name, TMP_PREFIX, sizeof TMP_PREFIX - 1) == 0)
      unlinkat(l->dirfd, e->d_name, 0);
  closedir(d);
}

int job_ledger_open(const char *key_file, struct job_ledger **out,
                    char *err, size_t errlen)
{
  struct job_ledger *l;
  struct stat st;
  int fd;

  *out = NULL;
  l = calloc(1, sizeof *l);
  if (!l)
    return err_set(err, errlen, -ENOMEM, "out of memory");
  if (snprintf(l->dir, sizeof l->dir, "%s.jobs", key_file) >=
      (int)sizeof l->dir) {
    free(l);
    return err_set(err, errlen, -ENAMETOOLONG, "%s.jobs: path too long",
                   key_file);
  }
  if (mkdir(l->dir, 0700) != 0 && errno != EEXIST) {
    int e = errno;

    free(l);
    return err_set(err, errlen, -e, "job ledger %s.jobs: cannot create "
                   "it: %s", key_file, strerror(e));
  }
  fd = open(l->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st) != 0) {
    int e = errno;

    if (fd >= 0)
      close(fd);
    err_set(err, errlen, -e, "job ledger %s: %s", l->dir,
            e == ELOOP || e == ENOTDIR ? "not a folder (a link?)"
                                       : strerror(e));
    free(l);
    return -e;
  }
  if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 077)) {
    err_set(err, errlen, -EPERM, "job ledger %s: must be this user's and "
            "closed to group and others (chmod 700)", l->dir);
    close(fd);
    free(l);
    return -EPERM;
  }
  l->dirfd = fd;
  sweep_tmp(l);
  *out = l;
  return 0;
}

void job_ledger_close(struct job_ledger *l)
{
  if (!l)
    return;
  close(l->dirfd);
  free(l);
}

/* The file name of job: 32 hex digits of SHA-256(id). */
static void name_of(const char *job, char name[33])
{
  static const char digits[] = "0123456789abcdef";
  uint8_t h[SHA256_BYTES];
  struct sha256 s;

  sha256_init(&s);
  sha256_update(&s, job, strlen(job));
  sha256_final(&s, h);
  for (int i = 0; i < 16; i++) {
    name[2 * i] = digits[h[i] >> 4];
    name[2 * i + 1] = digits[h[i] & 15];
  }
  name[32] = '\0';
}

int job_ledger_get(struct job_ledger *l, const char *job,
                   struct rdzv_ledger_rec *out)
{
  char name[33], buf[REC_LEN + 2];
  uint64_t inc;
  int fd, round, restarts;
  ssize_t n;

  name_of(job, name);
  fd = openat(l->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
              O_CLOEXEC);
  if (fd < 0)
    return -errno;
  /* One byte more than a record: a longer file is not one either. */
  n = pread(fd, buf, REC_LEN + 1, 0);
  close(fd);
  if (n != (ssize_t)REC_LEN)
    return n < 0 ? -errno : -EPROTO;
  buf[REC_LEN] = '\0';
  if (memcmp(buf, MAGIC " ", sizeof MAGIC) != 0 ||
      buf[REC_LEN - 1] != '\n' ||
      sscanf(buf, MAGIC " %16" SCNx64 " %d %d", &inc, &round,
             &restarts) != 3 || round < -1 || restarts < 0)
    return -EPROTO;
  out->incarnation = inc;
  out->round = round;
  out->restart_count = restarts;
  return 0;
}

/* Writes all of buf to fd: 0 or a negative errno. */
static int write_all(int fd, const char *buf, size_t len)
{
  size_t off = 0;
  int tries = 0;

  while (off < len && tries++ < 100) {
    ssize_t n = write(fd, buf + off, len - off);

    if (n < 0 && errno != EINTR)
      return -errno;
    if (n > 0)
      off += (size_t)n;
  }
  return off == len ? 0 : -EIO;
}

/* Note [ledger writes]: a temporary file, fsync, rename, fsync of the
 * folder. */
int job_ledger_put(struct job_ledger *l, const char *job,
                   const struct rdzv_ledger_rec *rec)
{
  char name[33], tmp[sizeof TMP_PREFIX + 33], buf[REC_LEN + 1];
  int fd, rc;

  name_of(job, name);
  snprintf(tmp, sizeof tmp, TMP_PREFIX "%s", name);
  snprintf(buf, sizeof buf, REC_FMT, rec->incarnation, rec->round,
           rec->restart_count);
  fd = openat(l->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
              O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0)
    return -errno;
  rc = write_all(fd, buf, REC_LEN);
  if (!rc && fsync(fd) != 0)
    rc = -errno;
  if (close(fd) != 0 && !rc)
    rc = -errno;
  if (!rc && renameat(l->dirfd, tmp, l->dirfd, name) != 0)
    rc = -errno;
  if (rc) {
    unlinkat(l->dirfd, tmp, 0);
    return rc;
  }
  return fsync(l->dirfd) == 0 ? 0 : -errno;
}

int job_ledger_drop(struct job_ledger *l, const char *job)
{
  char name[33];

  name_of(job, name);
  return unlinkat(l->dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
}

/* A record that cannot be read is logged (once per errno) and taken as
 * none: the job's claims cannot be proved (Note [ledger writes]). */
static int call_get(void *ctx, const char *job, struct rdzv_ledger_rec *out)
{
  struct job_ledger *l = ctx;
  int rc = job_ledger_get(l, job, out);
  char name[33], line[PATH_MAX + 256];

  if (!rc || rc == -ENOENT || rc == l->last_err || !l->log)
    return rc;
  l->last_err = rc;
  name_of(job, name);
  snprintf(line, sizeof line, "error: job ledger %s/%s: %s: ignored (its "
           "job's claims cannot be proved after a restart)", l->dir, name,
           rc == -EPROTO ? "not a whole ledger record (torn or damaged)"
                         : strerror(-rc));
  l->log(l->log_ctx, line);
  return rc;
}

static void report(struct job_ledger *l, const char *what, const char *job,
                   int rc)
{
  char line[PATH_MAX + 256];

  if (!rc || rc == l->last_err || !l->log)
    return;
  l->last_err = rc;
  snprintf(line, sizeof line, "error: job ledger %s: cannot %s the record "
           "of a job: %s (after a restart its nodes' claims cannot be "
           "proved)", l->dir, what, strerror(-rc));
  (void)job;
  l->log(l->log_ctx, line);
}

static void call_put(void *ctx, const char *job,
                     const struct rdzv_ledger_rec *rec)
{
  report(ctx, "write", job, job_ledger_put(ctx, job, rec));
}

static void call_drop(void *ctx, const char *job)
{
  report(ctx, "remove", job, job_ledger_drop(ctx, job));
}

struct rdzv_ledger job_ledger_calls(struct job_ledger *l,
                                    void (*log)(void *ctx, const char *line),
                                    void *log_ctx)
{
  struct rdzv_ledger c = { l, call_get, call_put, call_drop };

  l->log = log;
  l->log_ctx = log_ctx;
  return c;
}
