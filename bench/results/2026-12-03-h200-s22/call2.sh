BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
( cmake -S ../.snap2 -B ../build-o2 $CFG > $OUT/r/o-configure.log 2>&1 && cmake --build ../build-o2 --target mhc_cli > $OUT/r/o-build.log 2>&1; echo "[old build rc=$?]" > $OUT/r/o-done ) &
run_t() { # tag timeout filter
  timeout $2 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter="$3" > $OUT/r/t-$1.log 2>&1
  echo "[tests $1 rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $OUT/r/t-$1.log | head -3 | tr '\n' ' ') $(grep 'ms total' $OUT/r/t-$1.log)]"
  grep -E "^\[  FAILED" $OUT/r/t-$1.log | head -10 | sed "s/^/[tests $1] /"
}
run_t family 150 'Modes/GpuFamily.*/post_pre*'
run_t grids 90 'Grid/GpuGrid.MatchesReference/post_pre*'
run_t batch 60 'Modes/GpuBatch.*:Modes/GpuGraph.*/post_pre*'
timeout 60 $BD/tests/test_engine --gtest_brief=1 > $OUT/r/t-engine.log 2>&1; echo "[tests engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t-engine.log | head -2 | tr '\n' ' ')]"
wait; cat $OUT/r/o-done
O=../build-o2/tools/mhc
for round in 1 2; do
  for t in new old; do
    BB=$B; [ $t = old ] && BB=$O
    timeout 60 $BB bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 4096,16384 --budget-s 24 > $OUT/r/ab-$t-$round.log 2>&1
    cat $OUT/r/ab-$t-$round.log | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t $round] /"
  done
done
for t in new old; do
  BB=$B; [ $t = old ] && BB=$O
  timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:"post_bulk|gemm|finalize|collapse_stream" --launch-skip 8 --launch-count 8 $BB bench --ops post_pre --modes normal_fold --H 4096 --T 16384 --reps 2 --budget-s 3 > $OUT/r/ncu-$t.log 2>&1
  grep -E "post_bulk|gemm|finalize|collapse_stream|gpu__time" $OUT/r/ncu-$t.log | sed 's/(N4Params)//; s/mhc::cuda::n4::(anonymous namespace):://' | awk '{$1=$1};1' | cut -c1-90 | paste - - | sed "s/^/[ncu $t] /"
done
