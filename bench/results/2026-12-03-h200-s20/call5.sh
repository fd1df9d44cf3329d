BD=../build-s7; B=$BD/tools/mhc
timeout 120 ncu --clock-control none -k regex:"post_bulk" --launch-skip 2 --launch-count 1 --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis --section SchedulerStats \
  $B bench --ops post --modes full --H 4096 --T 16384 --reps 1 --budget-s 30 > $OUT/r/ncu-post.txt 2>&1
echo "[ncu rc=$?]"
grep -E "Duration|Stall|Warp Cycles|Eligible|Issued Warp|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Mem Pipes|Branch|Uncoalesced|shared|Shared" $OUT/r/ncu-post.txt | sed 's/^/[ncu] /' | head -60
grep -A3 -E "Warp Stall Sampling|stall_" $OUT/r/ncu-post.txt | sed 's/^/[ncu-s] /' | head -40
