# Session 41 call 4 (a `prefill` step command list): pre_broadcast's collapse loading the
# embedding row once a vector instead of once a stream (collapse_token's one_row), this tree
# (.snap: b3f3c6e + broadcast-one-row.patch) against base (.snap2: b3f3c6e).
# Predicted: the same bits (pre_broadcast's grid, family, graph, batch and decode cases pass);
# collapse_stream_kernel's L2 read sectors in pre_broadcast about 1/4 of base's (2 H bytes a token
# instead of 4 x 2 H); its time down if those loads bound it; every other row unchanged.
set -u
build_tree .snap2 base &
run_t bcast 200 'Grid/GpuGrid.MatchesReference/pre_broadcast*:Modes/*.*/pre_broadcast*:Modes/GpuFamily.*/*'
ncu_chain() {  # ncu_chain TREE_BIN TAG: each kernel of one pre_broadcast call (H = 4096, T = 16384)
  timeout 120 ncu --clock-control none -k regex:"gemm|finalize|collapse_stream" --launch-skip 15 --launch-count 3 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,sm__inst_executed.sum \
    "$1" bench --ops pre_broadcast --modes normal_fold --H 4096 --T 16384 --reps 2 --budget-s 20 > "$OUT/r/ncuchain-$2.txt" 2>&1
  echo "[ncuchain $2 rc=$?]"
  grep -E "_kernel|duration|dram__|lts__|inst_executed" "$OUT/r/ncuchain-$2.txt" | grep -v PROF | sed 's/^ */  /; s/(N4Params).*//'
}
ncu_chain "$BD/tools/mhc" this
wait
cat "$OUT/r/builds-done" 2>/dev/null
ncu_chain ../build-base/tools/mhc base
ab_rows 2 "base this" 90 --ops pre_broadcast --modes normal_fold --H 4096,5120,7168 --T 1,16,1024,4096,16384 --budget-s 40
ab_rows 1 "base this" 60 --ops pre,post_pre,collapse --modes normal_fold,carried_fold --H 7168 --T 16384 --budget-s 20
