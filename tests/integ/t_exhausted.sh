#!/bin/bash
# Restarts run out: torchrun's failure summary, and the documented exit
# status (the root cause's exit code, or 128 + signal).
. "$(dirname "$0")/lib.sh"

mkdir "$T/e"
"$CDRUN" --standalone --nproc_per_node=3 --max_restarts=1 \
  "$TW" fail "$T/e" 2 7 99 >"$T/out" 2>"$T/err"
expect_eq "exit status" "$?" 7
expect_grep '^=+$' "$T/err"
expect_grep "^$TW FAILED$" "$T/err"
expect_grep '^Root Cause \(first observed failure\):$' "$T/err"
expect_grep '^  rank      : 2 \(local_rank: 2\)$' "$T/err"
expect_grep '^  exitcode  : 7 \(pid: [0-9]+\)$' "$T/err"
expect_grep '^  host      : .+' "$T/err"
expect_grep '^  time      : [0-9]{4}-[0-9]{2}-[0-9]{2}_[0-9]{2}:[0-9]{2}:[0-9]{2}$' "$T/err"
expect_grep '^  error_file: <N/A>$' "$T/err"
expect_grep 'restarting it \(1 of 1 restarts used\)' "$T/err"
expect_eq "attempts" "$(envval "$T/e/env.2" TORCHELASTIC_RESTART_COUNT)" 1

# The error file a worker wrote reaches the summary.
"$CDRUN" --nproc_per_node=2 --log_dir "$T/logs" "$TW" errfile "boom here" \
  >"$T/out" 2>"$T/err"
expect_eq "errfile exit status" "$?" 1
expect_grep '^  traceback : Traceback: boom here at rank [01]$' "$T/err"
expect_grep "^  error_file: $T/logs/none_[^/]+/attempt_0/[01]/error.json$" "$T/err"

# A worker killed by a signal: 128 + signal, torchrun's message.
"$CDRUN" --standalone --nproc_per_node=2 "$TW" kill 1 9 >"$T/out" 2>"$T/err"
expect_eq "signal exit status" "$?" 137
expect_grep '^  exitcode  : -9 \(SIGKILL\) \(pid: [0-9]+\)$' "$T/err"
expect_grep '^  traceback : Signal 9 \(SIGKILL\) received by PID [0-9]+$' "$T/err"

# Workers failing together are all listed; the root cause is the first.
mkdir "$T/fa"
"$CDRUN" --nproc_per_node=3 "$TW" failall "$T/fa" 4 >"$T/out" 2>"$T/err"
expect_eq "failall status" "$?" 4
expect_grep '^Failures:$' "$T/err"
expect_grep '^\[1\]:$' "$T/err"
grep -q '<NO_OTHER_FAILURES>' "$T/err" && fail "simultaneous failures not listed"
# No logs were written and no error file read: no temporary dir is left.
ls -d "${TMPDIR:-/tmp}"/cdrun_* 2>/dev/null | while read -r d; do
  grep -q "$d" "$T/err" && fail "temporary log dir $d left behind"
done

# A target that cannot be executed: 127, no restarts, a clear message.
"$CDRUN" --max_restarts=3 --no_python "$T/no-such-program" >"$T/out" 2>"$T/err"
expect_eq "missing program status" "$?" 127
expect_grep "cannot execute '$T/no-such-program': No such file or directory" "$T/err"
grep -q restarting "$T/err" && fail "restarted a target that cannot run"
# The summary names the process whose exec failed, not pid 0.
expect_grep '^  exitcode  : 127 \(pid: [1-9][0-9]*\)$' "$T/err"
exit 0
