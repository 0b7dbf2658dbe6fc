#!/bin/bash
# The workers' job token on etcd (Note [the job token on etcd],
# launcher/rdzv_etcd.c) is drawn at random, not computed from what others
# know: the same on every node of a round, stored in the job document
# (readable by the job's role only), and new after a restart, as with
# rdzvd.  No rendezvous secret is set, so a token derived from the run id
# and the master endpoint would be the same across the restart.  On a
# three-member cluster.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd_cluster 3
ectl() { ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EPS" "$@"; }
conf=keepalive_interval=0.5,keepalive_misses=4,last_call_timeout=0.5
mkdir "$T/w"
# The worker: its token and pid per rank and restart, then waits for go.
cat >"$T/worker" <<'SH'
#!/bin/bash
d=$1
echo "$CDRUN_JOB_TOKEN" >"$d/tok.$RANK.$TORCHELASTIC_RESTART_COUNT.tmp"
mv "$d/tok.$RANK.$TORCHELASTIC_RESTART_COUNT.tmp" "$d/tok.$RANK.$TORCHELASTIC_RESTART_COUNT"
echo $$ >"$d/pid.$RANK.$TORCHELASTIC_RESTART_COUNT"
while [ ! -e "$d/go" ]; do sleep 0.05; done
SH
chmod +x "$T/worker"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --max_restarts=1 \
    --rdzv_backend=etcd --rdzv_endpoint="$ETCD_EPS" --rdzv_id=tok \
    --rdzv_conf="$conf" --no_python "$T/worker" "$T/w"
done
wait_files "$T/w/tok.*.0" 2 60
t0=$(cat "$T/w/tok.0.0")
[[ "$t0" =~ ^[0-9a-f]{64}$ ]] || fail "round 0's token is '$t0'"
expect_eq "rank 1's token in round 0" "$(cat "$T/w/tok.1.0")" "$t0"
ectl get /cdrun/rdzv/tok/state --print-value-only | grep -q "\"token\":\"$t0\"" ||
  fail "the token is not the one in the job's state"
grep -h 'derived from the run id' "$T/a.err" "$T/b.err" &&
  fail "an agent says its token is derived"

# A restart: rank 1's worker dies; the next round has a new token.
kill -KILL "$(cat "$T/w/pid.1.0")"
wait_files "$T/w/tok.*.1" 2 60
t1=$(cat "$T/w/tok.0.1")
[[ "$t1" =~ ^[0-9a-f]{64}$ ]] || fail "round 1's token is '$t1'"
expect_eq "rank 1's token after the restart" "$(cat "$T/w/tok.1.1")" "$t1"
[ "$t1" != "$t0" ] || fail "the token did not change across a restart"
# The node whose worker failed does not call the round it failed in full.
grep 'is full' "$T/a.err" "$T/b.err" && fail "a node says its own round is full"
touch "$T/w/go"
for n in a b; do
  pid=AGENT_$n
  wait_exit "${!pid}" 60
  [ "$RC" -eq 0 ] || { tail -n 30 "$T/$n.err"; fail "agent $n exited $RC"; }
done
exit 0
