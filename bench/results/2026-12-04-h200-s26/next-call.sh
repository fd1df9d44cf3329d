# Prepared for the next session's first device call (not run). .snap = main with
# next-s26-ownfold.patch applied INSIDE .snap: `(cd .snap && patch -p1 < ../bench/results/2026-12-04-h200-s26/next-s26-ownfold.patch)`
# then `diff -rq src .snap/src` must list post_collapse_kernel.cu (session 26's call 1 used `git apply`
# inside .snap, which applied nothing); .snap2 = main. Run as session 26's calls
# (scripts/device_session.sh prefill with this as call.sh).
# The patch: post_collapse_kernel's 256-thread shape folds from registers (thread c's vectors are
# chain c's: no collapsed rows in shared memory, the fold one token behind instead of two), so two
# blocks a multiprocessor fit up to H = 5120 (2 stages + the weight: 112.8 KB a block), with three
# vectors a thread there. SASS fast path (bench/probes/sass_loop_count.py): <256, 2> 1623 a
# token-thread (811 a vector, against 892 with the rows), <256, 3> 2360; per token a multiprocessor
# at H = 5120 ~15.9 K warp instructions against ~19.8 K for the 512-thread block; 128 registers,
# no spills in the kernels (<512, *> PTX unchanged).
# Predictions, shifted_fold at T = 16384: H = 5120 757 -> 710-730 us; H = 4096 -5 to -10 us; H = 2048
# level or a few us; 7168 and every no-fold row unchanged.
B=$BD/tools/mhc
( build_tree .snap2 main ) &
run_t family 150 'Modes/GpuFamily.*/post_pre_shifted*:Modes/GpuFamily.*/post_pre_normal_norm'
run_t det 150 'Modes/GpuDeterminism.*/post_pre*:Modes/GpuFusion.*/post_pre_shifted*:Modes/GpuBatch.*/post_pre*:Modes/GpuNanInf.*/post_pre_shifted*:Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
timeout 60 $BD/tests/test_engine --gtest_brief=1 > $OUT/r/t-engine.log 2>&1; echo "[tests engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t-engine.log | head -2 | tr '\n' ' ')]"
wait; cat $OUT/r/builds-done
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
for t in main new new main; do
  bin=$([ $t = new ] && echo $B || echo ../build-main/tools/mhc)
  timeout 40 $bin bench --ops post_pre --modes shifted_fold --H 2048,4096,5120,7168 --T 4096,16384 --budget-s 12 2>&1 | r | sed "s/^/[ab $t] /"
  timeout 20 $bin bench --ops post_pre --modes shifted --H 4096,5120 --T 16384 --budget-s 5 2>&1 | r | sed "s/^/[ab $t] /"
done
SF='Modes/GpuNanInf.*/post_pre_shifted_norm:Modes/GpuFusion.*/post_pre_shifted_norm'
san_t memcheck 60 "$SF"; san_t synccheck 60 "$SF"; san_t racecheck 120 "$SF"
