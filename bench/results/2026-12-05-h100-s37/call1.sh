# Run as session 37's first call (H100; reordered from session 36's bench/results/2026-12-05-nodevice-s36/next-call.sh:
# rows before bits, overlap rows for pre only, GpuFamily limited to staged and persistent).
# Prepared in session 36 (no device time was left to that session: 84 s): the first call of the
# next session with a device, preferably the H200. persistent_kernel (the cuda_n4_persistent and
# cuda_n4b_persistent rows) has never run: this call checks that it finishes, then its bits, its
# rows beside staged and overlap, its timeline, then the grid and the sanitizers (in the order of
# what matters most if the call runs out of time). Invocation (step `prefill` only):
#   bash scripts/prepare_device.sh (if .deps is missing); bash scripts/snap.sh .snap HEAD;
#   cp <this file> .snap/call.sh; carry [".deps", ".snap"]; timeout_s 595;
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 560 bash scripts/device_session.sh prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .
set -u
P="$BD/tools/mhc"
# The diagnostics build (timeline trace, section 4) builds in the background meanwhile.
(cmake -S . -B ../build-oprobe -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
   -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DMHC_GEMM_PROBE -DMHC_BUILD_TESTS=OFF \
   -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$OUT/r/oprobe-configure.log" 2>&1 &&
 cmake --build ../build-oprobe --target mhc_cli > "$OUT/r/oprobe-build.log" 2>&1
 echo "[oprobe build rc=$?]" >> "$OUT/r/builds-done") &
# 1. Smoke: each persistent row at small and large T, each under a 20 s timeout (a wait that never
#    ends shows as rc 124, and the rest of the list is skipped).
ok=1
for op in "pre normal_fold" "head learned_fold" "post_pre normal_fold" "pre_broadcast normal_fold"; do
  set -- $op
  v=$1.cuda_n4_persistent
  [ "$1" = pre_broadcast ] && v=$1.cuda_n4b_persistent
  timeout -k 5 20 "$P" bench --ops "$1" --modes "$2" --H 4096,7168 --T 1,33,1024,16384 --variant "$v" --reps 2 \
    --budget-s 4 > "$OUT/r/smoke-$1.log" 2>&1
  rc=$?
  echo "[smoke $v rc=$rc] $(grep -c '^\[' "$OUT/r/smoke-$1.log") rows"
  grep "^\[" "$OUT/r/smoke-$1.log" | head -8 | sed "s/^/[smoke] /"
  [ $rc -ne 0 ] && { ok=0; tail -5 "$OUT/r/smoke-$1.log" | sed "s/^/[smoke err] /"; }
done
[ $ok -eq 1 ] || { echo "[smoke failed: the rest skipped]"; wait; exit 0; }
# 2. Rows: staged and persistent side by side (one process a variant and op; overlap for pre).
for v in staged persistent; do
  for op in "pre normal_fold" "head learned_fold" "post_pre normal_fold"; do
    set -- $op
    timeout 25 "$P" bench --ops "$1" --modes "$2" --H 4096,5120,7168 --T 1024,4096,16384 \
      --variant "$1.cuda_n4_$v" --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[rows $v] /"
  done
  timeout 12 "$P" bench --ops pre_broadcast --modes normal_fold --H 4096,7168 --T 1024,16384 \
    --variant "pre_broadcast.cuda_n4b_$v" --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[rows n4b $v] /"
done
timeout 25 "$P" bench --ops pre --modes normal_fold --H 4096,5120,7168 --T 1024,4096,16384 \
  --variant pre.cuda_n4_overlap --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[rows overlap] /"
# 3. The persistent rows' timeline (diagnostics build): how long after a tile's count its tokens'
#    collapses start (the L2 re-read wants a few us), when the GEMM warps and the tails finish.
wait
cat "$OUT/r/builds-done"
#    The 8-GEMM-warp shape (MHC_PERSISTENT_GEMM_WARPS=8: gemm_kernel's own 8 x 2 ring, a tail of 80
#    registers that collapses one token at a time and spills) beside the release shape.
for w in 4 8; do
  for h in 4096 7168; do
    MHC_PERSISTENT_GEMM_WARPS=$w MHC_OVERLAP_TRACE=1 timeout 15 ../build-oprobe/tools/mhc bench --ops pre \
      --modes normal_fold --H $h --T 16384 --variant pre.cuda_n4_persistent --reps 2 --budget-s 2 2>&1 |
      grep "^\[" | sed "s/^/[trace w=$w H=$h] /"
  done
done
# 4. Bits: every variant of each family against its first on GpuFamily's T list, limited to the
#    staged and persistent rows (the overlap rows passed in session 35).
MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_persistent,cuda_n4b_staged,cuda_n4b_persistent run_t fam 150 'Modes/GpuFamily.*'
#    And the DRAM bytes under Nsight Compute (one launch): ~10.4 H a token read + written if the
#    collapse's re-read hits L2 (18.4 H if it does not); the staged chain's kernels beside it.
for k in persistent_kernel "gemm_kernel|finalize_kernel|collapse_stream"; do
  v=pre.cuda_n4_persistent; [ "$k" = persistent_kernel ] || v=pre.cuda_n4_staged
  timeout 60 ncu --clock-control none -k regex:"$k" --launch-skip 3 --launch-count 3 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    "$P" bench --ops pre --modes normal_fold --H 4096 --T 16384 --variant $v --reps 2 --budget-s 5 \
    > "$OUT/r/ncu-$v.txt" 2>&1
  echo "[ncu $v rc=$?]"
  grep -E "persistent_kernel|gemm_kernel|finalize_kernel|collapse_stream|gpu__time|dram__bytes|lts__t_sector" \
    "$OUT/r/ncu-$v.txt" | head -24 | sed "s/^/[ncu] /"
done
# 5. The grid's n4 cases, graphs and batch invariance, then the sanitizers over GpuFamily's
#    pre_normal_norm case limited to the staged and persistent rows.
run_t grid 120 'Grid/GpuGrid.MatchesReference/*n4_H*:Modes/GpuBatch.*:Modes/GpuGraph.*'
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_persistent
MHC_S7_SAN_ARGS="--racecheck-report all" san_t racecheck 90 'Modes/GpuFamily.*/pre_normal_norm'
san_t synccheck 60 'Modes/GpuFamily.*/pre_normal_norm'
san_t memcheck 60 'Modes/GpuFamily.*/pre_normal_norm'
unset MHC_TEST_VARIANTS
