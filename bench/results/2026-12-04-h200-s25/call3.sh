# Session 25 call 3: .snap = s25 bulk5 (the weight in shared memory; tests, sanitizers, ncu),
# .snap2 = main, .snap3 = s25 bulk4 (call 2's tree); A/B of the shifted post_pre rows in one run.
BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
bt() { cmake -S ../$1 -B ../build-$2 $CFG > $OUT/r/$2-configure.log 2>&1 && cmake --build ../build-$2 --target mhc_cli > $OUT/r/$2-build.log 2>&1; echo "[$2 build rc=$?]" >> $OUT/r/builds-done; }
( bt .snap2 main; bt .snap3 bulk4 ) &
run_t family 100 'Modes/GpuFamily.*/post_pre*'
run_t det 90 'Modes/GpuDeterminism.*/post_pre*:Modes/GpuFusion.*/post_pre_shifted*:Modes/GpuBatch.*/post_pre_shifted*:Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
wait; cat $OUT/r/builds-done
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
for round in 1 2; do
for t in main bulk4 bulk5; do
  bin=$([ $t = bulk5 ] && echo $B || echo ../build-$t/tools/mhc)
  timeout 40 $bin bench --ops post_pre --modes shifted_fold,shifted --H 4096,5120,7168 --T 4096,16384 --budget-s 14 2>&1 | r | sed "s/^/[ab$round $t] /"
done
done
for tool in memcheck racecheck synccheck; do
  timeout 30 compute-sanitizer --tool $tool --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuFusion.*/post_pre_shifted_norm' --gtest_brief=1 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1)]"
done
for H in 4096 7168; do
timeout 45 ncu --clock-control none -k regex:post_collapse --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section InstructionStats $B bench --ops post_pre --modes shifted_fold --H $H --T 16384 --reps 2 --budget-s 15 > $OUT/r/ncu-pc-$H.txt 2>&1
echo "[ncu $H rc=$?]"; grep -E "Duration|Throughput|Stall|Issued Warp|No Eligible|Warp Cycles Per Issued" $OUT/r/ncu-pc-$H.txt | head -20
done
