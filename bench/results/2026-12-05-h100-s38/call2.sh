# Prepared in session 36 (not run): a call for issue #15 (decode), session 33's decode parts of
# bench/results/2026-12-05-h200-s33/next-call.sh without its gemm_rb parts (moot since session 35),
# then the device_session `probe` step (decode_chunk_kernel stopped after each of its parts,
# -DMHC_DECODE_PROBE, at T = 1 and 16: where a decode call's time goes, last measured in session 8).
# Invocation (about 8 minutes):
#   bash scripts/snap.sh .snap HEAD bench/results/2026-12-05-h200-s33/decode-extra-blocks.patch;
#   bash scripts/snap.sh .snap2 HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap", ".snap2"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 560 bash scripts/device_session.sh prefill probe > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 595)
# Predicted (session 33): the rows at T = 128, H = 5120 / 7168 (where 8 / 16 blocks served a second
# token) lose one token's phase-2 chain, ~2-3 us; T <= 112 unchanged (the same launch as base).
(build_tree .snap2 base) &
# 1. decode_chunk_kernel with phase-2-only blocks: its bits (the fused plan cuda_n4 serves T > 128)
export MHC_TEST_VARIANTS=cuda_n4_decode_chunk,cuda_n4
run_t xgrid 120 "$(grid_filter "5120 7168" pre_computed_norm post_pre_normal_norm post_pre_shifted_norm head_learned_norm)"
run_t xfam 120 'Modes/GpuFamily.*/post_pre_normal*:Modes/GpuFamily.*/pre_computed*:Modes/GpuFamily.*/head_learned*'
unset MHC_TEST_VARIANTS
# 2. its rows against main (base), one round each
wait
cat "$OUT/r/builds-done"
for tree in this base; do
  x="$BD/tools/mhc"; [ $tree = base ] && x=../build-base/tools/mhc
  for op in "post_pre normal_fold" "pre normal_fold" "head learned_fold"; do
    set -- $op
    timeout 20 $x bench --ops $1 --modes $2 --H 5120,7168 --T 64,112,120,128 --variant $1.cuda_n4_decode_chunk \
      --budget-s 6 2>&1 | grep "^\[" | sed "s/^/[$tree] /"
  done
done
timeout 15 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold --H 5120,7168 --T 112,128 \
  --variant post_pre.cuda_n4 --budget-s 6 2>&1 | grep "^\[" | sed "s/^/[fused] /"
