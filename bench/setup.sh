#!/usr/bin/env bash
# Installs what bench/run.py compares Prism against; safe to run again (it skips what is there).
#   - llama-cpp-python, built from source for THIS CPU (AVX-512, VNNI, BF16 as present; AMX left
#     out, see ggml_cpu_args). It compiles llama.cpp with CMake: ~30 minutes on 2 busy cores. Set
#     BENCH_LLAMACPP_FORCE=1 to rebuild (e.g. after moving to a different CPU).
#   - torch, transformers, numpy, safetensors, gguf (PyTorch eager baseline, model writers).
#   - scalesim (SCALE-Sim, the cycle-level simulator the systolic timing model is checked against).
# It also builds Prism and the roofline probe (build/prism, build/prism_roofline_probe).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip_install() { $PY -m pip install -q --disable-pip-version-check --root-user-action=ignore "$@"; }

if ! $PY -c "import numpy, safetensors, gguf, torch, transformers" 2>/dev/null; then
  echo "setup: installing numpy safetensors gguf torch transformers"
  pip_install numpy safetensors gguf torch transformers
fi

# How ggml is built for this CPU. GGML_NATIVE=ON compiles it with -march=native. On a CPU with AMX,
# -march=native also compiles ggml's AMX int8 matmul, and that one dies here (llama-cpp-python 0.3.36:
# SIGSEGV at ldtilecfg in ggml_backend_amx_mul_mat on the first Q8_0/Q4_0 batch of more than one
# token), so there the CPU's other instruction sets are named one by one and AMX is left out; the
# repacked (REPACK) and VNNI paths stay.
ggml_cpu_args() {
  if ! grep -qw amx_int8 /proc/cpuinfo; then
    echo "-DGGML_NATIVE=ON"
    return
  fi
  local args="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" flag opt
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
              avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    flag=${pair%%:*} opt=${pair##*:}
    if grep -qw "$flag" /proc/cpuinfo; then args="$args -DGGML_$opt=ON"; else args="$args -DGGML_$opt=OFF"; fi
  done
  echo "$args"
}

if [ "${BENCH_LLAMACPP_FORCE:-0}" = "1" ] || ! $PY -m pip show -q llama-cpp-python >/dev/null 2>&1; then
  echo "setup: building llama-cpp-python from source for this CPU (~30 minutes on 2 busy cores)"
  # No multimodal (mtmd) library, no curl.
  CMAKE_ARGS="$(ggml_cpu_args) -DLLAVA_BUILD=OFF -DLLAMA_CURL=OFF ${BENCH_LLAMACPP_CMAKE_ARGS:-}" \
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    pip_install --no-cache-dir --force-reinstall --no-deps --no-binary llama-cpp-python llama-cpp-python
fi
# Its pure-Python dependencies (numpy, typing-extensions, diskcache, jinja2); the package itself is
# already there, so this does not rebuild it.
pip_install llama-cpp-python
$PY -c "import llama_cpp; print('setup: llama_cpp', llama_cpp.__version__)"

# SCALE-Sim, the cycle-level systolic-array simulator bench/systolic_scalesim.py checks Prism's timing model with.
if ! $PY -c "import scalesim" 2>/dev/null; then
  echo "setup: installing scalesim"
  pip_install scalesim
fi

# --llama-server: llama.cpp's own server (bench/serve.py's anchor), built from the llama.cpp that
# llama-cpp-python's source distribution vendors, for this CPU, into bench/llama-server/bin.
if [ "${1:-}" = "--llama-server" ] && [ ! -x bench/llama-server/bin/llama-server ]; then
  echo "setup: building llama-server from llama-cpp-python's sdist (~30 minutes on 2 cores)"
  src=$(mktemp -d)
  $PY -m pip download -q --no-binary :all: --no-deps -d "$src" llama-cpp-python
  tar xzf "$src"/llama_cpp_python-*.tar.gz -C "$src"
  # shellcheck disable=SC2046  # the CPU's flags, one word each
  cmake -S "$src"/llama_cpp_python-*/vendor/llama.cpp -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    $(ggml_cpu_args) -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
  ninja -C "$src/build" llama-server
  mkdir -p bench/llama-server/bin
  cp "$src"/build/bin/llama-server bench/llama-server/bin/
  rm -rf "$src"
fi

# Incremental (a no-op when up to date); BENCH_REBUILD=0 only builds what is missing.
if [ ! -x build/prism ] || [ ! -x build/prism_roofline_probe ] || [ "${BENCH_REBUILD:-1}" = "1" ]; then
  [ -f build/build.ninja ] || cmake -S . -B build -G Ninja >/dev/null
  ninja -C build -j"${BENCH_BUILD_JOBS:-1}" prism prism_roofline_probe prism_systolic_cycles
fi
echo "setup: done"
