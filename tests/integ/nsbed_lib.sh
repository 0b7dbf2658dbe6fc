# nsbed_lib.sh -- sourced after lib.sh by scenarios that need hosts with
# names (t_hosts_ssh's sshd hosts, slurm_cluster.sh's Slurm nodes): each
# host is a network namespace cdrun-<id>-<name> with one veth on a bridge
# that lives in a switch namespace of its own (as in scripts/netbed), so
# nothing is created in the machine's own namespace; its /etc/hosts is
# $T/hosts through ip netns exec's /etc/netns overlay.
#
#   nsbed_start OCTET   the switch; NET=10.OCTET.x, id, NS_SW, BR set
#                       (skips when namespaces or bridges cannot be made)
#   nsbed_host NAME     a host at ${ADDR[NAME]}/24 (ADDR and $T/hosts are
#                       the caller's, set before)
#   nsbed_cleanup       kills whatever runs in the namespaces (started by
#                       the test: they are its own), runs lib.sh's cleanup,
#                       deletes the bed; the caller's nsbed_stop_daemons,
#                       if defined, runs first (a clean stop of sshd etc.)
# The scenario makes nsbed_cleanup its EXIT trap.

id=$$
NS_SW=cdrun-$id-sw
BR=b$id
CREATED_NS=()

nsbed_cleanup() {
  local ns p
  declare -F nsbed_stop_daemons >/dev/null && nsbed_stop_daemons
  for ns in "${CREATED_NS[@]+"${CREATED_NS[@]}"}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  cleanup
  for ns in "${CREATED_NS[@]+"${CREATED_NS[@]}"}"; do
    [ "$ns" = "$NS_SW" ] || ip -n "$NS_SW" link del "v$id${ns##*-}" 2>/dev/null
  done
  ip -n "$NS_SW" link del "$BR" 2>/dev/null
  for ns in "${CREATED_NS[@]+"${CREATED_NS[@]}"}"; do
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  rmdir /etc/netns 2>/dev/null
  return 0
}

nsbed_start() {
  NET=10.$1.$((id % 250 + 1))
  command -v ip >/dev/null || skip "the ip command (iproute2) is not installed"
  ip netns add "$NS_SW" 2>"$T/ip.err" ||
    skip "'ip netns add' does not work here: $(head -c 200 "$T/ip.err")"
  CREATED_NS+=("$NS_SW")
  ip -n "$NS_SW" link set lo up || skip "cannot configure a network namespace"
  ip -n "$NS_SW" link add "$BR" type bridge 2>"$T/ip.err" ||
    skip "cannot create a bridge in a namespace: $(head -c 200 "$T/ip.err")"
  ip -n "$NS_SW" link set "$BR" up || fail "bridge up"
}

nsbed_host() {
  local name=$1 ns=cdrun-$id-$1
  ip netns add "$ns" || fail "netns $ns"
  CREATED_NS+=("$ns")
  ip -n "$NS_SW" link add "v$id$name" type veth peer name "e$id$name" \
    netns "$ns" 2>"$T/ip.err" ||
    skip "cannot create a veth pair: $(head -c 200 "$T/ip.err")"
  ip -n "$NS_SW" link set "v$id$name" master "$BR" || fail "bridge port"
  ip -n "$NS_SW" link set "v$id$name" up || fail "veth up"
  ip -n "$ns" link set lo up || fail "lo up"
  ip -n "$ns" addr add "${ADDR[$name]}/24" dev "e$id$name" || fail "addr"
  ip -n "$ns" link set "e$id$name" up || fail "veth up in $ns"
  mkdir -p "/etc/netns/$ns" && cp "$T/hosts" "/etc/netns/$ns/hosts" ||
    fail "cannot write /etc/netns/$ns/hosts"
}
