#!/bin/bash
# libpg's NCCL backend (libpg/nccl/) on the fake GPU of
# tests/fakecuda/ (host memory as device memory, a thread per stream,
# reductions between the worker processes): the collective matrix, async
# work, point to point, a grouped exchange, sub-groups and the reducer, launched by
# the real cdrun.  The workers read results on the host, so they wait on
# the host ($PG_NCCL_BLOCKING_WAIT=1); the device-side waits are
# check_pg_nccl's.
. "$(dirname "$0")/lib.sh"

FAKE=$(dirname "$(dirname "$TW")")/fake-nccl/tests
[ -x "$FAKE/pgtest" ] || skip "no $FAKE/pgtest (libpg built without NCCL headers)"
export PG_BACKEND=nccl PG_NCCL_BLOCKING_WAIT=1 FAKECUDA_DEVICES=4 PG_TIMEOUT=120
# pgtest's buffers are malloc'd: the fake takes them for device memory
# (on a GPU they would have to be cudaMalloc'd).
export FAKECUDA_HOST_IS_DEVICE=1

run() {   # run N PROGRAM MODE...
  local n=$1 prog=$2 r
  shift 2
  "$CDRUN" --standalone --nproc_per_node="$n" --no_python "$FAKE/$prog" "$@" \
    >"$T/out" 2>"$T/err" || { cat "$T/err" >&2; fail "$prog $* ($n ranks) failed"; }
}

for mode in "matrix quick" async sendrecv exchange; do
  run 3 pgtest $mode
  expect_grep "pgtest ${mode%% *}: rank 0 of 3 .nccl.: [0-9]* checks, 0 failed" "$T/err"
done
# Sub-groups: a 2x2 grid, rows and columns all-reducing at once, each
# split from the world's communicator (ncclCommSplit, as torch does): per
# rank a row split, two column groups (one of them as a non-member) and a
# split with no color.
FAKENCCL_TRACE=$T/splits run 4 pgtest groups
expect_grep "pgtest groups: rank 0 of 4 .nccl.: [0-9]* checks, 0 failed" "$T/err"
expect_eq "ncclCommSplit calls" "$(grep -c '^ncclCommSplit rank=[0-3] n=4 ' "$T/splits")" 16
expect_eq "splits without a color" "$(grep -c "color=-1 " "$T/splits")" 8
export PG_BUCKET_CAP_MB=0.0625 PG_FIRST_BUCKET_CAP_MB=0.015625
for mode in average nosync nosync_unused unused overlap; do
  run 2 reducertest "$mode"
  expect_grep "reducertest $mode: rank 0 of 2 on nccl" "$T/err"
  for r in 0 1; do
    expect_grep "reducertest $mode: rank $r: [1-9][0-9]* checks, 0 failed" "$T/err"
  done
done
exit 0
