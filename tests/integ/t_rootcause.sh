#!/bin/bash
# The failure summary's root cause and cdrun's exit status: failures with
# different codes, error-file timestamps deciding which came first, and
# workers cdrun stopped itself left out.  --monitor_interval=60: failures
# within 60 s of the first are listed together (Note [simultaneous
# failures]), so how fast this machine reaps them does not matter.
. "$(dirname "$0")/lib.sh"

# root_rank FILE: the rank line of the root cause block.
root_rank() {
  sed -n '/^Root Cause/,$ s/^  rank      : \([0-9]*\) .*/\1/p' "$1"
}

# Rank 1's error file is older: it is the root cause, its code the status.
mkdir "$T/a"
"$CDRUN" --standalone --nproc_per_node=2 --monitor_interval=60 \
  "$TW" codes "$T/a" 2000000000,1000000000 5,7 2>"$T/a.err"
expect_eq "older error file: exit status" "$?" 7
expect_eq "older error file: root cause" "$(root_rank "$T/a.err")" 1
expect_grep '^  rank      : 0 \(local_rank: 0\)$' "$T/a.err"
expect_grep '^  exitcode  : 5 ' "$T/a.err"

# The same with the timestamps swapped: rank 0 now.
mkdir "$T/b"
"$CDRUN" --standalone --nproc_per_node=2 --monitor_interval=60 \
  "$TW" codes "$T/b" 1000000000,2000000000 5,7 2>"$T/b.err"
expect_eq "swapped timestamps: exit status" "$?" 5
expect_eq "swapped timestamps: root cause" "$(root_rank "$T/b.err")" 0
expect_grep '^  exitcode  : 7 ' "$T/b.err"

# Rank 0 is stopped by cdrun's SIGTERM when rank 1 fails: not a failure.
mkdir "$T/c"
"$CDRUN" --standalone --nproc_per_node=2 --monitor_interval=60 \
  "$TW" codes "$T/c" -,- s,3 2>"$T/c.err"
expect_eq "stopped worker: exit status" "$?" 3
expect_eq "stopped worker: root cause" "$(root_rank "$T/c.err")" 1
expect_grep '<NO_OTHER_FAILURES>' "$T/c.err"
[ "$(grep -c '^  rank      :' "$T/c.err")" -eq 1 ] ||
  { cat "$T/c.err"; fail "a worker cdrun stopped is listed as a failure"; }

# Rank 1 (deaf to the SIGTERM) dies of a SIGKILL that cdrun did not send,
# after rank 0 failed: it failed too, as a worker the OOM killer took
# would, and is listed; cdrun never escalated to SIGKILL here.
mkdir "$T/d"
"$CDRUN" --standalone --nproc_per_node=2 --monitor_interval=60 --no_python \
  /bin/sh -c 'if [ "$LOCAL_RANK" = 0 ]; then
      while [ ! -e "$0/r1" ]; do sleep 0.05; done
      : >"$0/r0"; exit 3
    fi
    trap "" TERM; : >"$0/r1"
    while [ ! -e "$0/r0" ]; do sleep 0.05; done
    sleep 0.3; kill -9 $$' "$T/d" 2>"$T/d.err"
expect_eq "self-SIGKILL after a failure: exit status" "$?" 3
expect_grep 'worker 1 \(local rank 1, pid [0-9]+\) failed too \(signal 9\)' \
  "$T/d.err"
[ "$(grep -c '^  rank      :' "$T/d.err")" -eq 2 ] ||
  { cat "$T/d.err"; fail "the self-SIGKILLed worker is not listed"; }
exit 0
