#!/bin/bash
# libpg: async work (several in flight, out-of-order waits, a handle freed
# early), the group's store across ranks, send/recv with tags.
. "$(dirname "$0")/lib.sh"

PGTEST=$(dirname "$TW")/pgtest
for hid in same-host 'h$RANK'; do
  for mode in async store sendrecv; do
    PG_TIMEOUT=60 "$CDRUN" --standalone --nproc_per_node=4 --no_python \
      /bin/sh -c "PG_HOST_ID=$hid exec \"\$0\" $mode" "$PGTEST" \
      >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "$mode ($hid) failed"; }
    expect_grep "pgtest $mode: rank 0 of 4 .*, 0 failed" "$T/err"
  done
done
exit 0
