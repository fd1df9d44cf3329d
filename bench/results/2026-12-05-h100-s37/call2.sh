# Session 37, second call (tree 4c8a07d: persistent_kernel removed): does any dispatched or
# explicit n4 row ever give other bits (call 1's GpuFamily failed once for the persistent rows:
# post_pre_normal_norm, H = 4096, T = 4097, token 2955, residual_out included; session 35's team
# rows failed once at T = 4097 too)? Every variant of the family, repeated: a flake of the staged
# row (the first; every other is compared with it) shows as every other row failing at one token.
# Then graphs and batch invariance under the dispatch (pre's overlap window included), memcheck.
set -u
X="$BD/tests/test_gpu"
rep() {  # rep TAG VARIANTS REPEATS TIMEOUT FILTER (VARIANTS -none: every variant)
  MHC_TEST_VARIANTS=$2 timeout "$4" "$X" --gtest_brief=1 --gtest_repeat="$3" --gtest_filter="$5" > "$OUT/r/t-$1.log" 2>&1
  echo "[rep $1 rc=$? failed=$(grep -c '^\[  FAILED  \] Modes' "$OUT/r/t-$1.log") passed_lines=$(grep -c '^\[  PASSED' "$OUT/r/t-$1.log") $(grep 'ms total' "$OUT/r/t-$1.log" | tail -1)]"
  grep "outside tolerance" "$OUT/r/t-$1.log" | cut -c1-330 | head -12 | sed "s/^/[rep $1] /"
  grep "variant comparisons" "$OUT/r/t-$1.log" | sort | uniq -c | head -4 | sed "s/^/[rep $1] /"
}
rep all -none 4 70 'Modes/GpuFamily.*/post_pre_normal_norm'
rep allpre -none 3 45 'Modes/GpuFamily.*/pre_computed_norm'
run_t graphbatch 60 'Modes/GpuGraph.*:Modes/GpuBatch.*'
export MHC_TEST_VARIANTS=cuda_n4_staged,cuda_n4_overlap
san_t memcheck 45 'Modes/GpuFamily.*/post_pre_normal_norm'
grep -E "Invalid|ERROR SUMMARY" "$OUT/r/san-memcheck.log" | head -5 | sed "s/^/[memcheck] /"
