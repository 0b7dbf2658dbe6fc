/* log_file.c -- see log_file.h. */
#include "log_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int open_append(const char *path, FILE **out)
{
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  FILE *f;

  if (fd < 0)
    return -errno;
  f = fdopen(fd, "a");
  if (!f) {
    int err = -errno;

    close(fd);
    return err;
  }
  setvbuf(f, NULL, _IOLBF, 0);
  *out = f;
  return 0;
}

int log_file_open(struct log_file *lf, const char *path)
{
  int err;

  memset(lf, 0, sizeof *lf);
  lf->path = strdup(path);
  if (!lf->path)
    return -ENOMEM;
  err = open_append(path, &lf->f);
  if (err) {
    free(lf->path);
    lf->path = NULL;
  }
  return err;
}

int log_file_reopen(struct log_file *lf)
{
  FILE *f;
  int err = open_append(lf->path, &f);

  if (err)
    return err;
  fclose(lf->f);
  lf->f = f;
  return 0;
}

void log_file_close(struct log_file *lf)
{
  if (lf->f)
    fclose(lf->f);
  free(lf->path);
  memset(lf, 0, sizeof *lf);
}
