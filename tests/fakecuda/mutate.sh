#!/bin/bash
# mutate.sh -- applies each mutation of tests/fakecuda/mutations.tsv to a
# copy of the tree (libpg/ mutated: a file of libpg/nccl/), builds the
# NCCL unit suite on the fake there, runs it
# with several fake devices and with one, and reports which mutations
# survived (no test failed).  Run it after changing libpg/nccl/.
#   tests/fakecuda/mutate.sh [NAME...]   (default: every mutation)
# The suite is stopped at its first failure; a mutation must be killed
# in both runs.  Exit status: 0 when every mutation was killed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LIST=$ROOT/tests/fakecuda/mutations.tsv
LIMIT=${MUTATE_TIMEOUT:-300}      # seconds per run: a hang is a survivor
WORK=$(mktemp -d /tmp/mutate.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

command -v python3 >/dev/null || { echo "mutate.sh: needs python3" >&2; exit 2; }
cd "$ROOT" || exit 2
make -j2 build/release/fake-nccl/tests/check_pg_nccl >/dev/null ||
  { echo "mutate.sh: the unmutated tree does not build" >&2; exit 2; }
# The tree and its release build, so that only the mutated file rebuilds.
tar --exclude=.git -cf - . | (cd "$WORK" && tar -xf -) || exit 2
cp "$LIST" "$WORK/mutations.tsv" && LIST=$WORK/mutations.tsv || exit 2
mkdir -p "$WORK/.orig/libpg" && cp -a "$WORK/libpg/nccl" "$WORK/.orig/libpg/" || exit 2

# Runs the suite ($1: fake devices); prints "killed SECONDS TEST" at the
# first failed test, or "survived".
run_suite() {
  local start=$SECONDS out line pid
  out=$WORK/run.log
  : >"$out"
  # Its own process group, so that stopping it stops the ranks it forked.
  ( cd "$WORK" && FAKECUDA_DEVICES=$1 CK_DEFAULT_TIMEOUT=120 \
      CK_LOG_FILE_NAME=/dev/stdout exec setsid timeout "$LIMIT" \
      build/release/fake-nccl/tests/check_pg_nccl >"$out" 2>&1 ) &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    line=$(grep -m1 -E ':[FE]:' "$out")
    if [ -n "$line" ]; then
      kill -- -"$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      echo "killed $((SECONDS - start))s $(echo "$line" | grep -o "test_[a-z_0-9]*" | head -1)"
      return
    fi
    sleep 0.5
  done
  wait "$pid"
  line=$(grep -m1 -E ':[FE]:' "$out")
  if [ -n "$line" ]; then
    echo "killed $((SECONDS - start))s $(echo "$line" | grep -o "test_[a-z_0-9]*" | head -1)"
  else
    echo "survived"
  fi
}

survivors=0
while IFS=$'\t' read -r name file old new; do
  case "$name" in ''|'#'*) continue ;; esac
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then
    continue
  fi
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
  r4=$(run_suite 4)
  r1=$(run_suite 1)
  case "$r4 $r1" in
    *survived*) echo "$name: SURVIVED (4 devices: $r4; 1 device: $r1)"
                survivors=$((survivors + 1)) ;;
    *) echo "$name: killed (4 devices: $r4; 1 device: $r1)" ;;
  esac
done <"$LIST"
echo "mutate.sh: $survivors survived, stale or broken"
[ "$survivors" -eq 0 ]
