# Prepared in session 40 (device time spent): the next session's second call, a `prefill` step
# command list. It checks wide-fold-block-sum.patch: collapse_token's wide shape (collapse_stream_
# kernel at 4096 < H <= 6144, also polling the staged plan's pre) forms the fold's sum with every
# warp in block_sum instead of a 256-thread named barrier, which racecheck flagged in call 4
# (thread 0's s_inv read by threads >= 256 after a __syncthreads: 97 RAW reports at H = 5120).
# Invocation (about 7 minutes):
#   bash scripts/prepare_device.sh (if .deps is missing);
#   bash scripts/snap.sh .snap HEAD bench/results/2026-12-05-h100-s40/wide-fold-block-sum.patch;
#   bash scripts/snap.sh .snap2 HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap", ".snap2"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 560 bash scripts/device_session.sh prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 595)
# Predicted: the same bits (the family and the grid at H = 5120 pass), racecheck 0 hazards on the
# subset that flagged them, memcheck and synccheck clean, and the rows within noise of the base
# (one barrier fewer, 62-63 registers as before).
set -u
build_tree .snap2 base &
G="Grid/GpuGrid.MatchesReference"
W=""
for m in collapse_carried_norm collapse_identity_norm pre_computed_norm pre_carried_norm pre_identity_norm \
         pre_broadcast_computed_norm pre_broadcast_carried_norm post_pre_normal_norm post_pre_shifted_norm \
         head_learned_norm head_carried_norm head_mean_norm; do W="$W:$G/${m}_n4_H5120"; done
FAM='Modes/GpuFamily.*/pre_computed_norm:Modes/GpuFamily.*/post_pre_shifted_norm:Modes/GpuFamily.*/collapse_carried_norm:Modes/GpuFamily.*/head_mean_norm:Modes/GpuFamily.*/pre_broadcast_computed_norm'
run_t wide 150 "${W#:}:$FAM"
# The sanitizers over the graph cases that flagged (shape H = 5120, T = 128 among them), narrowed
# to the staged plan (its polling collapse is the flagged kernel) and the dispatcher's choice:
# call 4's racecheck over every variant ran past 330 s.
export MHC_TEST_VARIANTS=cuda_n4_staged
FR='Modes/GpuGraph.*/pre_computed_norm:Modes/GpuGraph.*/post_pre_shifted_norm'
MHC_S7_SAN_ARGS="--racecheck-report all" san_t racecheck 150 "$FR"
san_t memcheck 45 "$FR"
san_t synccheck 45 "$FR"
unset MHC_TEST_VARIANTS
wait
cat "$OUT/r/builds-done" 2>/dev/null
ab_rows 2 "base this" 45 --ops collapse,pre,post_pre --modes carried_fold,normal_fold --H 5120 --T 1024,16384 --budget-s 25
