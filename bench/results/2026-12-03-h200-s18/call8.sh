BD=../build-s7; B=$BD/tools/mhc
timeout 70 compute-sanitizer --tool racecheck --kernel-name kns=post_gemm_kernel $B bench --ops post_pre --modes normal_fold --H 4096 --T 600 --variant post_pre.cuda_n4_fused --reps 1 --budget-s 5 > $OUT/r/san-racecheck.log 2>&1
echo "[san racecheck T=600 rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|Hazard' $OUT/r/san-racecheck.log | head -3 | tr '\n' ' ') rows: $(grep -c 'post_pre.cuda_n4_fused' $OUT/r/san-racecheck.log)]"
