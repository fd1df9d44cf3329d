# Prepared for the next session's first device call (not run). Three trees, made here by
# scripts/snap.sh (git archive of main, the patches applied inside the folder by patch -p1, and a
# check that they changed what they name: session 26's call 1 used `git apply` inside .snap,
# which applied nothing):
#   D=bench/results/2026-12-04-h200-s26
#   bash scripts/snap.sh .snap HEAD $D/next-s26-ownfold.patch $D/next-s26-solo256.patch   (= s26-next 5d41938)
#   bash scripts/snap.sh .snap3 HEAD $D/next-s26-ownfold.patch                            (= s26-next 1845da2)
#   bash scripts/snap.sh .snap2 HEAD
#   cp $D/next-call.sh .snap/call.sh
# carry [".deps", ".snap", ".snap2", ".snap3"]; run as session 26's calls (scripts/device_session.sh
# prefill with this file as .snap/call.sh).
# ownfold: post_collapse_kernel's 256-thread shape folds from registers (thread c's vectors are
# chain c's: no collapsed rows in shared memory, the fold one token behind instead of two), so two
# blocks a multiprocessor fit up to H = 5120 (2 stages + the weight: 112.8 KB a block), three
# vectors a thread there. SASS fast path (bench/probes/sass_loop_count.py): <256, 2, 2> 1623 a
# token and thread (811 a vector, against 892 with the rows), <256, 3, 2> 2360; per token and
# multiprocessor at H = 5120 ~15.9 K warp instructions against ~19.8 K for the 512-thread block.
# solo256: with the fold, one 256-thread block a multiprocessor at H = 6144 / 7168 too (3 or 4
# vectors a thread, 170 / 199 registers, no spills, 3 stages where 512 threads had 2 at 7168):
# ~20.8 K warp instructions a token against ~25.8 K, but 8 warps a multiprocessor against 16.
# The 512-thread kernels' PTX is main's in both.
# Predictions, shifted_fold at T = 16384: ownfold H = 5120 757 -> 710-730 us, H = 4096 -5 to -10 us,
# 7168 unchanged; solo256 at 7168: unknown sign (fewer instructions and a deeper ring against half
# the warps): keep it only if it beats ownfold there in both rounds. No-fold rows unchanged.
B=$BD/tools/mhc
( build_tree .snap2 main ) &
( build_tree .snap3 ownfold ) &
run_t family 150 'Modes/GpuFamily.*/post_pre_shifted*:Modes/GpuFamily.*/post_pre_normal_norm'
run_t det 150 'Modes/GpuDeterminism.*/post_pre*:Modes/GpuFusion.*/post_pre_shifted*:Modes/GpuBatch.*/post_pre*:Modes/GpuNanInf.*/post_pre_shifted*:Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
timeout 60 $BD/tests/test_engine --gtest_brief=1 > $OUT/r/t-engine.log 2>&1; echo "[tests engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t-engine.log | head -2 | tr '\n' ' ')]"
wait; cat $OUT/r/builds-done
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
for t in main ownfold both both ownfold main; do
  bin=$([ $t = both ] && echo $B || echo ../build-$t/tools/mhc)
  timeout 45 $bin bench --ops post_pre --modes shifted_fold --H 2048,4096,5120,6144,7168 --T 4096,16384 --budget-s 14 2>&1 | r | sed "s/^/[ab $t] /"
done
timeout 20 $B bench --ops post_pre --modes shifted --H 4096,7168 --T 16384 --budget-s 5 2>&1 | r | sed "s/^/[both] /"
SF='Modes/GpuNanInf.*/post_pre_shifted_norm:Modes/GpuFusion.*/post_pre_shifted_norm'
san_t memcheck 45 "$SF"; san_t synccheck 45 "$SF"; san_t racecheck 100 "$SF"  # ~8-9 min in all
