BD=../build-s7; B=$BD/tools/mhc
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE=$PWD/.deps/googletest -DMHC_CLI11_INCLUDE=$PWD/.deps/cli11 -DMHC_BUILD_TESTS=OFF"
( cmake -S ../.snap2 -B ../build-s20a $CFG > $OUT/r/a-configure.log 2>&1 && cmake --build ../build-s20a --target mhc_cli > $OUT/r/a-build.log 2>&1; echo "[branch build rc=$?]" > $OUT/r/a-done ) &
( cmake -S . -B ../build-probe $CFG -DCMAKE_CUDA_FLAGS=-DMHC_GEMM_PROBE > $OUT/r/p-configure.log 2>&1 && cmake --build ../build-probe --target mhc_cli > $OUT/r/p-build.log 2>&1; echo "[probe build rc=$?]" > $OUT/r/p-done ) &
timeout 60 ncu --clock-control none -k regex:"gemm_group|post_bulk" --launch-skip 4 --launch-count 2 --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
  $B bench --ops post_pre --modes normal_fold --H 4096 --T 16384 --reps 1 --budget-s 60 > $OUT/r/ncu-issue.txt 2>&1
echo "[ncu rc=$?]"
grep -E "^  [a-z_:<>0-9, ]+\(|Duration|DRAM Throughput|Issue Slots Busy|Issued Ipc|No Eligible|Eligible Warps|Active Warps Per|Stall|Warp Cycles Per Issued" $OUT/r/ncu-issue.txt | sed "s/^/[ncu] /" | head -40
wait
cat $OUT/r/a-done $OUT/r/p-done
A=../build-s20a/tools/mhc; P=../build-probe/tools/mhc
for round in 1 2; do
  for t in main branch; do
    BB=$B; [ $t = branch ] && BB=$A
    timeout 60 $BB bench --ops mixes,pre,post_pre --modes plain,normal_fold --H 4096,7168 --T 4096,16384 --budget-s 40 > $OUT/r/ab-$t-$round.log 2>&1
    grep "^\[" $OUT/r/ab-$t-$round.log | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t $round] /"
  done
done
pr() { # tag, env..., then bench args
  local tag=$1; shift
  env "$@" timeout 40 $P bench --ops post_pre --modes normal_fold --H 4096,7168 --T 16384 --budget-s 20 > $OUT/r/probe-$tag.log 2>&1
  grep "^\[" $OUT/r/probe-$tag.log | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[probe $tag] /"
}
pr base
for Pn in 132 100 84 68; do pr post$Pn MHC_STAGED_SKIP=gfc MHC_PROBE_SPLIT="$Pn 132 0"; done
for G in 132 64 48 32; do pr gemm$G MHC_STAGED_SKIP=pfc MHC_PROBE_SPLIT="132 $G 0"; done
pr seq-pg MHC_STAGED_SKIP=fc MHC_PROBE_SPLIT="132 132 0"
for pg in "100 32" "84 48" "68 64"; do set -- $pg; pr conc$1-$2 MHC_STAGED_SKIP=fc MHC_PROBE_SPLIT="$1 $2 1"; done
pr full-conc84-48 MHC_PROBE_SPLIT="84 48 1"
pr full-conc68-64 MHC_PROBE_SPLIT="68 64 1"
