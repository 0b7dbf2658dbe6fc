#!/usr/bin/env bash
# scripts/pkg/man.sh VERSION PAGE: the man page with VERSION in its .TH
# line ("cdrun X.Y.Z"), for the packages and make install: the version has
# one source, the VERSION file.
set -euo pipefail
sed -E "s/^(\\.TH .*\")cdrun [0-9][^\"]*(\".*)$/\\1cdrun $1\\2/" "$2"
