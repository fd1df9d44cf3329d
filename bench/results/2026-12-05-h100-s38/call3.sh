# Session 38 call 3 (step `prefill`): the checks and rows call 1 left out or got wrong.
# Invocation: bash scripts/snap.sh .snap HEAD; bash scripts/snap.sh .snap2 4c8a07d (post without
#   session 37's proxy fence); cp <this file> .snap/call.sh; carry [".deps", ".snap", ".snap2"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 560 bash scripts/device_session.sh prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 595)
# Predicted: post rows with the fence within 1% of base (4c8a07d); post.cuda_n4_bulk_2048 3-5%
# faster than post.cuda_n4_bulk at T >= 4096 (H = 4096, 8192); every test passes.
set -u
(build_tree .snap2 base) &
# 1. decode_chunk_kernel's phase-2-only blocks (1259209): the decode suite (T = 128 at H = 7168:
#    16 such blocks; 1000 graph replays, two streams), batch invariance (now with a 125-token slice
#    at H = 5120 / 7168), NaN/Inf and graphs.
run_t decode 200 'Modes/GpuDecode.*:Modes/GpuBatch.TokenAlone*:Modes/GpuNanInf.*'
run_t graph 100 'Modes/GpuGraph.*'
# 2. post with and without the fence (call 1's rows asked for mode `normal`, which post does not
#    have: post's mode is `full`), then post_bulk_kernel's 2048-column segments beside its 1024.
wait
cat "$OUT/r/builds-done"
ab_rows 2 "base this" 40 --ops post --modes full --H 4096,5120,7168 --T 1024,4096,16384 --budget-s 12
for round in 1 2; do
  for v in bulk bulk_2048; do
    timeout 30 "$BD/tools/mhc" bench --ops post --modes full --H 4096,8192 --T 1024,4096,16384 \
      --variant post.cuda_n4_$v --budget-s 10 2>&1 | grep "^\[" | sed "s/^/[seg $v $round] /"
  done
done
# 3. The sanitizers over decode_chunk_kernel alone, on the grid cases where it has phase-2-only
#    blocks (T = 128 at H = 5120 and 7168).
export MHC_TEST_VARIANTS=cuda_n4_decode_chunk
F='Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H7168:Grid/GpuGrid.MatchesReference/head_learned_norm_n4_H5120'
san_t memcheck 110 "$F"
san_t synccheck 110 "$F"
MHC_S7_SAN_ARGS="--racecheck-report all" san_t racecheck 140 "$F"
