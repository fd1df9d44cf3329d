# Session 35, call 2: session 34's next-call-overlap-2.sh without its second round of rows.
# Prepared in session 34 (not run). Call 2 of 2 for the overlap rows, right after
# next-call-overlap.sh on the warm machine (the same .snap, the same invocation; the build is then
# incremental). About 8 minutes.
# 1. GpuGraph and GpuDeterminism (the counters back at 0 after every call, eager and replayed),
#    GpuBatch's T = 600 in three 256-token slices against tokens alone (the counters across
#    slices), memcheck and synccheck over H = 4096 grid cases of the overlap rows.
# 2. The rows' second round (staged against overlap against overlap_team, as call 1).
# 3. The diagnostics build (-DMHC_GEMM_PROBE, built beside 1 and 2): the tail kernel's
#    finalize-role blocks 16 / 33 / 66 / 132, the overlapped GEMM in 8 warps, the collapse role's
#    loads with the streaming hint, and MHC_NO_PDL=1 (the two kernels one after another: what the
#    overlap itself buys), on pre normal_fold at H = 4096 / 7168, T = 16384; then one call's
#    timeline for each form (MHC_OVERLAP_TRACE=1: how long after a tile is counted its pre is
#    stored and its tokens' collapses start, and how long they take).
grid() {
  local f="" m H hs=$1; shift
  for m in "$@"; do for H in $hs; do f="$f:Grid/GpuGrid.MatchesReference/${m}_n4_H$H"; done; done
  echo "${f#:}"
}
(cmake -S . -B ../build-oprobe -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
   -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DMHC_GEMM_PROBE -DMHC_BUILD_TESTS=OFF \
   -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$OUT/r/oprobe-configure.log" 2>&1 &&
 cmake --build ../build-oprobe --target mhc_cli > "$OUT/r/oprobe-build.log" 2>&1
 echo "[oprobe build rc=$?]" >> "$OUT/r/builds-done") &
# 1. slices, sanitizers
export MHC_TEST_VARIANTS=cuda_n4_overlap,cuda_n4_overlap_team,cuda_n4b_overlap
run_t ograph 80 'Modes/GpuGraph.*/pre_computed*:Modes/GpuGraph.*/post_pre_*:Modes/GpuGraph.*/head_learned*:Modes/GpuGraph.*/pre_broadcast_computed*:Modes/GpuDeterminism.*/pre_computed*:Modes/GpuDeterminism.*/post_pre_normal*:Modes/GpuDeterminism.*/mixes*'
run_t obatch 70 'Modes/GpuBatch.TokenAloneAndInSliceEqualBatch/pre_computed*:Modes/GpuBatch.TokenAloneAndInSliceEqualBatch/post_pre_*:Modes/GpuBatch.TokenAloneAndInSliceEqualBatch/pre_broadcast_computed*'
san_t memcheck 70 "$(grid 4096 pre_computed_norm post_pre_normal_norm head_learned_norm pre_broadcast_computed)"
san_t synccheck 50 "$(grid 4096 pre_computed_norm post_pre_normal_norm)"
unset MHC_TEST_VARIANTS
# 3. the diagnostics build's knobs
wait
cat "$OUT/r/builds-done"
P=../build-oprobe/tools/mhc
for e in MHC_OVERLAP_FINALIZE_BLOCKS=16 MHC_OVERLAP_FINALIZE_BLOCKS=33 MHC_OVERLAP_FINALIZE_BLOCKS=66 \
         MHC_OVERLAP_FINALIZE_BLOCKS=132 MHC_OVERLAP_GEMM_WARPS=8 MHC_OVERLAP_COLLAPSE_CS=1 MHC_NO_PDL=1; do
  env $e timeout 15 $P bench --ops pre --modes normal_fold --H 4096,7168 --T 16384 --variant pre.cuda_n4_overlap \
    --budget-s 5 2>&1 | grep "^\[" | sed "s/^/[probe $e] /"
done
for v in overlap overlap_team; do  # the timeline of one call (overlap_tail_kernel.cu, dump_trace)
  for H in 4096 7168; do
    env MHC_OVERLAP_TRACE=1 timeout 15 $P bench --ops pre --modes normal_fold --H $H --T 16384 --variant pre.cuda_n4_$v \
      --reps 2 --budget-s 3 2>&1 | grep "^\[" | sed "s/^/[probe $v trace] /"
  done
done
env MHC_NO_PDL=1 timeout 15 $P bench --ops pre --modes normal_fold --H 4096,7168 --T 16384 --variant pre.cuda_n4_overlap_team \
  --budget-s 5 2>&1 | grep "^\[" | sed "s/^/[probe team MHC_NO_PDL=1] /"
env MHC_NO_PDL=1 timeout 15 $P bench --ops pre --modes normal_fold --H 4096,7168 --T 16384 --variant pre.cuda_n4_staged \
  --budget-s 5 2>&1 | grep "^\[" | sed "s/^/[probe staged MHC_NO_PDL=1] /"
