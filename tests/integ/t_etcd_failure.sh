#!/bin/bash
# Through etcd, a worker failure on one node restarts every node's workers
# in a new round, and running out of restarts ends the job on every node
# (failure_lib.sh says what is checked).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"
. "$(dirname "$0")/failure_lib.sh"

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30
failure_scenario etcd "$ETCD_EP" 60
exit 0
