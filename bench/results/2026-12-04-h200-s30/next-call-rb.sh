# Prepared in session 30 (no device was lent that session; not run): gemm_rb_kernel, the mixes
# stage with its B fragments in registers and a 6-tile ring (the *.cuda_n4_staged_rb rows), against
# the staged plan's gemm_group_kernel, plus its tests and sanitizers. Run it first: a wrong or hung
# rb kernel shows in its first test (60 s cap), and the sanitizers are skipped then.
# Tree: `bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh`, carry [".deps", ".snap"]; run:
#   cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' bash scripts/device_session.sh prefill
# About 8 minutes.
# Predicted (session 30's count): gemm_rb_kernel keeps ~5 tiles (160 KB) in flight a multiprocessor
# where gemm_group_kernel keeps ~8 slots of 8 KB, with the tensor pipes ~50-58% busy at the copy's rate:
# the GEMM kernel from 79% to 88-93% of copy under Nsight Compute (H = 4096, T = 16384: 159 -> ~135 us),
# the mixes row at T = 16384 -20 to -30 us at H = 4096 and -35 to -50 at 7168, post_pre / pre
# normal_fold by about as much; at T = 1024 little (its blocks have 2 tiles a pass).
grid() {  # the n4 grid cases of the modes given, at the H where the n4 plans run
  local f="" m H
  for m in "$@"; do for H in 4096 5120 7168 16384; do f="$f:Grid/GpuGrid.MatchesReference/${m}_n4_H$H"; done; done
  echo "${f#:}"
}
# 1. bits: staged_rb against staged (GpuFamily with only those two), then against the reference
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_staged_rb
run_t rbmix 60 'Modes/GpuFamily.*/mixes'
ok=0; grep -q '^\[  PASSED  \] 1 test' "$OUT/r/t-rbmix.log" && ok=1
run_t rbfam 120 'Modes/GpuFamily.*/pre_*:Modes/GpuFamily.*/post_pre_*:Modes/GpuFamily.*/head_learned*'
export MHC_TEST_VARIANTS=cuda_n4_staged_rb
run_t rbgrid 120 "$(grid mixes pre_computed_norm post_pre_normal_norm head_learned_norm)"
unset MHC_TEST_VARIANTS
# 2. Nsight Compute: each GEMM kernel alone (mixes, H = 4096, T = 16384)
for K in gemm_rb_kernel gemm_group_kernel; do
  V=mixes.cuda_n4_staged; [ $K = gemm_rb_kernel ] && V=mixes.cuda_n4_staged_rb
  timeout 60 ncu --clock-control none -k regex:"$K" --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis \
    --metrics dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    "$BD/tools/mhc" bench --ops mixes --modes plain --H 4096 --T 16384 --reps 2 --budget-s 20 --variant $V \
    > "$OUT/r/ncu-$K.txt" 2>&1
  echo "[ncu $K rc=$?]"
  # the count's two margins: the tensor pipe (~50-58% predicted) and shared memory (~75%)
  grep -E "Duration|DRAM Throughput|dram__|Registers Per|Achieved Occupancy|Stall (Long|Wait|Barrier|Math|MIO|Short|Not Sel)|Warp Cycles Per Issued|Issue Slots Busy|Mem Pipes Busy|Shared Memory|Tensor|Max Bandwidth" \
    "$OUT/r/ncu-$K.txt" | sed "s/^ */[ncu $K] /"
done
# 3. the rows, staged against staged_rb in the same process order, two rounds
for round in 1 2; do
  for v in staged staged_rb; do
    timeout 45 "$BD/tools/mhc" bench --ops mixes --modes plain --H 4096,5120,7168 --T 1024,4096,16384 \
      --variant mixes.cuda_n4_$v --budget-s 30 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 30 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold --H 4096,7168 --T 4096,16384 \
      --variant post_pre.cuda_n4_$v --budget-s 20 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
    timeout 20 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,7168 --T 16384 \
      --variant pre.cuda_n4_$v --budget-s 12 2>&1 | grep "^\[" | sed "s/^/[$v $round] /"
  done
done
# 4. the three tools over gemm_rb_kernel (alone in the grid cases: T = 0 .. 4096; with the post,
#    finalize_kernel and the collapse in post_pre's), if its bits held
if [ $ok = 1 ]; then
  export MHC_TEST_VARIANTS=cuda_n4_staged_rb
  S='Grid/GpuGrid.MatchesReference/mixes_n4_H4096:Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120'
  san_t memcheck 60 "$S"
  san_t racecheck 100 "$S"
  san_t synccheck 60 "$S"
  unset MHC_TEST_VARIANTS
fi
