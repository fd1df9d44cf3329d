BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
( cmake -S ../.snap2 -B ../build-c0 $CFG -DCMAKE_CUDA_ARCHITECTURES=90a > $OUT/r/o-configure.log 2>&1 && cmake --build ../build-c0 --target mhc_cli > $OUT/r/o-build.log 2>&1; echo "[old build rc=$?]" > $OUT/r/o-done ) &
timeout 230 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuFamily.*:Modes/GpuBatch.*:Grid/GpuGrid.MatchesReference/collapse*_n4_H*:Grid/GpuGrid.MatchesReference/head*_n4_H5120' > $OUT/r/family.log 2>&1
echo "[tests rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/family.log | head -2 | tr '\n' ' ') $(grep -c '^\[       OK' $OUT/r/family.log) ok]"
grep -E "^\[  FAILED|Failure|variant comparisons" $OUT/r/family.log | head -12 | sed 's/^/[tests] /'
wait; cat $OUT/r/o-done
O=../build-c0/tools/mhc
for round in 1 2; do
  for t in new old; do
    BB=$B; [ $t = old ] && BB=$O
    timeout 90 $BB bench --ops collapse,pre,post_pre --modes carried_fold,normal_fold --H 4096,5120,7168 --T 4096,16384 --budget-s 60 > $OUT/r/ab-$t-$round.log 2>&1
    grep "^\[" $OUT/r/ab-$t-$round.log | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t $round] /"
  done
done
timeout 60 compute-sanitizer --tool memcheck --kernel-name kns=collapse_stream --launch-count 3 $B bench --ops pre --modes normal_fold --H 5120 --T 257 --reps 1 --budget-s 5 > $OUT/r/memcheck.txt 2>&1; echo "[memcheck collapse_stream rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/memcheck.txt | tail -1)]"
timeout 60 compute-sanitizer --tool synccheck --kernel-name kns=collapse_stream --launch-count 3 $B bench --ops pre --modes normal_fold --H 5120 --T 257 --reps 1 --budget-s 5 > $OUT/r/synccheck.txt 2>&1; echo "[synccheck collapse_stream rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/synccheck.txt | tail -1)]"
timeout 60 compute-sanitizer --tool racecheck --kernel-name kns=collapse_stream --launch-count 2 $B bench --ops pre --modes normal_fold --H 5120 --T 65 --reps 1 --budget-s 5 > $OUT/r/racecheck.txt 2>&1; echo "[racecheck collapse_stream rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/r/racecheck.txt | tail -1)]"
