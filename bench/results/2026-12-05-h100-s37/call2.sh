# Session 37, second call: how often persistent_kernel's bits differ (the first call's GpuFamily
# failed once: post_pre_normal_norm, H = 4096, T = 4097, token 2955), and whether the dispatched
# overlap rows ever do, each family repeated; then memcheck over the failing case.
set -u
X="$BD/tests/test_gpu"
rep() {  # rep TAG VARIANTS REPEATS TIMEOUT FILTER
  MHC_TEST_VARIANTS=$2 timeout "$4" "$X" --gtest_brief=1 --gtest_repeat="$3" --gtest_filter="$5" > "$OUT/r/t-$1.log" 2>&1
  echo "[rep $1 rc=$? failed=$(grep -c '^\[  FAILED  \] Modes' "$OUT/r/t-$1.log") passed_lines=$(grep -c '^\[  PASSED' "$OUT/r/t-$1.log") $(grep 'ms total' "$OUT/r/t-$1.log" | tail -1)]"
  grep "outside tolerance" "$OUT/r/t-$1.log" | cut -c1-330 | head -12 | sed "s/^/[rep $1] /"
}
# Every variant of the family (MHC_TEST_VARIANTS=-none excludes nothing): a flake of the staged
# row (the first, every other is compared with it) shows as every other row failing at one token.
rep all -none 8 100 'Modes/GpuFamily.*/post_pre_normal_norm'
rep allpre -none 5 70 'Modes/GpuFamily.*/pre_computed_norm'
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_persistent
san_t memcheck 90 'Modes/GpuFamily.*/post_pre_normal_norm'
grep -E "Invalid|ERROR SUMMARY" "$OUT/r/san-memcheck.log" | head -5 | sed "s/^/[memcheck] /"
