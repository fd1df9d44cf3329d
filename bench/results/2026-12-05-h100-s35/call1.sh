# Prepared in session 34 (no device lent that session; not run). Call 1 of 2 for the overlap rows
# (`*.cuda_n4_overlap`, `pre_broadcast.cuda_n4b_overlap`; on main, explicit, not dispatched):
#   bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 550 bash scripts/device_session.sh prefill > /tmp/o.log 2>&1; cp /tmp/o/summary.txt $R0/;
#        cp /tmp/o.log $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 595)
# About 8 minutes (the build ~3). Call 2 (next-call-overlap-2.sh) right after, on the warm machine.
# 0. A smoke row with a 25 s limit: if the plan hangs (the tail kernel's blocks poll the tile
#    counters and the mailbox), the list stops there and says so, instead of spending the call on
#    timeouts.
# 1. Bits: GpuFamily (the overlap and overlap_team rows against staged, every mode with a mixes
#    stage, T across the thresholds; the GpuFamily sweeps run many T on one workspace, so the tile
#    and ticket counters must be back at 0 after every call), the grid at H = 4096 / 5120 / 7168 /
#    16384 against the reference.
# 2. Rows, staged against overlap against overlap_team (gemm_team_kernel: a block's 4 warps on one
#    item, a quarter of the tiles in flight), one round: pre, post_pre (both modes), head, mixes;
#    pre_broadcast (cuda_n4b_staged against cuda_n4b_overlap).
# Predicted (docs/performance.md, "The overlap rows"): pre normal_fold at H = 4096, T = 16384
# ~331 -> 200-240 us (the collapse's second read of the streams from L2: 10 H bytes a token from
# DRAM against 18 H), post_pre normal_fold ~640 -> ~520-560 us; mixes level or a few us slower
# (finalize hidden, the GEMM in 4 warps ~5% slower); pre_broadcast 165 -> ~100-130 us. If the
# tail kernel's blocks find no room beside the GEMM blocks, the two run one after another and gain
# little (call 2's MHC_NO_PDL=1 row tells).
grid() {  # the n4 grid cases of the modes given, at the H given
  local f="" m H hs=$1; shift
  for m in "$@"; do for H in $hs; do f="$f:Grid/GpuGrid.MatchesReference/${m}_n4_H$H"; done; done
  echo "${f#:}"
}
# 0. smoke
timeout 25 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096 --T 1024,16384 --variant pre.cuda_n4_overlap \
  --reps 3 --budget-s 10 > "$OUT/r/smoke.log" 2>&1
rc=$?
grep "^\[" "$OUT/r/smoke.log" | sed "s/^/[smoke rc=$rc] /"
if [ $rc -ne 0 ]; then
  echo "[smoke failed rc=$rc: the overlap rows hang or fail; nothing else run]"
  tail -5 "$OUT/r/smoke.log"
  exit 0
fi
# 1. bits
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_overlap,cuda_n4_overlap_team,cuda_n4b_staged,cuda_n4b_overlap
run_t ofam 170 'Modes/GpuFamily.*/mixes*:Modes/GpuFamily.*/pre_*:Modes/GpuFamily.*/post_pre_*:Modes/GpuFamily.*/head_learned*'
export MHC_TEST_VARIANTS=cuda_n4_overlap,cuda_n4_overlap_team,cuda_n4b_overlap
run_t ogrid 90 "$(grid "4096 5120 7168 16384" mixes pre_computed_norm post_pre_normal_norm post_pre_shifted_norm head_learned_norm pre_broadcast_computed pre_broadcast_computed_norm)"
unset MHC_TEST_VARIANTS
# 2. rows (one round here, the second in call 2)
for v in staged overlap overlap_team; do
  timeout 20 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,5120,7168 --T 1024,4096,16384 \
    --variant pre.cuda_n4_$v --budget-s 10 2>&1 | grep "^\[" | sed "s/^/[$v 1] /"
  timeout 18 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,7168 --T 4096,16384 \
    --variant post_pre.cuda_n4_$v --budget-s 10 2>&1 | grep "^\[" | sed "s/^/[$v 1] /"
  timeout 10 "$BD/tools/mhc" bench --ops head --modes learned_fold --H 4096,7168 --T 16384 \
    --variant head.cuda_n4_$v --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[$v 1] /"
  timeout 10 "$BD/tools/mhc" bench --ops mixes --modes plain --H 4096,7168 --T 4096,16384 \
    --variant mixes.cuda_n4_$v --budget-s 5 2>&1 | grep "^\[" | sed "s/^/[$v 1] /"
done
for v in staged overlap; do
  timeout 12 "$BD/tools/mhc" bench --ops pre_broadcast --modes normal_fold --H 4096,7168 --T 4096,16384 \
    --variant pre_broadcast.cuda_n4b_$v --budget-s 6 2>&1 | grep "^\[" | sed "s/^/[$v 1] /"
done
