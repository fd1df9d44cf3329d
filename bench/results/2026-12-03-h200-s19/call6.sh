BD=../build-s7; B=$BD/tools/mhc
timeout 200 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuFamily.*:Modes/GpuBatch.*:GpuErrors.*' > $OUT/r/family.log 2>&1
echo "[family rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/family.log | head -2 | tr '\n' ' ')]"
grep -E "^\[  FAILED" $OUT/r/family.log | head -12 | sed 's/^/[family] /'
grep -E "variant comparisons" $OUT/r/family.log > $OUT/r/family-counts.txt
timeout 170 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Grid/GpuGrid.MatchesReference/m*_n4_H4096:Grid/GpuGrid.MatchesReference/pre*_n4_H4096:Grid/GpuGrid.MatchesReference/head*_n4_H4096:Grid/GpuGrid.MatchesReference/post_pre*_n4_H7168:Grid/GpuGrid.MatchesReference/pre_*_n4_H5120' > $OUT/r/grid.log 2>&1
echo "[grid rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/grid.log | head -2 | tr '\n' ' ') $(grep -c '^\[       OK' $OUT/r/grid.log) ok]"
grep -E "^\[  FAILED" $OUT/r/grid.log | head -12 | sed 's/^/[grid] /'
timeout 40 $BD/tests/test_engine --gtest_brief=1 > $OUT/r/engine.log 2>&1; echo "[engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/engine.log | tr '\n' ' ')]"
timeout 60 compute-sanitizer --tool memcheck --kernel-name kns=gemm_group --launch-count 2 $B bench --ops mixes --modes plain --H 4608 --T 4097 --reps 1 --budget-s 5 > $OUT/r/memcheck.txt 2>&1; echo "[memcheck gemm_group rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/memcheck.txt | tail -1)]"
timeout 60 compute-sanitizer --tool memcheck --kernel-name kns=finalize --launch-count 4 $B bench --ops pre --modes normal_fold --H 4608 --T 4097 --reps 1 --budget-s 5 > $OUT/r/memcheck-f.txt 2>&1; echo "[memcheck finalize rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/memcheck-f.txt | tail -1)]"
timeout 60 compute-sanitizer --tool synccheck --kernel-name kns=gemm_group --launch-count 2 $B bench --ops mixes --modes plain --H 4608 --T 4097 --reps 1 --budget-s 5 > $OUT/r/synccheck.txt 2>&1; echo "[synccheck gemm_group rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/synccheck.txt | tail -1)]"
timeout 90 compute-sanitizer --tool racecheck --kernel-name kns=gemm_group --launch-count 1 $B bench --ops mixes --modes plain --H 1536 --T 4097 --reps 1 --budget-s 5 > $OUT/r/racecheck.txt 2>&1; echo "[racecheck gemm_group rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/r/racecheck.txt | tail -1)]"
timeout 60 compute-sanitizer --tool racecheck --kernel-name kns=finalize --launch-count 2 $B bench --ops pre --modes normal_fold --H 1536 --T 4097 --reps 1 --budget-s 5 > $OUT/r/racecheck-f.txt 2>&1; echo "[racecheck finalize rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/r/racecheck-f.txt | tail -1)]"
timeout 130 $B bench --ops post_pre,pre,head,pre_broadcast,mixes --modes normal_fold,shifted_fold,learned_fold,plain --H 4096,5120,7168 --T 1024,4096,16384 --budget-s 110 --out $OUT/r/record.jsonl > $OUT/r/record.log 2>&1
echo "[record rc=$? $(grep -E 'rows measured' $OUT/r/record.log)]"; head -1 $OUT/r/record.log | sed 's/^/[record] /'; grep "^\[" $OUT/r/record.log | sed 's/(p10[^)]*)//; s/, chain.*//; s/^/[record] /'
