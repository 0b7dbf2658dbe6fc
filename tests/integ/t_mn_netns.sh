#!/bin/bash
# Agents on separate "hosts": rdzvd and three cdrun agents each in their own
# network namespace, wired through a bridge in a dedicated "switch"
# namespace (the host's own networking is untouched).  Every worker must get
# the rank-0 node's namespace address as MASTER_ADDR (not 127.0.0.1).  Then
# the rank-0 node's link goes down: rdzvd notices the silence after
# keepalive_interval * keepalive_misses, the two survivors restart with the
# smaller world (and a new master), and the cut-off agent, which no longer
# hears the server, gives up with a clear message and stops its workers.
# Needs root and working `ip netns`, veth and bridge; skips otherwise.
. "$(dirname "$0")/lib.sh"

: "${RDZVD:?RDZVD must point to bin/rdzvd}"

# The bed: scripts/netbed, 4 hosts (namespaces on a bridge that lives in a
# namespace of its own; names unique per run): h1 for rdzvd, the agents'
# nodes a, b, c on h2, h3, h4.
NETBED=$(cd "$(dirname "$0")/../.." && pwd)/scripts/netbed
BED=$T/bed
NODES=(a b c)

net_cleanup() {
  local p
  # Nothing may pin a namespace: kill every process first, then the bed,
  # then lib.sh's cleanup (which removes $T, the bed's state).
  for p in "${STARTED[@]+"${STARTED[@]}"}"; do
    kill -9 "$p" 2>/dev/null
  done
  "$NETBED" down "$BED" 2>/dev/null
  cleanup
  return 0
}
trap net_cleanup EXIT

"$NETBED" up "$BED" 4 2>"$T/netbed.err"
rc=$?
[ "$rc" -eq 77 ] && skip "$(cat "$T/netbed.err")"
[ "$rc" -eq 0 ] || fail "netbed up: $(cat "$T/netbed.err")"
declare -A ADDR NSOF HOST
i=2
for n in "${NODES[@]}"; do
  HOST[$n]=h$i
  ADDR[$n]=$("$NETBED" addr "$BED" "h$i")
  NSOF[$n]=$("$NETBED" ns "$BED" "h$i")
  i=$((i + 1))
done
RADDR=$("$NETBED" addr "$BED" h1)
# ---- rdzvd in its own namespace --------------------------------------------
: >"$T/rdzvd.log"
"$NETBED" exec "$BED" h1 "$RDZVD" --host "$RADDR" --port 0 2>"$T/rdzvd.log" &
RDZVD_PID=$!
STARTED+=("$RDZVD_PID")
for ((i = 0; i < 100; i++)); do
  RDZVD_PORT=$(sed -n 's/^rdzvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' \
                 "$T/rdzvd.log")
  [ -n "$RDZVD_PORT" ] && break
  sleep 0.05
done
[ -n "$RDZVD_PORT" ] || { cat "$T/rdzvd.log" >&2; fail "rdzvd did not start"; }
ep=$RADDR:$RDZVD_PORT
# The fabric works: every node reaches rdzvd over the bridge (a bare TCP
# connect, closed at once).
for n in "${NODES[@]}"; do
  ip netns exec "${NSOF[$n]}" timeout 5 bash -c \
    "exec 3<>/dev/tcp/$RADDR/$RDZVD_PORT" 2>"$T/ip.err" ||
    fail "node $n cannot reach rdzvd at $ep over the bridge: $(cat "$T/ip.err")"
done
# reconnect_timeout=2: the cut-off agent tries to come back (soft state)
# for 2 s, then gives up.
conf=last_call_timeout=0.5,keepalive_interval=0.2,keepalive_misses=5,join_timeout=20,reconnect_timeout=2

# ---- three agents, one per namespace -------------------------------------
mkdir "$T/w"
for n in "${NODES[@]}"; do
  # netbed exec execs the command: the pid is cdrun's own.
  "$NETBED" exec "$BED" "${HOST[$n]}" "$CDRUN" --nnodes=1:3 --nproc_per_node=1 \
    --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=netns \
    --rdzv_conf="$conf" "$TW" elastic "$T/w" 60 >"$T/$n.out" 2>"$T/$n.err" &
  STARTED+=("$!")
  printf -v "AGENT_$n" '%s' "$!"
