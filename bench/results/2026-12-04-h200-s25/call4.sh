# Session 25 call 4 (the prefill step's list; the call runs `device_session.sh test prefill san` on
# main 4a09d8b): the post_pre rows of record, both folded modes, decode to prefill.
B=../build-s7/tools/mhc
timeout 75 $B bench --ops post_pre --modes normal_fold,shifted_fold --H 4096,5120,7168 \
  --T 1,4,16,32,64,128,1024,4096,16384 --budget-s 65 --out $OUT/r/record-post_pre.jsonl 2>&1 | grep -E "^\[|copy"
