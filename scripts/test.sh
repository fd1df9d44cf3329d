#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: C++ tests (ctest; GPU tests report as skipped
# without a GPU), a consumer of the installed CMake package, and Python tests (pytest, in a
# fresh venv with only the required dependencies, then with ml_dtypes and torch). Builds every
# supported CUDA architecture when nvcc is present (compile only without a GPU). Ends with one
# summary line: tests passed, failed and skipped (the line above it: how many skipped tests are
# GPU tests skipped for lack of a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs="$(nproc)"
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DMHC_WERROR=ON >/dev/null
t0=$(date +%s)
cmake --build build-test -j"$jobs" > build-test/build.log 2>&1 \
  || { grep -E "error|warning" -A3 build-test/build.log | head -60; tail -20 build-test/build.log; exit 1; }
echo "test.sh: built build-test in $(( $(date +%s) - t0 )) s (log: build-test/build.log)"
# ctest's per-test lines go to build-test/ctest.log; its JUnit report feeds the summary below.
rc=0
(cd build-test && ctest -j"$jobs" --output-on-failure --output-junit ctest.xml > ctest.log 2>&1) || rc=1
(cd build-test && ctest -N -L gpu) | sed -n 's/^ *Test *#[0-9]*: //p' > build-test/gpu-tests.txt
grep -E "tests passed|Total Test time" build-test/ctest.log || tail -20 build-test/ctest.log
grep -A40 "The following tests FAILED" build-test/ctest.log || true
# The installed C++ package: install build-test into a temporary prefix, then build and run the
# CPU-only consumer project (tests/consumer: find_package(mhc), mhc::mhc) against it.
pkg="$(mktemp -d)"
trap 'rm -rf "$pkg"' EXIT
cmake --install build-test --prefix "$pkg/prefix" --component dev >/dev/null
cmake -S tests/consumer -B "$pkg/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$pkg/prefix" >/dev/null
cmake --build "$pkg/build" -j"$jobs" >/dev/null
"$pkg/build/mhc_consumer"
rm -f build-test/pytest*.xml
bash scripts/test_python.sh || rc=1
bash scripts/sanitize.sh || rc=1  # ASan+UBSan CPU tests, hostile CLI cases, ~1 min of fuzzing per reader
gpu=()
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=(--gpu-present); fi
py=()
for x in build-test/pytest*.xml; do [ -f "$x" ] && py+=(--pytest "$x"); done
python3 scripts/test_summary.py --ctest build-test/ctest.xml --gpu-tests build-test/gpu-tests.txt \
  --passed consumer "${py[@]}" "${gpu[@]}" || rc=1
exit $rc
