/* round_file.h -- the round file of live recovery: its grammar, its one
 * writer (cdrun's agent, launcher/live_handshake.c) and its one parser
 * (libpg, libpg/live/live_round.c).  Its name reaches the workers as
 * CDRUN_LIVE_ROUND_FILE (worker_contract.h).
 *
 * One file per node, which the agent rewrites at every round of the node,
 * the first included, atomically (a new file renamed over the old), so a
 * reader sees one whole line or the next.  The grammar:
 *
 *   file  = field *( " " field ) [ " " ] [ "\n" ]
 *   field = name "=" integer         ; each name once, in any order
 *   name  = "round" | "world" | "rank_offset" | "local_world"
 *
 *   round        0 .. 2^62        the rendezvous round
 *   world        1 .. 2^24        the workers of the round, all nodes
 *   rank_offset  0 .. 2^24 - 1    this node's first rank
 *   local_world  1 .. 2^24        this node's workers
 *
 * with rank_offset + local_world <= world; a worker's rank in the round
 * is rank_offset + its LOCAL_RANK.  The writer writes the fields in the
 * order above and the newline:
 *
 *   round=3 world=8 rank_offset=4 local_world=4\n
 *
 * A name that is not one of the four, a field twice or missing, a value
 * out of its range, a second line, a NUL or a file of ROUND_FILE_MAX
 * bytes or more is refused: a worker must not guess its rank. */
#ifndef PROTO_ROUND_FILE_H
#define PROTO_ROUND_FILE_H

#include <stddef.h>
#include <stdint.h>

/* The longest round file a reader takes is ROUND_FILE_MAX - 1 bytes (the
 * writer's longest line is under 100). */
#define ROUND_FILE_MAX 512

/* One round as the round file says it. */
struct live_round {
  int64_t round;
  int world;
  int rank_offset;
  int local_world;
};

/* The round file's line for r, newline included, into buf (len bytes,
 * NUL-terminated).  r is not checked: the parser judges.  Returns the
 * line's length, or -ENOSPC when it does not fit. */
int round_file_line(const struct live_round *r, char *buf, size_t len);

/* Parses text[0..len) (a round file's contents, the grammar above) into
 * *out.  Returns 0, or -EINVAL with a sentence in err (errlen bytes)
 * naming the problem: the field and its value, as "local_world= is
 * missing" or "round is 'x', expected an integer 0..4611686018427387904".
 * *out is written only on success. */
int round_file_parse(const char *text, size_t len, struct live_round *out,
                     char *err, size_t errlen);

#endif
