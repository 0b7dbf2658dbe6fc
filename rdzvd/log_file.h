/* log_file.h -- rdzvd --log-file: an append-only log that SIGHUP reopens,
 * so that logrotate can rename it and have the daemon start a new one. */
#ifndef RDZVD_LOG_FILE_H
#define RDZVD_LOG_FILE_H

#include <stdio.h>

struct log_file {
  char *path;
  FILE *f;                      /* line-buffered, appending */
};

/* Opens (creates, mode 0640) path for appending.  Returns 0 or a negative
 * errno. */
int log_file_open(struct log_file *lf, const char *path);

/* Opens the path anew and, once that worked, closes the old stream; on
 * failure the old stream stays in use.  Returns 0 or a negative errno. */
int log_file_reopen(struct log_file *lf);

void log_file_close(struct log_file *lf);

#endif
