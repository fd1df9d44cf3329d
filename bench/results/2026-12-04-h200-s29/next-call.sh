# Prepared for the next session's first device calls (not run): the GPU suite on the pre mailbox
# (92d6e56; session 29 ran only the computed-pre families, batch, four grids and one sanitizer
# grid on it) and a record. Tree: `bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh`,
# carry [".deps", ".snap"].
# Call A (~9 min): `cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' MHC_S7_PART=a bash
#   scripts/device_session.sh record step prefill` (the record: every op folded, 3 H, T = 1..16384;
#   the V4-Flash decode step; then part a below).
# Call B (~8 min): the same with MHC_S7_PART=b and the steps `prefill` only.
if [ "${MHC_S7_PART:-a}" = a ]; then
  run_t famA 200 'Modes/GpuFamily.*/mixes:Modes/GpuFamily.*/collapse*:Modes/GpuFamily.*/pre_*:Modes/GpuFamily.*/post'
  run_t famB 200 'Modes/GpuFamily.*/post_*:Modes/GpuFamily.*/head*'
else
  run_t rest 240 'Modes/GpuBatch.*:Modes/GpuGraph.*:Modes/GpuDecode.*:GpuErrors.*:GpuSinkhorn.*:GpuDeterminism*:GpuFusion*:GpuNanInf*:GpuExactSums*'
  run_t grids 240 'Grid/GpuGrid.MatchesReference/*n4_H*'
  # the mailbox at the wide collapse shape (H = 5120) and over group runs (T >= 4096 in the grid)
  san_t memcheck 60 'Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120'
  san_t racecheck 90 'Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120'
  san_t synccheck 60 'Grid/GpuGrid.MatchesReference/head_learned_norm_n4_H5120'
fi
