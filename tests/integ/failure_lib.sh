# failure_lib.sh -- the worker-failure scenario shared by the rendezvous
# back ends (t_mn_failure: rdzvd, t_etcd_failure: etcd).
#
# failure_scenario BACKEND ENDPOINT WAIT_S: a worker failure on one of two
# nodes restarts every node's workers in a new round, and
# TORCHELASTIC_RESTART_COUNT agrees on all nodes (counted per job); when
# restarts run out, the failing node prints the summary and the other
# stops with "the job ... was closed".  WAIT_S bounds each agent's run.
failure_scenario() {
  local backend=$1 ep=$2 secs=$3 n r rca rcb rcc rcd failer other rf ro

  mkdir "$T/f"
  # Global rank 1 fails on the first attempt only.
  for n in a b; do
    agent "$n" --nnodes=2 --nproc_per_node=2 --rdzv_backend="$backend" \
      --rdzv_endpoint="$ep" --rdzv_id=fail1 --max_restarts=2 \
      "$TW" fail "$T/f" 1 5 1
  done
  wait_exit "$AGENT_a" "$secs"; rca=$RC
  wait_exit "$AGENT_b" "$secs"; rcb=$RC
  [ "$rca" -eq 0 ] && [ "$rcb" -eq 0 ] ||
    { cat "$T/a.err" "$T/b.err"; fail "agents exited $rca/$rcb"; }
  for r in 0 1 2 3; do
    expect_eq "rank $r restart count" \
      "$(envval "$T/f/env.$r" TORCHELASTIC_RESTART_COUNT)" 1
  done

  # Restarts exhausted: rank 3 always fails.
  mkdir "$T/g"
  for n in c d; do
    agent "$n" --nnodes=2 --nproc_per_node=2 --rdzv_backend="$backend" \
      --rdzv_endpoint="$ep" --rdzv_id=fail2 --max_restarts=1 \
      "$TW" fail "$T/g" 3 9 99
  done
  wait_exit "$AGENT_c" "$secs"; rcc=$RC
  wait_exit "$AGENT_d" "$secs"; rcd=$RC
  # One agent holds rank 3: it reports the root cause and exits 9.
  if grep -q 'worker 3 (local rank 1' "$T/c.err"; then
    failer=c other=d; rf=$rcc; ro=$rcd
  else failer=d other=c; rf=$rcd; ro=$rcc; fi
  expect_eq "failing agent status" "$rf" 9
  expect_grep '^  rank      : 3 \(local_rank: 1\)$' "$T/$failer.err"
  [ "$ro" -ne 0 ] || fail "the other agent exited 0 although the job failed"
  expect_grep "job 'fail2' was closed" "$T/$other.err"
  expect_eq "attempts" "$(envval "$T/g/env.0" TORCHELASTIC_RESTART_COUNT)" 1
}
