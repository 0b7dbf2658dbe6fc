/* log_file.h -- rdzvd's log: its lines, written to --log-file (an
 * append-only file that SIGHUP reopens, so that logrotate can rename it
 * and have the daemon start a new one) or to stderr. */
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

/* Writes "<local time> rdzvd: <line>\n" to lf's file, or to stderr when
 * none is open (lf NULL or closed).  The line is escaped first
 * (peer_text.h): a log line may quote what a peer sent (a job id, a
 * host), and a peer must not be able to forge lines or send terminal
 * escapes through it. */
void log_file_line(struct log_file *lf, const char *line);

#endif
