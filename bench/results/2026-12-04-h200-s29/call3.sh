# Session 29 call 3 (call 2 again after its fix: warp_partial_pre ran its first shuffle under a lane condition, so the pre was wrong and every test of the form failed): collapse_stream_kernel forming the fresh pre from the GEMM stage's partials
# (warp 0: the canonical group sums and mixes_pre), with finalize_kernel launched before it only for
# the other mixes and waited for at the collapse's end (none for the learned head), so the collapse
# waits neither for finalize's Sinkhorn chains nor for its launch. This tree (.snap, call3-ppre.patch):
# the form at every slice; base (.snap2, call3-base.patch): the same code with the form off. Both
# take post_pre normal from T = 768 at H > 4096 (call 1 (3)).
# Predicted: pre / post_pre normal_fold / head learned_fold -3 to -6 us at T = 1024-2048 (finalize's
# Sinkhorn chain ~2.5 us and its launch off the path; the collapse +~0.3 us a block for the pre's
# loads and sums), level to +10 us at T = 16384 (collapse blocks ~5% longer against finalize's
# 10.7 us).
B=$BD/tools/mhc
build_tree .snap2 base &
run_t fam 220 'Modes/GpuFamily.*/post_pre_normal*:Modes/GpuFamily.*/pre_computed*:Modes/GpuFamily.*/head_learned*:Modes/GpuFamily.*/pre_broadcast_computed*:Modes/GpuBatch.*'
run_t grids 150 'Grid/GpuGrid.MatchesReference/*n4_H4096:Grid/GpuGrid.MatchesReference/*n4_H7168'
wait
cat $OUT/r/builds-done
ab_rows 2 "this base" 60 --ops pre,post_pre,head --modes normal_fold,learned_fold --H 4096,7168 --T 1024,2048,4096,16384 --budget-s 40
ab_rows 1 "this base" 30 --ops pre,post_pre,head --modes normal_fold,learned_fold --H 5120 --T 768,1024,16384 --budget-s 20
san_t memcheck 60 'Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H4096:Grid/GpuGrid.MatchesReference/head_learned_norm_n4_H7168'
san_t racecheck 60 'Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H4096'
san_t synccheck 60 'Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H4096'
