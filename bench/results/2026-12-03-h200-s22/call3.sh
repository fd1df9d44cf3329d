BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
( cmake -S ../.snap2 -B ../build-o3 $CFG > $OUT/r/o-configure.log 2>&1 && cmake --build ../build-o3 --target mhc_cli > $OUT/r/o-build.log 2>&1; echo "[old build rc=$?]" > $OUT/r/o-done
  cmake -S ../.snap3 -B ../build-m3 $CFG > $OUT/r/m-configure.log 2>&1 && cmake --build ../build-m3 --target mhc_cli > $OUT/r/m-build.log 2>&1; echo "[mid build rc=$?]" >> $OUT/r/o-done ) &
run_t() { # tag timeout filter
  timeout $2 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter="$3" > $OUT/r/t-$1.log 2>&1
  echo "[tests $1 rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $OUT/r/t-$1.log | head -3 | tr '\n' ' ') $(grep 'ms total' $OUT/r/t-$1.log)]"
  grep -E "^\[  FAILED" $OUT/r/t-$1.log | head -10 | sed "s/^/[tests $1] /"
}
run_t family 120 'Modes/GpuFamily.*/mixes:Modes/GpuFamily.*/pre_computed*:Modes/GpuFamily.*/pre_broadcast_computed*:Modes/GpuFamily.*/post_pre*:Modes/GpuFamily.*/head_learned*'
for tool in memcheck synccheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --kernel-name kns=gemm_group --launch-count 1 $B bench --ops mixes --modes plain --H 7168 --T 4096 --reps 1 --budget-s 5 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool gemm_group rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1)]"
done
wait; cat $OUT/r/o-done
for round in 1 2; do
  for t in new mid old; do
    BB=$B; [ $t = old ] && BB=../build-o3/tools/mhc; [ $t = mid ] && BB=../build-m3/tools/mhc
    timeout 40 $BB bench --ops mixes,pre,post_pre --modes plain,normal_fold --H 4096,7168 --T 4096,16384 --budget-s 16 > $OUT/r/ab-$t-$round.log 2>&1
    cat $OUT/r/ab-$t-$round.log | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t $round] /"
  done
done
