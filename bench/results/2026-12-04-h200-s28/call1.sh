# Session 28 call 1 (main 0b82c30). (1) The wgmma GEMM stage (gemm_wg_kernel, staged_wg rows) was
# last measured in session 11, when the token-major partial stores capped every GEMM form (44-46%
# against gemm_kernel's 53%); since session 13 the partials are chunk-major and gemm_kernel's stage
# rose to ~70%. Its rows beside the dispatched plan, and both GEMM kernels under Nsight Compute
# (T = 16384, H = 4096), say whether wgmma is now the better base for the mixes stage.
# (2) Decode after prefill (session 27's open question): T = 1 rows alone, with a big workspace,
# after T = 16 rows and after T = 16384 rows.
B=$BD/tools/mhc
for v in staged_wg staged; do
  timeout 40 $B bench --ops mixes --modes plain --H 4096,5120,7168 --T 4096,16384 --variant mixes.cuda_n4_$v --budget-s 25 2>&1 | grep "^\[" | sed "s/^/[$v] /"
done
for v in staged_wg staged; do
  timeout 40 $B bench --ops post_pre --modes normal_fold --H 4096,7168 --T 4096,16384 --variant post_pre.cuda_n4_$v --budget-s 25 2>&1 | grep "^\[" | sed "s/^/[$v] /"
done
for K in gemm_wg_kernel gemm_group_kernel; do
  V=mixes.cuda_n4_staged; [ $K = gemm_wg_kernel ] && V=mixes.cuda_n4_staged_wg
  timeout 90 ncu --clock-control none -k regex:"$K|finalize_kernel" --launch-skip 4 --launch-count 2 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats --section Occupancy \
    --print-details all $B bench --ops mixes --modes plain --H 4096 --T 16384 --reps 2 --budget-s 20 --variant $V > $OUT/r/ncu-$K.txt 2>&1
  echo "[ncu $K rc=$?]"
  grep -E "_kernel|Duration|DRAM Throughput|Memory Throughput|Executed Ipc A|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Registers Per|Achieved Occupancy|Stall" $OUT/r/ncu-$K.txt | grep -v "==PROF" | sed "s/^ */[ncu $K] /; s/(N4Params).*//" | head -60
done
for round in 1 2; do
  timeout 30 $B bench --ops post_pre --modes shifted_fold --H 4096,5120,7168 --T 1 --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[alone $round] /"
  timeout 40 $B bench --ops post_pre --modes shifted_fold --H 5120,7168 --T 1,16384 --budget-s 12 2>&1 | grep "^\[" | sed "s/^/[bigws $round] /"
  timeout 60 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 5120,7168 --T 1,16384 --budget-s 20 2>&1 | grep "^\[" | sed "s/^/[after16384 $round] /"
done
