BD=../build-s7; B=$BD/tools/mhc
for round in 1 2; do
  for v in cuda_n4 cuda_n4_staged; do
    timeout 40 $B bench --ops post_pre --modes normal_fold --H 4096,7168 --T 1024,2048,3072 --variant post_pre.$v --budget-s 10 > $OUT/r/thr-$v-$round.log 2>&1
    grep "^\[" $OUT/r/thr-$v-$round.log | sed 's/(p10[^)]*)//; s/, chain.*//' | sed "s/^/[thr $round] /"
  done
done
