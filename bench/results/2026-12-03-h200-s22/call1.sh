BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
( cmake -S ../.snap2 -B ../build-o1 $CFG > $OUT/r/o-configure.log 2>&1 && cmake --build ../build-o1 --target mhc_cli > $OUT/r/o-build.log 2>&1; echo "[old build rc=$?]" > $OUT/r/o-done ) &
run_t() { # tag timeout filter
  timeout $2 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter="$3" > $OUT/r/t-$1.log 2>&1
  echo "[tests $1 rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $OUT/r/t-$1.log | head -3 | tr '\n' ' ') $(grep 'ms total' $OUT/r/t-$1.log)]"
  grep -E "^\[  FAILED" $OUT/r/t-$1.log | head -10 | sed "s/^/[tests $1] /"
}
run_t family 100 'Modes/GpuFamily.*/post:Modes/GpuFamily.*/post_broadcast:Modes/GpuFamily.*/post_pre_normal_norm'
run_t grids 60 'Grid/GpuGrid.MatchesReference/post_n4_H*:Grid/GpuGrid.MatchesReference/post_broadcast_n4_H*'
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I. -Iinclude -o ../sk bench/probes/sinkhorn_forms.cu > $OUT/r/sk-build.log 2>&1 && timeout 60 ../sk 2>&1 | sed 's/^/[sk] /'
wait; cat $OUT/r/o-done
O=../build-o1/tools/mhc
for round in 1 2; do
  for t in new old; do
    BB=$B; [ $t = old ] && BB=$O
    timeout 40 $BB bench --ops post,post_pre --modes full,normal_fold --H 4096,7168 --T 4096,16384 --budget-s 14 > $OUT/r/ab-$t-$round.log 2>&1
    cat $OUT/r/ab-$t-$round.log | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t $round] /"
  done
done
