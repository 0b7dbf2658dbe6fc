#!/bin/bash
# run-main.sh -- the README's first command: install, build, run the main
# job (a standalone multi-worker run of the example worker).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
make -j2
exec bin/cdrun --standalone --nproc_per_node=4 --max_restarts=3 \
  bin/hello_worker "$@"
