# Prepared for the next session's first device call (not run): the GPU suites that reach the pre
# mailbox (the staged plan's computed-pre collapse: post_pre normal, pre / pre_broadcast computed,
# head learned; session 29 call 4 ran only their "_norm" families, batch, four grids and one
# sanitizer grid on it), a record, the V4-Flash step and the epilogue's instruction latencies.
# The other modes' code paths did not change (the T = 768 rule is dispatch only; GpuFamily ran every
# mode on 7738428 in call 1). Tree: `bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh`,
# carry [".deps", ".snap"]; run:
#   cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' bash scripts/device_session.sh record step prefill
# About 8.5 minutes (record ~130 s, step ~20 s, then the lines below).
# Sessions 30-31's explicit variants (staged_rb, decode_chunk_lanes, decode_box, decode_box_lanes) are left
# out of the suites here: they have calls of their own, and this call checks the default path.
export MHC_TEST_VARIANTS=-cuda_n4_staged_rb,cuda_n4_decode_chunk_lanes,cuda_n4_decode_box,cuda_n4_decode_box_lanes
M='*/post_pre_normal*:*/pre_computed*:*/pre_broadcast_computed*:*/head_learned*'
# the epilogue chain's instruction latencies (#15: is MUFU or FP32 issue what makes the
# Sinkhorn's ~76-instruction iteration take ~185 cycles?)
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I. -Iinclude -o /tmp/op_latency bench/probes/op_latency.cu &&
  timeout 20 /tmp/op_latency
# session 30's probes (compiled, not run; ~30 s): is a re-read of the streams from L2 nearly free,
# and at what window (the lagged pre); how many 16-block clusters of ~208 KB a block fit (the
# cluster one-pass pre)
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/l2lag bench/probes/l2_lag.cu && timeout 60 /tmp/l2lag | sed 's/^/[l2lag] /'
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/cc bench/probes/cluster_capacity.cu && timeout 30 /tmp/cc | sed 's/^/[cluster] /'
run_t fam 150 "$(echo "$M" | sed 's#\*/#Modes/GpuFamily.*/#g')"
run_t modes 150 "$(echo "$M" | sed 's#\*/#Modes/GpuGraph.*/#g'):$(echo "$M" | sed 's#\*/#Modes/GpuDeterminism.*/#g'):$(echo "$M" | sed 's#\*/#Modes/GpuNanInf.*/#g'):$(echo "$M" | sed 's#\*/#Modes/GpuBatch.*/#g'):Modes/GpuFusion.*"
run_t grids 150 'Grid/GpuGrid.MatchesReference/post_pre_normal*n4_H*:Grid/GpuGrid.MatchesReference/pre_computed*n4_H*:Grid/GpuGrid.MatchesReference/pre_broadcast_computed*n4_H*:Grid/GpuGrid.MatchesReference/head_learned*n4_H*'
# the mailbox in the collapse's wide shape (H = 5120), over chunk partials and group runs
san_t memcheck 40 'Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120'
san_t racecheck 70 'Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120'
san_t synccheck 40 'Grid/GpuGrid.MatchesReference/head_learned_norm_n4_H5120'
# Optional (MHC_S7_POLL_AB=1, ~90 s more; carry .snap2 = `bash scripts/snap.sh .snap2 HEAD
# bench/results/2026-12-04-h200-s29/next-poll-lane0.patch`): the mailbox polled by lane 0 of each
# warp with a growing back-off, the pre handed to the lanes by shuffles, against every lane polling
# every 64 ns. Predicted: the one row the mailbox made slower (post_pre normal_fold H = 4096,
# T = 16384, +1.7 us) level, the others within 0.5 us; if the polls' L2 requests are not what cost
# there, no change anywhere.
if [ "${MHC_S7_POLL_AB:-0}" = 1 ]; then
  build_tree .snap2 poll
  ab_rows 2 "this poll" 30 --ops pre,post_pre,head --modes normal_fold,learned_fold --H 4096,7168 --T 1024,16384 --budget-s 15
fi
