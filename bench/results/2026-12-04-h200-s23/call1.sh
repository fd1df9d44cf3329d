BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
bt() { cmake -S ../$1 -B ../build-$2 $CFG > $OUT/r/$2-configure.log 2>&1 && cmake --build ../build-$2 --target mhc_cli > $OUT/r/$2-build.log 2>&1; echo "[$2 build rc=$?]" >> $OUT/r/builds-done; }
( bt .snap2 main; bt .snap3 tile; bt .snap4 p768; bt .snap5 half; bt .snap6 pairs ) &
run_t family 200 'Modes/GpuFamily.*'
run_t batch 120 'Modes/GpuBatch.LargeBatch*/post_pre*:Modes/GpuBatch.LargeBatch*/pre_computed*:Modes/GpuBatch.LargeBatch*/mixes*:Modes/GpuBatch.LargeBatch*/head_learned*'
run_t grids 60 'Grid/GpuGrid.*/post_n4_H*:Grid/GpuGrid.*/post_pre_*_n4_H7168'
run_t decode 60 '*GpuDecode*post_pre*'
wait; cat $OUT/r/builds-done
bin() { case $1 in comb) echo $B;; *) echo ../build-$1/tools/mhc;; esac; }
for round in 1 2; do
  for t in main comb tile half p768; do
    timeout 45 $(bin $t) bench --ops mixes,pre,post_pre,post --modes plain,normal_fold,full --H 4096,7168 --T 4096,16384 --budget-s 20 > $OUT/r/ab-$t-$round.log 2>&1
    grep "^\[" $OUT/r/ab-$t-$round.log | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t $round] /"
  done
  for t in main comb pairs; do
    timeout 30 $(bin $t) bench --ops post_pre,pre --modes normal_fold --H 4096,7168 --T 1,4,16 --budget-s 5 > $OUT/r/dec-$t-$round.log 2>&1
    grep "^\[" $OUT/r/dec-$t-$round.log | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[dec $t $round] /"
  done
done
