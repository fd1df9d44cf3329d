# Prepared in session 33 (not run): where pre_broadcast's time goes, and the mid-T post_pre chain.
# pre_broadcast is the one row far under its composition's byte ceiling (32.6-38.4% of copy at
# T = 16384 against 66.7%; docs/performance.md): Nsight Compute's duration, DRAM bytes and
# instructions of each kernel of one call (GEMM stage over fn_b, finalize_kernel,
# collapse_stream_kernel) at T = 1024 and 16384, H = 4096 and 7168; then the same for post_pre
# normal_fold at T = 1024 (four launches' ramps and tails; 52.6 us against 30.7 allowed).
# Tree: main (`bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh`), carry [".deps", ".snap"];
# run: cd .snap && OUT=/tmp/o MHC_S7_PREFILL='bash call.sh' bash scripts/device_session.sh prefill
# About 4 minutes.
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum
chain() {  # TAG OP MODE H T LAUNCHES: the kernels of one call after warm-up ones
  timeout 90 ncu --clock-control none -k regex:"post|gemm|finalize|collapse|decode" --launch-skip 24 --launch-count "$6" \
    --metrics $M "$BD/tools/mhc" bench --ops "$2" --modes "$3" --H "$4" --T "$5" --reps 2 --budget-s 20 > "$OUT/r/ncu-$1.txt" 2>&1
  echo "[ncu $1 rc=$?]"
  grep -E "^  [a-zA-Z_:<>]*kernel|duration|dram__|warps_active|inst_executed" "$OUT/r/ncu-$1.txt" | grep -v PROF |
    sed 's/(N4Params).*//; s/^ */  /' | sed "s/^/[ncu $1] /"
}
for H in 4096 7168; do
  for T in 1024 16384; do chain "pb-H$H-T$T" pre_broadcast normal_fold $H $T 6; done
done
chain pp-H4096-T1024 post_pre normal_fold 4096 1024 8
chain pp-H7168-T1024 post_pre normal_fold 7168 1024 8
