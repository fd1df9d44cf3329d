# Session 28 call 4: post_bulk_kernel with 2048-column segments where H allows (H = 4096 among
# the shipped sizes): two groups of 256 threads, 4 KB bulk copies, the same 120 KB ring (session
# 21's next form: fewer, larger copies). This tree (.snap) against main (.snap2), two rounds;
# the post suites and the sanitizers on the new instantiation (post grid at H = 4096).
# Also the staged plan forced at T = 512 / 768 for post_pre normal_fold (the dispatcher's
# threshold is 1024, below it unmeasured since session 22).
B=$BD/tools/mhc
build_tree .snap2 main &
run_t post 200 'Grid/GpuGrid.MatchesReference/post*_n4_H4096:Modes/GpuExactSums.*:Modes/GpuFamily.*/post*:Modes/GpuFusion.*'
wait
cat $OUT/r/builds-done
san_t memcheck 100 'Grid/GpuGrid.MatchesReference/post_n4_H4096:Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H4096' &
for round in 1 2; do
  for tree in main s2048; do
    X=$B; [ $tree = main ] && X=../build-main/tools/mhc
    timeout 40 $X bench --ops post,post_pre --modes full,normal_fold --H 4096 --T 1024,4096,16384 --budget-s 20 2>&1 | grep "^\[" | sed "s/^/[$tree $round] /"
  done
done
wait
timeout 40 ../build-main/tools/mhc bench --ops post_pre --modes normal_fold --H 4096,7168 --T 512,768 --variant post_pre.cuda_n4_staged --budget-s 15 2>&1 | grep "^\[" | sed "s/^/[staged] /"
timeout 40 ../build-main/tools/mhc bench --ops post_pre --modes normal_fold --H 4096,7168 --T 512,768 --budget-s 15 2>&1 | grep "^\[" | sed "s/^/[dispatch] /"
san_t racecheck 120 'Grid/GpuGrid.MatchesReference/post_n4_H4096'
san_t synccheck 60 'Grid/GpuGrid.MatchesReference/post_n4_H4096'
