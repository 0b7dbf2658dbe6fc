#!/bin/bash
# Signals to the agent reach every worker's process group; the agent
# exits after its workers, with 128 + signal; SIGKILL after the grace
# period; only a second SIGINT kills at once: a repeated SIGTERM (Slurm
# sends two at a time limit) and a SIGTERM after a handled SIGUSR1 (Slurm's
# --signal warning) let the workers' handlers finish (Note [signal
# escalation]).
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

# ckpt_done DIR SIG N: the N workers' handlers for SIG ran to the end.
ckpt_done() {
  local r
  for ((r = 0; r < $3; r++)); do
    [ -f "$1/sig$2.$r" ] || fail "worker $r never got signal $2: $(cat "$T/err")"
    [ -f "$1/ckpt$2.$r" ] ||
      fail "worker $r's handler for signal $2 did not finish: $(cat "$T/err")"
  done
}

# SIGTERM twice, the second once the first is forwarded: the same event,
# no SIGKILL; the 2 s handlers finish.
mkdir "$T/e"
bg_cdrun --nproc_per_node=2 "$TW" ckpt "$T/e" 2
wait_files "$T/e/pid.*" 2 10
kill -TERM "$BG"
wait_grep 'received SIGTERM; forwarding it' "$T/err" 30
kill -TERM "$BG"
wait_exit "$BG" 30
expect_eq "agent status after two SIGTERMs" "$RC" 143
ckpt_done "$T/e" 15 2
expect_grep 'received SIGTERM again; already forwarded' "$T/err"
grep -q 'killing the workers now' "$T/err" && fail "a second SIGTERM escalated"

# The same 10 ms apart, as Slurm sends them (one event or two: the same).
mkdir "$T/f"
bg_cdrun --nproc_per_node=2 "$TW" ckpt "$T/f" 2
wait_files "$T/f/pid.*" 2 10
kill -TERM "$BG"; sleep 0.01; kill -TERM "$BG"
wait_exit "$BG" 30
expect_eq "agent status after two quick SIGTERMs" "$RC" 143
ckpt_done "$T/f" 15 2

# A handled SIGUSR1 (Slurm's checkpoint warning), then SIGTERM: both reach
# the workers and both handlers finish.
mkdir "$T/g"
bg_cdrun --nproc_per_node=2 --signals_to_handle=SIGTERM,SIGINT,SIGUSR1 \
  "$TW" ckpt "$T/g" 2
wait_files "$T/g/pid.*" 2 10
kill -USR1 "$BG"
wait_grep 'received SIGUSR1; forwarding it' "$T/err" 30
wait_files "$T/g/sig10.*" 2 10
kill -TERM "$BG"
wait_exit "$BG" 30
expect_eq "agent status after SIGUSR1, SIGTERM" "$RC" 143
ckpt_done "$T/g" 10 2
ckpt_done "$T/g" 15 2
expect_grep 'received SIGTERM; forwarding it to the workers too' "$T/err"
grep -q 'killing the workers now' "$T/err" && fail "SIGTERM after SIGUSR1 escalated"

# A SIGTERM, then a second SIGINT from the terminal still escalates... only
# the second SIGINT: the first is forwarded.
mkdir "$T/h"
TORCH_ELASTIC_SHUTDOWN_TIMEOUT=300 bg_cdrun --nproc_per_node=2 \
  "$TW" ignore "$T/h" 60
wait_files "$T/h/pid.*" 2 10
kill -TERM "$BG"
wait_grep 'received SIGTERM; forwarding it' "$T/err" 30
kill -INT "$BG"
wait_grep 'received SIGINT; forwarding it to the workers too' "$T/err" 30
kill -INT "$BG"
wait_exit "$BG" 30
expect_eq "agent status after SIGTERM, SIGINT, SIGINT" "$RC" 130
expect_grep 'received SIGINT again; killing the workers now' "$T/err"
exit 0
