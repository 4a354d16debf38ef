#!/usr/bin/env bash
# Configures and builds Prism (Release-with-debug-info) into build/; pass extra CMake flags as arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" > /dev/null
ninja -C build -j"$(nproc)"
