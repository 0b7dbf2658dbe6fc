#!/bin/bash
# torch 2.15's launcher flags: --log-line-prefix-template (with
# ${hostname}), --duplicate-stdout/stderr-filters, --virtual-local-rank,
# argparse's unique prefixes, --print-completion bash.
. "$(dirname "$0")/lib.sh"

host=$(hostname)

# The template from the flag beats the environment's; ${hostname} works.
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='env ' \
  "$CDRUN" --nproc 2 --role w --tee 3 \
  --log-line-prefix-template '<${hostname}|${role_name}|${rank}> ' \
  "$TW" print 2 >"$T/out" 2>"$T/err" || fail "template run"
expect_grep "^<$host\|w\|1> out rank=1 line=1$" "$T/out"
expect_grep "^<$host\|w\|0> err rank=0 line=0$" "$T/err"
grep -q '^env ' "$T/out" && fail "the environment's template won"

# Filters: matching lines of the tee'd streams (of every worker) also go,
# prefixed, to attempt_0/filtered_std{out,err}.log; ",," is a literal
# comma.  Streams that are not tee'd are not duplicated, as in torch.
"$CDRUN" --nproc_per_node=2 --log_dir "$T/l1" --tee 0:3,1:1 \
  --duplicate-stdout-filters 'line=1,,x,line=3' \
  --duplicate_stderr_filters 'err rank=' "$TW" print 5 \
  >"$T/out" 2>"$T/err" || fail "filter run"
a=$(echo "$T"/l1/*/attempt_0)
[ -f "$a/filtered_stdout.log" ] || fail "no filtered_stdout.log"
expect_eq "filtered stdout lines" "$(grep -c . "$a/filtered_stdout.log")" 2
expect_grep '^\[default0\]:out rank=0 line=3$' "$a/filtered_stdout.log"
expect_grep '^\[default1\]:out rank=1 line=3$' "$a/filtered_stdout.log"
expect_eq "filtered stderr lines" "$(grep -c . "$a/filtered_stderr.log")" 5
expect_eq "filtered stderr ranks" \
  "$(grep -vc '^\[default0\]:err rank=0 line=[0-4]$' "$a/filtered_stderr.log")" 0
# The streams still go where --tee says.
expect_eq "stdout.log kept" "$(grep -c . "$a/1/stdout.log")" 5
expect_eq "untee'd stderr on console" "$(grep -c '^err rank=1 line=' "$T/err")" 5
expect_eq "tee'd stdout on console" "$(grep -c '^\[default[01]\]:out rank=' "$T/out")" 10

# --virtual-local-rank: LOCAL_RANK=0, one device each.
mkdir "$T/v"
CUDA_VISIBLE_DEVICES=5,7 "$CDRUN" --nproc_per_node=2 --virtual-local-rank \
  --no-python bash -c 'echo "$LOCAL_RANK $CUDA_VISIBLE_DEVICES" >"$0/$RANK"' \
  "$T/v" || fail "virtual local rank run"
expect_eq "rank 0" "$(cat "$T/v/0")" "0 5"
expect_eq "rank 1" "$(cat "$T/v/1")" "0 7"
CUDA_VISIBLE_DEVICES=5 "$CDRUN" --nproc_per_node=2 --virtual-local-rank \
  /bin/true >"$T/out" 2>"$T/err" && fail "too few devices accepted"
expect_grep '^cdrun: error: --virtual_local_rank: local rank 1 exceeds the 1 device in CUDA_VISIBLE_DEVICES$' "$T/err"

# Unique prefixes; an ambiguous one lists the candidates.
"$CDRUN" --nproc 2 --max_rest=0 --stand --no-py bash -c 'echo "$WORLD_SIZE"' \
  >"$T/out" 2>"$T/err" || fail "prefix run"
expect_eq "prefix world" "$(sort -u "$T/out")" 2
"$CDRUN" --rdzv=x /bin/true >"$T/out" 2>"$T/err" && fail "ambiguous accepted"
expect_grep '^cdrun: error: ambiguous option: --rdzv could match --rdzv_backend, --rdzv_endpoint, --rdzv_id, --rdzv_conf$' "$T/err"

# Bash completion: a script bash accepts, completing flags and choices.
"$CDRUN" --print-completion bash >"$T/comp.bash" || fail "completion"
bash -n "$T/comp.bash" || fail "completion script has a syntax error"
got=$(bash -c '. "$1"; COMP_WORDS=(cdrun --numa-binding ex); COMP_CWORD=2
  _cdrun; echo "${COMPREPLY[*]}"' _ "$T/comp.bash")
expect_eq "complete a choice" "$got" exclusive
got=$(bash -c '. "$1"; COMP_WORDS=(cdrun --nproc); COMP_CWORD=1
  _cdrun; echo "${COMPREPLY[*]}"' _ "$T/comp.bash")
expect_eq "complete a flag" "$got" "--nproc_per_node --nproc-per-node"
got=$(bash -c '. "$1"; COMP_WORDS=(cdrun --standalone train.py --nproc)
  COMP_CWORD=3; _cdrun; echo "${COMPREPLY[*]}"' _ "$T/comp.bash")
expect_eq "script args left alone" "$got" ""
exit 0
