# Session 35, call 3 (H100 this session): the tail kernel with the largest shared-memory carveout
# (configure_overlap_tail_kernel). Calls 1-2's trace: a token's collapse started ~200 us after its
# tile was counted, i.e. after the GEMM kernel, so the tail's blocks ran only on the
# multiprocessors the GEMM left empty (4 at H = 4096). Hypothesis: a multiprocessor set to the GEMM
# kernel's 228 KB shared split takes no block of a kernel whose preferred split differs.
# Predicted: collapse start less its tile's count falls from ~200 us to ~10-60 us (the collapse
# role's ~190 slots beside the GEMM process ~45-55 tokens a us against ~70 produced); pre
# normal_fold H = 4096 T = 16384 ~474 -> ~330-400 us (H100). MHC_OVERLAP_DEFAULT_CARVEOUT=1 (probe
# build) is the A/B in the same run.
#   bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap"]; run as
#   bench/results/2026-12-05-h200-s34/next-call-overlap.sh says.
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
timeout 25 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096 --T 1024,16384 --variant pre.cuda_n4_overlap \
  --reps 3 --budget-s 10 > "$OUT/r/smoke.log" 2>&1
rc=$?
grep "^\[" "$OUT/r/smoke.log" | sed "s/^/[smoke rc=$rc] /"
if [ $rc -ne 0 ]; then echo "[smoke failed rc=$rc]"; tail -5 "$OUT/r/smoke.log"; exit 0; fi
for v in staged overlap overlap_team; do
  timeout 14 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,7168 --T 1024,4096,16384 \
    --variant pre.cuda_n4_$v --budget-s 7 2>&1 | grep "^\[" | sed "s/^/[$v] /"
  timeout 18 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,7168 --T 4096,16384 \
    --variant post_pre.cuda_n4_$v --budget-s 10 2>&1 | grep "^\[" | sed "s/^/[$v] /"
  timeout 10 "$BD/tools/mhc" bench --ops head --modes learned_fold --H 4096,7168 --T 16384 \
    --variant head.cuda_n4_$v --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[$v] /"
done
for v in staged overlap; do
  timeout 12 "$BD/tools/mhc" bench --ops pre_broadcast --modes normal_fold --H 4096,7168 --T 4096,16384 \
    --variant pre_broadcast.cuda_n4b_$v --budget-s 6 2>&1 | grep "^\[" | sed "s/^/[$v] /"
done
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_overlap,cuda_n4_overlap_team,cuda_n4b_staged,cuda_n4b_overlap
run_t ofam 90 'Modes/GpuFamily.*/pre_computed*:Modes/GpuFamily.*/post_pre_normal*:Modes/GpuFamily.*/pre_broadcast_computed*'
export MHC_TEST_VARIANTS=cuda_n4_overlap,cuda_n4b_overlap
san_t racecheck 45 "$(grid 4096 pre_computed_norm)"
unset MHC_TEST_VARIANTS
wait
cat "$OUT/r/builds-done"
P=../build-oprobe/tools/mhc
for e in MHC_OVERLAP_DEFAULT_CARVEOUT=1 MHC_OVERLAP_FINALIZE_BLOCKS=22 MHC_OVERLAP_FINALIZE_BLOCKS=33 MHC_OVERLAP_FINALIZE_BLOCKS=44; do
  env $e timeout 12 $P bench --ops pre --modes normal_fold --H 4096,7168 --T 16384 --variant pre.cuda_n4_overlap \
    --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[probe $e] /"
done
for v in overlap overlap_team; do
  for H in 4096 7168; do
    env MHC_OVERLAP_TRACE=1 timeout 12 $P bench --ops pre --modes normal_fold --H $H --T 16384 --variant pre.cuda_n4_$v \
      --reps 2 --budget-s 3 2>&1 | grep "^\[" | sed "s/^/[probe $v trace] /"
  done
done
