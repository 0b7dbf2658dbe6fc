#!/bin/bash
# Soft state on the network-namespace bed (see t_mn_netns.sh for the
# bed): rdzvd and three agents each in their own namespace.  Node b is
# cut off (its link goes down) and its agent's connection dies under the
# cut (ss -K inside its namespace: the agent learns at once, the server
# cannot: nothing gets through).  The agent keeps its worker and tries
# to reconnect; the partition ends (link up) long before the job's
# keepalive window (30 s), the agent re-asserts, the server lets the new
# connection supersede the old one, and the job goes on untouched: no new
# round, the same worker pids, exit 0.  Then rdzvd itself is SIGKILLed and
# restarted in its namespace: the agents come back over the bridge.
# Needs root, ip netns, veth, bridge and ss -K; skips otherwise.
. "$(dirname "$0")/lib.sh"

: "${RDZVD:?RDZVD must point to bin/rdzvd}"

# Names are unique per run (pid-derived); interface names stay <= 15 chars.
id=$$
NS_SW=cdrun-$id-sw           # the switch: holds the bridge
NS_R=cdrun-$id-r             # rdzvd
NODES=(a b c)                # the agents, namespaces cdrun-$id-<n>
BR=b$id                      # bridge, in NS_SW
NET=10.213.$((id % 250 + 1)) # private /24 (inside private namespaces)
CREATED_NS=()

net_cleanup() {
  local ns
  # lib.sh's cleanup kills every process first (nothing may pin a netns).
  cleanup
  # Bridge ports and the bridge, then the namespaces (which takes the
  # namespace-side veth ends with them).
  if [ "${#CREATED_NS[@]}" -gt 0 ]; then
    for ns in "${CREATED_NS[@]}"; do
      [ "$ns" = "$NS_SW" ] && continue
      ip -n "$NS_SW" link del "v$id${ns##*-}" 2>/dev/null
    done
    ip -n "$NS_SW" link del "$BR" 2>/dev/null
    for ns in "${CREATED_NS[@]}"; do
      ip netns del "$ns" 2>/dev/null
    done
  fi
  return 0
}
trap net_cleanup EXIT

# ---- can we do this here? ------------------------------------------------
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (uid $(id -u))"
command -v ip >/dev/null || skip "the ip command (iproute2) is not installed"
ip netns add "$NS_SW" 2>"$T/ip.err" ||
  skip "'ip netns add' does not work here: $(head -c 200 "$T/ip.err")"
CREATED_NS+=("$NS_SW")
ip -n "$NS_SW" link set lo up 2>"$T/ip.err" ||
  skip "cannot configure a network namespace: $(head -c 200 "$T/ip.err")"
ip -n "$NS_SW" link add "$BR" type bridge 2>"$T/ip.err" ||
  skip "cannot create a bridge in a namespace: $(head -c 200 "$T/ip.err")"
ip -n "$NS_SW" link set "$BR" up || fail "cannot bring the bridge up"

# host NAME NUM: a namespace cdrun-$id-NAME with eth-like e$idNAME at
# $NET.NUM/24, its peer v$idNAME a port of the bridge.
host() {
  local name=$1 num=$2 ns=cdrun-$id-$1
  ip netns add "$ns" 2>"$T/ip.err" ||
    skip "'ip netns add' failed for a second namespace: $(head -c 200 "$T/ip.err")"
  CREATED_NS+=("$ns")
  ip -n "$NS_SW" link add "v$id$name" type veth peer name "e$id$name" \
    netns "$ns" 2>"$T/ip.err" ||
    skip "cannot create a veth pair across namespaces: $(head -c 200 "$T/ip.err")"
  ip -n "$NS_SW" link set "v$id$name" master "$BR" 2>"$T/ip.err" ||
    skip "cannot attach a veth to the bridge: $(head -c 200 "$T/ip.err")"
  ip -n "$NS_SW" link set "v$id$name" up || fail "veth v$id$name up"
  ip -n "$ns" link set lo up || fail "lo up in $ns"
  ip -n "$ns" addr add "$NET.$num/24" dev "e$id$name" || fail "addr in $ns"
  ip -n "$ns" link set "e$id$name" up || fail "veth e$id$name up"
}

