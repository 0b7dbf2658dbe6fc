#!/bin/bash
# Signals to the agent reach every worker's process group; the agent
# exits after its workers, with 128 + signal; SIGKILL after the grace
# period; a second signal kills at once.
. "$(dirname "$0")/lib.sh"

# SIGTERM is forwarded to all four workers.
mkdir "$T/a"
bg_cdrun --standalone --nproc_per_node=4 "$TW" trap "$T/a" 60
wait_files "$T/a/pid.*" 4 10
kill -TERM "$BG"
wait_exit "$BG" 20
expect_eq "agent status after SIGTERM" "$RC" 143
for r in 0 1 2 3; do
  [ -f "$T/a/sig.$r" ] || fail "worker $r did not get the signal"
  expect_eq "worker $r signal" "$(tr -d '\n' <"$T/a/sig.$r")" 15
  alive "$(cat "$T/a/pid.$r")" && fail "worker $r outlived the agent"
done
expect_grep 'received SIGTERM; forwarding it to the workers' "$T/err"

# SIGUSR1 only when asked for with --signals_to_handle.
mkdir "$T/b"
bg_cdrun --nproc_per_node=2 --signals_to_handle=SIGTERM,SIGUSR1 \
  "$TW" trap "$T/b" 60
wait_files "$T/b/pid.*" 2 10
kill -USR1 "$BG"
wait_exit "$BG" 20
expect_eq "agent status after SIGUSR1" "$RC" $((128 + 10))
expect_eq "worker USR1" "$(tr -d '\n' <"$T/b/sig.0")" 10

# Workers that ignore SIGTERM are SIGKILLed after --shutdown_timeout.
mkdir "$T/c"
bg_cdrun --nproc_per_node=2 --shutdown_timeout=1 "$TW" ignore "$T/c" 60
wait_files "$T/c/pid.*" 2 10
kill -TERM "$BG"
wait_exit "$BG" 20
expect_eq "agent status after grace" "$RC" 143
expect_grep 'sending SIGKILL' "$T/err"
for r in 0 1; do
  alive "$(cat "$T/c/pid.$r")" && fail "worker $r survived SIGKILL"
done

# The grace period also comes from TORCH_ELASTIC_SHUTDOWN_TIMEOUT; a second
# Ctrl-C kills at once (well before the 300 s grace).
mkdir "$T/d"
TORCH_ELASTIC_SHUTDOWN_TIMEOUT=300 bg_cdrun --nproc_per_node=2 \
  "$TW" ignore "$T/d" 60
wait_files "$T/d/pid.*" 2 10
kill -INT "$BG"
# Two signals pending at once are one: send the second once the first is
# handled.
wait_grep 'received SIGINT; forwarding it' "$T/err" 30
kill -INT "$BG"
wait_exit "$BG" 20
expect_eq "agent status after two SIGINTs" "$RC" 130
expect_grep 'received SIGINT again; killing the workers now' "$T/err"
exit 0
