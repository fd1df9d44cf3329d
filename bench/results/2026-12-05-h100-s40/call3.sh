# Session 40, call 3 (a `prefill` step command list): the whole GPU suite on the final tree (after
# cluster_pre_kernel's removal), in 6 gtest shards at once, beside compute-sanitizer's memcheck,
# synccheck and racecheck over two subsets: decode_chunk_kernel alone (the grid cases where it has
# phase-2-only blocks, and pre / post_pre at H = 4096) and every variant on the default subset.
# Invocation: bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 560 bash scripts/device_session.sh prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 595)
set -u
G="Grid/GpuGrid.MatchesReference"
FDEC="$G/post_pre_normal_norm_n4_H7168:$G/head_learned_norm_n4_H5120:$G/pre_computed_norm_n4_H4096:$G/post_pre_shifted_norm_n4_H4096"
FALL="$G/post_pre_shifted_norm_n4_H4096:$G/pre_computed_norm_n4_H4096:$G/head_learned_norm_n4_H4096:GpuErrors.*"
san() {  # san NAME TOOL FILTER VARIANTS [ARGS] (VARIANTS empty: all; run in a subshell)
  if [ -n "$4" ]; then export MHC_TEST_VARIANTS="$4"; else unset MHC_TEST_VARIANTS; fi
  timeout 430 compute-sanitizer --tool "$2" ${5:-} --error-exitcode 9 "$BD/tests/test_gpu" \
    --gtest_filter="$3" --gtest_brief=1 > "$OUT/r/san-$1.log" 2>&1
  echo "[san $1 rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/r/san-$1.log" | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/r/san-$1.log" | head -2 | tr '\n' ' ')]"
}
N=6
for i in $(seq 0 $((N - 1))); do
  GTEST_TOTAL_SHARDS=$N GTEST_SHARD_INDEX=$i timeout 430 "$BD/tests/test_gpu" --gtest_brief=1 > "$OUT/r/shard-$i.log" 2>&1 &
done
san dec-memcheck memcheck "$FDEC" cuda_n4_decode_chunk > "$OUT/r/s1" &
san dec-synccheck synccheck "$FDEC" cuda_n4_decode_chunk > "$OUT/r/s2" &
san dec-racecheck racecheck "$FDEC" cuda_n4_decode_chunk "--racecheck-report all" > "$OUT/r/s3" &
san all-memcheck memcheck "$FALL" "" > "$OUT/r/s4" &
san all-synccheck synccheck "$FALL" "" > "$OUT/r/s5" &
san all-racecheck racecheck "$FALL" "" "--racecheck-report all" > "$OUT/r/s6" &
timeout 120 "$BD/tests/test_engine" --gtest_brief=1 > "$OUT/r/test-engine.log" 2>&1
echo "[test_engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$OUT/r/test-engine.log" | head -3 | tr '\n' ' ')]"
wait
for i in $(seq 0 $((N - 1))); do
  echo "[shard $i: $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED|tests from .* ran' "$OUT/r/shard-$i.log" | tr '\n' ' ')]"
  grep -E "^\[  FAILED|Failure" "$OUT/r/shard-$i.log" | head -10 | sed "s/^/[shard $i] /"
done
cat "$OUT"/r/s[1-6]
