BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
( cmake -S ../.snap2 -B ../build-p0 $CFG > $OUT/r/o-configure.log 2>&1 && cmake --build ../build-p0 --target mhc_cli > $OUT/r/o-build.log 2>&1; echo "[old build rc=$?]" > $OUT/r/o-done ) &
timeout 100 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuExactSums.*:Modes/GpuFamily.*/post*:Grid/GpuGrid.MatchesReference/post_n4_H*:Modes/GpuNanInf.*/post' > $OUT/r/t.log 2>&1
echo "[tests rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t.log | head -2 | tr '\n' ' ') $(grep -c '^\[       OK' $OUT/r/t.log) ok]"
grep -E "^\[  FAILED|variant comparisons" $OUT/r/t.log | head -10 | sed 's/^/[tests] /'
wait; cat $OUT/r/o-done
O=../build-p0/tools/mhc
for round in 1 2; do
  for t in new old; do
    BB=$B; [ $t = old ] && BB=$O
    timeout 60 $BB bench --ops post,post_pre --modes full,normal_fold --H 4096,7168 --T 4096,16384 --budget-s 40 > $OUT/r/ab-$t-$round.log 2>&1
    grep "^\[" $OUT/r/ab-$t-$round.log | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t $round] /"
  done
done
timeout 60 ncu --clock-control none -k regex:"post_bulk" --launch-skip 2 --launch-count 1 --section WarpStateStats --section SchedulerStats --section SpeedOfLight $B bench --ops post --modes full --H 4096 --T 16384 --reps 1 --budget-s 20 > $OUT/r/ncu-post.txt 2>&1
grep -E "Duration|DRAM Throughput|Active Threads|Warp Cycles Per Issued|Eligible Warps|Issued Warp" $OUT/r/ncu-post.txt | sed 's/^/[ncu] /'
