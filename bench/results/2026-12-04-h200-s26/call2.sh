# Session 26 call 2: session 25's two prepared patches (next-s25-narrow.patch, next-s25-post2.patch), applied
# with patch -p1 in .snap (call 1 ran `git apply` inside .snap, which git applies relative to the
# enclosing repository's root and so silently skipped: its "new" tree was main).
B=$BD/tools/mhc
( build_tree .snap2 main ) &
run_t family 120 'Modes/GpuFamily.*/post_pre*:Modes/GpuFamily.*/post:Modes/GpuFamily.*/post_broadcast'
run_t det 120 'Modes/GpuDeterminism.*/post*:Modes/GpuFusion.*/post_pre*:Modes/GpuBatch.*/post*:Modes/GpuExactSums.*/post*:Grid/GpuGrid.MatchesReference/post_n4_H*:Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
wait; cat $OUT/r/builds-done
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
ab() {
  bin=$([ $1 = new ] && echo $B || echo ../build-main/tools/mhc)
  timeout 40 $bin bench --ops post_pre --modes shifted_fold,shifted --H 4096,5120,7168 --T $2 --budget-s 12 2>&1 | r | sed "s/^/[ab$3 $1] /"
  timeout 25 $bin bench --ops post --modes full --H 4096,5120,7168 --T $2 --budget-s 7 2>&1 | r | sed "s/^/[ab$3 $1] /"
  timeout 15 $bin bench --ops post_pre --modes normal_fold --H 4096,5120,7168 --T 16384 --budget-s 5 2>&1 | r | sed "s/^/[ab$3 $1] /"
}
ab main 4096,16384 1; ab new 4096,16384 1; ab new 16384 2; ab main 16384 2
for tool in memcheck racecheck synccheck; do
  timeout 45 compute-sanitizer --tool $tool --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuFusion.*/post_pre_shifted_norm:Modes/GpuFusion.*/post_pre_normal_norm' --gtest_brief=1 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1)]"
done
