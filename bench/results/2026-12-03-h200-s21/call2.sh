BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
for v in "s4 4 0" "s5 5 0" "d4 4 1" "d5 5 1"; do set -- $v
  ( cmake -S . -B ../build-$1 $CFG -DCMAKE_CUDA_FLAGS="-DMHC_POST_BULK_STAGES=$2 -DMHC_POST_BULK_DEFER=$3" > $OUT/r/$1-configure.log 2>&1 && cmake --build ../build-$1 --target mhc_cli > $OUT/r/$1-build.log 2>&1; echo "[$1 build rc=$?]" > $OUT/r/$1-done ) &
done
wait; cat $OUT/r/*-done
for round in 1 2; do
  for t in s3 s4 s5 d4 d5; do
    BB=../build-$t/tools/mhc; [ $t = s3 ] && BB=$B
    timeout 40 $BB bench --ops post,post_pre --modes full,normal_fold --H 4096,7168 --T 4096,16384 --budget-s 18 > $OUT/r/ab-$t-$round.log 2>&1
    grep "^\[" $OUT/r/ab-$t-$round.log | sed 's/(p10[^)]*)//; s/, chain.*//; s/ of copy, post.*//; s/ of copy, post_pre.*//' | sed "s/^/[ab $t $round] /"
  done
done
for t in s3 d4; do
  BB=../build-$t/tools/mhc; [ $t = s3 ] && BB=$B
  timeout 60 ncu --clock-control none -k regex:"post_bulk" --launch-skip 2 --launch-count 1 --section WarpStateStats --section SpeedOfLight --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio $BB bench --ops post --modes full --H 4096 --T 16384 --reps 1 --budget-s 20 > $OUT/r/ncu-post-$t.txt 2>&1
  grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued|stalled" $OUT/r/ncu-post-$t.txt | awk '$NF+0 > 0.05 || /Duration|DRAM|Cycles/' | sed "s/^/[ncu $t] /"
done
