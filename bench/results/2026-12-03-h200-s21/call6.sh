BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
( cmake -S ../.snap2 -B ../build-o6 $CFG > $OUT/r/o-configure.log 2>&1 && cmake --build ../build-o6 --target mhc_cli > $OUT/r/o-build.log 2>&1; echo "[old build rc=$?]" > $OUT/r/o-done ) &
run_t() { # tag timeout filter
  timeout $2 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter="$3" > $OUT/r/t-$1.log 2>&1
  echo "[tests $1 rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $OUT/r/t-$1.log | head -3 | tr '\n' ' ') $(grep 'ms total' $OUT/r/t-$1.log)]"
  grep -E "^\[  FAILED" $OUT/r/t-$1.log | head -10 | sed "s/^/[tests $1] /"
}
run_t family 120 'Modes/GpuFamily.*/post:Modes/GpuFamily.*/post_broadcast:Modes/GpuFamily.*/collapse*:Modes/GpuFamily.*/pre_computed_norm:Modes/GpuFamily.*/pre_carried_norm:Modes/GpuFamily.*/post_pre_normal_norm'
run_t grids 90 'Grid/GpuGrid.MatchesReference/post_n4_H4096:Grid/GpuGrid.MatchesReference/post_n4_H7168:Grid/GpuGrid.MatchesReference/collapse_carried_norm_n4_H5120:Grid/GpuGrid.MatchesReference/collapse_carried_n4_H4096:Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H5120:Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H7168'
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --kernel-name kns=collapse_stream --launch-count 3 $B bench --ops pre --modes normal_fold --H 4096,5120 --T 64 --reps 1 --budget-s 5 > $OUT/r/san-$tool-collapse.log 2>&1
  echo "[san $tool collapse_stream rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool-collapse.log | tail -1)]"
done
timeout 60 compute-sanitizer --tool memcheck --kernel-name kns=post_flat --launch-count 2 $B bench --ops post --modes full --H 7168 --T 1024 --variant post.cuda_n4_flat --reps 1 --budget-s 5 > $OUT/r/san-memcheck-flat.log 2>&1
echo "[san memcheck post_flat rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/san-memcheck-flat.log | tail -1)]"
wait; cat $OUT/r/o-done
O=../build-o6/tools/mhc
for round in 1 2; do
  for t in new old; do
    BB=$B; [ $t = old ] && BB=$O
    timeout 30 $BB bench --ops post --modes full --H 4096 --T 16384 --variant post.cuda_n4_flat --budget-s 6 > $OUT/r/abf-$t-$round.log 2>&1
    timeout 30 $BB bench --ops post,pre --modes full,normal_fold --H 4096,5120 --T 16384 --budget-s 10 > $OUT/r/ab-$t-$round.log 2>&1
    cat $OUT/r/abf-$t-$round.log $OUT/r/ab-$t-$round.log | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t $round] /"
  done
done
