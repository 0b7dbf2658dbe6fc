#!/bin/bash
# lib.sh -- helpers for the integration scenarios (sourced).
# Every scenario runs the real bin/cdrun ($CDRUN) with the real test worker
# ($TESTWORKER), in a private temporary directory, and kills by pid every
# process it started, whatever happens.
set -u

: "${CDRUN:?CDRUN must point to bin/cdrun}"
: "${TESTWORKER:?TESTWORKER must point to the test worker}"
TW=$TESTWORKER
T=$(mktemp -d "${TMPDIR:-/tmp}/cdrun-test.XXXXXX")
# What cdrun keeps after a failure (its temporary log folder, for the
# error files) goes with the scenario, not into the machine's /tmp.
mkdir "$T/tmpdir"
export TMPDIR=$T/tmpdir
STARTED=()

cleanup() {
  local p f
  for p in "${STARTED[@]+"${STARTED[@]}"}"; do
    kill -9 "$p" 2>/dev/null
  done
  # Workers and grandchildren recorded their pids: none may survive.
  for f in "$T"/*/pid.* "$T"/*/gpid.* "$T"/pid.* "$T"/gpid.*; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  rm -rf "$T"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2; [ -f "$T/err" ] && tail -60 "$T/err" >&2
  exit 1
}

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

# Runs cdrun in the background; its pid is in $BG.  Output goes to
# $T/out and $T/err unless redirected by the caller.
bg_cdrun() {
  "$CDRUN" "$@" >"$T/out" 2>"$T/err" &
  BG=$!
  STARTED+=("$BG")
}

# wait_files GLOB COUNT SECONDS: waits until COUNT files match GLOB.
wait_files() {
  local glob=$1 count=$2 secs=$3 i n
  for ((i = 0; i < secs * 20; i++)); do
    n=$(compgen -G "$glob" | wc -l)
    [ "$n" -ge "$count" ] && return 0
    sleep 0.05
  done
  fail "timed out waiting for $count files matching $glob (have $n)"
}

# wait_grep PATTERN FILE SECONDS: waits until an extended regex matches a
# line of FILE (an event a scenario must not race past).
wait_grep() {
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    grep -Eq -- "$1" "$2" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "timed out waiting for '$1' in $2"
}

# wait_exit PID SECONDS: waits for a background child, sets $RC.
wait_exit() {
  local pid=$1 secs=$2 i
  for ((i = 0; i < secs * 20; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      RC=$?
      return 0
    fi
    sleep 0.05
  done
  fail "process $pid still running after ${secs}s"
}

# alive PID: true if the process exists and is not a zombie.
alive() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "${st#Z}" = "$st" ]
}

