# Session 32 call 2 (the session's device time allowed one more call after call 1: session 31's
# next-call-box.sh, cut to fit ~9 minutes, on a tree with decode_box_kernel dispatched).
# Tree: `bash scripts/snap.sh .snap HEAD bench/results/2026-12-05-h200-s32/dispatch-box.patch;
# cp <this file> .snap/call.sh` (dispatch-box.patch: decode_box_kernel ahead of decode_chunk_kernel
# for mixes, pre, post_pre and head wherever it runs: T <= 16, H <= 8192, H / 128 + T <= the
# multiprocessors), carry [".deps", ".snap"]; run:
#   cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' bash scripts/device_session.sh prefill
# Rows are timed by explicit variant (--variant), so the patch changes only what the suites'
# dispatched calls run. Left out of session 31's list: the 16-lane comb in decode_chunk_kernel and
# the T = 32-128 rows (call 1's op_latency: a shuffle costs ~26 cycles, so the 16-lane form's chain
# is ~215 cycles an iteration against the one-thread form's ~111) and the Sinkhorn forms probe.
# Predicted (session 31): decode_box post_pre normal_fold / shifted_fold -0.6 to -1.2 us at T = 1
# (7.47 -> ~6.3-6.9 us at H = 4096), about as much at T = 16, pre and head alike; the lanes form
# slower than decode_box by ~2 us x (215 - 111) / 111 if the comb is phase 2's longer branch.
grid() {  # the n4 grid cases of the modes given, at the H the decode kernels take
  local f="" m H
  for m in "$@"; do for H in 4096 7168; do f="$f:Grid/GpuGrid.MatchesReference/${m}_n4_H$H"; done; done
  echo "${f#:}"
}
rows() {  # ROUND: the three forms in the same process order
  for v in decode_chunk decode_box decode_box_lanes; do
    timeout 25 "$BD/tools/mhc" bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 1,4,16 \
      --variant post_pre.cuda_n4_$v --budget-s 12 2>&1 | grep "^\[" | sed "s/^/[$v $1] /"
    timeout 10 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,7168 --T 1,16 \
      --variant pre.cuda_n4_$v --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[$v $1] /"
    timeout 10 "$BD/tools/mhc" bench --ops head --modes learned_fold --H 4096,7168 --T 1,16 \
      --variant head.cuda_n4_$v --budget-s 4 2>&1 | grep "^\[" | sed "s/^/[$v $1] /"
  done
}
# 1. bits: decode_box and its lanes form against decode_chunk, then against the reference
export MHC_TEST_VARIANTS=cuda_n4_decode_chunk,cuda_n4_decode_box,cuda_n4_decode_box_lanes
run_t boxmix 40 'Modes/GpuFamily.*/mixes'
ok=0; grep -q '^\[  PASSED  \] 1 test' "$OUT/r/t-boxmix.log" && ok=1
[ $ok = 1 ] || { echo "[box] the first family test failed or hung: nothing more"; exit 0; }
run_t boxfam 90 'Modes/GpuFamily.*/pre_*:Modes/GpuFamily.*/post_pre_*:Modes/GpuFamily.*/head_learned*:GpuSinkhorn.*'
export MHC_TEST_VARIANTS=cuda_n4_decode_box,cuda_n4_decode_box_lanes
run_t boxgrid 60 "$(grid mixes pre_computed_norm post_pre_normal_norm post_pre_shifted_norm head_learned_norm)"
unset MHC_TEST_VARIANTS
# 2. rows, round 1; the V4-Flash step as dispatched (decode_box) and with decode_chunk forced
rows 1
for f in "" cuda_n4_decode_chunk; do
  timeout 30 "$BD/tools/mhc" run --graph-step 1,4,16 ${f:+--family $f} 2>&1 | grep -v "^{" | sed "s/^/[step ${f:-dispatch}] /"
done
# 3. the three tools over decode_box_kernel alone (T <= 16 of three grid cases)
export MHC_TEST_VARIANTS=cuda_n4_decode_box
S='Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120:Grid/GpuGrid.MatchesReference/post_pre_shifted_norm_n4_H7168:Grid/GpuGrid.MatchesReference/head_learned_norm_n4_H4096'
san_t memcheck 40 "$S"
san_t racecheck 50 "$S"
grep -E "Race reported" "$OUT/r/san-racecheck.log" | sed 's/(mhc::.*//' | sort | uniq -c | head -6 | sed 's/^/[racecheck] /'
san_t synccheck 40 "$S"
unset MHC_TEST_VARIANTS
# 4. the dispatched path's suites (decode_box at T <= 16): graphs, determinism, NaN / Inf, batch,
#    the decode suite (1000 replays, two streams with two workspaces), fusion
M='*/mixes*:*/pre_*:*/post_pre_*:*/head_*'
run_t modes 100 "$(echo "$M" | sed 's#\*/#Modes/GpuGraph.*/#g'):$(echo "$M" | sed 's#\*/#Modes/GpuDeterminism.*/#g'):$(echo "$M" | sed 's#\*/#Modes/GpuNanInf.*/#g'):$(echo "$M" | sed 's#\*/#Modes/GpuBatch.*/#g'):Modes/GpuDecode.*:Modes/GpuFusion.*"
# 5. rows, round 2
rows 2
