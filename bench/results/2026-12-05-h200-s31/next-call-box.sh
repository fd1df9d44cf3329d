# Prepared in session 31 (no device was lent that session; not run): decode_box_kernel, the
# one-launch decode variant whose chunk partials go through a poisoned workspace mailbox (no
# arrival counter, no read-back of the new residual), as the explicit *.cuda_n4_decode_box rows
# and, with the comb's Sinkhorn on 16 lanes of its warp (epilogue.cuh's sinkhorn4_lanes, the same
# bits), the *.cuda_n4_decode_box_lanes rows, against decode_chunk_kernel (what the dispatcher
# takes at T <= 16 today), and decode_chunk_kernel with the comb on 16 lanes
# (*.cuda_n4_decode_chunk_lanes, also at T = 32-128). Its tests come first,
# each under a timeout: a partial that never arrives shows as a hung poll (rc 124), and the
# sanitizers are skipped then.
# Tree: `bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh`, carry [".deps", ".snap"]; run:
#   cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' bash scripts/device_session.sh prefill
# About 8 minutes.
# Predicted (session 31's count, docs/performance-history.md): decode_chunk_kernel's handoff after
# phase 1 is three dependent L2 round trips (the block barrier and the acq_rel arrival, whose
# release waits for the block's stores; then the last block's loads of the partials and of the new
# residual); here the partials' own relaxed stores are the signal and the new residual never
# crosses blocks: post_pre normal_fold / shifted_fold -0.6 to -1.2 us at T = 1 (7.46 -> ~6.3-6.9 us
# at H = 4096) and about as much at T = 16; pre and head alike. At H = 7168 the phase-2 block's
# own post (3.5 vectors a thread) may come close to phase 1's length; if it outlasts it, the
# gain there shrinks. decode_box_lanes: the comb's chain (~185 cycles an iteration on one thread,
# ~2 us) becomes ~20 instructions an iteration with 6 shuffles on the chain: if a shuffle costs
# ~6-10 cycles, ~100-130 cycles an iteration, another -0.6 to -0.9 us at T = 1 where the chain
# is phase 2's longer branch (every H once the collapse no longer reads its row after the
# handoff); if a shuffle costs ~25 cycles, nothing (op_latency and sinkhorn_forms say which).
grid() {  # the n4 grid cases of the modes given, at the H the decode kernels take
  local f="" m H
  for m in "$@"; do for H in 4096 7168; do f="$f:Grid/GpuGrid.MatchesReference/${m}_n4_H$H"; done; done
  echo "${f#:}"
}
# 1. bits: the three new forms against decode_chunk (GpuFamily with only those four, and the
#    Sinkhorn's two forms: GpuSinkhorn), the replays and two
#    streams (GpuDecode: decode_kernel, decode_chunk_kernel and decode_box_kernel), the reference
export MHC_TEST_VARIANTS=cuda_n4_decode_chunk,cuda_n4_decode_chunk_lanes,cuda_n4_decode_box,cuda_n4_decode_box_lanes
run_t boxmix 60 'Modes/GpuFamily.*/mixes'
ok=0; grep -q '^\[  PASSED  \] 1 test' "$OUT/r/t-boxmix.log" && ok=1
# If that failed or hung (a poll that never ends), the rest of the call leaves decode_box out: the
# lanes form in decode_chunk_kernel is still measured.
NEW=cuda_n4_decode_chunk_lanes,cuda_n4_decode_box,cuda_n4_decode_box_lanes
FORMS="decode_chunk decode_chunk_lanes decode_box decode_box_lanes"
if [ $ok = 0 ]; then
  echo "[box] the first family test failed or hung (t-boxmix.log says which form): decode_box left out of the rest"
  NEW=cuda_n4_decode_chunk_lanes
  FORMS="decode_chunk decode_chunk_lanes"
fi
export MHC_TEST_VARIANTS=cuda_n4_decode_chunk,$NEW
run_t boxfam 150 'Modes/GpuFamily.*/pre_*:Modes/GpuFamily.*/post_pre_*:Modes/GpuFamily.*/head_learned*:GpuSinkhorn.*'
unset MHC_TEST_VARIANTS
[ $ok = 1 ] && run_t boxdecode 120 'Modes/GpuDecode.*'  # its variant list is fixed (decode_variants)
export MHC_TEST_VARIANTS=$NEW
run_t boxgrid 120 "$(grid mixes pre_computed_norm post_pre_normal_norm post_pre_shifted_norm head_learned_norm)"
unset MHC_TEST_VARIANTS
# the Sinkhorn's forms warm on one warp (~30 s): with the handoff shorter, the comb's chain is phase
# 2's longest branch; the new "quad" form takes the column step's 4 reciprocals from one
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I. -Iinclude -o /tmp/sk bench/probes/sinkhorn_forms.cu &&
  timeout 30 /tmp/sk | sed 's/^/[sinkhorn] /'
# 2. the rows, the four forms in the same process order, two rounds; then T = 32-128 for decode_chunk
#    with and without the lanes
for round in 1 2; do
  for v in $FORMS; do
    timeout 30 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 1,4,16 \
      --variant post_pre.cuda_n4_$v --budget-s 18 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 12 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,7168 --T 1,16 \
      --variant pre.cuda_n4_$v --budget-s 5 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 12 "$BD/tools/mhc" bench --ops head --modes learned_fold --H 4096,7168 --T 1,16 \
      --variant head.cuda_n4_$v --budget-s 5 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
  done
done
for round in 1 2; do
  for v in decode_chunk decode_chunk_lanes; do
    timeout 20 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold --H 4096,7168 --T 32,64,128 \
      --variant post_pre.cuda_n4_$v --budget-s 10 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
  done
done
# 3. the V4-Flash decode step (T = 1, 4, 16) as dispatched and with post_pre and head forced to
#    decode_box_lanes (`mhc run --graph-step --family`: each op of the step that has the variant),
#    or to decode_chunk_lanes where decode_box is out
STEP_FORM=cuda_n4_decode_box_lanes
[ $ok = 1 ] || STEP_FORM=cuda_n4_decode_chunk_lanes
for f in "" $STEP_FORM; do
  timeout 40 "$BD/tools/mhc" run --graph-step 1,4,16 ${f:+--family $f} 2>&1 | grep -v "^{" | sed "s/^/[step ${f:-dispatch}] /"
done
# 4. memcheck over the new forms (alone: T <= 16 of two grid cases), if their bits held;
#    synccheck, racecheck, and NaN/Inf, determinism, batch and graphs of the dispatched form go
#    with the dispatch change that a win would bring
if [ $ok = 1 ]; then
  export MHC_TEST_VARIANTS=$NEW
  S='Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120:Grid/GpuGrid.MatchesReference/head_learned_norm_n4_H7168'
  san_t memcheck 50 "$S"
  unset MHC_TEST_VARIANTS
fi
