# Prepared in session 40: the next session's first call (next-call-a.sh after it), a
# `prefill` step command list, on the tree with wide-fold-block-sum.patch:
#   - the GPU suite's main filter (device_session.sh's test step: the n4 grid, family, decode,
#     batch, graph and errors suites, every variant) as 4 shards of 4 OpenMP threads (shards_t).
#     One process ran ~190 of the 217 n4 grid cases in 200 s (session 40 call 2); 12 shards of 16
#     spinning threads each ran only ~135 in 330 s (call 4), so the shards now split the cores;
#   - beside it, racecheck over the graph cases of pre, post_pre and head (H = 4096 / 7168 / 5120,
#     T = 33 / 1 / 128 among them), one process a variant (call 4's single process over every
#     variant ran past 330 s). With MHC_TEST_VARIANTS each also runs the dispatcher's choice.
# Invocation: as next-call-a.sh without .snap2 (carry [".deps", ".snap"]); timeout_s 595.
set -u
FR='Modes/GpuGraph.*/pre_computed_norm:Modes/GpuGraph.*/post_pre_shifted_norm:Modes/GpuGraph.*/post_pre_normal_norm:Modes/GpuGraph.*/head_learned_norm'
rc_one() {  # racecheck over FR for one variant: one line
  MHC_TEST_VARIANTS=$1 OMP_NUM_THREADS=1 timeout 480 compute-sanitizer --tool racecheck --racecheck-report all \
    --error-exitcode 9 "$BD/tests/test_gpu" --gtest_filter="$FR" --gtest_brief=1 > "$OUT/r/san-racecheck-$1.log" 2>&1
  echo "[san racecheck $1 rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/r/san-racecheck-$1.log" | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/r/san-racecheck-$1.log" | head -2 | tr '\n' ' ')]"
}
for v in cuda_generic cuda_n4 cuda_n4_staged cuda_n4_staged_rb cuda_n4_staged_wg cuda_n4_overlap \
         cuda_n4_decode cuda_n4_decode_chunk; do
  rc_one $v > "$OUT/r/rc-$v.txt" &
done
F='Grid/GpuGrid.MatchesReference/*n4_H*:Modes/GpuFamily.*:Modes/GpuDecode.*:Modes/GpuBatch.*:Modes/GpuGraph.*:GpuErrors.*'
shards_t main 4 500 "$F"
timeout 40 "$BD/tests/test_engine" --gtest_brief=1 > "$OUT/r/test-engine.log" 2>&1
echo "[test_engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/r/test-engine.log" | head -2 | tr '\n' ' ')]"
wait
cat "$OUT"/r/rc-*.txt
