# Session 41 call 6 (a `prefill` step command list) on b3f3c6e (.snap2), the final kernels: the GPU
# suite outside call 1's main filter (the non-n4 grid, NaN/Inf, exact sums, fusion, determinism,
# 64-bit indexing, Sinkhorn), 4 shards of 4 OpenMP threads.
# Call 6 ran it on a warm machine whose ../build-s7 held call 5's tree (.snap): the configure of
# .snap2 into it failed unseen and the tests ran call 5's build. Call 7 is this script again with
# MHC_S7_BD=../build-final (a fresh folder); device_session.sh now does that by itself.
set -u
MAIN='Grid/GpuGrid.MatchesReference/*n4_H*:Modes/GpuFamily.*:Modes/GpuDecode.*:Modes/GpuBatch.*:Modes/GpuGraph.*:GpuErrors.*'
shards_t rest 4 270 "*-$MAIN"
