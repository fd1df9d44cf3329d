BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11"
( cmake -S ../.snap2 -B ../build-h0 $CFG > $OUT/r/o-configure.log 2>&1 && cmake --build ../build-h0 --target mhc_cli test_gpu > $OUT/r/o-build.log 2>&1; echo "[old build rc=$?]" > $OUT/r/o-done ) &
timeout 150 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuExactSums.*:Modes/GpuFamily.*:Grid/GpuGrid.MatchesReference/post_n4_H*:Modes/GpuNanInf.*:Modes/GpuDecode.*' > $OUT/r/t.log 2>&1
echo "[tests new rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t.log | head -2 | tr '\n' ' ')]"
grep -E "^\[  FAILED|Failure|Expected|Which is|mismatch|differ" $OUT/r/t.log | head -20 | sed 's/^/[tests new] /'
wait; cat $OUT/r/o-done
O=../build-h0/tools/mhc
timeout 100 ../build-h0/tests/test_gpu --gtest_brief=1 --gtest_filter='Grid/GpuGrid.MatchesReference/post_n4_H*' > $OUT/r/t-old.log 2>&1
echo "[tests old rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t-old.log | head -2 | tr '\n' ' ')]"
grep -E "^\[  FAILED|Failure|Expected|Which is|mismatch|differ" $OUT/r/t-old.log | head -20 | sed 's/^/[tests old] /'
for round in 1 2; do
  for t in new old; do
    BB=$B; [ $t = old ] && BB=$O
    timeout 50 $BB bench --ops post,post_pre --modes full,normal_fold --H 4096,7168 --T 1,16,4096,16384 --budget-s 35 > $OUT/r/ab-$t-$round.log 2>&1
    grep "^\[" $OUT/r/ab-$t-$round.log | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t $round] /"
  done
done
for t in new; do
  BB=$B
  timeout 60 ncu --clock-control none -k regex:"post_bulk" --launch-skip 2 --launch-count 1 --section WarpStateStats --section SchedulerStats --section SpeedOfLight --section InstructionStats $BB bench --ops post --modes full --H 4096 --T 16384 --reps 1 --budget-s 20 > $OUT/r/ncu-post-$t.txt 2>&1
  grep -E "Duration|DRAM Throughput|Active Threads|Warp Cycles Per Issued|Eligible Warps|Issued Warp|Executed Instructions  " $OUT/r/ncu-post-$t.txt | sed "s/^/[ncu $t] /"
done
