#!/bin/bash
# libpg collectives: every collective x dtype x op x size (0, 1, odd,
# large) x world sizes 1-8 against a serial reference, through the
# shared-memory path, the forced-TCP path (every rank its own "host") and
# the hierarchical one (two ranks per "host"); launched by the real cdrun.
# Under the sanitizers (10x slower) the world sizes are 1-4 and 8: every
# path and algorithm still runs, the odd sizes 5-7 only in the release run.
# integ-timeout: 480
. "$(dirname "$0")/lib.sh"

PGTEST=$(dirname "$TW")/pgtest
[ -x "$PGTEST" ] || fail "no pgtest binary at $PGTEST"
mode=${PG_MATRIX_MODE:-matrix}

run() {   # run LABEL NPROC HOSTID_EXPR
  local label=$1 n=$2 hid=$3
  PG_TIMEOUT=120 "$CDRUN" --standalone --nproc_per_node="$n" --no_python \
    /bin/sh -c "PG_HOST_ID=$hid exec \"\$0\" $mode" "$PGTEST" \
    >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "$label n=$n failed"; }
  grep -q "checks, 0 failed" "$T/err" ||
    { cat "$T/err"; fail "$label n=$n: no passing report"; }
  grep -Eo "\((self|cpu-[a-z]+)\): [0-9]+ checks" "$T/err" | head -1 |
    sed "s/^/$label n=$n /" >&2
}

sizes="1 2 3 4 5 6 7 8"
[ -n "${ASAN_OPTIONS:-}" ] && sizes="1 2 3 4 8"
for n in $sizes; do
  run shm "$n" same-host
  [ "$n" -gt 1 ] && run tcp "$n" 'h$RANK'
  [ "$n" -ge 4 ] && run hier "$n" 'h$((RANK / 2))'
done
exit 0
