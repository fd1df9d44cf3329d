# Prepared in session 33 (not run): pre_broadcast, the one row far under its composition's byte
# ceiling (32.6-38.4% of copy at T = 16384 against 66.7%; docs/performance.md), and the mid-T
# post_pre chain. Trees: `bash scripts/snap.sh .snap HEAD bench/results/2026-12-05-h200-s33/broadcast-load.patch;
# bash scripts/snap.sh .snap2 HEAD; cp <this file> .snap/call.sh`, carry [".deps", ".snap", ".snap2"];
# run: cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' bash scripts/device_session.sh prefill
# About 7 minutes.
# broadcast-load.patch: collapse_stream_kernel loads a broadcast x (the embedding at stream stride
# 0) once a vector instead of once for each of the 4 streams (4 loads of the same 16 bytes today,
# L2 requests unless L1 merges them); the same values, so the same bits.
# 1. bits: the grid's pre_broadcast cases at H = 4096 / 7168 (all six modes), GpuFamily's.
# 2. Nsight Compute over each kernel of one pre_broadcast call (GEMM stage over fn_b,
#    finalize_kernel, collapse_stream_kernel) at T = 1024 / 16384, H = 4096 / 7168, both trees at
#    16384: duration, DRAM bytes, instructions, and L2 sectors read (lts__t_sectors_srcunit_tex_op_read);
#    then one post_pre normal_fold call at T = 1024 (four launches; 52.6 us against 30.7 allowed).
# 3. rows against base, two rounds: pre_broadcast, and collapse carried_fold and pre normal_fold
#    (the regular path's code is unchanged but for one block-uniform branch; they should be level).
# Predicted: if the 4 loads reach L2 today, the collapse's L2 read sectors fall ~4x and
# pre_broadcast gains up to the collapse's share of its time; if L1 merged them, level.
(build_tree .snap2 base) &
export MHC_TEST_VARIANTS=cuda_n4b_staged
F=""
for m in computed computed_norm carried carried_norm identity identity_norm; do
  for H in 4096 7168; do F="$F:Grid/GpuGrid.MatchesReference/pre_broadcast_${m}_n4_H$H"; done
done
run_t bgrid 150 "${F#:}"
unset MHC_TEST_VARIANTS
run_t bfam 150 'Modes/GpuFamily.*/pre_broadcast*'
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum
chain() {  # TAG BINARY OP MODE H T LAUNCHES: the kernels of one call after warm-up ones
  timeout 90 ncu --clock-control none -k regex:"post|gemm|finalize|collapse|decode" --launch-skip 24 --launch-count "$7" \
    --metrics $M "$2" bench --ops "$3" --modes "$4" --H "$5" --T "$6" --reps 2 --budget-s 20 > "$OUT/r/ncu-$1.txt" 2>&1
  echo "[ncu $1 rc=$?]"
  grep -E "^  [a-zA-Z_:<>]*kernel|duration|dram__|lts__|warps_active|inst_executed" "$OUT/r/ncu-$1.txt" | grep -v PROF |
    sed 's/(N4Params).*//; s/^ */  /' | sed "s/^/[ncu $1] /"
}
for H in 4096 7168; do
  for T in 1024 16384; do chain "pb-H$H-T$T" "$BD/tools/mhc" pre_broadcast normal_fold $H $T 6; done
done
wait
cat $OUT/r/builds-done
chain pb-base-H4096-T16384 ../build-base/tools/mhc pre_broadcast normal_fold 4096 16384 6
chain pp-H4096-T1024 "$BD/tools/mhc" post_pre normal_fold 4096 1024 8
for round in 1 2; do
  for tree in this base; do
    x="$BD/tools/mhc"; [ $tree = base ] && x=../build-base/tools/mhc
    timeout 30 $x bench --ops pre_broadcast --modes normal_fold --H 4096,5120,7168 --T 1024,4096,16384 --budget-s 20 \
      2>&1 | grep "^\[" | sed "s/^/[$tree $round] /"
    timeout 25 $x bench --ops collapse,pre --modes carried_fold,normal_fold --H 4096,7168 --T 4096,16384 --budget-s 15 \
      2>&1 | grep "^\[" | sed "s/^/[$tree $round] /"
  done
done
