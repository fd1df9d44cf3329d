# Prepared in session 42 (no device was lent) for the call after session 41's next-call.sh: a
# `prefill` step command list, run in the tree that will be HEAD (.snap if broadcast-product.patch
# passed that call, else .snap2), right after it so that the warm machine's build is reused:
#   cp <this file> .snap/call.sh; carry [".deps", ".snap", ".snap2"];
#   run: cd .snap && export MHC_S7_PREFILL='bash call.sh';
#        timeout 560 bash scripts/device_session.sh prefill > $OUT/o.log 2>&1
# (a fresh machine rebuilds the tree first: ~3 minutes more).
# Why: between T = 128 and 8192, 53 of the H200 record's 72 rows are over the generic bound, worst
# pre_broadcast at T = 1024 (3.8x at H = 5120), where its time is the same on the H100 and the
# H200: a latency chain (bench/results/2026-12-05-nodevice-s42/README.md).
# 1. The overlap rows of head and pre_broadcast at mid T, never measured there. pre's overlap row
#    has been dispatched at T = 1024-2048 since session 35 (-16% at H = 4096, T = 1024, H100).
#    If they are faster, apply dispatch-mid-t.patch (narrowed to the T and H where they win).
#    Predicted from pre's case: -5 to -16% at T = 1024-2048, largest at H = 4096.
# 2. Where T = 1024's time goes: each kernel alone under Nsight Compute, pre_broadcast at H = 5120
#    and the mixes stage at H = 4096 (the mixes stage is 2.0x its bound there).
set -u
M='--H 4096,5120,7168 --T 512,1024,2048 --budget-s 15'
# variant_rows OP MODE VARIANT...: the rows of each forced variant, one process each.
variant_rows() {
  local op=$1 mode=$2 v
  shift 2
  for v in "$@"; do
    timeout 40 "$BD/tools/mhc" bench --ops $op --modes $mode --variant $v $M 2>&1 | rows | sed "s/^/[$v] /"
  done
}
variant_rows pre_broadcast normal_fold pre_broadcast.cuda_n4b_staged pre_broadcast.cuda_n4b_overlap
variant_rows head learned_fold head.cuda_n4_staged head.cuda_n4_overlap
ncu_kernels bcast1024 "gemm|finalize|collapse_stream" 15 3 --ops pre_broadcast --modes normal_fold --H 5120 --T 1024
ncu_kernels mixes1024 "gemm|finalize" 15 3 --ops mixes --modes plain --H 4096 --T 1024
# 3. Session 41's record had the collapse stage at H = 7168, T = 16 / 32 at 6.78 / 7.11 us against
#    session 32's 5.80 / 6.06, with T = 1 / 4 / 64 / 128 within 2% and T = 32 above T = 64. The
#    kernel's SASS is the same as session 32's but for parameter offsets (session 42): predicted
#    5.8-6.1 us again, i.e. a disturbance of that run.
timeout 40 "$BD/tools/mhc" bench --ops collapse --modes carried_fold --H 7168 --T 1,16,32,64 --budget-s 15 2>&1 |
  rows | sed "s/^/[collapse 7168] /"
