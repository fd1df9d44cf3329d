# Prepared in session 34 (no device lent that session; not run). The prefill step's command list
# for the overlap rows (`*.cuda_n4_overlap`, on main since 5455390, explicit, not dispatched):
#   bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap"];
#   run: cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' bash scripts/device_session.sh prefill
# About 9-10 minutes (the build ~3, a diagnostics build beside the tests); if the call's limit
# nears, section 3 is the one to drop.
# 0. A smoke row with a 25 s limit: if the overlapped plan hangs (its tail kernel's blocks poll the
#    tile counters and the mailbox), the list stops there and says so, instead of spending the call
#    on timeouts.
# 1. Bits: GpuFamily (the overlap rows against staged, every mode with a mixes stage, T across the
#    thresholds and the slices), the grid at H = 4096 / 5120 / 7168 / 16384 against the
#    reference, GpuGraph and GpuDeterminism (the tile counters back at 0 after every call, eager and
#    replayed), GpuBatch's T = 600 in three 256-token slices against tokens alone, memcheck and
#    synccheck over a small subset.
# 2. Rows, staged against overlap in two rounds: pre, head, post_pre (both modes), mixes,
#    pre_broadcast (cuda_n4b_staged against cuda_n4b_overlap).
# 3. The diagnostics build (-DMHC_GEMM_PROBE): the tail kernel's finalize-role blocks 16 / 33 / 66 /
#    132, the overlapped GEMM in 8 warps, the collapse role's loads with the streaming hint (as
#    outside the overlap rows), and MHC_NO_PDL=1 (the two kernels one after another, so what the
#    overlap itself buys).
# Predicted (docs/performance.md, "The overlap rows"): pre normal_fold at H = 4096, T = 16384
# ~330 -> 200-240 us (the collapse's second read of the streams from L2: 10 H bytes a token from
# DRAM against 18 H), post_pre normal_fold ~640 -> ~520-560 us; mixes level or a few us slower
# (finalize hidden, the GEMM in 4 warps ~5% slower). If the tail kernel's blocks find no room
# beside the GEMM blocks, the two run one after another and MHC_NO_PDL=1 lands within a few us of
# the default.
grid() {  # the n4 grid cases of the modes given, at the H given
  local f="" m H hs=$1; shift
  for m in "$@"; do for H in $hs; do f="$f:Grid/GpuGrid.MatchesReference/${m}_n4_H$H"; done; done
  echo "${f#:}"
}
(cmake -S . -B ../build-oprobe -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
   -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DMHC_GEMM_PROBE -DMHC_BUILD_TESTS=OFF \
   -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$OUT/r/oprobe-configure.log" 2>&1 &&
 cmake --build ../build-oprobe --target mhc_cli > "$OUT/r/oprobe-build.log" 2>&1
 echo "[oprobe build rc=$?]" >> "$OUT/r/builds-done") &
# 0. smoke
timeout 25 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096 --T 1024,16384 --variant pre.cuda_n4_overlap \
  --reps 3 --budget-s 10 > "$OUT/r/smoke.log" 2>&1
rc=$?
grep "^\[" "$OUT/r/smoke.log" | sed "s/^/[smoke rc=$rc] /"
if [ $rc -ne 0 ]; then
  echo "[smoke failed rc=$rc: the overlap rows hang or fail; nothing else run]"
  tail -5 "$OUT/r/smoke.log"
  wait
  exit 0
fi
# 1. bits
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_overlap,cuda_n4b_staged,cuda_n4b_overlap
run_t ofam 200 'Modes/GpuFamily.*/mixes*:Modes/GpuFamily.*/pre_*:Modes/GpuFamily.*/post_pre_*:Modes/GpuFamily.*/head_learned*'
export MHC_TEST_VARIANTS=cuda_n4_overlap,cuda_n4b_overlap
run_t ogrid 150 "$(grid "4096 5120 7168 16384" mixes pre_computed_norm post_pre_normal_norm post_pre_shifted_norm head_learned_norm pre_broadcast_computed pre_broadcast_computed_norm)"
run_t ograph 120 'Modes/GpuGraph.*/pre_computed*:Modes/GpuGraph.*/post_pre_*:Modes/GpuGraph.*/head_learned*:Modes/GpuGraph.*/pre_broadcast_computed*:Modes/GpuDeterminism.*/pre_computed*:Modes/GpuDeterminism.*/post_pre_normal*:Modes/GpuDeterminism.*/mixes*'
run_t obatch 120 'Modes/GpuBatch.TokenAloneAndInSliceEqualBatch/pre_computed*:Modes/GpuBatch.TokenAloneAndInSliceEqualBatch/post_pre_*:Modes/GpuBatch.TokenAloneAndInSliceEqualBatch/pre_broadcast_computed*'
san_t memcheck 90 "$(grid 4096 pre_computed_norm post_pre_normal_norm head_learned_norm pre_broadcast_computed)"
san_t synccheck 90 "$(grid 4096 pre_computed_norm post_pre_normal_norm)"
unset MHC_TEST_VARIANTS
# 2. rows
for round in 1 2; do
  for v in staged overlap; do
    timeout 40 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,5120,7168 --T 1024,4096,16384 \
      --variant pre.cuda_n4_$v --budget-s 25 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 30 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,7168 --T 4096,16384 \
      --variant post_pre.cuda_n4_$v --budget-s 18 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 20 "$BD/tools/mhc" bench --ops head --modes learned_fold --H 4096,7168 --T 16384 \
      --variant head.cuda_n4_$v --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 20 "$BD/tools/mhc" bench --ops mixes --modes plain --H 4096,7168 --T 4096,16384 \
      --variant mixes.cuda_n4_$v --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 20 "$BD/tools/mhc" bench --ops pre_broadcast --modes normal_fold --H 4096,7168 --T 4096,16384 \
      --variant pre_broadcast.cuda_n4b_$v --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
  done
done
# 3. the diagnostics build's knobs
wait
cat "$OUT/r/builds-done"
P=../build-oprobe/tools/mhc
for e in MHC_OVERLAP_FINALIZE_BLOCKS=16 MHC_OVERLAP_FINALIZE_BLOCKS=33 MHC_OVERLAP_FINALIZE_BLOCKS=66 \
         MHC_OVERLAP_FINALIZE_BLOCKS=132 MHC_OVERLAP_GEMM_WARPS=8 MHC_OVERLAP_COLLAPSE_CS=1 MHC_NO_PDL=1; do
  env $e timeout 20 $P bench --ops pre --modes normal_fold --H 4096,7168 --T 16384 --variant pre.cuda_n4_overlap \
    --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[probe $e] /"
done
env MHC_NO_PDL=1 timeout 20 $P bench --ops pre --modes normal_fold --H 4096,7168 --T 16384 --variant pre.cuda_n4_staged \
  --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[probe staged MHC_NO_PDL=1] /"
