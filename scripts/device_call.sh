#!/usr/bin/env bash
# Session 6 final device call (kept with the run's record): build, GPU test subset, bench of
# record, sanitizers over the new kernels, the decode-step figure, ncu of two kernels.
set -u
export OUT=${OUT:-/tmp/o}
R=$OUT/r; mkdir -p $R
B=./build-dev/tools/mhc
pack() { tar -C $R -czf $OUT/results.tgz . 2>/dev/null; cp $R/summary.txt $OUT/summary.txt 2>/dev/null; }
S() { pack; echo "== $* ($(date +%s))" | tee -a $R/summary.txt; }
F='Grid/GpuGrid.MatchesReference/*n4_H4096*:Grid/GpuGrid.MatchesReference/*n4_H7168*:Modes/GpuFamily.*:Modes/GpuDecode.*:Modes/GpuBatch.*:Modes/GpuGraph.*:GpuErrors.*'
MHC_TEST_FILTER="$F" MHC_TEST_TIMEOUT=150 OUT=$R/dev bash scripts/device.sh test > $R/device-test.txt 2>&1
tail -12 $R/device-test.txt | tee -a $R/summary.txt
tar -xf $R/dev/device-logs.tar -C $R 2>/dev/null
grep -E "^\[  FAILED" $R/work/gpu-tests.log | head -20 | tee -a $R/summary.txt
grep -E "variant comparisons" $R/work/gpu-tests.log > $R/family-counts.txt
S bench
timeout 120 $B bench --ops post_pre,pre,head,post,mixes,collapse --modes normal_fold,shifted_fold,learned_fold,full,plain,carried_fold --H 4096,5120,7168 --T 1,4,16,64,128,1024,4096,16384 --budget-s 105 --out $R/mhc.jsonl > $R/bench.log 2>&1
grep "^\[" $R/bench.log | sed 's/(p10[^)]*)//; s/, chain.*//' | tail -250 > $R/bench-rows.txt; head -2 $R/bench.log >> $R/summary.txt
S variants
for v in post_pre.cuda_n4_decode post_pre.cuda_n4_decode_lean; do timeout 15 $B bench --ops post_pre --modes normal_fold --H 4096,7168 --T 1,16,64 --variant $v --budget-s 9 --out $R/v-$v.jsonl 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; done | tee -a $R/summary.txt
for v in post.cuda_n4_flat post.cuda_n4_pipelined; do timeout 15 $B bench --ops post --H 4096,7168 --T 4096,16384 --variant $v --budget-s 9 --out $R/v-$v.jsonl 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; done | tee -a $R/summary.txt
timeout 18 $B bench --ops post_pre --modes normal_fold --H 4096,7168 --T 4096,16384 --variant post_pre.cuda_n4_staged --budget-s 12 --out $R/v-staged.jsonl 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | tee -a $R/summary.txt
S step
timeout 30 $B run --graph-step 1,4,16 > $R/step.txt 2>&1; cat $R/step.txt | grep -v "^{" | tee -a $R/summary.txt
S sanitize
SF='Grid/GpuGrid.MatchesReference/post_pre_shifted_norm_n4_H4096:Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H4096:Grid/GpuGrid.MatchesReference/post_n4_H4096:Grid/GpuGrid.MatchesReference/head_learned_norm_n4_H4096:Modes/GpuDecode.TwoStreamsTwoWorkspacesAtOnce/post_pre_normal_norm:GpuErrors.*'
for tool in memcheck synccheck racecheck; do
  timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 ./build-dev/tests/test_gpu --gtest_filter="$SF" --gtest_brief=1 > $R/san-$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/san-$tool.log | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' $R/san-$tool.log | head -2 | tr '\n' ' ')" | tee -a $R/summary.txt
done
S ncu
for spec in "decode_kernel 16"; do
  set -- $spec
  timeout 35 ncu --clock-control none -k regex:$1 --launch-skip 4 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy $B bench --ops pre --modes normal_fold --H 4096 --T $2 --reps 2 --budget-s 15 > $R/ncu-$1.txt 2>&1; echo "ncu $1 rc=$?" | tee -a $R/summary.txt
done
S done
pack
