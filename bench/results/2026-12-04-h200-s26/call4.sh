# Session 26 call 4: .snap = main + post_bulk_kernel's warp redo queue (post8's uncertified pairs
# redone 32 at a time, one a lane) + post_collapse_kernel's two 256-thread blocks at H <= 4096
# with the fold only (next-s25-narrow.patch less its 320 / 384-thread shapes); .snap2 = main.
# Predictions (T = 16384): post -5 to -15 us at every H (the redo's 11-19% of stall samples,
# less ~30 more fast-path instructions a vector for the failure bits); normal_fold post_pre the
# same; shifted_fold H = 4096 -15 us (call 2: 573 / 561 against 590 / 576), shifted and H > 4096
# unchanged.
B=$BD/tools/mhc
( build_tree .snap2 main ) &
run_t family 150 'Modes/GpuFamily.*/post_pre*:Modes/GpuFamily.*/post:Modes/GpuFamily.*/post_broadcast'
run_t det 150 'Modes/GpuDeterminism.*/post*:Modes/GpuFusion.*/post_pre*:Modes/GpuBatch.*/post*:Modes/GpuExactSums.*/post*:Modes/GpuNanInf.*/post*:Grid/GpuGrid.MatchesReference/post_n4_H*:Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
timeout 60 $BD/tests/test_engine --gtest_brief=1 > $OUT/r/t-engine.log 2>&1; echo "[tests engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t-engine.log | head -2 | tr '\n' ' ')]"
wait; cat $OUT/r/builds-done
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
ab() {
  bin=$([ $1 = new ] && echo $B || echo ../build-main/tools/mhc)
  timeout 30 $bin bench --ops post --modes full --H 4096,5120,7168 --T 4096,16384 --budget-s 8 2>&1 | r | sed "s/^/[ab$2 $1] /"
  timeout 30 $bin bench --ops post_pre --modes shifted_fold,shifted --H 4096,7168 --T 16384 --budget-s 7 2>&1 | r | sed "s/^/[ab$2 $1] /"
  timeout 20 $bin bench --ops post_pre --modes normal_fold --H 4096,5120,7168 --T 16384 --budget-s 6 2>&1 | r | sed "s/^/[ab$2 $1] /"
}
ab main 1; ab new 1; ab new 2; ab main 2
for tool in memcheck synccheck racecheck; do
  timeout $([ $tool = racecheck ] && echo 100 || echo 50) compute-sanitizer --tool $tool --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuExactSums.*/post:Modes/GpuNanInf.*/post_pre_shifted_norm' --gtest_brief=1 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1)]"
done
grep -E "Race reported" $OUT/r/san-racecheck.log | sed 's/.*access at//' | sort | uniq -c | head -5