done

# node_of PID: the node whose namespace the process PID runs in.
node_of() {
  local want got n
  want=$(readlink "/proc/$1/ns/net" 2>/dev/null) || return 1
  for n in "${NODES[@]}"; do
    got=$(ip netns exec "${NSOF[$n]}" readlink /proc/self/ns/net)
    [ "$got" = "$want" ] && { echo "$n"; return 0; }
  done
  return 1
}

# The round with all three nodes.
wait_files "$T/w/ws3.*" 3 20
check_world "$T/w" ws3 3
declare -A WPID NODE_OF_RANK
for r in 0 1 2; do
  p=$(cat "$T/w/pid.$r")
  nd=$(node_of "$p") || fail "worker rank $r (pid $p) is in no test namespace"
  WPID[$nd]=$p
  NODE_OF_RANK[$r]=$nd
done
[ "${#WPID[@]}" -eq 3 ] || fail "the 3 ranks are not on 3 different nodes"
master=${NODE_OF_RANK[0]}
for r in 0 1 2; do
  expect_eq "ws3 rank $r MASTER_ADDR" "$(envval "$T/w/ws3.$r" MASTER_ADDR)" \
    "${ADDR[$master]}"
done

# ---- partition: the rank-0 node's link goes down --------------------------
cut=$master
rm -f "$T"/w/ws2.*
"$NETBED" cut "$BED" "${HOST[$cut]}" || fail "cannot cut node $cut"
survivors=()
for n in "${NODES[@]}"; do [ "$n" != "$cut" ] && survivors+=("$n"); done

# The survivors restart with the smaller world and a new master.
wait_files "$T/w/ws2.*" 2 20
check_world "$T/w" ws2 2
m2=$(node_of "$(cat "$T/w/pid.0")") || fail "ws2 rank 0 is in no test namespace"
[ "$m2" != "$cut" ] || fail "the cut-off node is rank 0 of the new round"
for r in 0 1; do
  expect_eq "ws2 rank $r MASTER_ADDR" "$(envval "$T/w/ws2.$r" MASTER_ADDR)" \
    "${ADDR[$m2]}"
done
pv=AGENT_$cut
expect_grep "\\(${ADDR[$cut]}, pid ${!pv}\\) lost: no keepalive" "$T/rdzvd.log"
for n in "${survivors[@]}"; do
  expect_grep 'restarting the worker group: .*lost' "$T/$n.err"
done

# The cut-off agent gives up on the silent server and stops its worker.
pv=AGENT_$cut
wait_exit "${!pv}" 15
[ "$RC" -ne 0 ] || fail "the cut-off agent $cut exited 0"
expect_grep 'lost the rendezvous server .*no answer for' "$T/$cut.err"
expect_grep 'did not come back within 2 s \(reconnect_timeout\)' "$T/$cut.err"
alive "${WPID[$cut]}" && fail "worker ${WPID[$cut]} of the cut-off agent survived"
for n in "${survivors[@]}"; do
  pv=AGENT_$n
  alive "${!pv}" || { cat "$T/$n.err" >&2; fail "survivor $n died"; }
done

# ---- stop everything by pid ----------------------------------------------
for n in "${survivors[@]}"; do
  pv=AGENT_$n
  kill -TERM "${!pv}"
done
for n in "${survivors[@]}"; do
  pv=AGENT_$n
  wait_exit "${!pv}" 20
done
for f in "$T"/w/pid.*; do
  alive "$(cat "$f")" && fail "worker $(cat "$f") ($f) outlived its agent"
done
kill -TERM "$RDZVD_PID"
wait_exit "$RDZVD_PID" 10
# Under the sanitizer builds nothing may have been reported.
for f in "$T"/*.err "$T/rdzvd.log"; do
  grep -Eq 'Sanitizer|runtime error' "$f" && { cat "$f" >&2; fail "sanitizer report in $f"; }
done
exit 0
