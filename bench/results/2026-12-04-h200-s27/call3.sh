# Session 27 call 3 (`device_session.sh prefill` with this file as .snap/call.sh; .snap = main
# 7e9ab8b, the kernels of call 2's record). (1) Slice length of the staged plan at T = 16384
# (`--slice-tokens`): does a slice whose residual_out fits L2 (<= ~1024 tokens at H = 4096, 32 MB)
# let the GEMM stage and the collapse read it from L2, and does that pay for a slice's launches?
# (2) The decode rows alone (the record runs each shifted T = 1 row right after a T = 16384 row).
# (3) The GPU suites call 2 did not run (determinism, fusion, NaN/Inf, exact sums, the grids of
# n != 4), with memcheck, synccheck and racecheck over the shifted post_pre grid at H = 5120 (the
# 256-thread post_collapse_kernel with three vectors a thread, at T = 989 and 4096) beside them.
B=$BD/tools/mhc
for S in 512 1024 2048 4096 0; do
  timeout 30 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120 --T 16384 --slice-tokens $S \
    --budget-s 8 2>&1 | grep "^\[" | sed "s/^/[slice $S] /"
done
timeout 30 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 1,16 --budget-s 10 2>&1 | sed "s/^/[dec] /"
G='Grid/GpuGrid.MatchesReference/post_pre_shifted_norm_n4_H5120'
( san_t memcheck 100 "$G"; san_t synccheck 100 "$G"; san_t racecheck 200 "$G" ) > $OUT/r/san-lines.txt 2>&1 &
run_t det 90 'Modes/GpuDeterminism.*'
run_t fusion 110 'Modes/GpuFusion.*'
run_t naninf 110 'Modes/GpuNanInf.*:Modes/GpuExactSums.*'
run_t grids 60 'Grid/GpuGrid.*-Grid/GpuGrid.MatchesReference/*n4_H*'
wait; cat $OUT/r/san-lines.txt
grep -E "Race reported" $OUT/r/san-racecheck.log | sed 's/(mhc::cuda[^)]*)//g; s/^/[race] /' | sort | uniq -c | head
