BD=../build-s7; B=$BD/tools/mhc
( cmake -S ../.snap2 -B ../build-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DMHC_GTEST_SOURCE="$PWD/.deps/googletest" -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" -DMHC_BUILD_TESTS=OFF > $OUT/r/old-configure.log 2>&1 &&
  cmake --build ../build-old --target mhc_cli > $OUT/r/old-build.log 2>&1; echo "[old build rc=$?]" > $OUT/r/old-done )
cat $OUT/r/old-done
for t in new old; do
  BB=$B; [ $t = old ] && BB=../build-old/tools/mhc
  for H in 4096 7168; do
  timeout 120 ncu --clock-control none -k regex:"gemm|finalize|collapse_stream|post_bulk" --launch-skip 8 --launch-count 8 --section SpeedOfLight --section LaunchStats --section Occupancy \
    $BB bench --ops pre --modes normal_fold --H $H --T 16384 --reps 1 --budget-s 60 > $OUT/r/ncu-$t-$H.txt 2>&1
  echo "[ncu $t $H rc=$?]"
  grep -E "^  [a-z_:<>0-9, ]+\(|Duration|DRAM Throughput|Registers Per|Grid Size|Achieved Occupancy" $OUT/r/ncu-$t-$H.txt | sed "s/^/[ncu $t $H] /" | head -48
  done
done
