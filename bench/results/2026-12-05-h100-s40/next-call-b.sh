# Prepared in session 40: the next session's second call (after next-call-a.sh passes), a
# `prefill` step command list: the GPU suite's main filter (device_session.sh's test step: the
# n4 grid, family, decode, batch, graph and errors suites, every variant) on the tree with
# wide-fold-block-sum.patch, as 4 shards of 4 OpenMP threads (shards_t). One process ran ~190 of
# the 217 n4 grid cases in 200 s (session 40 call 2); 12 shards of 16 threads each ran only ~135
# in 330 s (call 4), so the shards now split the cores.
# Invocation: as next-call-a.sh without .snap2 (carry [".deps", ".snap"]); timeout_s 595.
set -u
F='Grid/GpuGrid.MatchesReference/*n4_H*:Modes/GpuFamily.*:Modes/GpuDecode.*:Modes/GpuBatch.*:Modes/GpuGraph.*:GpuErrors.*'
shards_t main 4 500 "$F"
timeout 40 "$BD/tests/test_engine" --gtest_brief=1 > "$OUT/r/test-engine.log" 2>&1
echo "[test_engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/r/test-engine.log" | head -2 | tr '\n' ' ')]"
