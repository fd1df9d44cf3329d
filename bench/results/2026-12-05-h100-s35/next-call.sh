# Prepared in session 35 (not run): the first call of the next session with a device, preferably
# the H200. Steps `test` (the GPU suites on main as it is: pre's overlap window of a78d099 and
# session 33's removal of decode_box have not been through them) then `prefill` with this list:
#   bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 560 bash scripts/device_session.sh test prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 595)
# Then, as a second call, `record` (the benchmark of record; docs/performance.md's table).
# 1. The overlap rows at mid T on this card (pre's window 1024..2048 was set on an H100).
# 2. The tail kernel's placement during the GEMM kernel (diagnostics build): how many finalize- and
#    collapse-role blocks run at the GEMM's midpoint and on how many multiprocessors, with the
#    driver's carveout and with 100%. Expected from session 35's timeline: few or no collapse-role
#    blocks beside a GEMM block.
(cmake -S . -B ../build-oprobe -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
   -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DMHC_GEMM_PROBE -DMHC_BUILD_TESTS=OFF \
   -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$OUT/r/oprobe-configure.log" 2>&1 &&
 cmake --build ../build-oprobe --target mhc_cli > "$OUT/r/oprobe-build.log" 2>&1
 echo "[oprobe build rc=$?]" >> "$OUT/r/builds-done") &
for v in staged overlap; do
  timeout 14 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096,5120,7168 --T 512,1024,2048,3072 \
    --variant pre.cuda_n4_$v --budget-s 6 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
  timeout 10 "$BD/tools/mhc" bench --ops head --modes learned_fold --H 4096,7168 --T 1024,2048 \
    --variant head.cuda_n4_$v --budget-s 3 2>&1 | grep "^\[" | sed "s/^/[mid $v] /"
done
wait
cat "$OUT/r/builds-done"
P=../build-oprobe/tools/mhc
for c in "" 100; do
  env ${c:+MHC_OVERLAP_CARVEOUT=$c} MHC_OVERLAP_TRACE=1 timeout 10 $P bench --ops pre --modes normal_fold --H 4096 \
    --T 16384 --variant pre.cuda_n4_overlap --reps 2 --budget-s 2 2>&1 | grep "^\[" | sed "s/^/[probe carveout=${c:-default}] /"
done
