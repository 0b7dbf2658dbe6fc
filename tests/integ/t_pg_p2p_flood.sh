#!/bin/bash
# A stranger with TCP reach (no token) floods every libpg listener of a
# job with idle connections: 4 ranks on two hosts (network namespaces a
# and b, two ranks each, the hierarchical backend), a flooder in a third
# host x and another in b itself (the same source address as two of the
# ranks), one thread per listener (rank 0's store, the mesh, each rank's
# lazy point-to-point listener), each holding hundreds of connections and
# opening new ones as they are closed.  The ranks' point-to-point across
# the hosts (pgtest sendrecv: a ring, so 1 -> 2 and 3 -> 0 cross) must
# complete: a stranger causes at most a delay (SECURITY.md).  Skips
# where namespaces cannot be made.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nsbed_lib.sh"

PGTEST=$(dirname "$TW")/pgtest
[ -x "$PGTEST" ] || fail "no pgtest binary at $PGTEST"
FLOODER=$(dirname "$0")/flooder.py
trap nsbed_cleanup EXIT

nsbed_start 203
declare -A ADDR=([a]=$NET.1 [b]=$NET.2 [x]=$NET.3)
: >"$T/hosts"
for h in a b x; do
  echo "${ADDR[$h]} $h" >>"$T/hosts"
  nsbed_host "$h"
done

D=$T/d
mkdir "$D"
TOKEN=flood-test-token-$RANDOM$RANDOM$RANDOM
export PG_TIMEOUT=60
PIDS=()
for r in 0 1 2 3; do
  h=a
  [ "$r" -ge 2 ] && h=b
  ip netns exec "cdrun-$id-$h" env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) \
    LOCAL_WORLD_SIZE=2 MASTER_ADDR="${ADDR[a]}" MASTER_PORT=29555 \
    PG_HOST_ID="host-$h" CDRUN_JOB_TOKEN="$TOKEN" \
    "$PGTEST" flooded "$D" >"$T/rank$r.out" 2>"$T/rank$r.err" &
  PIDS+=($!)
  STARTED+=($!)
done
wait_files "$D/ready.*" 4 120

# Every listener the ranks have: each host's listening TCP sockets (the
# namespaces are the test's own).
targets() {
  ip netns exec "cdrun-$id-$1" ss -ltnH |
    awk -v a="${ADDR[$1]}" '{ n = split($4, p, ":"); print a ":" p[n] }' |
    sort -u
}
TA=$(targets a)
TB=$(targets b)
# At least rank 0's store and two point-to-point listeners on a, two on b.
[ "$(echo "$TA" | wc -l)" -ge 3 ] || fail "listeners on a: $TA"
[ "$(echo "$TB" | wc -l)" -ge 2 ] || fail "listeners on b: $TB"
# shellcheck disable=SC2086
ip netns exec "cdrun-$id-x" python3 "$FLOODER" --ready "$T/flood.x" \
  $TA $TB >"$T/flood.x.out" 2>&1 &
FX=$!
STARTED+=($FX)
# shellcheck disable=SC2086
ip netns exec "cdrun-$id-b" python3 "$FLOODER" --ready "$T/flood.b" \
  $TA >"$T/flood.b.out" 2>&1 &
FB=$!
STARTED+=($FB)
wait_files "$T/flood.[xb]" 2 120
touch "$D/go"

bad=0
for r in 0 1 2 3; do
  wait_exit "${PIDS[$r]}" 300
  if [ "$RC" -ne 0 ]; then
    echo "--- rank $r (exit $RC):" >&2
    cat "$T/rank$r.err" >&2
    bad=1
  fi
done
kill -TERM "$FX" "$FB" 2>/dev/null
wait "$FX" "$FB" 2>/dev/null
cat "$T/flood.x.out" "$T/flood.b.out"
[ "$bad" -eq 0 ] || fail "point-to-point under a flood of strangers failed"
expect_grep "pgtest flooded: rank 0 of 4 \(cpu-hier\): [0-9]+ checks, 0 failed" \
  "$T/rank0.err"
exit 0
