#!/bin/bash
# Log files in torchrun's layout, --redirects, --tee with [role<lr>]:
# prefixes that never split or interleave lines, --local_ranks_filter,
# the prefix template.
. "$(dirname "$0")/lib.sh"

n=400
"$CDRUN" --standalone --nproc_per_node=4 --log_dir "$T/l1" --redirects 3 \
  "$TW" print $n >"$T/out" 2>"$T/err" || fail "redirect run"
for r in 0 1 2 3; do
  d=$(echo "$T"/l1/*/attempt_0/$r)
  [ -d "$d" ] || fail "no log folder for rank $r"
  expect_eq "rank $r stdout.log lines" "$(grep -c "^out rank=$r line=" "$d/stdout.log")" $n
  expect_eq "rank $r stderr.log lines" "$(grep -c "^err rank=$r line=" "$d/stderr.log")" $n
done
grep -q 'rank=' "$T/out" && fail "redirected output reached the console"

# --tee 3: files and a prefixed console, each line whole.
"$CDRUN" --nproc_per_node=4 --log-dir "$T/l2" -t 3 "$TW" print $n \
  >"$T/out" 2>"$T/err" || fail "tee run"
for r in 0 1 2 3; do
  expect_eq "tee rank $r console out" \
    "$(grep -Ec "^\[default$r\]:out rank=$r line=[0-9]+$" "$T/out")" $n
  expect_eq "tee rank $r console err" \
    "$(grep -Ec "^\[default$r\]:err rank=$r line=[0-9]+$" "$T/err")" $n
  expect_eq "tee rank $r file" \
    "$(grep -c "^out rank=$r line=" "$(echo "$T"/l2/*/attempt_0/$r)/stdout.log")" $n
done
bad=$(grep -Evc '^\[default[0-3]\]:out rank=[0-3] line=[0-9]+$' "$T/out")
expect_eq "malformed console lines" "$bad" 0

# --local_ranks_filter: only rank 1 reaches the console; files keep all.
"$CDRUN" --nproc_per_node=3 --log_dir "$T/l3" --tee 1 --local_ranks_filter 1 \
  "$TW" print 5 >"$T/out" 2>"$T/err" || fail "filter run"
expect_eq "filtered console" "$(grep -c . "$T/out")" 5
expect_grep '^\[default1\]:out rank=1 line=4$' "$T/out"
expect_eq "filtered stderr" "$(grep -c "rank=[02]" "$T/err")" 0
expect_eq "rank 1 stderr shown" "$(grep -c "^err rank=1" "$T/err")" 5
expect_eq "rank 0 file kept" \
  "$(grep -c . "$(echo "$T"/l3/*/attempt_0/0)/stdout.log")" 5

# The prefix template, and per-rank redirect maps.
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='<${role_name}|${rank}> ' \
  "$CDRUN" --nproc_per_node=2 --role w --tee 0:1 "$TW" print 2 \
  >"$T/out" 2>"$T/err" || fail "template run"
expect_grep '^<w\|0> out rank=0 line=1$' "$T/out"
expect_grep '^out rank=1 line=1$' "$T/out"
exit 0
