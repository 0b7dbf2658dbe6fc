#!/bin/bash
# A three-member etcd cluster loses members while a 2-node job runs, and
# each time the agents were talking to that very member: first it hangs
# (SIGSTOP: it accepts connections and never answers), then, once it is
# back, the leader dies (SIGKILL).  The agents fail over to the others,
# their leases live on (each agent's keepalive is answered by another
# member within the TTL), the job does not notice (no restart, the same
# workers), and it finishes through the exit barrier on the survivors.
# Every step waits for an event (gated workers, log lines), never a time.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd_cluster 3
# etcd_leader: which member leads (waits for an election).
etcd_leader() {
  local i l
  for ((i = 0; i < 300; i++)); do
    l=$(etcd_leader_index 3) && { echo "$l"; return 0; }
    sleep 0.1
  done
  fail "no etcd leader elected"
}
port_of() { echo "${ETCD_MEMBER_URL[$1]##*:}"; }
leader=$(etcd_leader)
follower=$((leader % 3 + 1))
# The agents start on a follower (the one that will hang), then the
# leader (the one that will die).
eps=127.0.0.1:$(port_of "$follower"),127.0.0.1:$(port_of "$leader")
for ((i = 1; i <= 3; i++)); do
  [ "$i" -eq "$leader" ] || [ "$i" -eq "$follower" ] ||
    eps+=",127.0.0.1:$(port_of "$i")"
done

mkdir "$T/w"
# TTL 5 s, a keepalive every 0.5 s.
conf=keepalive_interval=0.5,keepalive_misses=10
export LOGLEVEL=DEBUG
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$eps" --rdzv_id=ha --rdzv_conf="$conf" \
    "$TW" gate "$T/w"
done
# The workers wait for $T/w/go: the job runs until the test says.
wait_files "$T/w/pid.*.0.2" 2 60
w0=$(cat "$T/w/pid.0.0.2") w1=$(cat "$T/w/pid.1.0.2")

# renewed_after FILE LINE PORTS: a keepalive answered with a live TTL by
# a member whose port matches PORTS (a regex), logged after LINE
# (LOGLEVEL=DEBUG logs every answer).
renewed_after() {
  tail -n "+$(($2 + 1))" "$1" | grep -Eq \
    "127\.0\.0\.1:($3) /v3/lease/keepalive -> HTTP 200: .*\"TTL\":\"[1-9]"
}
# both_renewed WHAT PORTS: waits until both agents renewed through PORTS
# since the lines counted in $na, $nb.
both_renewed() {
  local i
  for ((i = 0; i < 1200; i++)); do
    renewed_after "$T/a.err" "$na" "$2" && renewed_after "$T/b.err" "$nb" "$2" &&
      break
    alive "$AGENT_a" && alive "$AGENT_b" || break
    sleep 0.05
  done
  renewed_after "$T/a.err" "$na" "$2" && renewed_after "$T/b.err" "$nb" "$2" ||
    { tail -n 40 "$T/a.err" "$T/b.err"
      fail "$1: no lease renewed by another member"; }
  alive "$w0" && alive "$w1" ||
    { cat "$T/a.err" "$T/b.err"; fail "$1: a worker ended"; }
}
others() {
  local i out=""
  for ((i = 1; i <= 3; i++)); do
    [ "$i" -eq "$1" ] || out+="${out:+|}$(port_of "$i")"
  done
  echo "$out"
}

# 1. The member the agents use hangs.
na=$(wc -l <"$T/a.err") nb=$(wc -l <"$T/b.err")
kill -STOP "${ETCD_MEMBER_PID[follower]}"
both_renewed "a hung member" "$(others "$follower")"
kill -CONT "${ETCD_MEMBER_PID[follower]}"

# 2. The leader dies (the agents moved to it when the follower hung).
leader=$(etcd_leader)
na=$(wc -l <"$T/a.err") nb=$(wc -l <"$T/b.err")
kill -KILL "${ETCD_MEMBER_PID[leader]}"
both_renewed "a dead leader" "$(others "$leader")"

# The job ends on the survivors: workers exit 0, exit barrier, leave.
touch "$T/w/go"
for ((i = 0; i < 1200; i++)); do
  alive "$AGENT_a" || alive "$AGENT_b" || break
  sleep 0.05
done
alive "$AGENT_a" || alive "$AGENT_b" &&
  { tail -n 40 "$T/a.err" "$T/b.err"; fail "the agents did not finish"; }
wait_exit "$AGENT_a" 10; rca=$RC
wait_exit "$AGENT_b" 10; rcb=$RC
[ "$rca" -eq 0 ] && [ "$rcb" -eq 0 ] ||
  { cat "$T/a.err" "$T/b.err"; fail "agents exited $rca/$rcb"; }
# (A warning that keepalives are late, followed by 'etcd answers again',
# is the truth about a leader's loss, not the job noticing it.)
grep -Eq 'restarting the worker group|etcd lease expired|removed this one' \
  "$T/a.err" "$T/b.err" &&
  { cat "$T/a.err" "$T/b.err"; fail "the job noticed the lost leader"; }
for n in a b; do
  if grep -q 'no lease keepalive has reached' "$T/$n.err"; then
    expect_grep 'etcd answers again' "$T/$n.err"
  fi
done
[ -z "$(compgen -G "$T/w/pid.*.1.*")" ] || fail "a second round ran"
expect_eq "restart count" "$(envval "$T/w/env.0.0.2" TORCHELASTIC_RESTART_COUNT)" 0
exit 0
