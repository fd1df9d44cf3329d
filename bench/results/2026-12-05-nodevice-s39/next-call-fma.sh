# Prepared in session 39 (no device), for #15: only if session 38's next-call.sh shows
# sinkhorn_forms' `fma` form >= 10% faster than the shipped form with a max relative error
# <= 4e-6. This tree (.snap) is HEAD with sinkhorn-fma.patch (epilogue.cuh's product form with the
# column sums by fused multiply-adds, c scaled by p_j q_k once an iteration); .snap2 is HEAD.
# Invocation (about 6 minutes): bash scripts/snap.sh .snap HEAD
#   bench/results/2026-12-05-nodevice-s39/sinkhorn-fma.patch; bash scripts/snap.sh .snap2 HEAD;
#   cp <this file> .snap/call.sh; carry [".deps", ".snap", ".snap2"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 560 bash scripts/device_session.sh prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 595)
# Predicted: the decode rows faster by the probe's saving on one chain (~3253 cycles shipped; each
# 10% is ~0.16 us at 1.98 GHz) at T = 1 and 16, nothing at prefill; every variant still bit-equal
# (GpuFamily: they share epilogue.cuh) and within the reference's tolerance (GpuGrid).
set -u
(build_tree .snap2 base) &
# 1. Bits on the patched tree: the family (every mode), the grid's n4 cases at H = 4096 and 7168,
#    the decode suite (graph replays, two streams).
run_t family 200 'Modes/GpuFamily.*'
run_t grid 150 "$(grid_filter "4096 7168" post_pre_normal_norm post_pre_shifted_norm pre_computed_norm head_learned_norm)"
run_t decode 120 'Modes/GpuDecode.*'
wait
cat "$OUT/r/builds-done"
# 2. The decode rows, patched (this) against HEAD (base), two rounds.
ab_rows 2 "this base" 40 --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 1,4,16 --budget-s 8
ab_rows 1 "this base" 40 --ops pre --modes normal_fold --H 4096,7168 --T 1,16 --budget-s 8
ab_rows 1 "this base" 40 --ops head --modes learned_fold --H 4096,7168 --T 1,16 --budget-s 8
# 3. The V4-Flash decode step, both trees.
for tree in this base; do
  x="$BD/tools/mhc"
  [ "$tree" != this ] && x="../build-$tree/tools/mhc"
  timeout 40 "$x" run --graph-step 1,4,16 2>&1 | grep -v "^{" | sed "s/^/[step $tree] /"
done
