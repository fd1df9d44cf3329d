BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
bt() { cmake -S ../$1 -B ../build-$2 $CFG > $OUT/r/$2-configure.log 2>&1 && cmake --build ../build-$2 --target mhc_cli > $OUT/r/$2-build.log 2>&1; echo "[$2 build rc=$?]" >> $OUT/r/builds-done; }
( bt .snap2 regs ) &
run_t family 60 'Modes/GpuFamily.*/post_pre_shifted*'
run_t det 60 'Modes/GpuDeterminism.*/post_pre*:Modes/GpuFusion.*/post_pre_shifted*:Modes/GpuBatch.*/post_pre_shifted*:Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
wait; cat $OUT/r/builds-done
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
timeout 40 ../build-regs/tools/mhc bench --ops post_pre --modes shifted_fold,shifted --H 4096,5120,7168 --T 4096,16384 --budget-s 16 --out $OUT/r/ab-regs.jsonl 2>&1 | r | sed "s/^/[ab regs] /"
timeout 40 $B bench --ops post_pre --modes shifted_fold,shifted --H 4096,5120,7168 --T 4096,16384 --budget-s 16 --out $OUT/r/ab-bulk.jsonl 2>&1 | r | sed "s/^/[ab bulk] /"
for tool in memcheck racecheck synccheck; do
  timeout 30 compute-sanitizer --tool $tool --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuFusion.*/post_pre_shifted_norm' --gtest_brief=1 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/san-$tool.log | head -2 | tr '\n' ' ')]"
  grep -E "Race reported between" $OUT/r/san-$tool.log | grep -c post_collapse | sed "s/^/[san $tool post_collapse reports] /"
done
