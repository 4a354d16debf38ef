#!/usr/bin/env bash
# The test command on a fresh machine: install dependencies, build, run every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# A private kernel cache: the tests exercise the real compile path, not a warm cache.
export PRISM_CACHE_DIR="${PRISM_CACHE_DIR:-$(mktemp -d)}"
cd build
ctest --output-on-failure -j2 --timeout 1500 "$@"
