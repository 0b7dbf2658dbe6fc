#!/bin/bash
# Note [a lost node] (rdzvd/rdzv_rules.h) on the etcd back end: a
# fixed-size job (--nnodes=2, no restart left) whose other node leaves
# ends on the survivor, naming the node and how it left, exit 75.
# Before, the survivor restarted its workers and waited for join_timeout
# (600 s here).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30
# Lease TTL = keepalive_interval x keepalive_misses = 2 s (etcd's minimum).
conf=keepalive_interval=0.5,keepalive_misses=4

# pair DIR ID: two agents DIRa and DIRb of job ID, sleeping workers.
pair() {
  local dir=$1 id=$2
  mkdir "$T/$dir"
  for k in a b; do
    agent "$dir$k" --nnodes=2 --nproc_per_node=1 --max_restarts=0 \
      --rdzv_backend=etcd --rdzv_endpoint="$ETCD_EP" --rdzv_id="$id" \
      --rdzv_conf="$conf" "$TW" sleep "$T/$dir" 600
  done
  wait_files "$T/$dir/pid.*" 2 60
}

# survivor_ends NAME HOW
survivor_ends() {
  local pid
  pid=AGENT_$1
  wait_exit "${!pid}" 60
  [ "$RC" -eq 75 ] || { cat "$T/$1.err"; fail "$1 exited $RC, want 75"; }
  expect_grep "was closed: node .*\($2\): the job cannot reach its size \(1 of 2 nodes\) and no restart is left \(0 of 0 used\): ending the job \(exit status 75\)" "$T/$1.err"
  grep -q "restarting the worker group" "$T/$1.err" &&
    fail "$1 restarted its workers for a job that cannot go on"
  return 0
}

# b's cdrun stopped: it leaves (goodbye).
pair g goodbye
kill -TERM "$AGENT_gb"
wait_exit "$AGENT_gb" 60
survivor_ends ga "it said goodbye"

# b's cdrun killed: its lease expires.
pair d died
kill -9 "$AGENT_db"
survivor_ends da "its link went silent"

for f in "$T"/*/pid.*; do
  alive "$(cat "$f")" && fail "worker $(cat "$f") outlived the job"
done
exit 0
