BD=../build-s7; B=$BD/tools/mhc
( cmake -S ../.snap2 -B ../build-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DMHC_GTEST_SOURCE="$PWD/.deps/googletest" -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" -DMHC_BUILD_TESTS=OFF > $OUT/r/old-configure.log 2>&1 &&
  cmake --build ../build-old --target mhc_cli > $OUT/r/old-build.log 2>&1; echo "[old build rc=$?]" > $OUT/r/old-done ) &
timeout 240 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuFamily.*:Modes/GpuBatch.LargeBatch*:GpuErrors.*' > $OUT/r/family.log 2>&1
echo "[family rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/family.log | head -2 | tr '\n' ' ')]"
grep -E "^\[  FAILED|variant comparisons" $OUT/r/family.log | head -12 | sed 's/^/[family] /'
grep -E "Failure" -A4 $OUT/r/family.log | head -24 | sed 's/^/[famfail] /'
timeout 60 $BD/tests/test_engine --gtest_brief=1 > $OUT/r/engine.log 2>&1; echo "[engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/engine.log | tr '\n' ' ')]"
wait; cat $OUT/r/old-done
for round in 1 2; do for t in new old; do
  BB=$B; [ $t = old ] && BB=../build-old/tools/mhc
  timeout 100 $BB bench --ops mixes,pre,post_pre --modes plain,normal_fold --H 4096,7168 --T 4096,16384 --budget-s 40 2>&1 | grep "^\[" | sed "s/^/[$t r$round] /"
done; done
for H in 4096 7168; do
  timeout 120 ncu --clock-control none -k regex:"gemm|finalize" --launch-skip 8 --launch-count 6 --section SpeedOfLight \
    $B bench --ops pre --modes normal_fold --H $H --T 16384 --reps 1 --budget-s 60 > $OUT/r/ncu-new-$H.txt 2>&1
  echo "[ncu $H rc=$?]"
  awk '/^  [a-z]|^  void/{name=$0} /Duration/{print "[ncu '$H'] " substr(name,1,70), $3}' $OUT/r/ncu-new-$H.txt | head -8
done
timeout 100 compute-sanitizer --tool memcheck --kernel-name kns=gemm_group --launch-count 2 $B bench --ops mixes --modes plain --H 4608 --T 4097 --reps 1 --budget-s 5 > $OUT/r/memcheck.txt 2>&1; echo "[memcheck rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/memcheck.txt | tail -1)]"
timeout 100 compute-sanitizer --tool memcheck --kernel-name kns=finalize --launch-count 4 $B bench --ops pre --modes normal_fold --H 4608 --T 4097 --reps 1 --budget-s 5 > $OUT/r/memcheck-f.txt 2>&1; echo "[memcheck finalize rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/memcheck-f.txt | tail -1)]"
timeout 100 compute-sanitizer --tool synccheck --kernel-name kns=gemm_group --launch-count 2 $B bench --ops mixes --modes plain --H 4608 --T 4097 --reps 1 --budget-s 5 > $OUT/r/synccheck.txt 2>&1; echo "[synccheck rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/synccheck.txt | tail -1)]"
timeout 150 compute-sanitizer --tool racecheck --kernel-name kns=gemm_group --launch-count 1 $B bench --ops mixes --modes plain --H 1536 --T 4097 --reps 1 --budget-s 5 > $OUT/r/racecheck.txt 2>&1; echo "[racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/r/racecheck.txt | tail -1)]"
timeout 100 compute-sanitizer --tool racecheck --kernel-name kns=finalize --launch-count 2 $B bench --ops pre --modes normal_fold --H 1536 --T 4097 --reps 1 --budget-s 5 > $OUT/r/racecheck-f.txt 2>&1; echo "[racecheck finalize rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/r/racecheck-f.txt | tail -1)]"
