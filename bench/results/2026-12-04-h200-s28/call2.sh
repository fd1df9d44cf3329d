# Session 28 call 2 (main 0b82c30, unchanged kernels). (1) The GPU suites that had not run on
# gemm_group_kernel's empty mbarriers (5927c88): decode, graphs, errors, NaN/Inf, exact sums,
# fusion, Sinkhorn, determinism and batch of every mode, the n4 grids at H = 4096 / 5120 / 16384
# and the other grids. (2) The mid-range T (256-4096), where most rows above the 1.3x bound are:
# the rows, and each kernel of one staged call under Nsight Compute (duration, DRAM bytes,
# instructions) at T = 1024 / 2048 / 4096, H = 4096, so the time splits into its stages.
B=$BD/tools/mhc
run_t decode 200 'Modes/GpuDecode.*:Modes/GpuGraph.*:GpuErrors.*:Modes/GpuNanInf.*:Modes/GpuExactSums.*:Modes/GpuFusion.*:GpuSinkhorn.*'
run_t det 150 'Modes/GpuDeterminism.*:Modes/GpuBatch.*'
run_t grids4 200 'Grid/GpuGrid.MatchesReference/*n4_H4096:Grid/GpuGrid.MatchesReference/*n4_H5120:Grid/GpuGrid.MatchesReference/*n4_H16384'
run_t grids 60 'Grid/GpuGrid.*-Grid/GpuGrid.MatchesReference/*n4_H*'
timeout 60 $B bench --ops post_pre,mixes,post,collapse --modes normal_fold,plain,full,carried_fold --H 4096,7168 --T 256,512,1024,2048 --budget-s 45 2>&1 | grep "^\[" | sed "s/^/[midT] /"
for T in 1024 2048 4096; do
  for op in post_pre mixes; do
    m=normal_fold; [ $op = mixes ] && m=plain
    timeout 60 ncu --clock-control none -k regex:"post_|gemm_|finalize_|collapse_" --launch-skip 40 --launch-count 8 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__inst_executed.sum,launch__grid_size \
      $B bench --ops $op --modes $m --H 4096 --T $T --reps 2 --budget-s 20 > $OUT/r/ncuchain-$op-$T.txt 2>&1
    echo "[ncuchain $op T=$T rc=$?]"
    grep -E "_kernel|duration|dram__|inst_executed|grid_size" $OUT/r/ncuchain-$op-$T.txt | grep -v "==PROF" | sed "s/^ */[ncu $op $T] /; s/(N4Params).*//; s/(unnamed>::[A-Za-z]*Params).*//" | head -48
  done
done
