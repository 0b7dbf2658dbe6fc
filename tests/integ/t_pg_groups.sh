#!/bin/bash
# libpg sub-groups (pg_new_group, pg_split) on a 2D grid of ranks: rows
# and columns all-reducing at once from two threads and interleaved async,
# per-group store keys, non-members, over shared memory (one "host"), TCP
# (every rank its own) and the hierarchical backend (two ranks per host:
# a 2x3 grid's rows span hosts); launched by the real cdrun.  The fake
# NCCL's run is in t_pg_nccl_fake.
. "$(dirname "$0")/lib.sh"

PGTEST=$(dirname "$TW")/pgtest
[ -x "$PGTEST" ] || fail "no pgtest binary at $PGTEST"

run() {   # run LABEL NPROC HOSTID_EXPR
  local label=$1 n=$2 hid=$3
  PG_TIMEOUT=120 "$CDRUN" --standalone --nproc_per_node="$n" --no_python \
    /bin/sh -c "PG_HOST_ID=$hid exec \"\$0\" groups" "$PGTEST" \
    >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "$label n=$n failed"; }
  expect_grep "pgtest groups: rank 0 of $n .cpu-$label.: [0-9]* checks, 0 failed" "$T/err"
}

run shm 4 same-host
run shm 6 same-host
run tcp 4 'h$RANK'
run hier 6 'h$((RANK / 2))'
exit 0
