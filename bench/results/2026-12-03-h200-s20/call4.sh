BD=../build-s7
timeout 150 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuBatch.*:Grid/GpuGrid.MatchesReference/pre_broadcast*_n4_H5120:Grid/GpuGrid.MatchesReference/post_pre*_n4_H5120:Modes/GpuExactSums.*' > $OUT/r/t1.log 2>&1
echo "[batch+grid5120+exact rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t1.log | head -2 | tr '\n' ' ') $(grep -c '^\[       OK' $OUT/r/t1.log) ok]"
grep -E "^\[  FAILED" $OUT/r/t1.log | head -8 | sed 's/^/[t1] /'
timeout 100 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter='Modes/GpuDecode.*' > $OUT/r/t2.log 2>&1
echo "[decode rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/t2.log | head -2 | tr '\n' ' ')]"
grep -E "^\[  FAILED" $OUT/r/t2.log | head -8 | sed 's/^/[t2] /'
