#!/bin/bash
# --numa_binding on the real topology: each worker's Cpus_allowed_list
# (read from /proc/PID/status) is its share, and its memory policy
# (/proc/PID/numa_maps) prefers its node.  CPU workers here: `exclusive`
# splits the CPUs cdrun may use fairly and disjointly; `node`/`socket`
# give the whole node/package; the agent's own affinity (taskset) bounds
# everything.
. "$(dirname "$0")/lib.sh"

# show DIR: each worker writes DIR/<rank> with its CPUs and the policy of
# its first mapping with one.
show='grep "^Cpus_allowed_list:" /proc/$$/status | cut -f2 >"$0/$RANK.cpus"
      grep -Eom1 "(prefer|bind|interleave)[^ ]*" /proc/$$/numa_maps >"$0/$RANK.mem"
      exit 0'
allowed=$(grep '^Cpus_allowed_list:' /proc/self/status | cut -f2)
ncpu=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')

mkdir "$T/x"
"$CDRUN" --nproc_per_node=2 --numa-binding=exclusive --no-python \
  bash -c "$show" "$T/x" >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "exclusive run"; }
expect_grep '^cdrun: --numa_binding=exclusive \((CPU|GPU) workers\): 0:' "$T/err"
c0=$(cat "$T/x/0.cpus") c1=$(cat "$T/x/1.cpus")
python3 - "$allowed" "$c0" "$c1" "$ncpu" <<'PY' || fail "exclusive split: '$c0' '$c1' of '$allowed'"
import sys
def cpus(s):
    out = set()
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out
allowed, a, b, n = cpus(sys.argv[1]), cpus(sys.argv[2]), cpus(sys.argv[3]), int(sys.argv[4])
assert a <= allowed and b <= allowed
if n >= 2:
    assert not (a & b), "shares overlap"          # disjoint
    assert abs(len(a) - len(b)) <= max(len(a), len(b)) // 2 + 1  # fair
else:
    assert a == b == allowed
PY
# The memory policy, unless this system forbids set_mempolicy (then cdrun
# said so).
if ! grep -q 'set_mempolicy' "$T/err"; then
  expect_grep '^(prefer|interleave):[0-9]' "$T/x/0.mem"
  expect_grep '^(prefer|interleave):[0-9]' "$T/x/1.mem"
fi

# node: every worker gets all the CPUs of its node (one node here).
if [ "$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)" -le 1 ]; then
  rm -f "$T"/x/*
  "$CDRUN" --nproc_per_node=2 --numa-binding node --no-python \
    bash -c "$show" "$T/x" >"$T/out" 2>"$T/err" || fail "node run"
  expect_eq "node rank 0" "$(cat "$T/x/0.cpus")" "$allowed"
  expect_eq "node rank 1" "$(cat "$T/x/1.cpus")" "$allowed"
fi

# cdrun's own affinity bounds the binding.
if command -v taskset >/dev/null && [ "$ncpu" -ge 2 ]; then
  first=$(python3 -c 'import os; print(min(os.sched_getaffinity(0)))')
  rm -f "$T"/x/*
  taskset -c "$first" "$CDRUN" --nproc_per_node=2 --numa_binding=socket \
    --no-python bash -c "$show" "$T/x" >"$T/out" 2>"$T/err" || fail "taskset run"
  expect_eq "bounded rank 0" "$(cat "$T/x/0.cpus")" "$first"
  expect_eq "bounded rank 1" "$(cat "$T/x/1.cpus")" "$first"
fi

# Without the flag the workers inherit cdrun's affinity.
rm -f "$T"/x/*
"$CDRUN" --nproc_per_node=2 --no-python bash -c "$show" "$T/x" \
  >"$T/out" 2>"$T/err" || fail "plain run"
expect_eq "unbound rank 1" "$(cat "$T/x/1.cpus")" "$allowed"
[ -s "$T/x/1.mem" ] && fail "a memory policy without --numa_binding"
exit 0
