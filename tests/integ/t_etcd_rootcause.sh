#!/bin/bash
# Note [root cause] across nodes, through etcd (rootcause_lib.sh says what
# is checked): A's report is in once the job's state says it is closing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"
. "$(dirname "$0")/rootcause_lib.sh"

a_reported() {
  local i
  for ((i = 0; i < 1200; i++)); do
    ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EP" get --print-value-only \
      /cdrun/rdzv/rootcause/state 2>/dev/null | grep -q '"closing":true' &&
      return 0
    sleep 0.05
  done
  fail "the job's state never said it was closing"
}

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30
rootcause_scenario etcd "$ETCD_EP" a_reported
exit 0
