# Session 35, call 5 (what fits the budget left after three refused starts): call 4's most useful
# parts in ~4 minutes. The same trees as call 4 (.snap = HEAD + session 33's
# decode-extra-blocks.patch, which changes only T <= 128), no base tree.
# 1. The overlap rows against staged at mid T (one launch fewer than staged's chain).
# 2. gemm_rb_kernel (staged_rb) against staged, one round (predicted, session 30: mixes -20 to -30 us
#    at H = 4096, -35 to -50 at 7168, T = 16384).
# 3. Where the tail kernel's blocks ran while the GEMM kernel did (diagnostics build's trace), with
#    the driver's carveout and with 100%.
# 4. Bits: GpuFamily, staged_rb and overlap against staged, where time is left.
(cmake -S . -B ../build-oprobe -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
   -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DMHC_GEMM_PROBE -DMHC_BUILD_TESTS=OFF \
   -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$OUT/r/oprobe-configure.log" 2>&1 &&
 cmake --build ../build-oprobe --target mhc_cli > "$OUT/r/oprobe-build.log" 2>&1
 echo "[oprobe build rc=$?]" >> "$OUT/r/builds-done") &
for v in staged overlap; do
  timeout 14 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,5120,7168 --T 256,512,1024,2048 \
    --variant pre.cuda_n4_$v --budget-s 5 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
  timeout 12 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,7168 --T 512,1024,2048 \
    --variant post_pre.cuda_n4_$v --budget-s 5 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
  timeout 8 "$BD/tools/mhc" bench --ops head --modes learned_fold --H 4096,7168 --T 1024,2048 \
    --variant head.cuda_n4_$v --budget-s 2 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
done
for v in n4b_staged n4b_overlap; do
  timeout 8 "$BD/tools/mhc" bench --ops pre_broadcast --modes normal_fold --H 4096,7168 --T 1024,2048 \
    --variant pre_broadcast.cuda_$v --budget-s 2 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
done
for v in staged staged_rb; do
  timeout 16 "$BD/tools/mhc" bench --ops mixes --modes plain --H 4096,7168 --T 1024,4096,16384 \
    --variant mixes.cuda_n4_$v --budget-s 6 2>&1 | grep "^\[" | sed "s/^/[$v] /"
  timeout 14 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold --H 4096,7168 --T 4096,16384 \
    --variant post_pre.cuda_n4_$v --budget-s 5 2>&1 | grep "^\[" | sed "s/^/[$v] /"
done
wait
cat "$OUT/r/builds-done"
P=../build-oprobe/tools/mhc
for c in "" 100; do
  env ${c:+MHC_OVERLAP_CARVEOUT=$c} MHC_OVERLAP_TRACE=1 timeout 10 $P bench --ops pre --modes normal_fold --H 4096 \
    --T 16384 --variant pre.cuda_n4_overlap --reps 2 --budget-s 2 2>&1 | grep "^\[" | sed "s/^/[probe carveout=${c:-default}] /"
done
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_staged_rb,cuda_n4_overlap
run_t rbfam 80 'Modes/GpuFamily.*/mixes:Modes/GpuFamily.*/pre_computed_norm:Modes/GpuFamily.*/post_pre_normal_norm'
