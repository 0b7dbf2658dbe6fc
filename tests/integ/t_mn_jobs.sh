#!/bin/bash
# Two jobs share one rdzvd without interference; a joiner whose
# configuration differs from the job's is refused; a lone node of a
# 2-node job times out with a clear message.
. "$(dirname "$0")/lib.sh"

start_rdzvd
ep=127.0.0.1:$RDZVD_PORT

mkdir "$T/x" "$T/y"
agent x1 --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=jx "$TW" env "$T/x"
agent y1 --nnodes=2 --nproc_per_node=3 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=jy "$TW" env "$T/y"
agent x2 --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=jx "$TW" env "$T/x"
agent y2 --nnodes=2 --nproc_per_node=3 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=jy "$TW" env "$T/y"
for n in x1 x2 y1 y2; do
  v=AGENT_$n
  wait_exit "${!v}" 30
  [ "$RC" -eq 0 ] || { cat "$T/$n.err"; fail "agent $n exited $RC"; }
done
check_world "$T/x" env 2
check_world "$T/y" env 6
expect_eq "job x run id" "$(envval "$T/x/env.0" TORCHELASTIC_RUN_ID)" jx
expect_eq "job y run id" "$(envval "$T/y/env.5" TORCHELASTIC_RUN_ID)" jy

# Configuration mismatch: nnodes 2:2 fixed first, 2:3 refused.
agent m1 --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$ep" \
  --rdzv_id=mm --rdzv_conf=join_timeout=20 "$TW" env "$T/x"
# m1 must have fixed the job's configuration before m2 asks.
wait_grep 'job mm: .* joined' "$T/rdzvd.log" 30
agent m2 --nnodes=2:3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$ep" \
  --rdzv_id=mm "$TW" env "$T/x"
wait_exit "$AGENT_m2" 20
[ "$RC" -ne 0 ] || fail "a mismatching joiner was accepted"
expect_grep 'config_mismatch' "$T/m2.err"
# Restarts are counted per job: every node must allow the same number.
agent m3 --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$ep" \
  --rdzv_id=mm --max_restarts=2 "$TW" env "$T/x"
wait_exit "$AGENT_m3" 20
[ "$RC" -ne 0 ] || fail "a joiner with another --max_restarts was accepted"
expect_grep 'max_restarts 2 differs' "$T/m3.err"
kill -TERM "$AGENT_m1"
wait_exit "$AGENT_m1" 20

# Join timeout: alone in a 2-node job; progress is printed while waiting.
agent lone --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$ep" \
  --rdzv_id=lone --rdzv_conf=join_timeout=2 "$TW" env "$T/x"
wait_exit "$AGENT_lone" 20
[ "$RC" -ne 0 ] || fail "a lone node of a 2-node job exited 0"
expect_grep 'waiting for nodes: 1 present, at least 2 needed' "$T/lone.err"
expect_grep 'join_timeout' "$T/lone.err"

# Static back end across two nodes: ranks from --node_rank, no rdzvd.
mkdir "$T/s"
port=$(free_port)
agent s0 --nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr=127.0.0.1 \
  --master_port="$port" "$TW" env "$T/s"
agent s1 --nnodes=2 --node_rank=1 --nproc_per_node=2 --master_addr=127.0.0.1 \
  --master_port="$port" "$TW" env "$T/s"
wait_exit "$AGENT_s0" 20; wait_exit "$AGENT_s1" 20
check_world "$T/s" env 4
expect_eq "static MASTER_PORT" "$(envval "$T/s/env.3" MASTER_PORT)" "$port"

# Two static nodes without --node_rank are both node 0: the nodes meet
# at the endpoint before starting (Note [static barrier]), and both say
# which flag is missing; no worker runs.
mkdir "$T/dup"
port=$(free_port)
agent d0 --nnodes=2 --nproc_per_node=2 --rdzv_endpoint=127.0.0.1:"$port" \
  "$TW" env "$T/dup"
agent d1 --nnodes=2 --nproc_per_node=2 --rdzv_endpoint=127.0.0.1:"$port" \
  "$TW" env "$T/dup"
wait_exit "$AGENT_d0" 30; rc0=$RC
wait_exit "$AGENT_d1" 30; rc1=$RC
for n in d0 d1; do
  expect_grep 'node rank 0 was claimed by two nodes .*--node_rank=0\.\.1, or use --rdzv_backend=c10d' \
    "$T/$n.err"
done
[ "$rc0" -ne 0 ] && [ "$rc1" -ne 0 ] || fail "duplicate node ranks: exit $rc0 and $rc1"
[ -z "$(ls -A "$T/dup")" ] || fail "workers ran with duplicate node ranks: $(ls "$T/dup")"

# Different --nproc_per_node on static nodes: refused the same way.
mkdir "$T/np"
port=$(free_port)
agent n0 --nnodes=2 --node_rank=0 --nproc_per_node=2 \
  --master_addr=127.0.0.1 --master_port="$port" "$TW" env "$T/np"
agent n1 --nnodes=2 --node_rank=1 --nproc_per_node=1 \
  --master_addr=127.0.0.1 --master_port="$port" "$TW" env "$T/np"
wait_exit "$AGENT_n0" 30; wait_exit "$AGENT_n1" 30
expect_grep 'same --nproc_per_node on every node \(1 at .*, 2 at node 0\)' "$T/n1.err"

# A static node whose node 0 never comes gives up after join_timeout.
mkdir "$T/lone1"
port=$(free_port)
agent l1 --nnodes=2 --node_rank=1 --nproc_per_node=1 --master_addr=127.0.0.1 \
  --master_port="$port" --rdzv_conf=join_timeout=1 "$TW" env "$T/lone1"
wait_exit "$AGENT_l1" 30
[ "$RC" -ne 0 ] || fail "a static node without node 0 exited 0"
expect_grep 'static rendezvous: waited 1 s for node 0 at 127\.0\.0\.1:' "$T/l1.err"
[ -z "$(ls -A "$T/lone1")" ] || fail "a worker ran without node 0"
exit 0
