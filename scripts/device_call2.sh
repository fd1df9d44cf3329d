#!/usr/bin/env bash
# Session 6, second device call: racecheck over the new kernels, ncu of gemm_kernel, staged
# post_pre at the remaining shapes.
set -u
export OUT=${OUT:-/tmp/o}
R=$OUT/r2; mkdir -p $R
pack() { tar -C $R -czf $OUT/results2.tgz . 2>/dev/null; cp $R/summary.txt $OUT/summary2.txt 2>/dev/null; }
S() { pack; echo "== $* ($(date +%s))" | tee -a $R/summary.txt; }
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 > $R/configure.log 2>&1
cmake --build build-dev --target mhc_cli test_gpu > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
B=./build-dev/tools/mhc
S staged
timeout 30 $B bench --ops post_pre --modes normal_fold --H 4096,5120,7168 --T 512,1024,8192 --variant post_pre.cuda_n4_staged --budget-s 22 --out $R/v-staged2.jsonl 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | tee -a $R/summary.txt
timeout 30 $B bench --ops post_pre --modes normal_fold --H 5120 --T 4096,16384 --variant post_pre.cuda_n4_staged --budget-s 20 --out $R/v-staged3.jsonl 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | tee -a $R/summary.txt
S racecheck
RF='Grid/GpuGrid.MatchesReference/post_pre_shifted_norm_n4_H4096:Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H4096:Modes/GpuDecode.TwoStreamsTwoWorkspacesAtOnce/post_pre_normal_norm:GpuErrors.*'
timeout 170 compute-sanitizer --tool racecheck --error-exitcode 9 ./build-dev/tests/test_gpu --gtest_filter="$RF" --gtest_brief=1 > $R/san-racecheck.log 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $R/san-racecheck.log | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' $R/san-racecheck.log | head -2 | tr '\n' ' ')" | tee -a $R/summary.txt
S ncu
timeout 40 ncu --clock-control none -k regex:gemm_kernel --launch-skip 4 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy $B bench --ops mixes --modes plain --H 4096 --T 8192 --reps 2 --budget-s 15 > $R/ncu-gemm_kernel.txt 2>&1; echo "ncu gemm rc=$?" | tee -a $R/summary.txt
S done
pack
