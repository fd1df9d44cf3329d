# Prepared in session 33 (no device was lent that session; not run). The prefill step's command
# list for: `bash scripts/snap.sh .snap HEAD bench/results/2026-12-05-h200-s33/decode-extra-blocks.patch;
# bash scripts/snap.sh .snap2 HEAD; cp <this file> .snap/call.sh`, carry [".deps", ".snap", ".snap2"];
# run: cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' bash scripts/device_session.sh prefill
# (.snap2, main without the patch, is built as "base" for the A/B rows). About 8 minutes.
# 1. session 30's gemm_rb_kernel (staged_rb): bits against staged and the reference, Nsight Compute
#    of both GEMM kernels, rows in two rounds (next-call-rb.sh without its sanitizer part, which
#    next-call-2.sh runs).
# 2. decode_chunk_kernel's phase-2-only blocks (the patch): bits (GpuFamily decode_chunk against
#    the fused plan at H = 7168, T = 97 and 128; grid cases at H = 5120 / 7168, T = 111 and 128),
#    then rows at T = 64-128 against base in two rounds, and the fused plan at H = 5120 / 7168.
# Predicted for 1 (session 30): gemm_rb_kernel 159 -> ~135 us under Nsight Compute (H = 4096,
# T = 16384); the mixes row -20 to -30 us at H = 4096, -35 to -50 at 7168; little at T = 1024.
# Predicted for 2: the rows at T = 128, H = 5120 / 7168 (where 8 / 16 blocks served a second token)
# lose one token's phase-2 chain, ~2-3 us (post_pre normal_fold at H = 5120: 17.84 -> ~15 us; at
# H = 7168 decode_chunk may then beat the fused plan's 25.1 us, which the dispatcher takes there);
# T <= 112 unchanged (no extra blocks: the same launch as base).
(build_tree .snap2 base) &
grid() {  # the n4 grid cases of the modes given, at the H given
  local f="" m H hs=$1; shift
  for m in "$@"; do for H in $hs; do f="$f:Grid/GpuGrid.MatchesReference/${m}_n4_H$H"; done; done
  echo "${f#:}"
}
# 1. gemm_rb_kernel
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_staged_rb
run_t rbmix 60 'Modes/GpuFamily.*/mixes'
run_t rbfam 120 'Modes/GpuFamily.*/pre_*:Modes/GpuFamily.*/post_pre_*:Modes/GpuFamily.*/head_learned*'
export MHC_TEST_VARIANTS=cuda_n4_staged_rb
run_t rbgrid 120 "$(grid "4096 5120 7168 16384" mixes pre_computed_norm post_pre_normal_norm head_learned_norm)"
# 2a. decode_chunk_kernel's bits (the fused plan cuda_n4 serves T > 128 in the grid)
export MHC_TEST_VARIANTS=cuda_n4_decode_chunk,cuda_n4
run_t xgrid 150 "$(grid "5120 7168" mixes pre_computed_norm post_pre_normal_norm post_pre_shifted_norm head_learned_norm)"
run_t xfam 150 'Modes/GpuFamily.*/post_pre_normal*:Modes/GpuFamily.*/pre_computed*:Modes/GpuFamily.*/head_learned*'
unset MHC_TEST_VARIANTS
for K in gemm_rb_kernel gemm_group_kernel; do
  V=mixes.cuda_n4_staged; [ $K = gemm_rb_kernel ] && V=mixes.cuda_n4_staged_rb
  timeout 50 ncu --clock-control none -k regex:"$K" --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis \
    "$BD/tools/mhc" bench --ops mixes --modes plain --H 4096 --T 16384 --reps 2 --budget-s 15 --variant $V \
    > "$OUT/r/ncu-$K.txt" 2>&1
  echo "[ncu $K rc=$?]"
  grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Mem Pipes Busy|Max Bandwidth" \
    "$OUT/r/ncu-$K.txt" | sed "s/^ */[ncu $K] /"
done
for round in 1 2; do
  for v in staged staged_rb; do
    timeout 40 "$BD/tools/mhc" bench --ops mixes --modes plain --H 4096,5120,7168 --T 1024,4096,16384 \
      --variant mixes.cuda_n4_$v --budget-s 25 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 30 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold --H 4096,7168 --T 4096,16384 \
      --variant post_pre.cuda_n4_$v --budget-s 18 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 20 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,7168 --T 16384 \
      --variant pre.cuda_n4_$v --budget-s 10 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
  done
done
# 2b. decode rows against base (the same dispatch: decode_chunk by id)
wait
cat $OUT/r/builds-done
for round in 1 2; do
  for tree in this base; do
    x="$BD/tools/mhc"; [ $tree = base ] && x=../build-base/tools/mhc
    for op in "post_pre normal_fold" "pre normal_fold" "head learned_fold" "mixes plain"; do
      set -- $op
      timeout 25 $x bench --ops $1 --modes $2 --H 5120,7168 --T 64,96,112,120,128 --variant $1.cuda_n4_decode_chunk \
        --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[$tree $round] /"
    done
  done
done
timeout 20 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold,shifted_fold --H 5120,7168 --T 96,112,128 \
  --variant post_pre.cuda_n4 --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[fused] /"
