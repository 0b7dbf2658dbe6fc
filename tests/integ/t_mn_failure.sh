#!/bin/bash
# Through rdzvd, a worker failure on one node restarts every node's
# workers in a new round, and running out of restarts ends the job on
# every node (failure_lib.sh says what is checked).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/failure_lib.sh"

start_rdzvd
failure_scenario c10d "127.0.0.1:$RDZVD_PORT" 30
exit 0
