#!/bin/bash
# Soft state with the daemon up: one agent's rendezvous connection is
# reset (ss -K destroys its socket: the agent sees ECONNABORTED, rdzvd a
# TCP reset).  The agent keeps its worker and reconnects within its
# keepalive window, rdzvd kept its node detached meanwhile, and the job
# goes on untouched: no new round, same worker pids, exit 0.
# Needs root and a kernel with socket destroy (ss -K); skips otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/soft_lib.sh"

[ "$(id -u)" -eq 0 ] || skip "needs root (ss -K)"
command -v ss >/dev/null || skip "no ss"

start_rdzvd
port=$RDZVD_PORT ep=127.0.0.1:$port w=$T/w
# A wide keepalive window, so that the reconnection is inside it however
# loaded the machine is.
three_agents reset "$w" --rdzv_conf=keepalive_interval=1,keepalive_misses=30
wait_files "$w/pid.*.0.3" 3 60
old=$(cat "$w"/pid.*.0.3)

# Agent b's connection to rdzvd: its local port.
sp=$(ss -tnpH state established "( dport = :$port )" |
     grep "pid=$AGENT_b," | sed -n 's/.*:\([0-9]*\) *[^ ]*:'"$port"' .*/\1/p' | head -1)
[ -n "$sp" ] || fail "cannot find agent b's connection: $(ss -tnpH "( dport = :$port )")"
ss -K -tnH state established "( dport = :$port and sport = :$sp )" >/dev/null 2>&1
for ((i = 0; i < 200; i++)); do
  grep -q "lost the rendezvous server" "$T/b.err" && break
  sleep 0.05
done
grep -q "lost the rendezvous server 127.0.0.1:$port" "$T/b.err" ||
  skip "ss -K did not destroy the socket (kernel without INET_DIAG_DESTROY?)"
wait_grep "reconnected to the rendezvous server 127.0.0.1:$port .*re-asserting running round 0" "$T/b.err" 60
wait_grep "job reset: .*connection reset: still a member" "$T/rdzvd.log" 30
wait_grep "job reset: .*reconnected and re-asserted rank [0-9] of round 0: the job goes on" "$T/rdzvd.log" 30
expect_eq "worker pids" "$(cat "$w"/pid.*.0.3)" "$old"
touch "$w/go"
for n in a b c; do expect_exit "$n" 60 0; done
grep -q "restart, new round" "$T/rdzvd.log" && fail "a new round after a reset within the window"
exit 0
