#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: C++ tests (ctest; GPU tests report as skipped
# without a GPU) and Python tests (pytest). Builds every supported CUDA architecture when nvcc
# is present (compile only without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs="$(nproc)"
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DMHC_WERROR=ON >/dev/null
cmake --build build-test -j"$jobs"
(cd build-test && ctest --output-on-failure -j"$jobs")
if [ -f python/CMakeLists.txt ] && [ -d tests/python ]; then
  bash scripts/test_python.sh
fi
