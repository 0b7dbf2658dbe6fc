#!/bin/bash
# Note [fixed membership]: nodes a launcher started (here a Slurm step, its
# environment set by hand: one agent per "node", through rdzvd) and a
# fixed size (Slurm's node count: 2:2).  One node's cdrun is killed: the
# survivor says which node was lost and why, waits the grace period
# (--rdzv_conf lost_node_grace) and exits 75, instead of waiting for it
# until the join timeout.  (A restart is left: with none, the job cannot
# reach its size and ends at once, Note [a lost node], t_lost_node.)
# With --nnodes=1:2 the job stays elastic: the survivor runs on alone.
. "$(dirname "$0")/lib.sh"

start_rdzvd
EP=127.0.0.1:$RDZVD_PORT

# step_agent NAME NODEID ARGS...: an agent of Slurm step 77.0.
step_agent() {
  local name=$1 nodeid=$2
  shift 2
  SLURM_JOB_ID=77 SLURM_STEP_ID=0 SLURM_NODEID=$nodeid \
    SLURM_STEP_NODELIST=localhost SLURM_STEP_NUM_NODES=2 \
    SLURM_STEP_NUM_TASKS=2 agent "$name" "$@"
}

# ---- fixed: 2 nodes from Slurm's step, one killed ---------------------------
mkdir "$T/f"
for k in 0 1; do
  step_agent "f$k" "$k" --nproc_per_node=2 --max_restarts=1 \
    --rdzv_endpoint="$EP" \
    --rdzv_id=fixed --rdzv_conf=lost_node_grace=1 "$TW" sleep "$T/f" 600
done
wait_files "$T/f/pid.*" 4 60
kill -9 "$AGENT_f1"
wait_exit "$AGENT_f0" 120
expect_eq "survivor's exit status" "$RC" 75
expect_grep "node [^ ]+ lost \(its agent exited\) and this job's size is fixed \(its nodes come from Slurm's step" "$T/f0.err"
expect_grep 'is not back after 1 s: ending the job \(exit status 75\)' \
  "$T/f0.err"
for f in "$T"/f/pid.*; do
  alive "$(cat "$f")" && fail "worker $(cat "$f") outlived the job"
done

# ---- elastic: --nnodes=1:2, the survivor goes on alone ----------------------
mkdir "$T/e"
for k in 0 1; do
  step_agent "e$k" "$k" --nnodes=1:2 --nproc_per_node=2 \
    --rdzv_endpoint="$EP" --rdzv_id=elastic \
    --rdzv_conf=lost_node_grace=0,last_call_timeout=1 \
    "$TW" elastic "$T/e" 600
done
wait_files "$T/e/ws4.*" 4 60
rm -f "$T"/e/ws2.*      # a round of one before the other came, if any
kill -9 "$AGENT_e1"
wait_files "$T/e/ws2.*" 2 60
alive "$AGENT_e0" || fail "the elastic survivor exited"
grep -q "size is fixed" "$T/e0.err" && fail "an elastic job called fixed"
kill -TERM "$AGENT_e0"
wait_exit "$AGENT_e0" 60
exit 0
