BD=../build-s7; B=$BD/tools/mhc
timeout 120 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuGraph.*' > $OUT/r/t-graph.log 2>&1
echo "[tests graph rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t-graph.log | head -2 | tr '\n' ' ')]"
grep -E "^\[  FAILED" $OUT/r/t-graph.log | head -10 | sed "s/^/[tests graph] /"
timeout 60 $BD/tests/test_engine --gtest_brief=1 > $OUT/r/t-engine.log 2>&1
echo "[test_engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t-engine.log | head -2 | tr '\n' ' ')]"
for tool in memcheck synccheck racecheck; do
  timeout 90 compute-sanitizer --tool $tool --kernel-name kns=post_bulk --launch-count 2 $B bench --ops post --modes full --H 7168 --T 4096 --reps 1 --budget-s 5 > $OUT/r/san-$tool-post.log 2>&1
  echo "[san $tool post_bulk rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' $OUT/r/san-$tool-post.log | tail -1)]"
done
timeout 60 compute-sanitizer --tool memcheck --kernel-name kns=decode_chunk --launch-count 4 $B bench --ops post_pre --modes normal_fold --H 4096 --T 1,16 --reps 1 --budget-s 5 > $OUT/r/san-memcheck-decode.log 2>&1
echo "[san memcheck decode_chunk rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/san-memcheck-decode.log | tail -1)]"
timeout 150 $B bench --ops post,post_pre --modes full,normal_fold,shifted_fold --H 4096,5120,7168 --T 1,4,16,64,1024,4096,16384 --budget-s 130 --out $OUT/r/rows.jsonl > $OUT/r/rows.log 2>&1
head -3 $OUT/r/rows.log | sed 's/^/[rows] /'
grep "^\[" $OUT/r/rows.log | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[rows] /"
