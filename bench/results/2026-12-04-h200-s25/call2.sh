# Session 25 call 2: .snap = s25 bulk4 (tests, sanitizers), .snap2 = main, .snap3 = s25 bulk3 (call 1's
# post_collapse_kernel without the decode change); A/B of the shifted post_pre rows in one run.
BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
bt() { cmake -S ../$1 -B ../build-$2 $CFG > $OUT/r/$2-configure.log 2>&1 && cmake --build ../build-$2 --target mhc_cli > $OUT/r/$2-build.log 2>&1; echo "[$2 build rc=$?]" >> $OUT/r/builds-done; }
( bt .snap2 main; bt .snap3 bulk3 ) &
run_t family 90 'Modes/GpuFamily.*/post_pre*'
run_t det 90 'Modes/GpuDeterminism.*/post_pre*:Modes/GpuFusion.*/post_pre_shifted*:Modes/GpuBatch.*/post_pre_shifted*:Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
wait; cat $OUT/r/builds-done
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
for round in 1 2; do
for t in main bulk3 bulk4; do
  bin=$([ $t = bulk4 ] && echo $B || echo ../build-$t/tools/mhc)
  timeout 40 $bin bench --ops post_pre --modes shifted_fold,shifted --H 4096,5120,7168 --T 4096,16384 --budget-s 14 2>&1 | r | sed "s/^/[ab$round $t] /"
done
done
for tool in memcheck racecheck synccheck; do
  timeout 30 compute-sanitizer --tool $tool --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuFusion.*/post_pre_shifted_norm' --gtest_brief=1 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1)]"
done
