#!/bin/bash
# The no-progress watchdog: --worker-heartbeat-timeout=S gives each worker
# its own CDRUN_HEARTBEAT_FILE; one that does not touch it (libpg's
# pg_heartbeat) for S seconds is killed and is a failure with a summary
# line.  Workers that beat run to their end; examples/train_mlp beats.
. "$(dirname "$0")/lib.sh"

# Without the flag: no variable.
"$CDRUN" --no-python bash -c 'echo "${CDRUN_HEARTBEAT_FILE-unset}"' \
  >"$T/out" 2>"$T/err" || fail "plain run"
expect_eq "heartbeat file without the flag" "$(cat "$T/out")" unset

# One file per worker, in its log folder, existing at start.
"$CDRUN" --nproc_per_node=2 --log_dir "$T/l" --worker-heartbeat-timeout=60 \
  --no-python bash -c 'test -f "$CDRUN_HEARTBEAT_FILE" && echo "$CDRUN_HEARTBEAT_FILE"' \
  >"$T/out" 2>"$T/err" || fail "file run"
expect_eq "distinct files" "$(sort -u "$T/out" | wc -l)" 2
expect_grep '/attempt_0/0/heartbeat$' "$T/out"

# Rank 1 beats 3 times and hangs; rank 0 beats once and exits 0 (5 s:
# ample for rank 0 to start and beat on a loaded machine).
mkdir "$T/d"
bg_cdrun --nproc_per_node=2 --worker_heartbeat_timeout 5 --no-python \
  bash -c 'if [ "$RANK" = 1 ]; then exec "$0" hang "$1" 3; fi
           exec "$0" hang "$1" -1' "$TW" "$T/d"
wait_exit "$BG" 120
expect_eq "exit status (SIGKILL)" "$RC" 137
expect_grep "^cdrun: rank 1 made no progress for [0-9.]+ s \(its heartbeat file was not touched; --worker_heartbeat_timeout=5\); sending SIGKILL to pid $(cat "$T/d/pid.1")$" "$T/err"
expect_grep "^  traceback : rank 1 made no progress for " "$T/err"
expect_grep '^  rank      : 1 \(local_rank: 1\)$' "$T/err"
grep -q 'rank 0 made no progress' "$T/err" && fail "rank 0 was killed"
alive "$(cat "$T/d/pid.1")" && fail "the hung worker survived"
# Both are gone: their pids must not be killed again at cleanup.
rm -f "$T"/d/pid.*

# Workers that beat are left alone (the timeout is generous: no race).
"$CDRUN" --nproc_per_node=2 --worker-heartbeat-timeout=30 "$TW" hang "$T/d" -50 \
  >"$T/out" 2>"$T/err" || { cat "$T/err" >&2; fail "beating workers failed"; }
rm -f "$T"/d/pid.*

# The training example beats every step: its heartbeat file (inherited
# here, so the test can age it first) is touched.
TRAIN=$(dirname "$CDRUN")/train_mlp
[ -x "$TRAIN" ] || fail "$TRAIN not built"
touch -d '2000-01-01 00:00:00' "$T/hb"
CDRUN_HEARTBEAT_FILE=$T/hb PG_TIMEOUT=60 "$CDRUN" --nproc_per_node=1 \
  "$TRAIN" --samples 512 --global-batch 64 --hidden 16 --epochs 1 \
  --ckpt-dir "$T/ckpt" \
  >"$T/out" 2>&1 || { cat "$T/out" >&2; fail "train"; }
[ "$(stat -c %Y "$T/hb")" -gt "$(date -d '2001-01-01' +%s)" ] ||
  fail "train_mlp did not touch its heartbeat file"
exit 0
