#!/usr/bin/env bash
# Session 6, fourth device call: the GPU tests over the host-side and shared-helper refactors
# made after call 4 (bit equality within the n4 family, every n4 variant and a generic case
# against the reference, the default dispatch across thresholds).
set -u
export OUT=${OUT:-/tmp/o}
R=$OUT/r4; mkdir -p $R
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 > $R/configure.log 2>&1
cmake --build build-dev --target test_gpu > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
F='Modes/GpuFamily.*:Grid/GpuGrid.MatchesReference/*n4_H4096:Grid/GpuGrid.MatchesReference/pre_computed_n2_H1000:Grid/GpuGrid.MatchesReference/post_pre_shifted_norm_n8_H4096:Modes/GpuBatch.*/post_pre*'
timeout 130 ./build-dev/tests/test_gpu --gtest_brief=1 --gtest_filter="$F" > $R/gpu-tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $R/gpu-tests.log | head -3 | tr '\n' ' ')" | tee $R/summary.txt
grep -E "^\[  FAILED" $R/gpu-tests.log | head -20 | tee -a $R/summary.txt
grep -c "variant comparisons" $R/gpu-tests.log | tee -a $R/summary.txt
