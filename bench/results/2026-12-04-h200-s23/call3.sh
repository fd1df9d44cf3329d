BD=../build-s7; B=$BD/tools/mhc
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
for v in cuda_n4 cuda_n4_staged; do
  timeout 30 $B bench --ops post_pre --modes normal_fold --H 4096,7168 --T 256,512,768 --variant post_pre.$v --budget-s 8 2>&1 | r | sed "s/^/[thr $v] /"
done
run_t family 200 'Modes/GpuFamily.*'
run_t decode 40 'Modes/GpuDecode.*'
run_t grid 90 'Grid/GpuGrid.MatchesReference/post_pre_*_n4_H*'
run_t batch 40 'Modes/GpuBatch.*/post_pre*'
run_t graph 30 'Modes/GpuGraph.*:GpuErrors.*'
timeout 30 $BD/tests/test_engine --gtest_brief=1 > $OUT/r/test-engine.log 2>&1; echo "[test_engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/test-engine.log | head -2 | tr '\n' ' ')]"
