#!/bin/bash
# A worker failure restarts the whole local group; the next attempt
# succeeds; TORCHELASTIC_RESTART_COUNT counts attempts.
. "$(dirname "$0")/lib.sh"

mkdir "$T/e"
"$CDRUN" --standalone --nproc_per_node=4 --max_restarts=2 --log_dir "$T/logs" \
  "$TW" fail "$T/e" 1 3 1 >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 0 ] || { cat "$T/err"; fail "cdrun exited $rc after a restart"; }
expect_grep 'worker 1 \(local rank 1, pid [0-9]+\) exited with status 3' "$T/err"
expect_grep 'restarting it \(1 of 2 restarts used\)' "$T/err"
for r in 0 1 2 3; do
  expect_eq "rank $r restart count" \
    "$(envval "$T/e/env.$r" TORCHELASTIC_RESTART_COUNT)" 1
  expect_eq "rank $r max restarts" \
    "$(envval "$T/e/env.$r" TORCHELASTIC_MAX_RESTARTS)" 2
done
# One folder per attempt.
[ -d "$(echo "$T"/logs/*/attempt_0)" ] || fail "no attempt_0 folder"
[ -d "$(echo "$T"/logs/*/attempt_1)" ] || fail "no attempt_1 folder"
[ -d "$(echo "$T"/logs/*/attempt_2)" ] && fail "a third attempt ran"
grep -q FAILED "$T/err" && fail "a summary was printed for a success"
exit 0
