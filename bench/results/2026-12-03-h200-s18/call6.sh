BD=../build-s7; B=$BD/tools/mhc
for v in post_pre.cuda_n4_fused post_pre.cuda_n4_staged; do
  timeout 60 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 4096,16384 --variant $v --budget-s 25 2>&1 | grep "^\[" | sed "s/^/[$v] /"
done
timeout 60 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuFamily.*/post_pre*' > $OUT/r/family.log 2>&1
echo "[family rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/family.log | head -2 | tr '\n' ' ')]"
grep -E "variant comparisons" $OUT/r/family.log | sed 's/^/[family] /'
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --kernel-name regex:post_gemm_kernel $B bench --ops post_pre --modes normal_fold --H 4096 --T 1921 --variant post_pre.cuda_n4_fused --reps 1 --budget-s 5 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tr '\n' ' ') rows: $(grep -c 'post_pre.cuda_n4_fused' $OUT/r/san-$tool.log)]"
done
