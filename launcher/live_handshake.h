/* live_handshake.h -- the agent's side of the live-recovery handshake with
 * its workers (man/cdrun.1, LIVE RECOVERY), both through files:
 * - the opt-in file: a worker opts in by creating the file named by its
 *   CDRUN_LIVE_OPT_IN (libpg writes its pid and "\n");
 * - the round file (CDRUN_LIVE_ROUND_FILE): one per node, rewritten at
 *   every round of the node, one line
 *   "round=<R> world=<W> rank_offset=<O> local_world=<L>\n".  A worker's
 *   rank in round R is O + LOCAL_RANK. */
#ifndef CDRUN_LIVE_HANDSHAKE_H
#define CDRUN_LIVE_HANDSHAKE_H

#include <stdbool.h>
#include <stddef.h>

/* The file names in a worker's folder and in the run's log folder. */
#define LIVE_HANDSHAKE_OPT_IN "live_opt_in"
#define LIVE_HANDSHAKE_ROUND "live_round"

/* Whether the worker whose opt-in file is path has opted in: the file
 * exists (a regular file; its content is not checked). */
bool live_handshake_opted_in(const char *path);

/* One round as the round file says it. */
struct live_round {
  int round;
  int world;
  int rank_offset;
  int local_world;
};

/* The round file's line for r into buf (len bytes).  Returns its length,
 * or -ENOSPC when it does not fit. */
int live_handshake_round_line(const struct live_round *r, char *buf,
                              size_t len);

/* Replaces the file at path with r's line atomically: written to
 * "<path>.tmp", then renamed over path, so a reader sees the old line or
 * the new one, never a part.  Returns 0 or a negative errno. */
int live_handshake_write_round(const char *path, const struct live_round *r);

/* Parses a round file's line (a test's and a worker's view).  Returns 0,
 * or -EINVAL when line is not one. */
int live_handshake_parse_round(const char *line, struct live_round *r);

#endif
