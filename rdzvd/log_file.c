/* log_file.c -- see log_file.h. */
#include "log_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "peer_text.h"

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

void log_file_line(struct log_file *lf, const char *line)
{
  char text[4096], stamp[32];
  struct timeval tv;
  struct tm tm;

  peer_text_escape(text, sizeof text, line, strlen(line), 0);
  gettimeofday(&tv, NULL);
  localtime_r(&tv.tv_sec, &tm);
  strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  fprintf(lf && lf->f ? lf->f : stderr, "%s.%03d rdzvd: %s\n", stamp,
          (int)(tv.tv_usec / 1000), text);
}
