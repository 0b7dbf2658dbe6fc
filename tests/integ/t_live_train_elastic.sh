#!/bin/bash
# examples/train_mlp --recovery live in an elastic job (--nnodes=1:2,
# two agents through rdzvd): a node lost (its agent SIGKILLed) leaves the
# group and the survivors go on with the smaller world, re-sharded, none
# restarted, to a test accuracy within 0.3 points of the fault-free run's;
# a node that joins enters at the step boundary where it is first seen
# (the survivors wait for it there: --hold-join), none restarted, to the
# same accuracy; a lost node whose world no longer divides the global
# batch ends the job with a clear error.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/live_train_lib.sh"

ref
start_rdzvd
# last_call_timeout: both nodes of a run start in one round (it completes
# at max); join: a single node starts alone at once.
conf=last_call_timeout=30,join_timeout=30,keepalive_interval=0.2,keepalive_misses=5
jconf=last_call_timeout=0.2,join_timeout=30,keepalive_interval=0.2,keepalive_misses=5

# node NAME ID CONF NPROC ARGS...: an agent of job ID (train_mlp's output
# in $T/NAME.out, the agent's and stderr in $T/NAME.err).
node() {
  local name=$1 id=$2 conf=$3 n=$4
  shift 4
  agent "$name" --nnodes=1:2 --nproc_per_node="$n" --rdzv_backend=c10d \
    --rdzv_endpoint=127.0.0.1:"$RDZVD_PORT" --rdzv_id="$id" \
    --rdzv_conf="$conf" --recovery=live --max_restarts=0 "$TRAIN" \
    "${SMALL[@]}" --ckpt-dir "$T/$id.ckpt" --log-steps 1 "$@"
}

# lose A B WORLDS GO: the agent of A and B that is not node 0 (node 0
# has rank 0's banner; t_live_node0.sh loses it) is SIGKILLed; once the
# survivor's agent says the new round's world (WORLDS, a regex), GO is
# made (the workers hold until it exists) and the survivor's exit status
# awaited: $keep names it, $RC is its status.
lose() {
  local lose kpid lpid
  if grep -Eq '^train_mlp: [0-9]+ workers ' "$T/$1.out"; then
    keep=$1 lose=$2
  else
    keep=$2 lose=$1
  fi
  kpid=AGENT_$keep lpid=AGENT_$lose
  kill -KILL "${!lpid}"
  wait_exit "${!lpid}" 30
  wait_grep "round [0-9]+: world $3 .*the workers go on \(live recovery\)" \
    "$T/$keep.err" 60
  touch "$4"
  wait_exit "${!kpid}" 120
}

# ---- node lost: 2 x 2 workers, one agent SIGKILLed at step 30 ----------
node la loss "$conf" 2 --recovery live --hold-at-step 30 --hold-file "$T/go.loss"
node lb loss "$conf" 2 --recovery live --hold-at-step 30 --hold-file "$T/go.loss"
holding 4 "$T/la.err" "$T/lb.err"
lose la lb 2 "$T/go.loss"
[ "$RC" -eq 0 ] || { cat "$T/$keep.out" "$T/$keep.err" >&2; fail "loss: the survivor exited $RC"; }
expect_grep '^live_recovery generation=[0-9]+ world=2 old_world=4 joined=0 left=2 step=30 cause=peer_lost ' \
  "$T/$keep.out"
expect_eq "loss: survivors started" \
  "$(grep -Ec '^live: rank [01] pid [0-9]+ started at step 0 \(world 4, restart 0\)$' "$T/$keep.out")/$(grep -c '^live: ' "$T/$keep.out")" "2/2"
expect_grep '^final: step 96 ' "$T/$keep.out"
near "$(acc "$T/$keep.out")" "$(acc "$T/ref.log")" ||
  fail "loss: test accuracy $(acc "$T/$keep.out")%, fault-free $(acc "$T/ref.log")%"

# ---- node join: 1 x 2 workers, a second node of 2 at step 30 -----------
node ja join "$jconf" 2 --recovery live --hold-at-step 30 --hold-file "$T/go.join" --hold-join
holding 2 "$T/ja.err"
node jb join "$jconf" 2 --recovery live --hold-at-step 30 --hold-file "$T/go.join" --hold-join
wait_grep 'round [0-9]+: world 4 .*the workers go on \(live recovery\)' "$T/ja.err" 60
touch "$T/go.join"
wait_exit "$AGENT_ja" 120
[ "$RC" -eq 0 ] || { cat "$T/ja.out" "$T/ja.err" >&2; fail "join: the first node exited $RC"; }
wait_exit "$AGENT_jb" 60
[ "$RC" -eq 0 ] || { cat "$T/jb.out" "$T/jb.err" >&2; fail "join: the second node exited $RC"; }
expect_grep '^live_recovery generation=[0-9]+ world=4 old_world=2 joined=2 left=0 step=30 cause=membership ' \
  "$T/ja.out"
expect_eq "join: survivors started" \
  "$(grep -Ec '^live: rank [01] pid [0-9]+ started at step 0 \(world 2, restart 0\)$' "$T/ja.out")/$(grep -c '^live: ' "$T/ja.out")" "2/2"
expect_eq "join: newcomers started" \
  "$(grep -Ec '^live: rank [23] pid [0-9]+ started at step 30 \(world 4, restart 0\)$' "$T/jb.out")/$(grep -c '^live: ' "$T/jb.out")" "2/2"
expect_grep '^final: step 96 ' "$T/ja.out"
near "$(acc "$T/ja.out")" "$(acc "$T/ref.log")" ||
  fail "join: test accuracy $(acc "$T/ja.out")%, fault-free $(acc "$T/ref.log")%"

# ---- a lost node leaves a world that does not divide the batch ---------
# 2 + 3 workers, global batch 35: a survivors' world of 2 or 3 cannot
# split it, whichever node is lost.
SMALL=(--samples 4096 --global-batch 35 --hidden 64 --epochs 1 --ckpt-every 0)
node da odd "$conf" 2 --recovery live --hold-at-step 10 --hold-file "$T/go.odd"
node db odd "$conf" 3 --recovery live --hold-at-step 10 --hold-file "$T/go.odd"
holding 5 "$T/da.err" "$T/db.err"
lose da db '[23]' "$T/go.odd"
[ "$RC" -ne 0 ] || fail "odd: the job exited 0"
expect_grep '^train_mlp: rank [0-2]: --global-batch: 35 is not divisible by the new world size [23]$' \
  "$T/$keep.err"
exit 0
