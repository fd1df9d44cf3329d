BD=../build-s7; B=$BD/tools/mhc
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
mkdir -p $OUT/r
timeout 100 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 1,4,16,32,64,128,768,1024,4096,16384 --budget-s 70 --out $OUT/r/record-post_pre.jsonl 2>&1 | r | sed "s/^/[rec] /"
run_t family 200 'Modes/GpuFamily.*'
run_t grid 80 'Grid/GpuGrid.MatchesReference/post_pre_*_n4_H*:Grid/GpuGrid.MatchesReference/collapse_*_n4_H*:Grid/GpuGrid.MatchesReference/head_*_n4_H*'
run_t rest 80 'Modes/GpuFusion.*:Modes/GpuBatch.*/post_pre*:Modes/GpuGraph.*:GpuErrors.*:Modes/GpuNanInf.*/post_pre*:Modes/GpuDeterminism.*/post_pre*:Modes/GpuDecode.*'
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuFusion.*/post_pre_shifted_norm' --gtest_brief=1 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/san-$tool.log | head -2 | tr '\n' ' ')]"
done
