#!/bin/bash
# Soft state: rdzvd is SIGKILLed under a running 3-node job and a new one
# starts on the same port about two seconds later.  The agents keep their
# workers, reconnect and re-assert; the new daemon rebuilds the job: the
# workers' pids and TORCHELASTIC_RESTART_COUNT are unchanged, nobody is
# restarted, and the job ends 0.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/soft_lib.sh"

start_rdzvd
port=$RDZVD_PORT
ep=127.0.0.1:$port
w=$T/w
three_agents soft "$w" --max_restarts=2
wait_files "$w/pid.*.0.3" 3 60
p0=$(pid_of "$w" 0 0 3) p1=$(pid_of "$w" 1 0 3) p2=$(pid_of "$w" 2 0 3)

kill_rdzvd KILL
for n in a b c; do
  wait_grep "lost the rendezvous server 127.0.0.1:$port: .*workers keep running" "$T/$n.err" 30
done
sleep 2   # "two seconds later": the agents retry meanwhile (not a timing check)
rdzvd_on "$port" "$T/rdzvd2.log"
for n in a b c; do
  wait_grep "reconnected to the rendezvous server 127.0.0.1:$port after .*re-asserting running round 0" "$T/$n.err" 30
done
wait_grep "job soft: round 0 rebuilt: all 3 nodes re-asserted it" "$T/rdzvd2.log" 30

for r in 0 1 2; do
  v=p$r
  alive "${!v}" || fail "worker rank $r (pid ${!v}) died"
done
expect_eq "pid rank 0" "$(pid_of "$w" 0 0 3)" "$p0"
expect_eq "pid rank 1" "$(pid_of "$w" 1 0 3)" "$p1"
expect_eq "pid rank 2" "$(pid_of "$w" 2 0 3)" "$p2"

touch "$w/go"
for n in a b c; do expect_exit "$n" 60 0; done
# Nobody restarted: one incarnation of each rank, restart count 0.
[ "$(compgen -G "$w/env.*" | wc -l)" -eq 3 ] || fail "a worker was restarted: $(ls "$w")"
for r in 0 1 2; do
  expect_eq "rank $r restart count" \
    "$(envval "$w/env.$r.0.3" TORCHELASTIC_RESTART_COUNT)" 0
done
expect_grep "job soft: finished" "$T/rdzvd2.log"
grep -q "restart, new round" "$T/rdzvd2.log" && fail "the new daemon started a new round"
exit 0
