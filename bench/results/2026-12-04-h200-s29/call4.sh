# Session 29 call 4: the pre mailbox (261affc + the change committed as 92d6e56, without its comments). finalize_kernel stores each
# token's fresh pre into a workspace mailbox (poisoned between calls) before its comb's Sinkhorn
# chain; collapse_stream_kernel polls its token's pre there after issuing its loads, instead of
# waiting for finalize_kernel to complete (it waits at its end), and puts the poison back. Base: 261affc.
# Predicted: pre / post_pre normal_fold / head learned_fold -3 to -6 us at T = 1024, -4 to -8 us at
# T = 16384 (the collapse's loads and first tokens overlap finalize_kernel's Sinkhorn and tail).
B=$BD/tools/mhc
build_tree .snap2 base &
run_t fam 90 'Modes/GpuFamily.*/post_pre_normal_norm:Modes/GpuFamily.*/pre_computed_norm:Modes/GpuFamily.*/head_learned_norm:Modes/GpuFamily.*/pre_broadcast_computed_norm:Modes/GpuBatch.*/pre_computed*:Modes/GpuBatch.*/post_pre_normal*:Modes/GpuBatch.*/head_learned*'
wait
cat $OUT/r/builds-done
ab_rows 2 "this base" 30 --ops pre,post_pre,head --modes normal_fold,learned_fold --H 4096,7168 --T 1024,16384 --budget-s 15
run_t grids 40 'Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H4096:Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H7168:Grid/GpuGrid.MatchesReference/head_learned_n4_H5120:Grid/GpuGrid.MatchesReference/pre_broadcast_computed_n4_H4096'
san_t memcheck 25 'Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H4096'
san_t racecheck 35 'Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H4096'
san_t synccheck 25 'Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H4096'
