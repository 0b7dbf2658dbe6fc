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
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "sha256.h"

#define MAGIC "cdrun-job-ledger-1"
/* One record: fixed width, so that one pwrite at 0 replaces it whole. */
#define REC_FMT MAGIC " %016" PRIx64 " %11d %11d\n"
#define REC_LEN (sizeof MAGIC - 1 + 1 + 16 + 1 + 11 + 1 + 11 + 1)

struct job_ledger {
  int dirfd;
  char dir[PATH_MAX];
  void (*log)(void *ctx, const char *line);
  void *log_ctx;
  int last_err;         /* the last write error logged: once each */
};

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
  char name[33], buf[REC_LEN + 1];
  uint64_t inc;
  int fd, round, restarts;
  ssize_t n;

  name_of(job, name);
  fd = openat(l->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
              O_CLOEXEC);
  if (fd < 0)
    return -errno;
  n = pread(fd, buf, REC_LEN, 0);
  close(fd);
  if (n != (ssize_t)REC_LEN)
    return n < 0 ? -errno : -EPROTO;
  buf[REC_LEN] = '\0';
  if (sscanf(buf, MAGIC " %16" SCNx64 " %d %d", &inc, &round,
             &restarts) != 3 || round < -1 || restarts < 0)
    return -EPROTO;
  out->incarnation = inc;
  out->round = round;
  out->restart_count = restarts;
  return 0;
}

int job_ledger_put(struct job_ledger *l, const char *job,
                   const struct rdzv_ledger_rec *rec)
{
  char name[33], buf[REC_LEN + 1];
  int fd, rc = 0;

  name_of(job, name);
  snprintf(buf, sizeof buf, REC_FMT, rec->incarnation, rec->round,
           rec->restart_count);
  fd = openat(l->dirfd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
              O_CLOEXEC, 0600);
  if (fd < 0)
    return -errno;
  if (pwrite(fd, buf, REC_LEN, 0) != (ssize_t)REC_LEN)
    rc = errno ? -errno : -EIO;
  close(fd);
  return rc;
}

int job_ledger_drop(struct job_ledger *l, const char *job)
{
  char name[33];

  name_of(job, name);
  return unlinkat(l->dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
}

static int call_get(void *ctx, const char *job, struct rdzv_ledger_rec *out)
{
  return job_ledger_get(ctx, job, out);
}

static void report(struct job_ledger *l, const char *what, const char *job,
                   int rc)
{
  char line[512];

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
