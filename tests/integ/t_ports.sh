#!/bin/bash
# MASTER_PORT: a free port, never the same for concurrent jobs, and
# bindable by rank 0 with SO_REUSEADDR while cdrun holds it.
. "$(dirname "$0")/lib.sh"

pids=()
for j in 1 2 3 4 5 6; do
  mkdir "$T/j$j"
  "$CDRUN" --standalone --nproc_per_node=1 "$TW" listen "$T/j$j" \
    >"$T/out$j" 2>"$T/err$j" &
  pids+=($!)
  STARTED+=($!)
done
for j in 1 2 3 4 5 6; do
  wait "${pids[$((j - 1))]}" || { cat "$T/err$j"; fail "job $j failed"; }
done
ports=$(cat "$T"/j*/port.0 | sort -u | wc -l)
expect_eq "distinct ports across 6 concurrent jobs" "$ports" 6
exit 0
