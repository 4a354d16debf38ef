#!/usr/bin/env bash
# Installs Prism's build and test dependencies (apt + pip); safe to run again.
set -euo pipefail

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config clang-format
  nlohmann-json3-dev libfmt-dev libcli11-dev libcpp-httplib-dev libpcre2-dev libicu-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  chromium chromium-driver
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages are needed by the parity tests, the benchmarks and the Python package (nanobind builds
# its native module; scikit-build-core is what `pip install .` builds with). PRISM_PY_DEPS=0 skips them.
if [ "${PRISM_PY_DEPS:-1}" = "1" ]; then
  PY=${PYTHON:-python3}
  if ! $PY -c "import numpy, pytest, safetensors, gguf, torch, transformers, tokenizers, jinja2, openai, selenium, nanobind, scikit_build_core, sentence_transformers, ray.serve" 2>/dev/null; then
    $PY -m pip install -q --disable-pip-version-check \
      numpy pytest safetensors gguf "torch" transformers tokenizers jinja2 openai selenium nanobind scikit-build-core \
      sentence-transformers "ray[serve]"
  fi
fi
