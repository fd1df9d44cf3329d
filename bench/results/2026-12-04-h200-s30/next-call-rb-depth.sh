# Prepared in session 30 (not run), for after next-call-rb.sh if staged_rb comes out level with or
# slower than staged: the same gemm_rb_kernel with a 3-tile ring (2 tiles, 64 KB, in flight) against
# its 6-tile ring (5 tiles, 160 KB), in the diagnostics build (MHC_GEMM_PROBE, MHC_RB_STAGES=3), so
# that one call says whether bytes in flight set the GEMM stage's speed (session 12's copies
# needed ~128 KB in flight; session 23 found no gain from more warps or half steps in gemm_kernel).
# Tree: `bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh`, carry [".deps", ".snap"]; run:
#   cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' bash scripts/device_session.sh prefill
# About 4 minutes. Predicted, if bytes in flight are the limit: the 3-entry ring 10-20% slower on
# mixes at T = 16384; if they are not: within 2%.
cmake -S . -B ../build-depth -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DMHC_GEMM_PROBE -DMHC_BUILD_TESTS=OFF \
  -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$OUT/r/depth-configure.log" 2>&1 &&
  cmake --build ../build-depth --target mhc_cli > "$OUT/r/depth-build.log" 2>&1
echo "[depth build rc=$?]"
for round in 1 2; do
  for stages in 6 3; do
    MHC_RB_STAGES=$stages timeout 45 ../build-depth/tools/mhc bench --ops mixes --modes plain --H 4096,7168 \
      --T 4096,16384 --variant mixes.cuda_n4_staged_rb --budget-s 30 2>&1 | grep "^\[" | sed "s/^/[ring $stages $round] /"
  done
done
