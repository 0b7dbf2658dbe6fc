#!/bin/bash
# Note [root cause] across nodes, through rdzvd (rootcause_lib.sh says
# what is checked): A's report is in once rdzvd says the job is closing.
# Then Note [exit time]: B's worker exits without an error file while
# B's agent is stopped, and still is the root cause.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/rootcause_lib.sh"

a_reported() {
  wait_grep 'job rootcause: closing: waiting' "$T/rdzvd.log" 60
}

start_rdzvd
rootcause_scenario c10d "127.0.0.1:$RDZVD_PORT" a_reported

a_reported_late() {
  wait_grep 'job reaplate: closing: waiting' "$T/rdzvd.log" 60
}
rootcause_reap_late_scenario c10d "127.0.0.1:$RDZVD_PORT" a_reported_late
exit 0
