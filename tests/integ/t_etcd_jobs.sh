#!/bin/bash
# Two jobs share one etcd without seeing each other (keys under their own
# rdzv_id), and a node whose --nnodes differs from its job's is refused
# with config_mismatch while the job runs on.  etcd-v2 is refused with a
# reason; etcd down at start fails within the join timeout, clearly.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30
ep=$ETCD_EP

mkdir "$T/j1" "$T/j2"
agent a1 --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint="$ep" \
  --rdzv_id=j1 "$TW" env "$T/j1"
agent a2 --nnodes=2 --nproc_per_node=2 --rdzv_backend=etcd-v3 --rdzv_endpoint="$ep" \
  --rdzv_id=j2 "$TW" env "$T/j2"
agent b1 --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint="$ep" \
  --rdzv_id=j1 "$TW" env "$T/j1"
agent b2 --nnodes=2 --nproc_per_node=2 --rdzv_backend=etcd --rdzv_endpoint="$ep" \
  --rdzv_id=j2 "$TW" env "$T/j2"
for n in a1 a2 b1 b2; do
  pid=AGENT_$n
  wait_exit "${!pid}" 60
  [ "$RC" -eq 0 ] || { cat "$T/$n.err"; fail "agent $n exited $RC"; }
done
check_world "$T/j1" env 2
check_world "$T/j2" env 4

# Config mismatch: the job is 2..2, a third node asks for 1..3.
mkdir "$T/m"
for n in c d; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$ep" --rdzv_id=mm "$TW" elastic "$T/m" 60
done
wait_files "$T/m/ws2.*" 2 30
agent x --nnodes=1:3 --nproc_per_node=1 --rdzv_backend=etcd \
  --rdzv_endpoint="$ep" --rdzv_id=mm "$TW" elastic "$T/m" 60
wait_exit "$AGENT_x" 30
[ "$RC" -ne 0 ] || fail "a mismatching node was accepted"
expect_grep 'config_mismatch' "$T/x.err"
expect_grep '1\.\.3 differs from the job.s 2\.\.2' "$T/x.err"
alive "$AGENT_c" && alive "$AGENT_d" || fail "the job did not run on"
kill -TERM "$AGENT_c" "$AGENT_d"
wait_exit "$AGENT_c" 30
wait_exit "$AGENT_d" 30

# etcd-v2 is refused, saying why and what to use.
"$CDRUN" --nnodes=2 --rdzv_backend=etcd-v2 --rdzv_endpoint="$ep" \
  "$TW" env "$T" 2>"$T/v2.err" && fail "etcd-v2 accepted"
expect_grep 'etcd-v2: not supported: .*v2 API.*--rdzv_backend=etcd' "$T/v2.err"
# A password on the command line is refused.
"$CDRUN" --nnodes=2 --rdzv_backend=etcd --rdzv_endpoint="$ep" \
  --rdzv_conf=user=root,password=x "$TW" env "$T" 2>"$T/pw.err" &&
  fail "password= accepted"
expect_grep 'password_file' "$T/pw.err"

# etcd down: nothing listens on the endpoint; a clear error once the
# join timeout (3 s) has passed.
read -r dead <<<"$(free_ports 1)"
agent down --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
  --rdzv_endpoint="127.0.0.1:$dead" --rdzv_id=down \
  --rdzv_conf=join_timeout=3 "$TW" env "$T"
wait_exit "$AGENT_down" 60
[ "$RC" -ne 0 ] || fail "an agent without etcd exited 0"
expect_grep "cannot use etcd .*127\.0\.0\.1:$dead.*join timeout \(3 s\)" "$T/down.err"
exit 0
