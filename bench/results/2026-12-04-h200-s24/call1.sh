BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
bt() { cmake -S ../$1 -B ../build-$2 $CFG > $OUT/r/$2-configure.log 2>&1 && cmake --build ../build-$2 --target mhc_cli > $OUT/r/$2-build.log 2>&1; echo "[$2 build rc=$?]" >> $OUT/r/builds-done; }
( bt .snap2 main; bt .snap3 pc2 ) &
run_t family 200 'Modes/GpuFamily.*/post_pre*:Modes/GpuFamily.*/pre_*'
run_t grid 90 'Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
run_t fusion 60 'Modes/GpuFusion.*:Modes/GpuBatch.*/post_pre_shifted*:Modes/GpuGraph.*/post_pre*'
wait; cat $OUT/r/builds-done
bin() { case $1 in new) echo $B;; *) echo ../build-$1/tools/mhc;; esac; }
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
for round in 1; do
  for t in main new pc2; do
    timeout 60 $(bin $t) bench --ops post_pre --modes shifted_fold,normal_fold --H 4096,5120,7168 --T 1024,4096,16384 --budget-s 25 2>&1 | r | sed "s/^/[ab $t $round] /"
  done
done
for t in main new; do
  timeout 40 $(bin $t) bench --ops post_pre --modes shifted_fold --H 4096,7168 --T 256,512,768 --variant post_pre.cuda_n4_staged --budget-s 10 2>&1 | r | sed "s/^/[thr $t staged] /"
done
timeout 30 $B bench --ops post_pre --modes shifted_fold --H 4096,7168 --T 256,512,768 --variant post_pre.cuda_n4 --budget-s 8 2>&1 | r | sed "s/^/[thr new cuda_n4] /"
