# Session 38 call 5 (steps `sinkhorn prefill`): diagnostics for the next designs. The `sinkhorn`
# step times bench/probes/sinkhorn_forms.cu, whose `scale` and `quad` forms have never run (call
# 4's probe 7: decode's epilogue costs 1.78 us warm, ~3500 cycles, the Sinkhorn chain nearly all
# of it); this script profiles post_bulk_kernel (post at 88-93% of copy against the 95% target;
# its 2048-column form, fewer copies, was slower in call 3, so the copies are not what limits it).
# Invocation: cp <this file> .snap/call5.sh (call 3's tree); carry [".deps", ".snap"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call5.sh'; rm -rf /tmp/o;
#        timeout 400 bash scripts/device_session.sh sinkhorn prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 450)
set -u
for T in 4096 16384; do
  timeout 120 ncu --clock-control none -k regex:post_bulk_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats "$BD/tools/mhc" bench --ops post --modes full --H 4096 --T $T \
    --reps 2 --budget-s 30 > "$OUT/r/ncu-post-T$T.txt" 2>&1
  echo "[ncu post T=$T rc=$?]"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps|L2 Hit|Achieved Occupancy" \
    "$OUT/r/ncu-post-T$T.txt" | head -30 | sed "s/^ */[ncu T=$T] /"
done
