#!/bin/bash
# run.sh -- runs every integration scenario tests/integ/t_*.sh, each in its
# own bash with a time limit; exit 77 from a scenario means "skipped".
cd "$(dirname "$0")" || exit 1
pass=0 failed=0 skipped=0 retried=0 failures=()
# Arguments, if any, select the scenarios whose names contain one of them.
selected() {
  local name
  [ $# -eq 1 ] && return 0
  for name in "${@:2}"; do
    [[ $1 == *"$name"* ]] && return 0
  done
  return 1
}
for t in t_*.sh; do
  selected "$t" "$@" || continue
  start=$EPOCHREALTIME
  # A scenario may raise its own limit with a line '# integ-timeout: SECS'.
  limit=$(sed -n 's/^# integ-timeout: \([0-9][0-9]*\)$/\1/p' "$t" | head -1)
  timeout -k 5 "${limit:-180}" bash "$t" >"/tmp/cdrun-integ-$$.log" 2>&1
  rc=$?
  # Quarantine: a scenario with a known intermittent defect (named on its
  # '# integ-retry: WHY' line) runs once more after a failure; the failure
  # is printed in full and counted, so it stays visible.
  why=$(sed -n 's/^# integ-retry: //p' "$t" | head -1)
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ -n "$why" ]; then
    retried=$((retried + 1))
    echo "RETRY $t (rc=$rc; known intermittent: $why)"
    sed 's/^/    /' "/tmp/cdrun-integ-$$.log"
    timeout -k 5 "${limit:-180}" bash "$t" >"/tmp/cdrun-integ-$$.log" 2>&1
    rc=$?
  fi
  secs=$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $start }")
  case $rc in
    0) pass=$((pass + 1)); echo "PASS $t (${secs}s)" ;;
    77) skipped=$((skipped + 1))
        echo "SKIP $t: $(grep -m1 '^SKIP' "/tmp/cdrun-integ-$$.log")" ;;
    *) failed=$((failed + 1)); failures+=("$t")
       echo "FAIL $t (rc=$rc, ${secs}s)"; sed 's/^/    /' "/tmp/cdrun-integ-$$.log" ;;
  esac
done
rm -f "/tmp/cdrun-integ-$$.log"
[ "$retried" -eq 0 ] || echo "integration: $retried scenario(s) retried after a failure (RETRY above)"
echo "integration: $pass passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
