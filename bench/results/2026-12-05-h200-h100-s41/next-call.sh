# Prepared in session 41 for the next session's first call (no device time was left to start one):
# a `prefill` step command list. pre_broadcast's collapse as e * sum(pre): collapse_stream_kernel's
# kOneRow instances (collapse_vec_one_row), this tree (.snap: HEAD + broadcast-product.patch,
# made on 8d8e90d, applies to 15822da) against base (.snap2: HEAD). The existing instances' SASS
# is the same as base's (checked with nvdisasm, mangled names, labels and padding aside), so what
# needs running is the new instances:
# pre_broadcast's grid and mode suites, the exact-sum extremes (the patch adds
# pre_broadcast_carried to them), test_engine (the warmup list), memcheck over the extremes.
# Invocation (about 3 minutes after the start):
#   bash scripts/prepare_device.sh (if .deps is missing);
#   bash scripts/snap.sh .snap HEAD bench/results/2026-12-05-h200-h100-s41/broadcast-product.patch;
#   bash scripts/snap.sh .snap2 HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap", ".snap2"];
#   run: cd .snap && export MHC_S7_PREFILL='bash call.sh';
#        timeout 560 bash scripts/device_session.sh prefill > $OUT/o.log 2>&1   (writes under $OUT)
# Predicted: the same bits. A certified pair's fast path takes ~18 instructions against ~36 (the
# 4-stream column_pair, two 4-term chains), ~20% of the kernel's 92.9 M warp instructions at
# H = 4096, T = 16384 (session 41 call 4, H100), which brings its issue time (~90-100 us) under
# its memory floor (~81 us): the collapse ~122 -> ~90-95 us, pre_broadcast at T = 16384 ~184 ->
# ~150-160 us at H = 4096 on the H100 (265 -> ~230-245 at 5120, 325 -> ~275-290 at 7168).
# Session 42 added T = 1024 and 4096 (the generic bound's range, where pre_broadcast is 1.5-3.8x
# over it): the collapse there is a smaller share of a latency chain (GEMM, finalize, collapse),
# so -3 to -10% at T = 1024 and -10 to -15% at T = 4096 (H100 record: 20.2 / 29.7 / 33.4 and
# 53.5 / 74.1 / 91.3 us).
set -u
build_tree .snap2 base &
san_t memcheck 150 'Modes/GpuExactSums.*/pre_broadcast_carried' > "$OUT/r/san-m.txt" &
shards_t bcast 4 150 'Grid/GpuGrid.MatchesReference/pre_broadcast*:Modes/*.*/pre_broadcast*:Modes/GpuExactSums.*'
timeout 30 "$BD/tests/test_engine" --gtest_brief=1 > "$OUT/r/test-engine.log" 2>&1
echo "[test_engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/r/test-engine.log" | head -2 | tr '\n' ' ')]"
wait
cat "$OUT/r/builds-done" "$OUT/r/san-m.txt"
A='--ops pre_broadcast --modes normal_fold --H 4096,5120,7168 --T 16,1024,4096,16384 --budget-s 20'
ab_rows 2 "base this" 60 $A
