# Session 28 call 3: the staged plan's normal mode without finalize_kernel. collapse_stream_kernel
# forms the token's pre from the GEMM stage's partials and writes the mixes itself (its mixes
# mode): warp = an extra warp sums the partials, hands the pre over and runs the comb's Sinkhorn
# beside the collapse (this tree, .snap); tail = the collapse threads sum the partials and form
# the pre, and two threads write the mixes after the collapse (.snap3); main = the tree before
# (.snap2). Tests on the warp tree (every variant bit-equal, the n4 grids); then rows of the three
# trees, two rounds, in one process order per round.
B=$BD/tools/mhc
( build_tree .snap2 main; build_tree .snap3 tail ) &
run_t family 240 'Modes/GpuFamily.*:Modes/GpuBatch.*'
run_t grids 240 'Grid/GpuGrid.MatchesReference/*n4_H4096:Grid/GpuGrid.MatchesReference/*n4_H5120:Grid/GpuGrid.MatchesReference/*n4_H7168'
wait
cat $OUT/r/builds-done
for round in 1 2; do
  for tree in main warp tail; do
    X=$B; [ $tree = main ] && X=../build-main/tools/mhc; [ $tree = tail ] && X=../build-tail/tools/mhc
    timeout 45 $X bench --ops post_pre,pre,head --modes normal_fold,learned_fold --H 4096,5120,7168 --T 1024,4096,16384 --budget-s 28 2>&1 | grep "^\[" | sed "s/^/[$tree $round] /"
  done
done
