#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build the `prism` command (only it: the tests
# are built by scripts/test.sh), compile the shipped stories260K model and generate a story. Extra
# arguments go to `prism run` (e.g. -p "Once upon a time" -n 100).
set -euo pipefail
cd "$(dirname "$0")/.."
PRISM_PY_DEPS=0 scripts/install-deps.sh
PRISM_BUILD_TARGETS=prism scripts/build.sh
exec build/prism run "$@"
