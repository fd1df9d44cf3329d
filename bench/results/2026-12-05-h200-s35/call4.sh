# Session 35, call 4: session 33's next-call.sh, trimmed to one call of ~8 minutes (no Nsight
# Compute; smaller bench budgets), plus the overlap rows' GpuFamily case that failed for the team
# form in call 3 (post_pre normal), now on the overlap form alone.
#   bash scripts/snap.sh .snap HEAD bench/results/2026-12-05-h200-s33/decode-extra-blocks.patch;
#   bash scripts/snap.sh .snap2 HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap", ".snap2"];
#   run as bench/results/2026-12-05-h200-s34/next-call-overlap.sh says.
# Predicted (session 30 / 33): gemm_rb_kernel's mixes rows -20 to -30 us at H = 4096, -35 to -50 at
# 7168 (T = 16384), post_pre / pre normal_fold by about as much; decode_chunk_kernel's
# phase-2-only blocks: T = 128 at H = 5120 / 7168 ~2-3 us faster, T <= 112 unchanged.
(build_tree .snap2 base) &
grid() {
  local f="" m H hs=$1; shift
  for m in "$@"; do for H in $hs; do f="$f:Grid/GpuGrid.MatchesReference/${m}_n4_H$H"; done; done
  echo "${f#:}"
}
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_staged_rb,cuda_n4_overlap
run_t rbfam 110 'Modes/GpuFamily.*/mixes:Modes/GpuFamily.*/pre_computed_norm:Modes/GpuFamily.*/post_pre_normal*'
export MHC_TEST_VARIANTS=cuda_n4_staged_rb
run_t rbgrid 70 "$(grid "4096 7168 16384" mixes pre_computed_norm post_pre_normal_norm)"
export MHC_TEST_VARIANTS=cuda_n4_decode_chunk,cuda_n4
run_t xgrid 80 "$(grid "5120 7168" pre_computed_norm post_pre_normal_norm post_pre_shifted_norm)"
run_t xfam 80 'Modes/GpuFamily.*/post_pre_normal_norm:Modes/GpuFamily.*/head_learned_norm'
unset MHC_TEST_VARIANTS
for round in 1 2; do
  for v in staged staged_rb; do
    timeout 25 "$BD/tools/mhc" bench --ops mixes --modes plain --H 4096,7168 --T 1024,4096,16384 \
      --variant mixes.cuda_n4_$v --budget-s 10 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 20 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold --H 4096,7168 --T 4096,16384 \
      --variant post_pre.cuda_n4_$v --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 12 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,7168 --T 16384 \
      --variant pre.cuda_n4_$v --budget-s 5 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
  done
done
wait
cat $OUT/r/builds-done
for round in 1 2; do
  for tree in this base; do
    x="$BD/tools/mhc"; [ $tree = base ] && x=../build-base/tools/mhc
    for op in "post_pre normal_fold" "pre normal_fold"; do
      set -- $op
      timeout 15 $x bench --ops $1 --modes $2 --H 5120,7168 --T 64,112,128 --variant $1.cuda_n4_decode_chunk \
        --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[$tree $round] /"
    done
  done
done
timeout 12 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold --H 5120,7168 --T 112,128 \
  --variant post_pre.cuda_n4 --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[fused] /"
