#!/bin/bash
# Losing node 0 of a 3-node live job through rdzvd (Note [live store in
# rdzvd]): examples/train_mlp --recovery live, 3 nodes x 2 workers
# (--nnodes=2:3); at step 30, while every worker holds (--hold-at-step),
# node 0's agent and workers are SIGKILLed together.  The survivors go on
# in a world of 4, none restarted (each worker's only start is at step 0,
# restart 0), with rdzvd's live store; the result is bitwise the one of
# the same run that loses node 2 instead (the same worlds, ranks and
# data: node 0 costs what any node costs), and its test accuracy within
# 0.3 points of the fault-free run's (a changed world re-shards the
# batch, so no run that loses a node can be bitwise the fault-free one).
# Then the embedded rendezvous, which node 0's cdrun hosts: its loss is
# the rendezvous' loss, and the job ends, clearly and leaving nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/live_train_lib.sh"

start_rdzvd
# last_call_timeout: the three nodes of a run start in one round (it
# completes at max_nodes).
conf=last_call_timeout=30,join_timeout=30,keepalive_interval=0.2,keepalive_misses=5
# 6 workers, then 4: 96 divides by both.
SMALL=(--samples 4096 --global-batch 96 --hidden 64 --epochs 3 --ckpt-every 10)

# node NAME ID ARGS...: an agent of job ID, 2 workers (train_mlp's output
# in $T/NAME.out, the agent's and stderr in $T/NAME.err).
node() {
  local name=$1 id=$2
  shift 2
  agent "$name" --nnodes=2:3 --nproc_per_node=2 --rdzv_backend=c10d \
    --rdzv_endpoint=127.0.0.1:"$RDZVD_PORT" --rdzv_id="$id" \
    --rdzv_conf="$conf" --recovery=live --max_restarts=0 "$TRAIN" \
    "${SMALL[@]}" --ckpt-dir "$T/$id.ckpt" --log-steps 1 \
    --recovery live --params-out "$T/$id.params" "$@"
}

# three ID ARGS...: nodes ${ID}0 ${ID}1 ${ID}2 of job ID, joined in that
# order (node rank = the digit: survivors of a round keep their order,
# and the first round ranks by join).
three() {
  local id=$1 k
  shift
  for k in 0 1 2; do
    node "$id$k" "$id" "$@"
    wait_grep "job $id: .* joined round 0 \\($((k + 1)) present" \
      "$T/rdzvd.log" 30
  done
}

# workers NAME: the pids of node NAME's workers (their "started" lines).
workers() {
  sed -En 's/^live: rank [0-9]+ pid ([0-9]+) started at step .*/\1/p' \
    "$T/$1.out" "$T/$1.err" | sort -u
}

# lose ID K: node ID$K (agent and workers together) SIGKILLed while every
# worker holds at step 30; the others go on and finish; checks that no
# survivor restarted.
lose() {
  local id=$1 k=$2 lost=$1$2 pids s a
  three "$id" --hold-at-step 30 --hold-file "$T/go.$id"
  holding 6 "$T/${id}0.err" "$T/${id}1.err" "$T/${id}2.err"
  [ "$k" != 0 ] || grep -Eq '^train_mlp: 6 workers ' "$T/${id}0.out" ||
    fail "$id: ${id}0 is not node 0"
  pids=$(workers "$lost")
  [ "$(echo "$pids" | wc -w)" -eq 2 ] || fail "$lost: workers '$pids'"
  a=AGENT_$lost
  # shellcheck disable=SC2086
  kill -KILL "${!a}" $pids
  wait_exit "${!a}" 30
  for s in 0 1 2; do
    [ "$s" = "$k" ] && continue
    wait_grep "round [0-9]+: world 4 .*the workers go on \(live recovery\)" \
      "$T/$id$s.err" 60
  done
  touch "$T/go.$id"
  for s in 0 1 2; do
    [ "$s" = "$k" ] && continue
    a=AGENT_$id$s
    wait_exit "${!a}" 120
    [ "$RC" -eq 0 ] || { cat "$T/$id$s.out" "$T/$id$s.err" >&2
                         fail "$id: $id$s exited $RC"; }
    grep -q "restarting them\|restarting the worker group" "$T/$id$s.err" &&
      fail "$id: $id$s restarted its workers"
    expect_eq "$id: $id$s's workers started once" \
      "$(grep -Ec '^live: rank [0-9]+ pid [0-9]+ started at step 0 \(world 6, restart 0\)$' "$T/$id$s.out")/$(grep -c '^live: ' "$T/$id$s.out")" "2/2"
  done
}

