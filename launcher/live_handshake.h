/* live_handshake.h -- the agent's side of the live-recovery handshake with
 * its workers (man/cdrun.1, LIVE RECOVERY), both through files:
 * - the opt-in file: a worker opts in by creating the file named by its
 *   CDRUN_LIVE_OPT_IN (libpg writes its pid and "\n");
 * - the round file (CDRUN_LIVE_ROUND_FILE): one per node, rewritten at
 *   every round of the node, one line in the worker contract's grammar
 *   (proto/worker/round_file.h, which has its writer and its parser). */
#ifndef CDRUN_LIVE_HANDSHAKE_H
#define CDRUN_LIVE_HANDSHAKE_H

#include <stdbool.h>

#include "round_file.h"

/* The file names in a worker's folder and in the run's log folder. */
#define LIVE_HANDSHAKE_OPT_IN "live_opt_in"
#define LIVE_HANDSHAKE_ROUND "live_round"

/* Whether the worker whose opt-in file is path has opted in: the file
 * exists (a regular file; its content is not checked). */
bool live_handshake_opted_in(const char *path);

/* Replaces the file at path with r's line (round_file_line) atomically:
 * written to "<path>.tmp", then renamed over path, so a reader sees the
 * old line or the new one, never a part.  Returns 0 or a negative
 * errno. */
int live_handshake_write_round(const char *path, const struct live_round *r);

#endif
