#!/bin/bash
# Note [taken master port] (launcher/port.h): a --master_port (or
# PET_MASTER_PORT) that another process listens on fails the job before
# any worker starts, naming the port and the process.  Before, the workers
# started, rank 0's store could not bind, and the other ranks talked to the
# stranger until their timeout.
. "$(dirname "$0")/lib.sh"

# A real listener, holding the port until killed.
python3 - "$T/port" <<'PY' &
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
PY
HOLDER=$!
STARTED+=("$HOLDER")
wait_files "$T/port" 1 30
port=$(cat "$T/port")

# expect_refused NAME: NAME's cdrun exited 1, named the port and its
# holder, and started no worker.
expect_refused() {
  expect_eq "$1: exit status" "$RC" 1
  expect_grep "MASTER_PORT $port is already in use: process $HOLDER \(python3\) listens on it" "$T/$1.err"
  compgen -G "$T/$1/env.*" >/dev/null && fail "$1: a worker started"
  return 0
}

mkdir "$T/flag"
agent flag --nnodes=1 --nproc_per_node=2 --master_port="$port" \
  "$TW" env "$T/flag"
wait_exit "$AGENT_flag" 30
expect_refused flag

mkdir "$T/env"
PET_MASTER_PORT=$port agent env --standalone --nproc_per_node=2 \
  "$TW" env "$T/env"
wait_exit "$AGENT_env" 30
expect_refused env

# Node 0 of two static nodes: refused before meeting.
mkdir "$T/mn"
agent mn --nnodes=2 --node_rank=0 --nproc_per_node=1 \
  --master_addr=127.0.0.1 --master_port="$port" "$TW" env "$T/mn"
wait_exit "$AGENT_mn" 30
expect_refused mn

# A free port still works.
mkdir "$T/ok"
agent ok --nnodes=1 --nproc_per_node=2 --master_port="$(free_port)" \
  "$TW" env "$T/ok"
wait_exit "$AGENT_ok" 30
expect_eq "free port: exit status" "$RC" 0
exit 0
