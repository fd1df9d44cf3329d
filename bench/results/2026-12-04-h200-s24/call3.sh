BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
bt() { cmake -S ../$1 -B ../build-$2 $CFG > $OUT/r/$2-configure.log 2>&1 && cmake --build ../build-$2 --target mhc_cli > $OUT/r/$2-build.log 2>&1; echo "[$2 build rc=$?]" >> $OUT/r/builds-done; }
( bt .snap2 main; bt .snap3 regs ) &
run_t family 200 'Modes/GpuFamily.*/post_pre*:Modes/GpuFamily.*/pre_*'
run_t grid 90 'Grid/GpuGrid.MatchesReference/post_pre_*_n4_H*'
run_t fusion 60 'Modes/GpuFusion.*:Modes/GpuBatch.*/post_pre*:Modes/GpuGraph.*/post_pre*:Modes/GpuNanInf.*/post_pre*:Modes/GpuDeterminism.*/post_pre*'
timeout 30 $BD/tests/test_engine --gtest_brief=1 > $OUT/r/test-engine.log 2>&1; echo "[test_engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/test-engine.log | head -2 | tr '\n' ' ')]"
wait; cat $OUT/r/builds-done
bin() { case $1 in bulk) echo $B;; *) echo ../build-$1/tools/mhc;; esac; }
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
for t in main regs bulk; do
  timeout 50 $(bin $t) bench --ops post_pre --modes shifted_fold --H 4096,5120,7168 --T 1024,4096,16384 --budget-s 20 2>&1 | r | sed "s/^/[ab $t] /"
done
timeout 30 $B bench --ops post_pre --modes shifted_fold --H 4096,5120,7168 --T 512,640,768 --variant post_pre.cuda_n4_staged --budget-s 10 2>&1 | r | sed "s/^/[thr bulk staged] /"
timeout 30 $B bench --ops post_pre --modes shifted --H 4096,7168 --T 16384 --budget-s 8 2>&1 | r | sed "s/^/[nofold bulk] /"
timeout 30 ../build-main/tools/mhc bench --ops post_pre --modes shifted --H 4096,7168 --T 16384 --budget-s 8 2>&1 | r | sed "s/^/[nofold main] /"
