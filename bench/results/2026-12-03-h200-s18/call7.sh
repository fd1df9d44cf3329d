BD=../build-s7; B=$BD/tools/mhc
for tool in memcheck racecheck synccheck; do
  timeout 35 compute-sanitizer --tool $tool --kernel-name kns=post_gemm_kernel $B bench --ops post_pre --modes normal_fold --H 4096 --T 1921 --variant post_pre.cuda_n4_fused --reps 1 --budget-s 5 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Hazard' $OUT/r/san-$tool.log | head -3 | tr '\n' ' ') rows: $(grep -c 'post_pre.cuda_n4_fused' $OUT/r/san-$tool.log)]"
done
