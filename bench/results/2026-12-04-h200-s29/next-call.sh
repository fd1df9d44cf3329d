# Prepared for the next session's first device calls (not run): the GPU suite on the pre mailbox
# (92d6e56 and its host-only follow-ups; session 29 ran only the computed-pre families, batch,
# four grids and one sanitizer grid on it) and a record. Tree: `bash scripts/snap.sh .snap HEAD;
# cp <this file> .snap/call.sh`, carry [".deps", ".snap"]. Three calls of ~8 minutes:
#   A: cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' MHC_S7_PART=a bash scripts/device_session.sh record step prefill
#      (the record: every op folded, 3 H, T = 1..16384; the V4-Flash decode step; then part a)
#   B, C: the same with MHC_S7_PART=b / c and the step `prefill` only.
case "${MHC_S7_PART:-a}" in
a)
  # the epilogue chain's instruction latencies (#15: is MUFU or FP32 issue what makes the
  # Sinkhorn's ~76-instruction iteration take ~185 cycles?)
  nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I. -Iinclude -o /tmp/op_latency bench/probes/op_latency.cu &&
    timeout 20 /tmp/op_latency
  run_t famA 200 'Modes/GpuFamily.*/mixes:Modes/GpuFamily.*/collapse*:Modes/GpuFamily.*/pre_*:Modes/GpuFamily.*/post'
  run_t famB 200 'Modes/GpuFamily.*/post_*:Modes/GpuFamily.*/head*'
  ;;
b)
  run_t rest1 220 'Modes/GpuDecode.*:Modes/GpuGraph.*:GpuErrors.*:GpuSinkhorn.*:*GpuNanInf*:*GpuExactSums*:*GpuFusion*'
  run_t rest2 220 '*GpuDeterminism*:Modes/GpuBatch.*'
  ;;
c)
  run_t gridsA 200 'Grid/GpuGrid.MatchesReference/*n4_H4096:Grid/GpuGrid.MatchesReference/*n4_H5120:Grid/GpuGrid.MatchesReference/*n4_H16384'
  run_t gridsB 150 'Grid/GpuGrid.MatchesReference/*n4_H7168'
  # the mailbox in the collapse's wide shape (H = 5120), over chunk partials and group runs
  san_t memcheck 40 'Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120'
  san_t racecheck 70 'Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120'
  san_t synccheck 40 'Grid/GpuGrid.MatchesReference/head_learned_norm_n4_H5120'
  ;;
esac
