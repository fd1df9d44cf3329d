# Session 27 call 5 (`device_session.sh prefill`; .snap = main 5927c88 + call5-lane0.patch: lane 0
# alone arrives on gemm_group_kernel's empty mbarrier after the warp's __syncwarp, count = the
# active warps; .snap3 = 5927c88 (all 32 lanes arrive: call 4 measured mixes at H = 5120,
# T = 4096 6 us slower); .snap2 = 7e9ab8b (the counter alone)). Racecheck over call 3's grid on
# lane0, GpuFamily of every mode with a GEMM stage beside it, then A/B of the three, two rounds.
B=$BD/tools/mhc
( build_tree .snap2 main; build_tree .snap3 lanes32 ) &
G='Grid/GpuGrid.MatchesReference/post_pre_shifted_norm_n4_H5120'
( san_t racecheck 240 "$G" ) > $OUT/r/san-lines.txt 2>&1 &
run_t family 200 'Modes/GpuFamily.*/mixes:Modes/GpuFamily.*/pre_computed*:Modes/GpuFamily.*/post_pre*:Modes/GpuFamily.*/head_learned*:Modes/GpuFamily.*/pre_broadcast_computed*'
wait; cat $OUT/r/builds-done $OUT/r/san-lines.txt
grep -E "Race reported" $OUT/r/san-racecheck.log | sed 's/(mhc::cuda[^)]*)//g; s/^/[race] /' | sort | uniq -c | head
for t in lane0 main lanes32 lanes32 main lane0; do
  bin=$([ $t = lane0 ] && echo $B || echo ../build-$t/tools/mhc)
  timeout 30 $bin bench --ops mixes --modes plain --H 4096,5120,7168 --T 4096,16384 --budget-s 8 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t] /"
  timeout 30 $bin bench --ops post_pre --modes normal_fold --H 4096,5120,7168 --T 16384 --budget-s 8 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t] /"
done
