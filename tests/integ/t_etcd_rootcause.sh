#!/bin/bash
# Note [root cause] across nodes, through etcd (rootcause_lib.sh says what
# is checked): A's report is in once the job's state says it is closing.
# Then Note [exit time]: B's worker exits without an error file while
# B's agent is stopped, and still is the root cause.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"
. "$(dirname "$0")/rootcause_lib.sh"

# closing_in ID: waits until job ID's state says it is closing.
closing_in() {
  local i
  for ((i = 0; i < 1200; i++)); do
    ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EP" get --print-value-only \
      "/cdrun/rdzv/$1/state" 2>/dev/null | grep -q '"closing":true' &&
      return 0
    sleep 0.05
  done
  fail "the job's state never said it was closing"
}
a_reported() { closing_in rootcause; }
a_reported_late() { closing_in reaplate; }

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30
rootcause_scenario etcd "$ETCD_EP" a_reported
rootcause_reap_late_scenario etcd "$ETCD_EP" a_reported_late
exit 0
