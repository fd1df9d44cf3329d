BD=../build-s7; B=$BD/tools/mhc
timeout 40 $B bench --ops post_pre --modes normal_fold --H 4096 --T 16384 --variant post_pre.cuda_n4_fused --reps 3 --budget-s 3 2>&1 | tail -3 | sed 's/^/[sanity] /'
echo "[sanity rc=${PIPESTATUS[0]}]"
timeout 240 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuFamily.*:GpuErrors.*' > $OUT/r/family.log 2>&1
echo "[family rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/family.log | head -2 | tr '\n' ' ')]"
grep -E "FAILED|variant comparisons" $OUT/r/family.log | head -20 | sed 's/^/[family] /'
grep -E "Failure|fused" $OUT/r/family.log | head -10 | sed 's/^/[famfail] /'
for round in 1; do for v in post_pre.cuda_n4_fused post_pre.cuda_n4_staged; do
  timeout 80 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 1024,4096,16384 --variant $v --budget-s 25 2>&1 | grep "^\[" | sed "s/^/[r$round $v] /"
done; done
timeout 90 ncu --clock-control none -k regex:post_gemm_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
  $B bench --ops post_pre --modes normal_fold --H 4096 --T 16384 --variant post_pre.cuda_n4_fused --reps 1 --budget-s 60 > $OUT/r/ncu-pg.txt 2>&1
echo "[ncu rc=$?]"
grep -E "Duration|Throughput|Issue|Warp Cycles|Eligible|Active Warps|Registers|Achieved|Busy|Stall|Hit Rate|Shared Memory" $OUT/r/ncu-pg.txt | sed 's/^/[ncu-pg] /' | head -50
