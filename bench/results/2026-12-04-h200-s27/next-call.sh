# Prepared for the next session's first device call (not run). One tree, main at the end of
# session 27 (`bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh`; carry [".deps",
# ".snap"]; `device_session.sh prefill`).
# (1) The GPU suites that did not run on gemm_group_kernel's empty mbarriers (5927c88): decode,
#     graphs, errors, NaN/Inf, exact sums, fusion, determinism of every mode, the n4 grids at
#     H = 4096 / 5120 / 16384 and the other grids.
# (2) Decode after prefill in one process: the record's shifted_fold T = 1 rows ran 0.3-2.2 us
#     slower than alone, each right after a T = 16384 post_pre row. A serving engine runs decode
#     steps between prefill chunks, so whether a T = 1 call after a large call is slower matters:
#     the same rows alone, with a workspace sized for 16384 tokens but first in the process
#     (bigws), after T = 16 rows and after T = 16384 rows, two rounds.
B=$BD/tools/mhc
run_t decode 200 'Modes/GpuDecode.*:Modes/GpuGraph.*:GpuErrors.*:Modes/GpuNanInf.*:Modes/GpuExactSums.*:Modes/GpuFusion.*:GpuSinkhorn.*'
run_t det 150 'Modes/GpuDeterminism.*:Modes/GpuBatch.*'
run_t grids4 200 'Grid/GpuGrid.MatchesReference/*n4_H4096:Grid/GpuGrid.MatchesReference/*n4_H5120:Grid/GpuGrid.MatchesReference/*n4_H16384'
run_t grids 60 'Grid/GpuGrid.*-Grid/GpuGrid.MatchesReference/*n4_H*'
for round in 1 2; do
  timeout 30 $B bench --ops post_pre --modes shifted_fold --H 4096,5120,7168 --T 1 --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[alone $round] /"
  timeout 40 $B bench --ops post_pre --modes shifted_fold --H 5120,7168 --T 1,16384 --budget-s 12 2>&1 | grep "^\[" | sed "s/^/[bigws $round] /"
  timeout 40 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 5120,7168 --T 1,16 --budget-s 10 2>&1 | grep "^\[" | sed "s/^/[after16 $round] /"
  timeout 60 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 5120,7168 --T 1,16384 --budget-s 20 2>&1 | grep "^\[" | sed "s/^/[after16384 $round] /"
done
