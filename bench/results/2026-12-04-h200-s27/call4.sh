# Session 27 call 4 (`device_session.sh prefill`; .snap = main with gemm_group_kernel's empty
# mbarriers, .snap2 = 7e9ab8b before it). Racecheck over call 3's grid (post_pre_shifted_norm,
# H = 5120, every variant, T up to 4096: gemm_group_kernel at T = 4096) on the new kernel, and on
# the old one as a single launch of `mixes plain` at H = 7168 / 5120 (session 22's command, which
# reported 0 hazards); memcheck and synccheck over the grid; GpuFamily of every mode with a GEMM
# stage and determinism beside them; then A/B of the rows that run gemm_group_kernel, two rounds.
B=$BD/tools/mhc
( build_tree .snap2 main ) &
G='Grid/GpuGrid.MatchesReference/post_pre_shifted_norm_n4_H5120'
( san_t racecheck 240 "$G"; san_t memcheck 120 "$G"; MHC_S7_SAN_ARGS= san_t synccheck 120 "$G" ) > $OUT/r/san-lines.txt 2>&1 &
run_t family 200 'Modes/GpuFamily.*/mixes:Modes/GpuFamily.*/pre_computed*:Modes/GpuFamily.*/post_pre*:Modes/GpuFamily.*/head_learned*:Modes/GpuFamily.*/pre_broadcast_computed*'
run_t det 120 'Modes/GpuDeterminism.*/post_pre*:Modes/GpuDeterminism.*/mixes:Modes/GpuDeterminism.*/pre_computed*:Modes/GpuBatch.*/post_pre*:Grid/GpuGrid.MatchesReference/*_n4_H7168'
wait; cat $OUT/r/builds-done $OUT/r/san-lines.txt
grep -E "Race reported" $OUT/r/san-racecheck.log | sed 's/(mhc::cuda[^)]*)//g; s/^/[race] /' | sort | uniq -c | head
for H in 7168 5120; do
  timeout 100 compute-sanitizer --tool racecheck --kernel-name kns=gemm_group --launch-count 1 ../build-main/tools/mhc bench \
    --ops mixes --modes plain --H $H --T 4096 --reps 1 --budget-s 5 > $OUT/r/san-old-$H.log 2>&1
  echo "[san racecheck old gemm_group H=$H rc=$? $(grep -E 'RACECHECK SUMMARY' $OUT/r/san-old-$H.log | tail -1)]"
done
for t in new main main new; do
  bin=$([ $t = new ] && echo $B || echo ../build-main/tools/mhc)
  timeout 45 $bin bench --ops mixes,post_pre --modes plain,normal_fold,shifted_fold --H 4096,5120,7168 --T 4096,16384 \
    --budget-s 14 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t] /"
done
