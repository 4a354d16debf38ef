#!/usr/bin/env bash
# Configures and builds Prism (Release-with-debug-info) into build/; pass extra CMake flags as arguments.
# PRISM_BUILD_TARGETS names the ninja targets to build (default: everything, tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" > /dev/null
# shellcheck disable=SC2086  # a list of target names
ninja -C build -j"$(nproc)" ${PRISM_BUILD_TARGETS:-}
