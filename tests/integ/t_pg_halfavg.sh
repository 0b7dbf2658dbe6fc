#!/bin/bash
# libpg: f16/bf16 reductions accumulate in f32 and round once on every CPU
# backend (an f16 AVG of 65504 over 3 ranks is 65504, not +inf): shared
# memory, forced TCP, hierarchical.
. "$(dirname "$0")/lib.sh"

PGTEST=$(dirname "$TW")/pgtest
run() {   # run LABEL NPROC HOSTID_EXPR
  PG_TIMEOUT=60 "$CDRUN" --standalone --nproc_per_node="$2" --no_python \
    /bin/sh -c "PG_HOST_ID=$3 exec \"\$0\" halfavg" "$PGTEST" \
    >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "$1 n=$2 failed"; }
  expect_grep "pgtest halfavg: rank 0 of $2 .*, 0 failed" "$T/err"
}
run shm 3 same-host
run tcp 3 'h$RANK'
run hier 4 'h$((RANK / 2))'
run self 1 same-host
exit 0
