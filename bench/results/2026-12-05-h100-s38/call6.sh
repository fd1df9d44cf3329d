# Session 38 call 6 (step `prefill`): post_bulk_kernel with 4 stages a group (three in flight,
# 160 KB of shared memory: post-bulk-4-stages.patch, tree .snap3) against 3 (this tree).
# Why: call 5's Nsight Compute (H = 4096, T = 16384): DRAM at 81.5% of peak, 44% of issue slots
# used, 56% of cycles with no eligible warp; 80 KB in flight a multiprocessor at 20.7 GB/s each
# means ~3.9 us from a refill's issue to its use. If the tiles wait on their copies (a bubble),
# a third stage in flight moves post toward the copy rate; if DRAM's queue is the limit, nothing moves.
# Predicted: +0 to +3% of copy at T >= 4096 (92 -> up to 95% at T = 16384).
# Invocation: bash scripts/snap.sh .snap3 HEAD post-bulk-4-stages.patch; cp <this file> .snap/call6.sh;
#   carry [".deps", ".snap", ".snap3"]; run: R0=$OUT; cd .snap && export OUT=/tmp/o
#   MHC_S7_PREFILL='bash call6.sh'; rm -rf /tmp/o; timeout 400 bash scripts/device_session.sh prefill
#   > $R0/o.log 2>&1; cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .  (timeout_s 440)
set -u
(build_tree .snap3 s4) &
wait
cat "$OUT/r/builds-done"
ab_rows 2 "this s4" 40 --ops post --modes full --H 4096,5120,7168 --T 1024,4096,16384 --budget-s 12
