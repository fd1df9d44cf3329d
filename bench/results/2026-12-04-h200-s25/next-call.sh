# Prepared for the next session's first device call (not run): .snap = main with
# next-s25-narrow.patch applied (post_collapse_kernel as two 256-thread blocks a multiprocessor
# where H <= 4096), .snap2 = main; run as session 25's calls were (scripts/device_session.sh
# prefill with this as call.sh). Prediction: shifted_fold at T = 16384, H = 4096 564 -> 520-540 us
# (the loop's fast path 892 SASS instructions a vector against 1051; one block's barrier wait
# behind the other's work); H = 5120 / 7168 unchanged (the same 512-thread code).
BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
bt() { cmake -S ../$1 -B ../build-$2 $CFG > $OUT/r/$2-configure.log 2>&1 && cmake --build ../build-$2 --target mhc_cli > $OUT/r/$2-build.log 2>&1; echo "[$2 build rc=$?]" >> $OUT/r/builds-done; }
( bt .snap2 main ) &
run_t family 100 'Modes/GpuFamily.*/post_pre*'
run_t det 100 'Modes/GpuDeterminism.*/post_pre*:Modes/GpuFusion.*/post_pre_shifted*:Modes/GpuBatch.*/post_pre_shifted*:Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
wait; cat $OUT/r/builds-done
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
for round in 1 2; do
for t in main narrow; do
  bin=$([ $t = narrow ] && echo $B || echo ../build-main/tools/mhc)
  timeout 40 $bin bench --ops post_pre --modes shifted_fold,shifted --H 2048,4096,5120 --T 1024,4096,16384 --budget-s 16 2>&1 | r | sed "s/^/[ab$round $t] /"
done
done
for tool in memcheck racecheck synccheck; do
  timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuFusion.*/post_pre_shifted_norm' --gtest_brief=1 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1)]"
done
