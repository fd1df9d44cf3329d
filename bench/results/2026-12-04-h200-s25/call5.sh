# Session 25 call 5 (the prefill step's list; `device_session.sh prefill step`): .snap = main
# 4a09d8b, .snap2 = 9392a9f (before post_collapse_kernel). racecheck over the
# shifted post mode; the post_pre decode rows of both trees in turn (call 4's shifted rows at
# H = 5120 / 7168 ran 1-2 us above calls 1's: the decode kernel is the same code in both).
BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
bt() { cmake -S ../$1 -B ../build-$2 $CFG > $OUT/r/$2-configure.log 2>&1 && cmake --build ../build-$2 --target mhc_cli > $OUT/r/$2-build.log 2>&1; echo "[$2 build rc=$?]" >> $OUT/r/builds-done; }
( bt .snap2 before ) &
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $BD/tests/test_gpu --gtest_filter='Modes/GpuFusion.*/post_pre_shifted_norm' --gtest_brief=1 > $OUT/r/san-racecheck.log 2>&1
echo "[san racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' $OUT/r/san-racecheck.log | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/r/san-racecheck.log | head -1)]"
grep -E "Race reported" $OUT/r/san-racecheck.log | sed 's/(mhc::cuda[^)]*)//g; s/^/[race] /' | sort | uniq -c | sed 's/^ *//' | head
wait; cat $OUT/r/builds-done
for round in 1 2; do
for t in before main; do
  bin=$([ $t = main ] && echo $B || echo ../build-before/tools/mhc)
  timeout 30 $bin bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 1,4,16 --budget-s 12 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[dec$round $t] /"
done
done
