#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: C++ tests (ctest; GPU tests report as skipped
# without a GPU), a consumer of the installed CMake package, and Python tests (pytest). Builds
# every supported CUDA architecture when nvcc is present (compile only without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs="$(nproc)"
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DMHC_WERROR=ON >/dev/null
cmake --build build-test -j"$jobs"
(cd build-test && ctest --output-on-failure -j"$jobs")
# The installed C++ package: install build-test into a temporary prefix, then build and run the
# CPU-only consumer project (tests/consumer: find_package(mhc), mhc::mhc) against it.
pkg="$(mktemp -d)"
trap 'rm -rf "$pkg"' EXIT
cmake --install build-test --prefix "$pkg/prefix" --component dev >/dev/null
cmake -S tests/consumer -B "$pkg/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$pkg/prefix" >/dev/null
cmake --build "$pkg/build" -j"$jobs" >/dev/null
"$pkg/build/mhc_consumer"
if [ -f python/CMakeLists.txt ] && [ -d tests/python ]; then
  bash scripts/test_python.sh
fi
