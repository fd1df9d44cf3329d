BD=../build-s7; B=$BD/tools/mhc
( cmake -S ../.snap2 -B ../build-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DMHC_GTEST_SOURCE="$PWD/.deps/googletest" -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" -DMHC_BUILD_TESTS=OFF > $OUT/r/old-configure.log 2>&1 &&
  cmake --build ../build-old --target mhc_cli > $OUT/r/old-build.log 2>&1; echo "[prev build rc=$?]" > $OUT/r/old-done )
cat $OUT/r/old-done
for round in 1 2; do for t in new prev; do
  BB=$B; [ $t = prev ] && BB=../build-old/tools/mhc
  timeout 100 $BB bench --ops mixes,pre,post_pre --modes plain,normal_fold --H 4096,7168 --T 16384 --budget-s 30 2>&1 | grep "^\[" | sed "s/^/[$t r$round] /"
done; done
for t in new prev; do
  BB=$B; [ $t = prev ] && BB=../build-old/tools/mhc
  for H in 4096 7168; do
  timeout 120 ncu --clock-control none -k regex:"gemm|finalize" --launch-skip 8 --launch-count 6 --section SpeedOfLight \
    $BB bench --ops pre --modes normal_fold --H $H --T 16384 --reps 1 --budget-s 60 > $OUT/r/ncu-$t-$H.txt 2>&1
  awk '/^  [a-z]|^  void/{name=$0} /Duration/{print "[ncu '$t' '$H'] " substr(name,1,50), $3}' $OUT/r/ncu-$t-$H.txt | head -6
  done
done
