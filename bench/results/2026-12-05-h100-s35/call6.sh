# Session 35, call 6 (the last ~270 s of the budget after five refused starts): call 5's first two
# parts only. The mid-T rows of the overlap form against staged, then gemm_rb_kernel's mixes rows.
# Invocation: as call 5, but the log goes straight to the returned folder (so a cut call still
# returns what it measured): R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh';
# timeout 150 bash scripts/device_session.sh prefill > $R0/o.log 2>&1
for v in staged overlap; do
  timeout 12 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,7168 --T 512,1024,2048 \
    --variant pre.cuda_n4_$v --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
  timeout 10 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,7168 --T 1024,2048 \
    --variant post_pre.cuda_n4_$v --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
done
for v in staged staged_rb; do
  timeout 12 "$BD/tools/mhc" bench --ops mixes --modes plain --H 4096,7168 --T 4096,16384 \
    --variant mixes.cuda_n4_$v --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[$v] /"
done
