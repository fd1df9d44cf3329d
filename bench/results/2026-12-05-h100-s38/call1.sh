# Prepared in session 37 (its device time ran out): the next session's first call. It checks
# session 37's synchronisation fixes, none yet run on a GPU: post_bulk_kernel's proxy fence
# (9ebd835), gemm_wg_kernel's (beec6fd) and the pre mailbox's strong stores (beec6fd), then the
# remaining rows' bits, in the order of what matters most if the call runs out of time.
# Invocation (step `prefill` only; about 6 minutes):
#   bash scripts/prepare_device.sh (if .deps is missing); bash scripts/snap.sh .snap HEAD;
#   bash scripts/snap.sh .snap2 4c8a07d (the tree before the fixes); cp <this file> .snap/call.sh;
#   carry [".deps", ".snap", ".snap2"]; timeout_s 595;
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 560 bash scripts/device_session.sh prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .
# Predicted: the fence costs nothing measurable on the post rows (post_collapse_kernel has the same
# fence and streams at its roofline): post normal at T = 16384 within 1% of the base tree's; pre
# and post_pre (finalize_kernel's rescheduled epilogue around the strong mailbox store) within 1%.
set -u
X="$BD/tests/test_gpu"
(build_tree .snap2 base) &
# 1. Stress: many calls of the same post / post_pre call, each bit-equal to the first (the fence's
#    purpose; session 37's mismatch was one warp's 1024 elements of one token's residual_out).
export MHC_TEST_DETERMINISM_RUNS=25
run_t stress 150 'Modes/GpuDeterminism.*/post:Modes/GpuDeterminism.*/post_pre_normal_norm:Modes/GpuDeterminism.*/post_pre_normal'
unset MHC_TEST_DETERMINISM_RUNS
# 2. Every variant of post_pre's and pre's families, repeated (a flake of the staged row, the first,
#    shows as every other row failing at one token).
rep() {  # rep TAG REPEATS TIMEOUT FILTER
  timeout "$3" "$X" --gtest_brief=1 --gtest_repeat="$2" --gtest_filter="$4" > "$OUT/r/t-$1.log" 2>&1
  echo "[rep $1 rc=$? failed=$(grep -c '^\[  FAILED  \] Modes' "$OUT/r/t-$1.log") $(grep 'ms total' "$OUT/r/t-$1.log" | tail -1)]"
  grep "outside tolerance" "$OUT/r/t-$1.log" | cut -c1-330 | head -12 | sed "s/^/[rep $1] /"
}
rep fam 3 120 'Modes/GpuFamily.*/post_pre_normal_norm:Modes/GpuFamily.*/pre_computed_norm:Modes/GpuFamily.*/post'
# 3. The post rows with and without the fence (one process a tree and round).
wait
cat "$OUT/r/builds-done"
ab_rows 2 "base this" 30 --ops post --modes normal --H 4096,7168 --T 16,1024,4096,16384 --budget-s 8
ab_rows 1 "base this" 30 --ops post_pre --modes normal_fold --H 4096,7168 --T 16,1024,16384 --budget-s 8
ab_rows 1 "base this" 30 --ops pre --modes normal_fold --H 4096,7168 --T 1024,4096,16384 --budget-s 8
#    post_bulk_kernel's 2048-column segments (post.cuda_n4_bulk_2048, explicit) beside its 1024
#    (post.cuda_n4_bulk), two rounds. Predicted (session 21: two more copies a tile, +40%, cost
#    +4-5%): half the copies a byte, 3-5% faster at T >= 4096 (H = 4096, 8192).
for round in 1 2; do
  for v in bulk bulk_2048; do
    timeout 30 "$BD/tools/mhc" bench --ops post --modes normal --H 4096,8192 --T 1024,4096,16384 \
      --variant post.cuda_n4_$v --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[seg $v $round] /"
  done
done
# 4. Graphs, batch invariance (pre's overlap window, 1024 .. 2048, is dispatched since session 35
#    and has not yet run through them), then the sanitizers over post.
run_t graphbatch 120 'Modes/GpuGraph.*:Modes/GpuBatch.*'
san_t memcheck 60 'Modes/GpuDeterminism.*/post'
san_t synccheck 60 'Modes/GpuDeterminism.*/post'
MHC_S7_SAN_ARGS="--racecheck-report all" san_t racecheck 90 'Modes/GpuDeterminism.*/post'
