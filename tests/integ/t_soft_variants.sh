#!/bin/bash
# Soft state, what can happen while rdzvd is down (a real rdzvd, three
# agents with gated workers, the daemon SIGKILLed and restarted on the
# same port):
#  1. an agent dies meanwhile: once the daemon is back, the survivors get
#     a new round without it after the resume grace;
#  2. a worker fails meanwhile: the restart happens once it is back (one
#     restart counted, every node restarts its workers);
#  3. the daemon stays down past reconnect_timeout: a clear failure, the
#     workers are stopped;
#  4. reconnect_timeout=0: the agents fail at once, as before soft state.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/soft_lib.sh"

# Waits for every named agent to say it lost the daemon.
all_lost() {
  local n
  for n in "$@"; do
    wait_grep "lost the rendezvous server 127.0.0.1:$port" "$T/$n.err" 30
  done
}

# ---- 1. an agent dies while the daemon is down -------------------------
start_rdzvd
port=$RDZVD_PORT ep=127.0.0.1:$port w=$T/w1
NNODES=2:3 three_agents died "$w"
wait_files "$w/pid.*.0.3" 3 60
kill_rdzvd KILL
all_lost a b c

kill -9 "$AGENT_c"
wait_exit "$AGENT_c" 30
rdzvd_on "$port" "$T/rdzvd1.log" --resume_grace 2
wait_grep "job died: round 0: 1 of 3 nodes did not come back within" "$T/rdzvd1.log" 60
wait_files "$w/pid.*.0.2" 2 60      # round 1: two nodes, no restart counted
touch "$w/go"
expect_exit a 60 0
expect_exit b 60 0
for r in 0 1; do
  expect_eq "died rank $r restart count" \
    "$(envval "$w/env.$r.0.2" TORCHELASTIC_RESTART_COUNT)" 0
done
expect_grep "did not come back" "$T/a.err"
kill_rdzvd TERM

# ---- 2. a worker fails while the daemon is down ------------------------
start_rdzvd
port=$RDZVD_PORT ep=127.0.0.1:$port w=$T/w2
three_agents wfail "$w" --max_restarts=1
wait_files "$w/pid.*.0.3" 3 60
kill_rdzvd KILL
all_lost a b c
kill -9 "$(pid_of "$w" 1 0 3)"
for n in a b c; do
  grep -q "worker group failed" "$T/$n.err" && failed_agent=$n
done
for ((i = 0; i < 600; i++)); do
  for n in a b c; do
    grep -q "worker group failed; restarting" "$T/$n.err" && failed_agent=$n
  done
  [ -n "${failed_agent:-}" ] && break
  sleep 0.05
done
[ -n "${failed_agent:-}" ] || fail "no agent noticed its failed worker"
# The others' workers run on until the daemon is back.
[ -z "$(compgen -G "$w/pid.*.1.3")" ] || fail "restarted without the daemon"
rdzvd_on "$port" "$T/rdzvd2.log"
wait_files "$w/pid.*.1.3" 3 60
touch "$w/go"
for n in a b c; do expect_exit "$n" 60 0; done
for r in 0 1 2; do
  expect_eq "wfail rank $r restart count" \
    "$(envval "$w/env.$r.1.3" TORCHELASTIC_RESTART_COUNT)" 1
done
expect_grep "restart_count 1 of 1" "$T/rdzvd2.log"
kill_rdzvd TERM

# ---- 3. the daemon stays down past reconnect_timeout -------------------
start_rdzvd
port=$RDZVD_PORT ep=127.0.0.1:$port w=$T/w3
three_agents gone "$w" --rdzv_conf=reconnect_timeout=2
wait_files "$w/pid.*.0.3" 3 60
pids=$(cat "$w"/pid.*.0.3)
kill_rdzvd KILL
for n in a b c; do
  v=AGENT_$n
  wait_exit "${!v}" 60
  [ "$RC" -ne 0 ] || fail "agent $n exited 0 without its rendezvous"
  expect_grep "the rendezvous server 127.0.0.1:$port did not come back within 2 s \(reconnect_timeout\)" "$T/$n.err"
done
for p in $pids; do alive "$p" && fail "worker $p outlived its agent's failure"; done

# ---- 4. reconnect_timeout=0: today's behaviour ---------------------------
start_rdzvd
port=$RDZVD_PORT ep=127.0.0.1:$port w=$T/w4
three_agents zero "$w" --rdzv_conf=reconnect_timeout=0
wait_files "$w/pid.*.0.3" 3 60
kill_rdzvd KILL
for n in a b c; do
  v=AGENT_$n
  wait_exit "${!v}" 60
  [ "$RC" -ne 0 ] || fail "agent $n exited 0 without its rendezvous"
  expect_grep "rendezvous failed: lost the rendezvous server 127.0.0.1:$port: connection closed" "$T/$n.err"
  grep -q "reconnecting" "$T/$n.err" && fail "agent $n reconnected with reconnect_timeout=0"
done
exit 0
