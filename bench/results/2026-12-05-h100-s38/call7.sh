# Session 38 call 7 (step `prefill`, tree 0aea065): post_pre at H = 7168, T = 97-128 as dispatched
# now (decode_chunk_kernel; before 0aea065 the fused two-kernel plan), and the suites over it.
# Invocation: bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 200 bash scripts/device_session.sh prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 230)
# Predicted: post_pre normal_fold / shifted_fold at H = 7168, T = 128 ~19.3 us (call 2's explicit
# decode_chunk row) against call 4's 25.06 / 25.13; T = 97 and 112 ~17-18.6 us.
set -u
timeout 40 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold,shifted_fold --H 7168 --T 97,112,128 --budget-s 30 \
  2>&1 | grep "^\["
run_t dispatch 100 'Modes/GpuBatch.TokenAlone*/post_pre_*norm:Modes/GpuDecode.*/post_pre_*'
