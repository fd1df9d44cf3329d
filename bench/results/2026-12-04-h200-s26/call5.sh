# Session 26 call 5 (the prefill step's list; the call runs `device_session.sh test prefill` on
# main c736e59, .snap2 = 75148b5): post_pre rows of the prefill record for both folded modes, then
# shifted_fold beside the tree before (the narrow post_collapse runs at H <= 4096 with the fold).
B=$BD/tools/mhc
( build_tree .snap2 main ) &
timeout 50 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 --T 1024,4096,16384 \
  --budget-s 40 --out $OUT/r/record-post_pre.jsonl 2>&1 | grep -E "^\[|copy" | sed 's/(p10[^)]*)//; s/, chain.*//'
wait; cat $OUT/r/builds-done
for t in main new main new; do
  bin=$([ $t = new ] && echo $B || echo ../build-main/tools/mhc)
  timeout 20 $bin bench --ops post_pre --modes shifted_fold --H 2048,4096 --T 1024,4096,16384 --budget-s 8 2>&1 | grep "^\[" | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[ab $t] /"
done
