BD=../build-s7; B=$BD/tools/mhc
run_t() { # tag timeout filter
  timeout $2 $BD/tests/test_gpu --gtest_brief=1 --gtest_filter="$3" > $OUT/r/t-$1.log 2>&1
  echo "[tests $1 rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $OUT/r/t-$1.log | head -3 | tr '\n' ' ')]"
  grep -E "^\[  FAILED" $OUT/r/t-$1.log | head -10 | sed "s/^/[tests $1] /"
}
run_t family 150 'Modes/GpuFamily.*'
run_t grids 170 'Grid/GpuGrid.MatchesReference/post_n4_H*:Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H*:Grid/GpuGrid.MatchesReference/post_pre_shifted_n4_H*:Grid/GpuGrid.MatchesReference/post_broadcast_n4_H*'
run_t edge 150 'Modes/GpuNanInf.*:Modes/GpuDecode.*:Modes/GpuExactSums.*/post'
grep -h "variant comparisons" $OUT/r/t-*.log | sort | uniq | head -30 | sed 's/^/[counts] /'
