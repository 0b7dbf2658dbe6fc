#!/bin/bash
# cdrun --recovery=live on rdzvd: a failure live recovery does not take (a
# worker withdraws its opt-in and exits 3) while the agent re-joins with
# its workers running (below min_nodes after a node was lost) is counted
# as restart mode counts it once the round completes: the group restarts
# with TORCHELASTIC_RESTART_COUNT=1 (1 of --max_restarts 1 used), and a
# second such failure ends the job, not restarted again.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/live_agent_lib.sh"

start_rdzvd
ep=127.0.0.1:$RDZVD_PORT
conf=last_call_timeout=0.5,join_timeout=30,keepalive_interval=0.2,keepalive_misses=5
args=(--nnodes=2:3 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=owed
      --rdzv_conf="$conf" --recovery=live --max_restarts=1 --no_python
      --nproc_per_node=1)

# below_min NAME: kills the agent NAME, waits until d re-joins below
# min_nodes with its worker running.
below_min() {
  local n
  n=$(grep -c "re-joining with the workers running" "$T/d.err")
  kill -KILL "$(eval echo "\$AGENT_$1")"
  wait_exit "$(eval echo "\$AGENT_$1")" 20
  for ((i = 0; i < 600; i++)); do
    [ "$(grep -c "re-joining with the workers running" "$T/d.err")" -gt "$n" ] && return 0
    sleep 0.05
  done
  fail "d did not re-join after $1 was lost: $(cat "$T/d.err")"
}

mkdir "$T/d" "$T/e" "$T/g" "$T/h"
agent d "${args[@]}" "$LW" "$T/d"
wait_grep "job owed: .* joined round 0" "$T/rdzvd.log" 30   # d ranks first
agent e "${args[@]}" "$LW" "$T/e"
wait_files "$T/d/round.*" 1 30
wait_files "$T/e/round.*" 1 30
d0=$(pid_of "$T/d" 0)

# ---- e lost; d's worker withdraws and fails while d re-joins ----
below_min e
touch "$T/d/withdraw.$d0"
wait_grep "worker group failed during a membership change; it restarts once the new round completes" "$T/d.err" 30
expect_grep "worker 0 \(pid $d0\) did not opt in to live recovery" "$T/d.err"
agent g "${args[@]}" "$LW" "$T/g"
wait_files "$T/d/env.0.*" 2 30
for f in "$T"/d/env.0.*; do
  [ "$f" = "$T/d/env.0.$d0" ] || e1=$f
done
expect_eq "the restart is counted" \
  "$(envval "$e1" TORCHELASTIC_RESTART_COUNT)" 1
expect_grep "worker group failed during a membership change: round [0-9]+ counts it" "$T/d.err"
expect_grep "worker group failed; restarting it \(1 of 1 restarts used\)" "$T/d.err"
wait_files "$T/d/round.*" 2 30

# ---- again, with no restart left: the job ends ----
# A third node first, so that losing g leaves the job at min_nodes: below
# it, with no restart left, the loss itself would end the job (Note [a
# lost node], rdzvd/rdzv_rules.h; t_lost_node).
d1=$(cat "$(compgen -G "$T/d/pid.0.*" | grep -v "pid.0.$d0\$")")
agent h "${args[@]}" "$LW" "$T/h"
wait_files "$T/h/round.*" 1 30
wait_grep "job owed: round [0-9]+ complete: 3 nodes" "$T/rdzvd.log" 30
below_min g
touch "$T/d/withdraw.$d1"
wait_exit "$AGENT_d" 60
expect_eq "d's exit (status 3)" "$RC" 3
expect_eq "restarts" "$(grep -c 'worker group failed; restarting it' "$T/d.err")" 1
expect_grep "Root Cause" "$T/d.err"
exit 0
