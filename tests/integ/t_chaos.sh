#!/bin/bash
# scripts/bench/chaos, short: a 2-host x 2-worker train_mlp job through a
# real rdzvd takes 6 faults (seed 7), one of each kind: a worker SIGKILLed,
# an agent SIGKILLed and started again, rdzvd SIGKILLed and started again on
# its port, a link cut beyond the keepalive window (netbed), a worker
# SIGSTOPped then SIGCONTed, the checkpoint disk full (root).  It must end
# with the parameters of the fault-free run, bit for bit, and leave nothing
# behind (processes, shm, temporary directories, sockets, namespaces,
# cgroups, the tmpfs).  Without namespaces it runs on loopback, without the
# link cut; without root, without the full disk (chaos says so).
# (t_live_train_chaos.sh: CHAOS_RECOVERY=live.)
. "$(dirname "$0")/lib.sh"

use_chaos

# The flags chaos relies on.  --log-steps: a line per K steps;
# --params-out: the parameters' f32 bytes, whose sum (in double, in order)
# is the final line's.
TINY=(--hidden 8 --samples 256 --global-batch 64 --ckpt-every 0 --steps 3)
(cd "$T" && "$TRAIN" "${TINY[@]}" --log-steps 1 --params-out "$T/p.bin") \
  >"$T/tiny.log" 2>&1 || { cat "$T/tiny.log" >&2; fail "train_mlp --params-out"; }
expect_eq "--log-steps 1" "$(grep '^step ' "$T/tiny.log" | tr '\n' ,)" "step 1,step 2,step 3,"
sum=$(sed -En 's/^final: .* params: sum=([^ ]*) .*/\1/p' "$T/tiny.log")
expect_eq "sum of --params-out" "$(python3 -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
s = 0.0
for (x,) in struct.iter_unpack("<f", b):
    s += x
print("%d %.9g" % (len(b) // 4, s))' "$T/p.bin")" "682 $sum"
(cd "$T" && "$TRAIN" "${TINY[@]}" --params-out "$T/no/p.bin") >"$T/tiny.log" 2>&1
expect_eq "--params-out unwritable: exit" "$?" 1
expect_grep 'cannot write --params-out: .*/no/p.bin: No such file or directory' "$T/tiny.log"
"$TRAIN" --params-out= >"$T/tiny.log" 2>&1
expect_eq "--params-out empty: exit" "$?" 2
expect_grep "^train_mlp: --params-out: '' is not a file name" "$T/tiny.log"
rm -rf "$T/p.bin" "$T/tiny.log" "$T/ckpt"

# Bad settings: exit 2 and a sentence, nothing started.
CHAOS_KINDS=worker_kill,bogus "$CHAOS" >/dev/null 2>"$T/bad.err"
expect_eq "bad CHAOS_KINDS: exit" "$?" 2
expect_grep "^chaos: CHAOS_KINDS: no kind 'bogus'" "$T/bad.err"
CHAOS_FAULTS=-1 "$CHAOS" >/dev/null 2>"$T/bad.err"
expect_eq "bad CHAOS_FAULTS: exit" "$?" 2
expect_grep "^chaos: CHAOS_FAULTS: '-1' is not an integer" "$T/bad.err"
rm -f "$T/bad.err"

# CHAOS_WAIT: a missing event fails in a minute, not at the suite's limit.
# CHAOS_STEPS: room for the steps run while rdzvd restarts (the job goes
# on), however slow the restart under load.
TMPDIR=$T CDRUN=$CDRUN RDZVD=$RDZVD TRAIN=$TRAIN CHAOS_FAULTS=6 CHAOS_SEED=7 \
  CHAOS_STEPS=300 \
  CHAOS_WAIT=60 \
  CHAOS_KINDS=worker_kill,agent_kill,rdzvd_kill,cut_long,worker_stop,disk_full \
  "$CHAOS" >"$T/out" 2>"$T/err" &
CHAOS_PID=$!
STARTED+=("$CHAOS_PID")
wait_exit "$CHAOS_PID" 170
[ "$RC" -ne 77 ] || skip "$(tail -n 1 "$T/err")"
[ "$RC" -eq 0 ] || { cat "$T/err" "$T/out" >&2; fail "chaos exited $RC"; }

expect_grep '^chaos recovery=restart seed=7 faults=6 equal=1 leaks=0 step_ms=[0-9.]+$' "$T/out"
# One cost line per kind that ran, each phase a number or '-'.
kinds=(worker_kill agent_kill rdzvd_kill worker_stop)
grep -q '^chaos: cut_long skipped' "$T/err" || kinds+=(cut_long)
grep -q '^chaos: disk_full skipped' "$T/err" || kinds+=(disk_full)
for k in "${kinds[@]}"; do
  expect_grep "^chaos_cost kind=$k n=[0-9]+ lost_ms=[0-9]+ detect_ms=([0-9]+|-) restart_ms=([0-9]+|-) reload_ms=([0-9]+|-) replay_ms=[0-9]+$" "$T/out"
done
expect_eq "cost lines" "$(grep -c '^chaos_cost ' "$T/out")" "${#kinds[@]}"
# The kinds that restart the workers were seen restarting them.
for k in worker_kill agent_kill; do
  expect_grep "^chaos_cost kind=$k n=[0-9]+ lost_ms=[0-9]+ detect_ms=[0-9]+ restart_ms=[0-9]+ " "$T/out"
done
# rdzvd's restart restarts nothing (soft state).
expect_grep '^chaos_cost kind=rdzvd_kill n=[0-9]+ lost_ms=[0-9]+ detect_ms=[0-9]+ restart_ms=- reload_ms=- ' "$T/out"

# Nothing of the run is left in our TMPDIR but its (kept on failure) dir.
left=$(ls -A "$T" | grep -v -E '^(out|err|tmpdir)$')
expect_eq "left in TMPDIR" "$left" ""
exit 0
