# Prepared for the next session's first device call (not run). Main at the end of
# session 28 (`bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh`) and the patched tree of (4) (.snap2); carry [".deps",
# ".snap", ".snap2"]; `device_session.sh prefill`). About 8 minutes.
# (1) GpuFamily of every mode on main (session 28 call 3's whole-family run hit its 240 s limit;
#     call 5 ran only the modes with a mixes stage), in two halves. Its H = 7168 sweep now has
#     T = 2641 (84d9a06: finalize_kernel's element form there), which has not run yet.
# (2) What binds finalize_kernel at H = 4096, T = 1024 (~9 us for 3.3 MB; its rounds of loads are
#     not it: call 5): Nsight Compute's warp states and launch statistics.
# (3) The staged plan's threshold for post_pre normal_fold at H = 5120 / 7168 (call 4: the staged plan
#     won at H = 7168, T = 768 by 2.8 us; lost at 512 and at H = 4096): forced against dispatched.
B=$BD/tools/mhc
run_t famA 200 'Modes/GpuFamily.*/mixes:Modes/GpuFamily.*/collapse*:Modes/GpuFamily.*/pre_*:Modes/GpuFamily.*/post'
run_t famB 200 'Modes/GpuFamily.*/post_*:Modes/GpuFamily.*/head*'
timeout 60 ncu --clock-control none -k regex:finalize_kernel --launch-skip 8 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --print-details all \
  $B bench --ops mixes --modes plain --H 4096 --T 1024 --reps 2 --budget-s 15 > $OUT/r/ncu-finalize.txt 2>&1
echo "[ncu finalize rc=$?]"
grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued|No Eligible|Stall|Achieved Occupancy|Block Limit" $OUT/r/ncu-finalize.txt | grep -v "==PROF" | sed "s/^ */[ncu finalize] /" | head -30
for v in staged dispatch; do
  V=""; [ $v = staged ] && V="--variant post_pre.cuda_n4_staged"
  timeout 40 $B bench --ops post_pre --modes normal_fold --H 5120,7168 --T 640,768,896,1024 $V --budget-s 16 2>&1 | grep "^\[" | sed "s/^/[$v] /"
done
# (4) finalize_kernel launched with programmatic dependent launch again (next-finalize-pdl.patch,
#     built beside: `bash scripts/snap.sh .snap2 HEAD bench/results/2026-12-04-h200-s28/next-finalize-pdl.patch`,
#     carry .snap2 too). Session 14 measured +83 us at T = 16384 with it and never found why; the
#     stages have all changed since. At T = 1024, finalize's launch is exposed (call 2: ~9 us for
#     3.3 MB). Predicted: -2 to -4 us at T <= 4096; at T = 16384 whatever session 14's loss was.
build_tree .snap2 fpdl
ab_rows 2 "this fpdl" 40 --ops mixes,pre,post_pre --modes plain,normal_fold --H 4096,7168 --T 1024,4096,16384 --budget-s 20