host r 1
declare -A ADDR NSOF
i=11
for n in "${NODES[@]}"; do
  host "$n" "$i"
  ADDR[$n]=$NET.$i
  NSOF[$n]=cdrun-$id-$n
  i=$((i + 1))
done
# ---- rdzvd in its own namespace --------------------------------------------
: >"$T/rdzvd.log"
ip netns exec "$NS_R" "$RDZVD" --host "$NET.1" --port 0 2>"$T/rdzvd.log" &
RDZVD_PID=$!
STARTED+=("$RDZVD_PID")
for ((i = 0; i < 100; i++)); do
  RDZVD_PORT=$(sed -n 's/^rdzvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' \
                 "$T/rdzvd.log")
  [ -n "$RDZVD_PORT" ] && break
  sleep 0.05
done
[ -n "$RDZVD_PORT" ] || { cat "$T/rdzvd.log" >&2; fail "rdzvd did not start"; }
. "$(dirname "$0")/soft_lib.sh"
command -v ss >/dev/null || skip "no ss"
ep=$NET.1:$RDZVD_PORT
conf=keepalive_interval=1,keepalive_misses=30,join_timeout=60

mkdir "$T/w"
for n in "${NODES[@]}"; do
  ip netns exec "${NSOF[$n]}" "$CDRUN" --nnodes=3 --nproc_per_node=1 \
    --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=softnet \
    --rdzv_conf="$conf" "$TW" gate "$T/w" >"$T/$n.out" 2>"$T/$n.err" &
  STARTED+=("$!")
  printf -v "AGENT_$n" '%s' "$!"
done
wait_files "$T/w/pid.*.0.3" 3 60
old=$(cat "$T"/w/pid.*.0.3)

# ---- a short partition of node b -------------------------------------------
ip -n "${NSOF[b]}" link set "e${id}b" down || fail "cannot cut node b"
ip netns exec "${NSOF[b]}" ss -K -tn "( dport = :$RDZVD_PORT )" >/dev/null 2>&1
for ((i = 0; i < 200; i++)); do
  grep -q "lost the rendezvous server" "$T/b.err" && break
  sleep 0.05
done
grep -q "lost the rendezvous server $ep" "$T/b.err" ||
  skip "ss -K did not destroy the socket (kernel without INET_DIAG_DESTROY?)"
ip -n "${NSOF[b]}" link set "e${id}b" up || fail "cannot reconnect node b"
wait_grep "reconnected to the rendezvous server $ep .*re-asserting running round 0" "$T/b.err" 60
wait_grep "job softnet: .*reconnected and re-asserted rank [0-9] of round 0: the job goes on" "$T/rdzvd.log" 30
expect_eq "worker pids after the partition" "$(cat "$T"/w/pid.*.0.3)" "$old"

# ---- rdzvd restarts in its namespace -----------------------------------------
kill -KILL "$RDZVD_PID"
wait_exit "$RDZVD_PID" 30
for n in "${NODES[@]}"; do
  wait_grep "lost the rendezvous server $ep" "$T/$n.err" 30
done
: >"$T/rdzvd2.log"
ip netns exec "$NS_R" "$RDZVD" --host "$NET.1" --port "$RDZVD_PORT" 2>"$T/rdzvd2.log" &
RDZVD_PID=$!
STARTED+=("$RDZVD_PID")
wait_grep "job softnet: round 0 rebuilt: all 3 nodes" "$T/rdzvd2.log" 60
expect_eq "worker pids after the restart" "$(cat "$T"/w/pid.*.0.3)" "$old"

touch "$T/w/go"
for n in "${NODES[@]}"; do expect_exit "$n" 60 0; done
grep -q "restart, new round" "$T/rdzvd.log" "$T/rdzvd2.log" && fail "a new round"
kill -TERM "$RDZVD_PID"
wait_exit "$RDZVD_PID" 10
for f in "$T"/*.err "$T"/rdzvd*.log; do
  grep -Eq 'Sanitizer|runtime error' "$f" && { cat "$f" >&2; fail "sanitizer report in $f"; }
done
exit 0
