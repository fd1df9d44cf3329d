# Session 26 call 3: where post_collapse_kernel's cycles go (stall reasons by SASS line), to learn why
# call 2's two forms with 6-15% fewer instructions a vector were not faster. .snap = main + the two
# prepared patches (narrow post_collapse, 1024-column post_bulk); .snap2 = main.
B=$BD/tools/mhc
build_tree .snap2 main; cat $OUT/r/builds-done
M=../build-main/tools/mhc
MET='regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$'
prof() {  # TAG BIN KERNEL OP MODE H
  timeout 60 ncu --clock-control none -k regex:$3 --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section SourceCounters --section MemoryWorkloadAnalysis --metrics "$MET" \
    -o $OUT/r/ncu-$1 $2 bench --ops $4 --modes $5 --H $6 --T 16384 --reps 2 --budget-s 10 > $OUT/r/ncu-$1.log 2>&1
  echo "[ncu $1 rc=$?]"
  ncu -i $OUT/r/ncu-$1.ncu-rep --print-details all > $OUT/r/ncu-$1.txt 2>&1
  grep -E "Duration|DRAM Throughput|Issued Warp|Warp Cycles Per Issued|Executed Instructions  " $OUT/r/ncu-$1.txt | sed "s/^/[$1] /" | head -6
  grep -E "issue_stalled_.*ratio" $OUT/r/ncu-$1.txt | awk -v t=$1 '$NF+0 >= 0.05 {print "[" t "] " $1, $NF}'
  ncu -i $OUT/r/ncu-$1.ncu-rep --page source --csv --print-source sass > $OUT/r/ncu-$1-sass.csv 2>&1; echo "[$1 sass csv $(wc -l < $OUT/r/ncu-$1-sass.csv) lines]"
}
prof pc4096fold $M post_collapse post_pre shifted_fold 4096
prof pc4096 $M post_collapse post_pre shifted 4096
prof pc7168fold $M post_collapse post_pre shifted_fold 7168
prof narrow4096fold $B post_collapse post_pre shifted_fold 4096
prof bulk4096 $M post_bulk post full 4096
