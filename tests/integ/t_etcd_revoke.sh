#!/bin/bash
# An agent that dies in any way but SIGKILL frees its place at once, not
# one lease TTL later: a signal it handles makes it leave ("left"), one it
# does not handle (SIGUSR1 outside --signals_to_handle, a crash: SIGABRT,
# SIGSEGV) still sends the revoke of its lease from the signal handler
# (Note [an agent's last word], launcher/etcd_last_word.h), so the others
# count it as lost at once.  The lease TTL is 60 s, longer than this
# scenario waits for each event.  On a three-member cluster.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd_cluster 3
conf=keepalive_interval=1,keepalive_misses=60,last_call_timeout=0.5
mkdir "$T/w"
node() {
  agent "$1" --nnodes=1:2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$ETCD_EPS" --rdzv_id=rv --rdzv_conf="$conf" \
    "$TW" gate "$T/w"
}
# alone_after SIG NAME: NAME dies of SIG; a restarts alone within 30 s.
alone_after() {
  rm -f "$T"/w/pid.*.0.1
  kill -"$1" "${!2}"
  wait_files "$T/w/pid.0.0.1" 1 30
  alive "$AGENT_a" || fail "a ended"
}
# pair NAME: NAME joins a; both run in a world of 2.
pair() {
  rm -f "$T"/w/pid.*.0.2
  node "$1"
  wait_files "$T/w/pid.*.0.2" 2 60
}
node a
pair b
alone_after TERM AGENT_b
expect_grep 'restarting the worker group: .*left' "$T/a.err"
pair c
alone_after USR1 AGENT_c
pair d
alone_after ABRT AGENT_d
lost=2
# Under AddressSanitizer a SIGSEGV is the sanitizer's report (a failure
# of the run): the fault's case is left to the plain build.
if [ -z "${ASAN_OPTIONS:-}" ]; then
  pair e
  alone_after SEGV AGENT_e
  lost=3
fi
[ "$(grep -c 'restarting the worker group: .*lost' "$T/a.err")" -eq "$lost" ] ||
  { cat "$T/a.err"; fail "not $lost nodes lost"; }
# The survivor's words name what it sees with its own join in: never
# "0 present" in the round it is about to enter.
grep ' 0 present' "$T/a.err" && fail "the survivor says '0 present'"
kill -TERM "$AGENT_a"
wait_exit "$AGENT_a" 30
exit 0
