#!/bin/bash
# run-tests.sh -- the README's second command: install, build and run every
# test: the unit suites and integration scenarios, then the same again
# under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
make -j2 test
make -j2 asan test
