BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
( cmake -S ../.snap2 -B ../build-main $CFG > $OUT/r/main-configure.log 2>&1 && cmake --build ../build-main --target mhc_cli > $OUT/r/main-build.log 2>&1; echo "[main build rc=$?]" >> $OUT/r/builds-done
  cmake -S ../.snap3 -B ../build-gp $CFG -DCMAKE_CUDA_FLAGS=-DMHC_GEMM_PROBE > $OUT/r/gp-configure.log 2>&1 && cmake --build ../build-gp --target mhc_cli > $OUT/r/gp-build.log 2>&1; echo "[gp build rc=$?]" >> $OUT/r/builds-done ) &
for tool in memcheck synccheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --kernel-name kns=decode_chunk --launch-count 4 $B bench --ops post_pre --modes normal_fold,shifted --H 4096,7168 --T 1 --reps 1 --budget-s 5 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool decode_chunk T=1 rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1)]"
done
wait; cat $OUT/r/builds-done
GP=../build-gp/tools/mhc; M=../build-main/tools/mhc
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
timeout 30 $M bench --ops mixes --modes plain --H 4096,7168 --T 2048,4095 --budget-s 8 2>&1 | r | sed "s/^/[gp main] /"
for sh in "0 8 4" "0 12 3" "0 10 3" "0 16 2" "1 12 3" "1 8 4"; do
  MHC_GEMM_PROBE="$sh" timeout 30 $GP bench --ops mixes --modes plain --H 4096,7168 --T 2048,4095 --variant mixes.cuda_n4_staged --budget-s 8 2>&1 | r | sed "s/^/[gp $sh] /"
done
timeout 30 $M bench --ops mixes,post_pre --modes plain,normal_fold --H 4096,7168 --T 16384 --budget-s 10 2>&1 | r | sed "s/^/[gp16 main] /"
for sh in "0 8 4" "0 12 3"; do
  MHC_NO_GROUP=1 MHC_GEMM_PROBE="$sh" timeout 30 $GP bench --ops mixes,post_pre --modes plain,normal_fold --H 4096,7168 --T 16384 --budget-s 10 2>&1 | r | sed "s/^/[gp16 nogroup $sh] /"
done
for round in 1 2; do
  for t in main pairs; do
    BB=$B; [ $t = main ] && BB=$M
    timeout 30 $BB bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 1,2,4 --budget-s 8 2>&1 | r | sed "s/^/[dec $t $round] /"
  done
done
