# Session 25 call 6 (the prefill step's list): .snap = main with post_bulk_kernel's mixes a tile
# ahead, .snap2 = 4a09d8b (before it). Tests of the post family and the staged normal post_pre,
# sanitizers over the staged normal post_pre (post_bulk_kernel), A/B of post and post_pre rows.
BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
bt() { cmake -S ../$1 -B ../build-$2 $CFG > $OUT/r/$2-configure.log 2>&1 && cmake --build ../build-$2 --target mhc_cli > $OUT/r/$2-build.log 2>&1; echo "[$2 build rc=$?]" >> $OUT/r/builds-done; }
( bt .snap2 before ) &
run_t post 85 'Modes/GpuFamily.*/post:Modes/GpuFamily.*/post_broadcast:Modes/GpuFamily.*/post_pre_normal*:Modes/GpuFamily.*/post_pre_shifted_norm:Grid/GpuGrid.MatchesReference/post_n4_H*:Grid/GpuGrid.MatchesReference/post_broadcast_n4_H*:Modes/GpuDeterminism.*/post:Modes/GpuBatch.*/post:Modes/GpuExactSums.*/post*:Modes/GpuFusion.*/post_pre_normal*'
for tool in memcheck synccheck racecheck; do
  timeout 35 compute-sanitizer --tool $tool --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuFusion.*/post_pre_normal_norm' --gtest_brief=1 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/san-$tool.log | head -1)]"
done
wait; cat $OUT/r/builds-done
for round in 1 2; do
for t in before main; do
  bin=$([ $t = main ] && echo $B || echo ../build-before/tools/mhc)
  timeout 20 $bin bench --ops post --modes full --H 4096,5120,7168 --T 4096,16384 --budget-s 8 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab$round $t] /"
  timeout 15 $bin bench --ops post_pre --modes normal_fold --H 4096,5120,7168 --T 16384 --budget-s 6 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab$round $t] /"
done
done
