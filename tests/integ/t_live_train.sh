#!/bin/bash
# examples/train_mlp --recovery live under cdrun --recovery=live, at a
# fixed world of 4 workers: a worker SIGKILLed mid-run is replaced alone
# and the interrupted step redone, and the run ends bitwise equal to a
# fault-free one, with no survivor restarted (each worker says once, with
# its pid, when it starts) and no checkpoint reloaded; the same with the
# replacement killed during the heal itself; a job where one worker does
# not opt in is recovered by restarting the group (from the checkpoint),
# bitwise equal too.  (t_live_train_two.sh: two workers killed in one
# step; t_live_train_elastic.sh: a node lost, a node joining.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/live_train_lib.sh"

ref

# Rank 2 dies at the start of step 45: cdrun replaces it alone, the
# survivors recover and redo step 45 with it.
train kill --recovery=live --max_restarts=1 -- --recovery live \
  --die-at-step 45 --die-rank 2
same_as_ref kill
expect_grep 'replacing worker 2 alone \(live recovery' "$T/kill.log"
for r in 0 1 3; do
  expect_eq "kill: rank $r started" "$(starts kill $r)" "0/0 "
done
expect_eq "kill: rank 2 started" "$(starts kill 2)" "0/0 45/1 "
expect_grep '^live_recovery generation=[0-9]+ world=4 old_world=4 joined=1 left=[0-9]+ step=45 cause=peer_lost attempts=1 detect_ms=[0-9.]+ rebuild_ms=[0-9.]+ heal_ms=[0-9.]+ redo_ms=[0-9.]+$' \
  "$T/kill.log"
expect_eq "kill: recoveries" "$(grep -c '^live_recovery ' "$T/kill.log")" 1
! grep -Eq '^resumed from step|restarting the worker group' "$T/kill.log" ||
  fail "kill: the group restarted: $(grep -E 'resumed|restarting' "$T/kill.log")"

# Rank 2 dies; its first replacement dies while it receives the state
# (--die-in-heal); the second one joins.
train heal --recovery=live --max_restarts=2 -- --recovery live \
  --die-at-step 45 --die-rank 2 --die-in-heal
same_as_ref heal
expect_grep 'rank 2: --die-in-heal: this replacement dies while it receives the state' \
  "$T/heal.log"
expect_grep 'replacing worker 2 alone \(live recovery; replacement 2 of 2' \
  "$T/heal.log"
for r in 0 1 3; do
  expect_eq "heal: rank $r started" "$(starts heal $r)" "0/0 "
done
expect_eq "heal: rank 2 started" "$(starts heal 2)" "0/0 45/2 "
# The survivors' recovery failed once (or a second one followed).
attempts=$(sed -En 's/^live_recovery .* attempts=([0-9]+) .*/\1/p' "$T/heal.log" |
           awk '{ s += $1 } END { print s + 0 }')
[ "$attempts" -ge 2 ] || fail "heal: $attempts pg_recover calls, want 2 or more"
! grep -Eq '^resumed from step' "$T/heal.log" || fail "heal: a checkpoint was reloaded"

# Worker 1 does not opt in (a wrapper adds --no-live-opt-in): cdrun says
# so and restarts the group, which resumes from the checkpoint of step 40.
cat >"$T/wrap" <<EOF
#!/bin/sh
[ "\$LOCAL_RANK" = 1 ] && exec "$TRAIN" "\$@" --no-live-opt-in
exec "$TRAIN" "\$@"
EOF
chmod +x "$T/wrap"
"$CDRUN" --standalone --nproc_per_node=4 --recovery=live --max_restarts=1 \
  --no_python "$T/wrap" "${SMALL[@]}" --ckpt-dir "$T/optout.ckpt" \
  --params-out "$T/optout.params" --recovery live --die-at-step 45 \
  --die-rank 2 >"$T/optout.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { cat "$T/optout.log" >&2; fail "optout: cdrun exited $rc"; }
same_as_ref optout
expect_grep 'worker 1 \(pid [0-9]+\) did not opt in to live recovery: restarting the worker group instead' \
  "$T/optout.log"
expect_eq "optout: said once" \
  "$(grep -c 'did not opt in to live recovery' "$T/optout.log")" 1
expect_grep '^resumed from step 40 ' "$T/optout.log"
! grep -q '^live_recovery ' "$T/optout.log" || fail "optout: recovered live"

# Bad flags: exit 2 and a sentence.
"$TRAIN" --recovery sometimes >"$T/bad.log" 2>&1
expect_eq "--recovery sometimes: exit" "$?" 2
expect_grep "^train_mlp: --recovery: 'sometimes' is not restart or live" "$T/bad.log"
# Alone (or under a cdrun that cannot serve live recovery): restart mode,
# said.
(cd "$T" && "$TRAIN" --recovery live --steps 1 --samples 256 \
   --global-batch 64 --hidden 8 --ckpt-every 0) >"$T/bad.log" 2>&1
expect_eq "--recovery live alone: exit" "$?" 0
expect_grep '^train_mlp: rank 0: --recovery live: libpg is not in live mode \(run it under cdrun --recovery=live\): restart mode$' \
  "$T/bad.log"
expect_grep '^final: step 1 ' "$T/bad.log"
"$TRAIN" --die-in-heal >"$T/bad.log" 2>&1
expect_eq "--die-in-heal alone: exit" "$?" 2
exit 0
