/* fuzz_round_file.c -- libFuzzer target: the round file's parser
 * (proto/worker/round_file.c), which every live worker runs on a file
 * cdrun's agent wrote.  Each input is a file's contents: the parser must
 * never read past them, a round it takes must keep to the grammar's
 * ranges, and its line (the one writer's) must parse back to the same
 * round, whatever the input's field order or newline. */
#include "round_file.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct live_round r, back;
  char err[256], line[ROUND_FILE_MAX];
  int n;

  err[0] = '\0';
  if (round_file_parse((const char *)data, size, &r, err, sizeof err)) {
    if (!err[0])
      abort();            /* a refusal always says why */
    return 0;
  }
  if (r.round < 0 || r.round > ((int64_t)1 << 62) || r.world < 1 ||
      r.world > (1 << 24) || r.rank_offset < 0 || r.local_world < 1 ||
      (int64_t)r.rank_offset + r.local_world > r.world)
    abort();
  n = round_file_line(&r, line, sizeof line);
  if (n <= 0 || round_file_parse(line, (size_t)n, &back, err, sizeof err) ||
      back.round != r.round || back.world != r.world ||
      back.rank_offset != r.rank_offset || back.local_world != r.local_world)
    abort();
  return 0;
}
