#!/bin/bash
# A worker failure restarts the whole local group; the next attempt
# succeeds; TORCHELASTIC_RESTART_COUNT counts attempts.  A crash loop backs
# off (Note [restart backoff]) and says it is the same failure.
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

# A crash loop: at once, then 0.2 s, 0.4 s, 0.4 s (the cap); each failure
# is the same one.  The healthy interval is far longer than any attempt.
CDRUN_RESTART_BACKOFF=0.2:0.4:600 "$CDRUN" --nproc_per_node=2 \
  --max_restarts=4 "$TW" errfile "disk full" >"$T/out" 2>"$T/loop.err"
expect_eq "crash loop: exit status" "$?" 1
expect_grep 'restarting it \(1 of 4 restarts used\)' "$T/loop.err"
expect_grep 'restarting it in 0\.2 s \(2 of 4 restarts used\)' "$T/loop.err"
expect_grep 'restarting it in 0\.4 s \(3 of 4 restarts used\)' "$T/loop.err"
expect_grep 'restarting it in 0\.4 s \(4 of 4 restarts used\)' "$T/loop.err"
expect_grep '^cdrun: the same failure 4 times in a row: exited with status 1: disk full$' \
  "$T/loop.err"
# Off: every restart at once.
CDRUN_RESTART_BACKOFF=0 "$CDRUN" --nproc_per_node=1 --max_restarts=3 \
  "$TW" errfile "disk full" >"$T/out" 2>"$T/off.err"
expect_eq "no backoff: exit status" "$?" 1
expect_grep 'restarting it \(3 of 3 restarts used\)' "$T/off.err"
grep -q 'restarting it in' "$T/off.err" && fail "CDRUN_RESTART_BACKOFF=0 waited"
exit 0
