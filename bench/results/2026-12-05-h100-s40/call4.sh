# Session 40, call 4 (a `prefill` step command list): the GPU suite's main filter (device_session.sh's
# test step: the n4 grid, family, decode, batch, graph, errors) in 12 gtest shards at once, all
# variants, on the final tree; beside it racecheck over every variant on the graph-capture cases
# of pre, post_pre and head (T = 33; call 3's racecheck over the T <= 4096 grid ran past 430 s).
# Invocation: as call3.sh, with `timeout 420` for device_session.sh (timeout_s 470).
set -u
F='Grid/GpuGrid.MatchesReference/*n4_H*:Modes/GpuFamily.*:Modes/GpuDecode.*:Modes/GpuBatch.*:Modes/GpuGraph.*:GpuErrors.*'
N=12
for i in $(seq 0 $((N - 1))); do
  GTEST_TOTAL_SHARDS=$N GTEST_SHARD_INDEX=$i timeout 330 "$BD/tests/test_gpu" --gtest_brief=1 --gtest_filter="$F" > "$OUT/r/shard-$i.log" 2>&1 &
done
FR='Modes/GpuGraph.*/pre_computed_norm:Modes/GpuGraph.*/post_pre_shifted_norm:Modes/GpuGraph.*/post_pre_normal_norm:Modes/GpuGraph.*/head_learned_norm'
timeout 330 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 "$BD/tests/test_gpu" \
  --gtest_filter="$FR" --gtest_brief=1 > "$OUT/r/san-racecheck.log" 2>&1
echo "[san racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/r/san-racecheck.log" | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/r/san-racecheck.log" | head -2 | tr '\n' ' ')]"
wait
for i in $(seq 0 $((N - 1))); do
  echo "[shard $i: $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$OUT/r/shard-$i.log" | tr '\n' ' ')]"
  grep -E "^\[  FAILED|Failure" "$OUT/r/shard-$i.log" | head -10 | sed "s/^/[shard $i] /"
done
