#!/bin/bash
# mutate.sh -- applies each mutation of tests/fakecuda/mutations.tsv to a
# copy of the tree (a file of libpg/nccl/), builds the NCCL unit suite on
# the fake there and runs it with four fake devices, then (if nothing
# failed) with one, then (if still nothing) the NCCL scenarios on the fake
# (t_pg_nccl_fake, t_pg_nccl_fake_live, t_pg_live_nccl, t_gpu_check_fake).
# A mutation is killed when a test fails within $MUTATE_LIMIT seconds
# (default 120) of its run's start; a run that hangs past that is a
# survivor.  Run it after changing libpg/nccl/:
#   nice tests/fakecuda/mutate.sh [NAME...]   (default: every mutation)
# The summary says how many mutations each test or scenario killed.
# Exit status: 0 when every mutation was killed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LIST=$ROOT/tests/fakecuda/mutations.tsv
LIMIT=${MUTATE_LIMIT:-120}
SCENARIOS="t_pg_nccl_fake.sh t_pg_nccl_fake_live.sh t_pg_live_nccl.sh t_gpu_check_fake.sh"
WORK=$(mktemp -d /tmp/mutate.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

command -v python3 >/dev/null || { echo "mutate.sh: needs python3" >&2; exit 2; }
cd "$ROOT" || exit 2
FAKE_BINS="build/release/fake-nccl/tests/check_pg_nccl build/release/fake-nccl/tests/pgtest
  build/release/fake-nccl/tests/reducertest build/release/fake-nccl/tests/pg_live_worker"
# shellcheck disable=SC2086
make -j2 all $FAKE_BINS build/release/tests/testworker \
  build/release/tests/pg_store_host >/dev/null ||
  { echo "mutate.sh: the unmutated tree does not build" >&2; exit 2; }
# The tree and its release build, so that only the mutated file rebuilds.
tar --exclude=.git -cf - . | (cd "$WORK" && tar -xf -) || exit 2
cp "$LIST" "$WORK/mutations.tsv" && LIST=$WORK/mutations.tsv || exit 2
mkdir -p "$WORK/.orig/libpg" && cp -a "$WORK/libpg/nccl" "$WORK/.orig/libpg/" || exit 2

# Runs the unit suite ($1: fake devices); prints "killed SECONDS TEST" at
# its first failed test, or "survived".  Every test's own limit is cut to
# LIMIT (CK_TIMEOUT_MULTIPLIER: the cases allow 600 s).
run_suite() {
  local start=$SECONDS out=$WORK/run.log line pid
  : >"$out"
  # Its own process group, so that stopping it stops the ranks it forked.
  ( cd "$WORK" && FAKECUDA_DEVICES=$1 CK_DEFAULT_TIMEOUT=$LIMIT \
      CK_TIMEOUT_MULTIPLIER=$(awk "BEGIN { print $LIMIT / 600 }") \
      CK_LOG_FILE_NAME=/dev/stdout exec setsid timeout "$LIMIT" \
      build/release/fake-nccl/tests/check_pg_nccl >"$out" 2>&1 ) &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    line=$(grep -m1 -E ':[FE]:' "$out")
    [ -n "$line" ] && break
    sleep 0.5
  done
  kill -- -"$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  line=$(grep -m1 -E ':[FE]:' "$out")
  if [ -n "$line" ] && [ $((SECONDS - start)) -le "$LIMIT" ]; then
    echo "killed $((SECONDS - start))s $(echo "$line" | grep -o "test_[a-z_0-9]*" | head -1)"
  else
    echo "survived"
  fi
}

# Runs the scenarios one by one on the mutated build; prints "killed
# SECONDS SCENARIO" at the first that fails within LIMIT, or "survived".
run_scenarios() {
  local t start rc
  # shellcheck disable=SC2086
  (cd "$WORK" && make -j2 all $FAKE_BINS build/release/tests/testworker \
     build/release/tests/pg_store_host >"$WORK/build.log" 2>&1) ||
    { echo "killed 0s build"; return; }
  for t in $SCENARIOS; do
    start=$SECONDS
    ( cd "$WORK/tests/integ" && CDRUN=$WORK/bin/cdrun RDZVD=$WORK/bin/rdzvd \
        TESTWORKER=$WORK/build/release/tests/testworker \
        exec setsid timeout -k 5 "$LIMIT" bash "$t" >"$WORK/scenario.log" 2>&1 )
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ "$rc" -ne 124 ] &&
       [ $((SECONDS - start)) -le "$LIMIT" ]; then
      echo "killed $((SECONDS - start))s ${t%.sh}"
      return
    fi
  done
  echo "survived"
}

survivors=0 total=0
: >"$WORK/killers"
while IFS=$'\t' read -r name file old new; do
  case "$name" in ''|'#'*) continue ;; esac
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then
    continue
  fi
  total=$((total + 1))
  # The backend's files back as they were (new mtimes: rebuilt, so no
  # object keeps the previous mutation), then this mutation.
  cp "$WORK/.orig/libpg/nccl/"* "$WORK/libpg/nccl/"
  if ! python3 - "$WORK/$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2].replace('\\n', '\n'), sys.argv[3].replace('\\n', '\n')
text = open(path).read()
if old not in text:
    sys.exit(1)
open(path, 'w').write(text.replace(old, new, 1))
PY
  then
    echo "$name: STALE (its text is not in $file any more)"
    survivors=$((survivors + 1))
    continue
  fi
  if ! (cd "$WORK" && make -j2 build/release/fake-nccl/tests/check_pg_nccl \
        >"$WORK/build.log" 2>&1); then
    echo "$name: DOES NOT BUILD (fix its line in tests/fakecuda/mutations.tsv)"
    survivors=$((survivors + 1))
    continue
  fi
  r=$(run_suite 4)
  how="unit suite, 4 fake devices"
  if [ "$r" = survived ]; then
    r=$(run_suite 1)
    how="unit suite, 1 fake device"
  fi
  if [ "$r" = survived ]; then
    r=$(run_scenarios)
    how="scenario"
  fi
  case "$r" in
    survived) echo "$name: SURVIVED (the unit suite on 4 and 1 fake devices and the scenarios)"
              survivors=$((survivors + 1)) ;;
    *) read -r _ secs who <<<"$r"
       echo "$name: killed by $who in $secs ($how)"
       echo "$who" >>"$WORK/killers" ;;
  esac
done <"$LIST"
# Back to the unmutated files, so a rerun of the scenarios' build is clean.
cp "$WORK/.orig/libpg/nccl/"* "$WORK/libpg/nccl/"
echo "mutate.sh: $((total - survivors)) of $total killed; by what:"
sort "$WORK/killers" | uniq -c | sort -rn | sed 's/^/  /'
echo "mutate.sh: $survivors survived, stale or broken"
[ "$survivors" -eq 0 ]
