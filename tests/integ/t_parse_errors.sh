#!/bin/bash
# Every bad flag, value or environment variable: one line naming it, exit 2
# (an unknown flag: the usage line too).
. "$(dirname "$0")/lib.sh"

# expect_usage_error REGEX [ENV=V...] -- ARGS...
expect_usage_error() {
  local want=$1 envs=()
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]+"${envs[@]}"}" "$CDRUN" "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  [ "$rc" -eq 2 ] || fail "cdrun $*: exit $rc, want 2 ($(cat "$T/err"))"
  expect_eq "lines for cdrun $*" "$(wc -l <"$T/err")" 1
  grep -Eq -- "^cdrun: error: .*$want" "$T/err" ||
    fail "cdrun $*: '$(cat "$T/err")' does not match '$want'"
  [ -s "$T/out" ] && fail "cdrun $*: wrote to stdout"
  return 0
}

# An option cdrun does not know: argparse's usage line, then the error
# (with the option probably meant).
"$CDRUN" --nproc-per-nodes=2 /bin/true >"$T/out" 2>"$T/err"
expect_eq "misspelled flag: exit status" "$?" 2
expect_eq "misspelled flag: lines" "$(wc -l <"$T/err")" 2
expect_eq "misspelled flag: usage line" "$(head -1 "$T/err")" \
  "usage: cdrun [options] training_script [training_script_args ...]"
expect_grep "^cdrun: error: unrecognized argument '--nproc-per-nodes=2' \(did you mean --nproc-per-node\?\)$" "$T/err"
[ -s "$T/out" ] && fail "misspelled flag: wrote to stdout"
expect_usage_error "--nproc_per_node" -- --nproc_per_node=abc /bin/true
expect_usage_error "CDRUN_RESTART_BACKOFF: invalid value 'abc'" \
  CDRUN_RESTART_BACKOFF=abc -- /bin/true
expect_usage_error "--nproc_per_node" -- --nproc_per_node=0 /bin/true
expect_usage_error "--nproc_per_node" -- --nproc_per_node xpu /bin/true
expect_usage_error "--nnodes" -- --nnodes=3:2 /bin/true
expect_usage_error "--nnodes=1:4: the static back end needs a fixed" -- \
  --nnodes=1:4 /bin/true
expect_usage_error "--standalone runs one node" -- --standalone --nnodes=2 /bin/true
expect_usage_error "--rdzv_backend=c10d needs --rdzv_endpoint" -- \
  --rdzv_backend=c10d --nnodes=2 /bin/true
expect_usage_error "--rdzv_conf: invalid value 'abc' for join_timeout" -- \
  --rdzv_backend=c10d --rdzv_endpoint=h:1 --rdzv_conf=join_timeout=abc /bin/true
expect_usage_error "--rdzv_conf: invalid value '2' for is_host" -- \
  --rdzv_backend=c10d --rdzv_endpoint=h:1 --rdzv_conf=is_host=2 /bin/true
expect_usage_error "--rdzv_backend=etcd needs --rdzv_endpoint" -- \
  --rdzv-backend etcd /bin/true
expect_usage_error "--rdzv_backend=etcd-v2: not supported: it speaks etcd's v2 API" -- \
  --rdzv-backend etcd-v2 /bin/true
expect_usage_error "password=... is refused" -- --rdzv_backend=etcd \
  --rdzv_endpoint=h:2379 --rdzv_conf=user=u,password=p /bin/true
expect_usage_error "password_file=/nonexistent/pw: cannot read it" -- \
  --rdzv_backend=etcd --rdzv_endpoint=h:2379 \
  --rdzv_conf=user=u,password_file=/nonexistent/pw /bin/true
expect_usage_error "cacert, cert and key need protocol=https" -- \
  --rdzv_backend=etcd --rdzv_endpoint=h:2379 --rdzv_conf=cacert=/x /bin/true
expect_usage_error "invalid etcd member list 'h:1,,h:2'" -- \
  --rdzv_backend=etcd --rdzv_endpoint=h:1,,h:2 /bin/true
expect_usage_error "--rdzv_backend: unknown back end 'zk'" -- \
  --rdzv_backend=zk /bin/true
expect_usage_error "--rdzv_endpoint" -- --rdzv_endpoint='[::1' /bin/true
expect_usage_error "--rdzv_conf" -- --rdzv_conf=join_timeout /bin/true
expect_usage_error "--max_restarts" -- --max_restarts=-1 /bin/true
expect_usage_error "--max_restarts" -- --max_restarts
expect_usage_error "--monitor_interval" -- --monitor_interval=0 /bin/true
expect_usage_error "--start_method" -- --start_method=thread /bin/true
expect_usage_error "--master_port" -- --master_port=70000 /bin/true
expect_usage_error "--node_rank=1 is out of range for --nnodes=1" -- \
  --node_rank=1 /bin/true
expect_usage_error "--node_rank=2 is out of range for --nnodes=2" -- \
  --nnodes=2 --node_rank=2 /bin/true
expect_usage_error "--redirects" -- --redirects=4 /bin/true
expect_usage_error "--tee" -- --tee=0:3,0:1 /bin/true
expect_usage_error "--local_ranks_filter" -- --nproc_per_node=2 \
  --local_ranks_filter=5 /bin/true
expect_usage_error "--signals_to_handle" -- --signals_to_handle=SIGFOO /bin/true
expect_usage_error "--shutdown_timeout" -- --shutdown_timeout=-3 /bin/true
expect_usage_error "--event_log_handler" -- --event_log_handler=x /bin/true
expect_usage_error "--logs_specs: not supported" -- --logs_specs=x /bin/true
expect_usage_error "--numa_binding: invalid value 'rack'" -- \
  --numa_binding=rack /bin/true
expect_usage_error "--standalone" -- --standalone=1 /bin/true
expect_usage_error "mutually exclusive" -- -m --no_python x
expect_usage_error "missing the training script" --
expect_usage_error "PET_MAX_RESTARTS" PET_MAX_RESTARTS=x -- /bin/true
expect_usage_error "PET_STANDALONE" PET_STANDALONE=yes -- /bin/true
expect_usage_error "PET_NNODES" PET_NNODES=x -- /bin/true

# The command line beats the environment; help and version work.
PET_NPROC_PER_NODE=bogus "$CDRUN" --nproc_per_node=1 /bin/true ||
  fail "--nproc_per_node did not override PET_NPROC_PER_NODE"
"$CDRUN" --help >"$T/out" || fail "--help"
expect_grep '^usage: cdrun ' "$T/out"
expect_grep 'nproc[-_]per[-_]node' "$T/out"
"$CDRUN" --version >"$T/out" || fail "--version"
expect_grep '^cdrun [0-9]+\.[0-9]+\.[0-9]+$' "$T/out"
exit 0
