B=../build-s7/tools/mhc
for v in collapse.cuda_n4 collapse.cuda_n4_staged; do
  timeout 80 $B bench --ops collapse --modes carried_fold --H 4096,5120,7168 --T 1,16,128,1024,4096,16384 --variant $v --budget-s 25 2>&1 | grep "^\[" | sed "s/^/[$v] /"
done
for v in post_pre.cuda_n4 post_pre.cuda_n4_staged; do
  timeout 60 $B bench --ops post_pre --modes normal_fold --H 4096,7168 --T 1024,4096,16384 --variant $v --budget-s 20 2>&1 | grep "^\[" | sed "s/^/[$v] /"
done
timeout 90 ncu --clock-control none -k regex:mix_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis \
  $B bench --ops post_pre --modes normal_fold --H 4096 --T 16384 --variant post_pre.cuda_n4 --reps 1 --budget-s 2 > /tmp/ncu-mix.txt 2>&1
echo "[ncu rc=$?]"
grep -E "Duration|Throughput|Stall|Issue|Warp Cycles|Eligible|Active Warps|Registers|Achieved|Theoretical|Busy|Hit" /tmp/ncu-mix.txt | sed 's/^/[ncu-mix] /' | head -60
cp /tmp/ncu-mix.txt $OUT/r/ 2>/dev/null
