#!/bin/bash
# A short run of scripts/bench/abuse: every hostile client of issues 8,
# 19 and 32 (and ours) against one live rdzvd, and the floods on libpg's
# store, live store and mesh while they set up (store_mesh_flood,
# live_store_flood), with a shared secret (strangers know none,
# members do), then a normal two-node job.  Counts and budgets are reduced
# so that each attack still overruns the limit it attacks (the budgets are
# 16M, the lockout makes 4 x max_jobs jobs) in a few seconds.  Fails when
# an attack is not survived, the harness itself failed, or the normal job
# did not run.
. "$(dirname "$0")/lib.sh"

: "${RDZVD:?RDZVD must point to bin/rdzvd}"
bench=$(cd "$(dirname "$0")/../../scripts/bench" && pwd)/abuse
command -v cc >/dev/null || skip "no C compiler for the abuse client"

# Under the sanitizers (make asan test) RSS says nothing: ASan's
# quarantine keeps freed memory.  The other checks stay.
budget=98304
[ -z "${ASAN_OPTIONS:-}" ] || budget=4194304
ABUSE_AUTH=1 ABUSE_SILENT_WAIT=30 ABUSE_RSS_BUDGET_KB=$budget \
ABUSE_RDZVD_ARGS="--hello_timeout 2 --max_jobs 500 --input_budget 16M --output_budget 16M --kv_budget 16M" \
PGTEST=$(dirname "$TW")/pgtest ABUSE_PG_HANDSHAKES=20 \
ABUSE_COUNTS="huge_resume=200 junk=65 silent=100 partial_frames=30 pipelined_hello=20 metrics_lockout=32 member_partial_frames=32 waiting_list=500 kv_waiters=100 pong_flood=8 kv_fill=4 lockout=2000 job_squat=2000" \
CDRUN=$CDRUN RDZVD=$RDZVD TMPDIR=$T \
  "$bench" >"$T/abuse.out" 2>"$T/abuse.err"
rc=$?
cat "$T/abuse.out"
last=$(tail -n 1 "$T/abuse.out")
[[ $last =~ ^abuse\ attacks=([0-9]+)\ survived=([0-9]+)\ .*normal_job=([a-z]+)\ .*harness_errors=([0-9]+) ]] ||
  { cat "$T/abuse.err"; fail "no summary line (exit $rc)"; }
[ "${BASH_REMATCH[1]}" -ge 23 ] || fail "only ${BASH_REMATCH[1]} attacks ran"
grep -q '^abuse_attack name=store_mesh_flood survived=1' "$T/abuse.out" &&
  grep -q '^abuse_attack name=live_store_flood survived=1' "$T/abuse.out" ||
  fail "a libpg flood was not survived: $(grep -E 'name=(store_mesh|live_store)_flood' "$T/abuse.out")"
[ "${BASH_REMATCH[4]}" -eq 0 ] || fail "the abuse harness itself failed: $last"
[ "${BASH_REMATCH[2]}" -eq "${BASH_REMATCH[1]}" ] || fail "an attack was not survived: $last"
[ "${BASH_REMATCH[3]}" = ok ] || { cat "$T/abuse.err"; fail "the normal job failed: $last"; }
[ "$rc" -eq 0 ] || fail "abuse exited $rc: $last"
exit 0
