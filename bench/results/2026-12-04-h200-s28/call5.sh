# Session 28 call 5: finalize_kernel's round-batched form (chunk partials, up to 2 x SMs x 10
# tokens a slice: one element a thread, 8 rounds of loads in flight at once, where the form
# before made one dependent L2 round trip a round: 4 at H = 4096, 7 at H = 7168). Prediction:
# finalize 1.5-4 us faster, so mixes / pre / post_pre at T = 512-2048 that much faster; the
# same bits (same adds in the same order). This tree (.snap) against main (.snap2), two rounds;
# the family and batch tests of the ops with a mixes stage, the n4 grid at H = 4096, and the
# three sanitizers over the mixes grid at H = 4096 (every T on both sides of the new form's limit).
B=$BD/tools/mhc
build_tree .snap2 main &
run_t fam 150 'Modes/GpuFamily.*/mixes:Modes/GpuFamily.*/pre_computed*:Modes/GpuFamily.*/post_pre_normal*:Modes/GpuFamily.*/head_learned*:Modes/GpuBatch.*'
run_t grid 60 'Grid/GpuGrid.MatchesReference/*n4_H4096'
wait
cat $OUT/r/builds-done
for round in 1 2; do
  for tree in main rounds; do
    X=$B; [ $tree = main ] && X=../build-main/tools/mhc
    timeout 30 $X bench --ops mixes,pre,post_pre --modes plain,normal_fold --H 4096,7168 --T 512,1024,2048 --budget-s 14 2>&1 | grep "^\[" | sed "s/^/[$tree $round] /"
  done
done
san_t memcheck 50 'Grid/GpuGrid.MatchesReference/mixes_n4_H4096'
san_t racecheck 50 'Grid/GpuGrid.MatchesReference/mixes_n4_H4096'
san_t synccheck 40 'Grid/GpuGrid.MatchesReference/mixes_n4_H4096'
