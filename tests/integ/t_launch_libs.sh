#!/bin/bash
# Note [cJSON on demand]: a launch of workers on this node maps no
# libcjson nor libm into the agent (a ninth of its peak RSS); the agent
# loads libcjson at its first JSON, here a worker's error file, which the
# failure summary still reads.
. "$(dirname "$0")/lib.sh"

# What the agent (the worker's parent) has mapped while its worker runs.
"$CDRUN" --standalone --nproc_per_node=1 --no_python /bin/sh -c \
  'cat "/proc/$PPID/maps" >"$0"' "$T/maps" >"$T/out" 2>"$T/err" ||
  { cat "$T/err"; fail "cdrun failed"; }
grep -q '/libc\.so' "$T/maps" || fail "no libc in the agent's maps: $T/maps"
grep -q 'libcjson' "$T/maps" && fail "the agent mapped libcjson for a launch"
# The sanitizers' runtime needs libm itself.
if ! grep -q 'libasan' "$T/maps"; then
  grep -q '/libm\.so' "$T/maps" && fail "the agent mapped libm for a launch"
fi

# The error file is JSON: read through the lazily loaded libcjson.
"$CDRUN" --standalone --nproc_per_node=1 "$TW" errfile "disk full" \
  >"$T/out" 2>"$T/err"
expect_eq "failed worker: exit status" "$?" 1
expect_grep 'disk full' "$T/err"
expect_grep 'error_file: .*error\.json' "$T/err"
exit 0
