# Prepared for the next session's first device call (not run): .snap = main with both patches
# applied (git apply next-s24-bulk3.patch next-s24-decode-pre.patch), .snap2 = main, both carried;
# run as the session-24 calls were (scripts/device_session.sh prefill with this as call.sh).
BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
bt() { cmake -S ../$1 -B ../build-$2 $CFG > $OUT/r/$2-configure.log 2>&1 && cmake --build ../build-$2 --target mhc_cli > $OUT/r/$2-build.log 2>&1; echo "[$2 build rc=$?]" >> $OUT/r/builds-done; }
( bt .snap2 main ) &
run_t family 90 'Modes/GpuFamily.*/post_pre*'
run_t det 90 'Modes/GpuDeterminism.*/post_pre*:Modes/GpuDecode.*:Modes/GpuFusion.*/post_pre_shifted*:Modes/GpuBatch.*/post_pre_shifted*:Grid/GpuGrid.MatchesReference/post_pre_shifted*_n4_H*'
wait; cat $OUT/r/builds-done
r() { grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
for t in main new; do
  bin=$([ $t = new ] && echo $B || echo ../build-main/tools/mhc)
  timeout 40 $bin bench --ops post_pre --modes shifted_fold,shifted --H 4096,5120,7168 --T 4096,16384 --budget-s 16 2>&1 | r | sed "s/^/[ab $t] /"
  timeout 30 $bin bench --ops post_pre --modes shifted_fold,normal_fold --H 4096,5120,7168 --T 1,4,16 --budget-s 10 2>&1 | r | sed "s/^/[dec $t] /"
done
for tool in memcheck racecheck synccheck; do
  timeout 30 compute-sanitizer --tool $tool --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuFusion.*/post_pre_shifted_norm' --gtest_brief=1 > $OUT/r/san-$tool.log 2>&1
  echo "[san $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/r/san-$tool.log | tail -1)]"
done
