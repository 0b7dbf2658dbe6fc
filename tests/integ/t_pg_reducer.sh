#!/bin/bash
# libpg reducer: averages across ranks with many buckets, no_sync
# accumulation (kept for a parameter the synced step does not use), unused
# parameters, a parameter-list mismatch, and a bucket
# reduced while the backward pass goes on; over shm (1, 2, 4 ranks) and
# forced TCP (3 ranks, one host id each).
. "$(dirname "$0")/lib.sh"

REDUCERTEST=$(dirname "$TW")/reducertest
[ -x "$REDUCERTEST" ] || fail "$REDUCERTEST not built"
# 64 KiB / 16 KiB: what reducertest's average mode expects from the env.
export PG_BUCKET_CAP_MB=0.0625 PG_FIRST_BUCKET_CAP_MB=0.015625
export PG_TIMEOUT=60

run() {   # run N HOSTID MODE BACKEND
  local n=$1 hid=$2 mode=$3 backend=$4 r
  "$CDRUN" --standalone --nproc_per_node="$n" --no_python \
    /bin/sh -c "PG_HOST_ID=$hid exec \"\$0\" $mode" "$REDUCERTEST" \
    >"$T/out" 2>"$T/err" || {
      cat "$T/err" >&2
      fail "$mode ($n ranks, host id $hid) failed"
    }
  expect_grep "reducertest $mode: rank 0 of $n on $backend" "$T/err"
  for ((r = 0; r < n; r++)); do
    expect_grep "reducertest $mode: rank $r: [1-9][0-9]* checks, 0 failed" \
      "$T/err"
  done
  if [ "$mode" = mismatch ] && [ "$n" -gt 1 ]; then
    for ((r = 0; r < n; r++)); do
      expect_grep "rank $r: error: EINVAL: parameter 3: rank 1 has 301 x \
f64, rank 0 has 300 x f64" "$T/err"
      expect_grep "rank $r: error: EINVAL: rank $((n - 1)) has 19 \
parameters, rank 0 has 20" "$T/err"
    done
  fi
}

for mode in average nosync nosync_unused unused mismatch overlap; do
  run 1 same-host "$mode" '[a-z-]+'
  run 2 same-host "$mode" cpu-shm
  run 4 same-host "$mode" cpu-shm
  run 3 'h$RANK' "$mode" cpu-tcp
done
exit 0
