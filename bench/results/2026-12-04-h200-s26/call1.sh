# Prepared for the next session's first device call (not run): .snap = main with both prepared
# patches applied (git apply next-s25-narrow.patch next-s25-post2.patch), .snap2 = main; run as
# session 25's calls were (scripts/device_session.sh prefill with this as call.sh). The two touch
# different rows: post_collapse_kernel (the shifted post_pre) and post_bulk_kernel (post, and the
# normal post_pre's post stage).
# Predictions (T = 16384): shifted_fold at H = 4096 564 -> 520-540 us (two 256-thread blocks a
# multiprocessor: 892 SASS instructions a vector on the loop's fast path against 1051), H = 5120
# 732 -> 700-720 (320 threads, two vectors each), H = 7168 unchanged; post -5 to -10 us at every H (1024-column tiles at two vectors a thread: 536
# against 625 a vector, the same 80 KB in flight), normal_fold post_pre the same few us.
B=$BD/tools/mhc
( build_tree .snap2 main ) &
run_t family 120 'Modes/GpuFamily.*/post_pre*:Modes/GpuFamily.*/post:Modes/GpuFamily.*/post_broadcast'
run_t det 120 'Modes/GpuDeterminism.*/post*:Modes/GpuFusion.*/post_pre*:Modes/GpuBatch.*/post*:Modes/GpuExactSums.*/post*:Grid/GpuGrid.MatchesReference/post_n4_H*:Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
wait; cat $OUT/r/builds-done
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
for round in 1 2; do
for t in main new; do
  bin=$([ $t = new ] && echo $B || echo ../build-main/tools/mhc)
  timeout 40 $bin bench --ops post_pre --modes shifted_fold,shifted --H 2048,4096,5120,7168 --T 1024,4096,16384 --budget-s 14 2>&1 | r | sed "s/^/[ab$round $t] /"
  timeout 25 $bin bench --ops post --modes full --H 4096,5120,7168 --T 4096,16384 --budget-s 8 2>&1 | r | sed "s/^/[ab$round $t] /"
  timeout 15 $bin bench --ops post_pre --modes normal_fold --H 4096,5120,7168 --T 16384 --budget-s 6 2>&1 | r | sed "s/^/[ab$round $t] /"
done
done
for tool in memcheck racecheck synccheck; do
  timeout 45 compute-sanitizer --tool $tool --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuFusion.*/post_pre_shifted_norm:Modes/GpuFusion.*/post_pre_normal_norm' --gtest_brief=1 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1)]"
done
