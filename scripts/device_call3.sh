#!/usr/bin/env bash
# Session 6, third device call: racecheck on the tests after which call 2's racecheck process
# ended abnormally, one process each.
set -u
export OUT=${OUT:-/tmp/o}
R=$OUT/r3; mkdir -p $R
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 > $R/configure.log 2>&1
cmake --build build-dev --target test_gpu > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
for f in 'Modes/GpuDecode.TwoStreamsTwoWorkspacesAtOnce/post_pre_normal_norm' 'GpuErrors.*' 'Grid/GpuGrid.MatchesReference/post_pre_shifted_norm_n4_H4096'; do
  n=$(echo "$f" | tr -c 'A-Za-z0-9_\n' '_')
  timeout 75 compute-sanitizer --tool racecheck --error-exitcode 9 ./build-dev/tests/test_gpu --gtest_filter="$f" --gtest_brief=1 > $R/race-$n.log 2>&1
  echo "$f: rc=$? $(grep -E 'RACECHECK SUMMARY' $R/race-$n.log | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED|Error' $R/race-$n.log | head -3 | tr '\n' ' ')" | tee -a $R/summary.txt
  tar -C $R -czf $OUT/results3.tgz .
done
