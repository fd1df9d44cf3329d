BD=../build-s7; B=$BD/tools/mhc
run_t() { # tag timeout filter
  timeout $2 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter="$3" > $OUT/r/t-$1.log 2>&1
  echo "[tests $1 rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $OUT/r/t-$1.log | head -3 | tr '\n' ' ') $(grep 'ms total' $OUT/r/t-$1.log)]"
  grep -E "^\[  FAILED" $OUT/r/t-$1.log | head -10 | sed "s/^/[tests $1] /"
}
timeout 40 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 1024,2048 --budget-s 14 > $OUT/r/rows.log 2>&1
grep "^\[" $OUT/r/rows.log | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[rows] /"
run_t family 90 'Modes/GpuFamily.*/post_pre*'
run_t batch 40 'Modes/GpuBatch.*/post_pre_normal_norm:Modes/GpuBatch.*/post_pre_shifted_norm'
timeout 60 compute-sanitizer --tool memcheck --launch-count 12 $B bench --ops post_pre --modes normal_fold --H 7168 --T 1025 --reps 1 --budget-s 5 > $OUT/r/san-memcheck.log 2>&1
echo "[san memcheck post_pre staged T=1025 rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/san-memcheck.log | tail -1)]"