# ---- the fault-free run ----
three ref
for k in 0 1 2; do
  a=AGENT_ref$k
  wait_exit "${!a}" 120
  [ "$RC" -eq 0 ] || { cat "$T/ref$k.err" >&2; fail "ref: ref$k exited $RC"; }
done
expect_grep "job ref: live store on port [0-9]+" "$T/rdzvd.log"
last=$(sed -En 's/^final: step ([0-9]+) .*/\1/p' "$T/ref0.out")
[ -n "$last" ] || fail "ref: no final line"

# ---- node 2 lost, then node 0 lost: the same ----
lose two 2
lose zero 0
expect_grep '^live_recovery generation=[0-9]+ world=4 old_world=6 joined=0 left=2 step=30 cause=peer_lost ' \
  "$T/zero1.out"
expect_grep "^final: step $last " "$T/zero1.out"
cmp -s "$T/zero.params" "$T/two.params" ||
  fail "node 0's loss left other parameters than node 2's"
near "$(acc "$T/zero1.out")" "$(acc "$T/ref0.out")" ||
  fail "test accuracy $(acc "$T/zero1.out")%, fault-free $(acc "$T/ref0.out")%"

# ---- the embedded rendezvous: node 0's loss is the rendezvous' loss ----
# Node 0's cdrun hosts the rendezvous and the live store: the survivors'
# agents say the host is gone, their workers' recoveries cannot reach the
# store, and each ends with a nonzero status at reconnect_timeout, naming
# the host, nothing of theirs left running (man/cdrun.1, Node 0).
port=$(free_port)
econf=last_call_timeout=30,join_timeout=30,keepalive_interval=0.2,keepalive_misses=5,reconnect_timeout=5
for k in 0 1 2; do
  agent "emb$k" --nnodes=2:3 --nproc_per_node=2 --rdzv_backend=c10d \
    --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=emb \
    --rdzv_conf="$econf$([ $k = 0 ] || echo ,is_host=0)" --recovery=live \
    --max_restarts=1 "$TRAIN" "${SMALL[@]}" --ckpt-dir "$T/emb.ckpt" \
    --log-steps 1 --recovery live --hold-at-step 30 --hold-file "$T/go.emb"
  # The host first (node 0: the first to join its own rendezvous).
  [ "$k" = 0 ] && wait_grep 'hosting the rendezvous' "$T/emb0.err" 30
done
holding 6 "$T/emb0.err" "$T/emb1.err" "$T/emb2.err"
grep -Eq '^train_mlp: 6 workers ' "$T/emb0.out" || fail "emb0 is not node 0"
pids=$(workers emb0)
# shellcheck disable=SC2086
kill -KILL "$AGENT_emb0" $pids
wait_exit "$AGENT_emb0" 30
touch "$T/go.emb"
for k in 1 2; do
  a=AGENT_emb$k
  wait_exit "${!a}" 60
  [ "$RC" -ne 0 ] || fail "emb$k exited 0 without its rendezvous"
  expect_grep "the rendezvous host 127.0.0.1:$port \(embedded in the agent of node 0\) is gone" "$T/emb$k.err"
  expect_grep "rendezvous failed: the rendezvous host 127.0.0.1:$port \(embedded in the agent of node 0\) did not come back within 5 s \(reconnect_timeout\)" "$T/emb$k.err"
  for p in $(workers "emb$k"); do
    alive "$p" && fail "emb$k's worker $p outlived its agent"
  done
done
exit 0