# expect_eq WHAT GOT WANT
expect_eq() {
  [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}

# expect_grep PATTERN FILE: an extended regex must match a line of FILE.
expect_grep() {
  grep -Eq -- "$1" "$2" || {
    echo "--- $2:" >&2
    cat "$2" >&2
    fail "no line matching '$1' in $2"
  }
}

# envval FILE NAME: a variable from a testworker env file.
envval() {
  sed -n "s/^$2=//p" "$1"
}

# start_rdzvd: starts bin/rdzvd on a free loopback port; sets RDZVD_PID
# and RDZVD_PORT.
start_rdzvd() {
  : "${RDZVD:?RDZVD must point to bin/rdzvd}"
  : >"$T/rdzvd.log"
  "$RDZVD" --host 127.0.0.1 --port 0 2>>"$T/rdzvd.log" &
  RDZVD_PID=$!
  STARTED+=("$RDZVD_PID")
  local i
  for ((i = 0; i < 100; i++)); do
    RDZVD_PORT=$(sed -n 's/^rdzvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' \
                   "$T/rdzvd.log")
    [ -n "$RDZVD_PORT" ] && return 0
    sleep 0.05
  done
  cat "$T/rdzvd.log" >&2
  fail "rdzvd did not start"
}

# use_train_mlp: TRAIN, examples/train_mlp beside cdrun (fails when it is
# not built), PG_TIMEOUT, and SMALL, its small job's flags: 32 steps per
# epoch, 96 in all, a checkpoint every 10 (about 0.1 s each).
use_train_mlp() {
  TRAIN=$(dirname "$CDRUN")/train_mlp
  [ -x "$TRAIN" ] || fail "$TRAIN not built"
  export PG_TIMEOUT=60
  SMALL=(--samples 4096 --global-batch 128 --hidden 64 --epochs 3
         --ckpt-every 10)
}

# use_chaos: CHAOS (scripts/bench/chaos) and TRAIN, for the chaos
# scenarios; needs RDZVD and python3 (skips without it).
use_chaos() {
  : "${RDZVD:?RDZVD must point to bin/rdzvd}"
  CHAOS=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/bench/chaos
  TRAIN=$(dirname "$CDRUN")/train_mlp
  [ -x "$TRAIN" ] || fail "$TRAIN not built"
  command -v python3 >/dev/null || skip "no python3"
}

# free_port: a port nobody holds right now, for a process to bind later
# (an embedded host, a static node 0).  It is drawn outside the kernel's
# ephemeral range: a port the kernel handed out (bind to port 0) is the
# next source port of any connect() on a busy machine, and a node 0 that
# then cannot bind it only connects, and the static nodes wait for their
# join timeout (t_lost_node did, under load).
free_port() {
  python3 -c '
import random, socket
lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
first, last = (10000, lo - 1) if lo > 11000 else (hi + 1, 65535)
for _ in range(1000 if first < last else 0):
    p = random.randint(first, last)
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
else:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
'
}

# agent NAME ARGS...: starts a cdrun agent in the background; its pid goes
# to AGENT_<NAME>, its output to $T/NAME.out and $T/NAME.err.
agent() {
  local name=$1
  shift
  "$CDRUN" "$@" >"$T/$name.out" 2>"$T/$name.err" &
  local pid=$!
  STARTED+=("$pid")
  printf -v "AGENT_$name" '%s' "$pid"
}

# check_world DIR PREFIX WORLD: every rank 0..WORLD-1 wrote DIR/PREFIX.<r>
# with WORLD_SIZE=WORLD, one MASTER_ADDR:PORT, RANK = offset + LOCAL_RANK
# where offsets follow the group ranks.
check_world() {
  local dir=$1 prefix=$2 world=$3 r f ma mp
  ma=$(envval "$dir/$prefix.0" MASTER_ADDR)
  mp=$(envval "$dir/$prefix.0" MASTER_PORT)
  for ((r = 0; r < world; r++)); do
    f=$dir/$prefix.$r
    [ -f "$f" ] || fail "rank $r did not run ($f missing)"
    expect_eq "rank $r WORLD_SIZE" "$(envval "$f" WORLD_SIZE)" "$world"
    expect_eq "rank $r MASTER_ADDR" "$(envval "$f" MASTER_ADDR)" "$ma"
    expect_eq "rank $r MASTER_PORT" "$(envval "$f" MASTER_PORT)" "$mp"
    expect_eq "rank $r RANK" "$(envval "$f" RANK)" "$r"
  done
  [ -f "$dir/$prefix.$world" ] && fail "a rank beyond the world ran"
  # Offsets: the first rank of each group is the sum of the sizes before.
  python3 - "$dir" "$prefix" "$world" <<'PY' || fail "rank offsets inconsistent"
import sys, os
d, p, w = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = []
for r in range(w):
    kv = dict(l.rstrip("\n").split("=", 1) for l in open(os.path.join(d, f"{p}.{r}")))
    env.append(kv)
groups = {}
for kv in env:
    g = int(kv["GROUP_RANK"])
    groups.setdefault(g, []).append(kv)
gws = {int(kv["GROUP_WORLD_SIZE"]) for kv in env}
assert len(gws) == 1 and gws.pop() == len(groups), "GROUP_WORLD_SIZE"
off = 0
for g in sorted(groups):
    ranks = sorted(int(kv["RANK"]) for kv in groups[g])
    lws = int(groups[g][0]["LOCAL_WORLD_SIZE"])
    assert ranks == list(range(off, off + lws)), (g, ranks, off, lws)
    for kv in groups[g]:
        assert int(kv["RANK"]) == off + int(kv["LOCAL_RANK"])
    off += lws
assert off == w
PY
}
