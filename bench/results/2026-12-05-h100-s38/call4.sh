# Session 38 call 4 (steps `probe step prefill`, right after call 3 on the warm machine): the
# decode rows of #15 as dispatched after 1259209, the V4-Flash step, and probe 7 (the epilogue
# run twice: its second pass has a warm instruction cache).
# Invocation: cp <this file> .snap/call4.sh (the tree of call 3); carry [".deps", ".snap"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call4.sh'
#        MHC_S7_PROBE_LEVELS='4 6 7 0' MHC_S7_PROBE_OPS='post_pre normal_fold;pre normal_fold';
#        rm -rf /tmp/o; timeout 540 bash scripts/device_session.sh probe step prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 580)
# Predicted: T <= 112 as session 32's record (on the H200; this is an H100, so compare with call
#   1's and call 2's H100 rows); T = 128 at H = 5120 / 7168 2-3 us faster than before 1259209.
#   Probe 7 - probe 6 is the epilogue's warm cost: ~1.1 us if the Sinkhorn chain is all of it
#   (op_latency: 110.8 cycles an iteration), against probe 6 - probe 4 = 2.1 us cold (call 2).
set -u
timeout 200 "$BD/tools/mhc" bench --ops post_pre,pre,head,pre_broadcast --modes normal_fold,shifted_fold,learned_fold \
  --H 4096,5120,7168 --T 1,2,4,8,16,32,64,128 --budget-s 180 --out "$OUT/r/decode.jsonl" 2>&1 | grep "^\["
