#!/bin/bash
# Note [opt-in window] (launcher/live_agent.c): --recovery=live with a
# program that never opts in (a PyTorch script, here a shell loop) says at
# the start, once its workers are up and none opted in within the window,
# that the job is recovered by restart; and its first failure costs what
# restart mode's does: with --max_restarts=1 the restart that follows
# succeeds.  Alone (standalone) and with two nodes (rdzvd).  Before, cdrun
# said nothing until the first failure.
. "$(dirname "$0")/lib.sh"

export CDRUN_LIVE_OPT_IN_WINDOW=0.3
# Attempt 0 fails (exit 3) once the test says so; the restart succeeds.
W='if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
     while [ ! -e "$0/fail" ]; do sleep 0.02; done; exit 3; fi; exit 0'

# check NAME: NAME announced restart recovery once, before any failure,
# restarted once, and succeeded.
check() {
  local pid
  pid=AGENT_$1
  wait_exit "${!pid}" 60
  [ "$RC" -eq 0 ] || { cat "$T/$1.err"; fail "$1 exited $RC, want 0"; }
  expect_eq "$1: said once" "$(grep -c 'no worker opted in to live recovery within 0.3 s of its start (a program without the handshake, such as a PyTorch script): this job is recovered by restarting the worker group, as with --recovery=restart' "$T/$1.err")" 1
  grep -q "did not opt in" "$T/$1.err" && fail "$1 said it twice"
  return 0
}

mkdir "$T/s"
agent s --standalone --nproc_per_node=2 --recovery=live --max_restarts=1 \
  --no_python /bin/sh -c "$W" "$T/s"
wait_grep "no worker opted in to live recovery" "$T/s.err" 30
: >"$T/s/fail"
check s
expect_grep "worker group failed; restarting it \(1 of 1 restarts used\)" \
  "$T/s.err"

start_rdzvd
mkdir "$T/m"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --recovery=live --max_restarts=1 \
    --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$RDZVD_PORT" \
    --rdzv_id=noopt --no_python /bin/sh -c "$W" "$T/m"
done
wait_grep "no worker opted in to live recovery" "$T/a.err" 30
wait_grep "no worker opted in to live recovery" "$T/b.err" 30
: >"$T/m/fail"
check a
check b
exit 0
