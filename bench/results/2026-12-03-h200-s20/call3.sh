BD=../build-s7; B=$BD/tools/mhc
timeout 170 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuFamily.*:Grid/GpuGrid.MatchesReference/collapse*_n4_H5120' > $OUT/r/family.log 2>&1
echo "[family rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/family.log | head -2 | tr '\n' ' ')]"
grep -E "^\[  FAILED|variant comparisons" $OUT/r/family.log | head -14 | sed 's/^/[family] /'
timeout 40 $BD/tests/test_engine --gtest_brief=1 > $OUT/r/engine.log 2>&1; echo "[engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/engine.log | tr '\n' ' ')]"
timeout 80 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuGraph.*' > $OUT/r/graph.log 2>&1
echo "[graph rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/graph.log | head -2 | tr '\n' ' ') $(grep -c '^\[       OK' $OUT/r/graph.log) ok]"
grep -E "^\[  FAILED" $OUT/r/graph.log | head -8 | sed 's/^/[graph] /'
timeout 50 compute-sanitizer --tool memcheck --kernel-name kns=collapse_stream --launch-count 3 $B bench --ops pre,collapse --modes normal_fold,carried_fold --H 5120 --T 257 --reps 1 --budget-s 5 > $OUT/r/memcheck.txt 2>&1; echo "[memcheck collapse_stream rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/memcheck.txt | tail -1)]"
timeout 130 $B bench --ops post_pre,pre,head,pre_broadcast,mixes,collapse --modes normal_fold,shifted_fold,learned_fold,plain,carried_fold --H 4096,5120,7168 --T 1024,4096,16384 --budget-s 110 --out $OUT/r/record.jsonl > $OUT/r/record.log 2>&1
echo "[record rc=$? $(grep -E 'rows measured' $OUT/r/record.log)]"; head -1 $OUT/r/record.log | sed 's/^/[record] /'; grep "^\[" $OUT/r/record.log | sed 's/(p10[^)]*)//; s/, chain.*//; s/^/[record] /'
