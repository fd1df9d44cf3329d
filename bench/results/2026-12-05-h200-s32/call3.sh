# Session 32 call 3: decode_box_kernel dispatched for every op with a mixes stage but pre_broadcast
# where it runs (T <= 16, H <= 8192, H / 128 + T <= the multiprocessors), ahead of decode_chunk_kernel
# (dispatch-box.patch). The suites of the dispatched path, the sanitizers over decode_box_kernel,
# the decode rows and the V4-Flash step.
# Tree: `bash scripts/snap.sh .snap HEAD bench/results/2026-12-05-h200-s32/dispatch-box.patch;
# cp <this file> .snap/call.sh`, carry [".deps", ".snap"]; run:
#   cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' bash scripts/device_session.sh step prefill
M='*/mixes*:*/pre_*:*/post_pre_*:*/head_*'
run_t modes 200 "$(echo "$M" | sed 's#\*/#Modes/GpuGraph.*/#g'):$(echo "$M" | sed 's#\*/#Modes/GpuDeterminism.*/#g'):$(echo "$M" | sed 's#\*/#Modes/GpuNanInf.*/#g'):$(echo "$M" | sed 's#\*/#Modes/GpuBatch.*/#g'):Modes/GpuDecode.*:GpuErrors.*:Modes/GpuFusion.*:Modes/GpuExactSums.*"
run_t grids 150 'Grid/GpuGrid.MatchesReference/mixes*n4_H*:Grid/GpuGrid.MatchesReference/pre_*n4_H*:Grid/GpuGrid.MatchesReference/post_pre_*n4_H*:Grid/GpuGrid.MatchesReference/head_*n4_H*'
export MHC_TEST_VARIANTS=cuda_n4_decode_box
S='Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120:Grid/GpuGrid.MatchesReference/post_pre_shifted_norm_n4_H7168:Grid/GpuGrid.MatchesReference/head_learned_norm_n4_H4096'
san_t memcheck 50 "$S"
san_t racecheck 70 "$S"
grep -E "Race reported" "$OUT/r/san-racecheck.log" | sort | uniq -c | head -6 | sed 's/^/[racecheck] /'
san_t synccheck 50 "$S"
unset MHC_TEST_VARIANTS
timeout 60 "$BD/tools/mhc" bench --ops post_pre,pre,head,mixes --modes normal_fold,shifted_fold,learned_fold,plain \
  --H 4096,5120,7168 --T 1,2,4,8,16 --budget-s 45 --out "$OUT/r/decode-rows.jsonl" 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'
