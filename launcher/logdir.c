/* logdir.c -- the log folders: made with their parents, removed whole. */
#include "logdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Levels the quick removal descends before it hands the rest to nftw:
 * each level holds an open folder (a descriptor and readdir's buffer). */
#define RMTREE_FAST_DEPTH 8

/* mkdir that accepts an existing directory (and only a directory). */
static int mkdir_one(const char *path)
{
  struct stat st;

  if (mkdir(path, 0755) == 0)
    return 0;
  if (errno != EEXIST)
    return -errno;
  if (stat(path, &st) < 0)
    return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int logdir_mkdirs(const char *dir)
{
  char *path;
  int rc = 0;

  if (!dir || !*dir)
    return -ENOENT;
  /* The common case: the parent is there. */
  if (mkdir(dir, 0755) == 0)
    return 0;
  path = strdup(dir);
  if (!path)
    return -ENOMEM;
  for (char *p = path + 1; *p; p++) {
    if (*p != '/' || p[-1] == '/')
      continue;
    *p = '\0';
    rc = mkdir_one(path);
    *p = '/';
    if (rc < 0)
      break;
  }
  if (rc == 0)
    rc = mkdir_one(path);
  free(path);
  return rc;
}

/* Removes one entry of folder dfd: a folder with unlinkat(AT_REMOVEDIR)
 * first (Note [quick rmtree]), else emptied and then removed. */
static int rm_at(int dfd, const char *name, unsigned char type, int depth);

/* Removes what folder fd holds (fd is closed).  Returns 0 or -errno. */
static int rm_contents(int fd, int depth)
{
  struct dirent *e;
  DIR *d = fdopendir(fd);
  int rc = 0, r;

  if (!d) {
    r = -errno;
    close(fd);
    return r;
  }
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' &&
        (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
      continue;
    r = rm_at(dirfd(d), e->d_name, e->d_type, depth);
    if (r && !rc)
      rc = r;
  }
  closedir(d);
  return rc;
}

static int rm_at(int dfd, const char *name, unsigned char type, int depth)
{
  int fd, rc;

  if (type != DT_DIR && type != DT_UNKNOWN)
    return unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
  if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
    return 0;
  if (errno == ENOTDIR)         /* DT_UNKNOWN, and not a folder */
    return unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
  if (errno != ENOTEMPTY && errno != EEXIST)
    return -errno;
  if (depth <= 0)
    return -ELOOP;              /* the caller falls back to nftw */
  fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : -errno;
  rc = rm_contents(fd, depth - 1);
  if (rc)
    return rc;
  return unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0
                                                                   : -errno;
}

/* nftw callback: children come before their directory (FTW_DEPTH).  A
 * positive errno return stops the walk and is what nftw returns. */
static int rm_entry(const char *path, const struct stat *st, int type,
                    struct FTW *ftw)
{
  int r;

  (void)st;
  (void)ftw;
  r = (type == FTW_DP || type == FTW_DNR) ? rmdir(path) : unlink(path);
  /* Something else removed it meanwhile: that is the goal anyway. */
  if (r < 0 && errno != ENOENT)
    return errno;
  return 0;
}

/* Note [quick rmtree]: the tree a launch leaves is empty folders
 * (attempt_<k>/<local_rank>/), and /tmp is often a disk file system, where
 * every call costs.  An empty folder goes with one rmdir, so each folder
 * is first removed as if empty, and opened and read only when that fails;
 * nftw opened, read and stat'ed every one (eight calls for an empty
 * folder).  A tree deeper than RMTREE_FAST_DEPTH, or one the quick walk
 * could not finish, is finished by nftw, which needs no descriptor per
 * level. */
int logdir_rmtree(const char *dir)
{
  struct stat st;
  int fd, rc;

  if (!dir || !*dir)
    return -ENOENT;
  if (rmdir(dir) == 0)
    return 0;
  if (errno == ENOENT || errno == ENOTDIR)
    return -errno;
  fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 && rm_contents(fd, RMTREE_FAST_DEPTH) == 0 && rmdir(dir) == 0)
    return 0;
  if (lstat(dir, &st) < 0)
    return -errno;
  if (!S_ISDIR(st.st_mode))
    return -ENOTDIR;
  rc = nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (rc < 0)
    return errno ? -errno : -EIO;
  return rc > 0 ? -rc : 0;
}
