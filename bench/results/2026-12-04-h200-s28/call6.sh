# Session 28 call 6: finalize_kernel's round-batched form only where a slice's chunk partials
# have more than 4 rounds (H > 4096; call 5: a gain at H = 7168, level or slower at 4096). H = 5120
# (5 rounds) was not measured in call 5: this tree (.snap) against main (.snap2), one round each,
# H = 4096 / 5120 / 7168 (4096 should now be level with main).
B=$BD/tools/mhc
build_tree .snap2 main
cat $OUT/r/builds-done
for tree in main rule main2 rule2; do
  X=$B; case $tree in main*) X=../build-main/tools/mhc ;; esac
  timeout 30 $X bench --ops mixes,pre,post_pre --modes plain,normal_fold --H 4096,5120,7168 --T 1024,2048 --budget-s 12 2>&1 | grep "^\[" | sed "s/^/[$tree] /"
done
