# Session 35, call 4: session 33's next-call.sh, trimmed (no Nsight Compute; smaller bench budgets;
# most important first, since the call may be cut at its limit), plus the overlap rows' block
# placement (the diagnostics build's trace: which multiprocessors ran the tail kernel's blocks
# while the GEMM kernel ran) and the tail's carveout A/B (MHC_OVERLAP_CARVEOUT).
#   bash scripts/snap.sh .snap HEAD bench/results/2026-12-05-h200-s33/decode-extra-blocks.patch;
#   bash scripts/snap.sh .snap2 HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap", ".snap2"];
#   run as bench/results/2026-12-05-h200-s34/next-call-overlap.sh says.
# Predicted (session 30 / 33): gemm_rb_kernel's mixes rows -20 to -30 us at H = 4096, -35 to -50 at
# 7168 (T = 16384), post_pre / pre normal_fold by about as much; decode_chunk_kernel's
# phase-2-only blocks: T = 128 at H = 5120 / 7168 ~2-3 us faster, T <= 112 unchanged.
# Overlap (hypothesis from calls 1-3): at the GEMM's midpoint few or no collapse-role blocks run,
# the finalize role's blocks one a multiprocessor at most.
(build_tree .snap2 base) &
(cmake -S . -B ../build-oprobe -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
   -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DMHC_GEMM_PROBE -DMHC_BUILD_TESTS=OFF \
   -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$OUT/r/oprobe-configure.log" 2>&1 &&
 cmake --build ../build-oprobe --target mhc_cli > "$OUT/r/oprobe-build.log" 2>&1
 echo "[oprobe build rc=$?]" >> "$OUT/r/builds-done") &
grid() {
  local f="" m H hs=$1; shift
  for m in "$@"; do for H in $hs; do f="$f:Grid/GpuGrid.MatchesReference/${m}_n4_H$H"; done; done
  echo "${f#:}"
}
rows() {  # rows ROUND: staged against staged_rb
  for v in staged staged_rb; do
    timeout 25 "$BD/tools/mhc" bench --ops mixes --modes plain --H 4096,7168 --T 1024,4096,16384 \
      --variant mixes.cuda_n4_$v --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[$v $1] /"
    timeout 20 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold --H 4096,7168 --T 4096,16384 \
      --variant post_pre.cuda_n4_$v --budget-s 7 2>&1 | grep "^\[" | sed "s/^/[$v $1] /"
    timeout 12 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,7168 --T 16384 \
      --variant pre.cuda_n4_$v --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[$v $1] /"
  done
}
drows() {  # drows ROUND: decode_chunk with phase-2-only blocks (this) against base
  for tree in this base; do
    x="$BD/tools/mhc"; [ $tree = base ] && x=../build-base/tools/mhc
    timeout 15 $x bench --ops post_pre --modes normal_fold --H 5120,7168 --T 64,112,128 \
      --variant post_pre.cuda_n4_decode_chunk --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[$tree $1] /"
    timeout 10 $x bench --ops pre --modes normal_fold --H 5120,7168 --T 112,128 \
      --variant pre.cuda_n4_decode_chunk --budget-s 3 2>&1 | grep "^\[" | sed "s/^/[$tree $1] /"
  done
}
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_staged_rb,cuda_n4_overlap
run_t rbfam 100 'Modes/GpuFamily.*/mixes:Modes/GpuFamily.*/pre_computed_norm:Modes/GpuFamily.*/post_pre_normal*'
unset MHC_TEST_VARIANTS
rows 1
wait
cat "$OUT/r/builds-done"
P=../build-oprobe/tools/mhc
for c in "" 0 50 86 100; do
  env ${c:+MHC_OVERLAP_CARVEOUT=$c} MHC_OVERLAP_TRACE=1 timeout 12 $P bench --ops pre --modes normal_fold --H 4096 \
    --T 16384 --variant pre.cuda_n4_overlap --reps 2 --budget-s 3 2>&1 | grep "^\[" | sed "s/^/[probe carveout=${c:-default}] /"
done
env MHC_OVERLAP_TRACE=1 MHC_OVERLAP_FINALIZE_BLOCKS=16 timeout 12 $P bench --ops pre --modes normal_fold --H 4096 \
  --T 16384 --variant pre.cuda_n4_overlap --reps 2 --budget-s 3 2>&1 | grep "^\[" | sed "s/^/[probe fin=16] /"
export MHC_TEST_VARIANTS=cuda_n4_decode_chunk,cuda_n4
run_t xgrid 70 "$(grid "5120 7168" pre_computed_norm post_pre_normal_norm post_pre_shifted_norm)"
run_t xfam 60 'Modes/GpuFamily.*/post_pre_normal_norm'
unset MHC_TEST_VARIANTS
drows 1
# The overlap rows at mid T (calls 1 and 3: pre normal_fold T = 1024 33.3-33.7 us against staged's
# 39.6-39.7 at H = 4096, 43.2 against 47.5 at 5120): one launch fewer than staged's chain.
for v in staged overlap; do
  timeout 14 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,5120,7168 --T 256,512,1024,2048 \
    --variant pre.cuda_n4_$v --budget-s 6 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
  timeout 14 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,7168 --T 512,1024,2048 \
    --variant post_pre.cuda_n4_$v --budget-s 6 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
  timeout 8 "$BD/tools/mhc" bench --ops head --modes learned_fold --H 4096,7168 --T 1024,2048 \
    --variant head.cuda_n4_$v --budget-s 3 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
  timeout 8 "$BD/tools/mhc" bench --ops pre_broadcast --modes normal_fold --H 4096,7168 --T 1024,2048 \
    --variant pre_broadcast.cuda_n4b_$v --budget-s 3 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
done
export MHC_TEST_VARIANTS=cuda_n4_staged_rb
run_t rbgrid 60 "$(grid "4096 7168 16384" mixes pre_computed_norm post_pre_normal_norm)"
unset MHC_TEST_VARIANTS
rows 2
drows 2
