# Prepared in session 33 (not run): the second call, after next-call.sh, on the same trees (.snap =
# main + decode-extra-blocks.patch; no .snap2 needed). About 8 minutes.
# 0. GpuDecode's replays and two streams for decode_chunk_kernel (its shape H = 7168, T = 128 has
#    16 phase-2-only blocks with the patch).
# 1. compute-sanitizer's memcheck, racecheck and synccheck over decode_chunk_kernel with its
#    phase-2-only blocks (grid cases at H = 7168 and 5120, whose T = 128 runs 16 / 8 of them) and
#    over gemm_rb_kernel (next-call-rb.sh's sanitizer part), if next-call.sh showed their bits held.
# 2. decode_chunk_kernel stopped after each part (-DMHC_DECODE_PROBE: 1 pdl_wait, 2 phase 1,
#    3 arrivals, 4 reductions, 5 no epilogue, 6 no collapse, 0 all), post_pre normal_fold at
#    T = 1 / 16 / 128, H = 4096 / 7168: where a decode call's time goes today (last measured in
#    session 8, before every later change to the kernel).
(cmake -S . -B ../build-probe -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
   -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DMHC_DECODE_PROBE -DMHC_BUILD_TESTS=OFF \
   -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > $OUT/r/probe-configure.log 2>&1 &&
 cmake --build ../build-probe --target mhc_cli > $OUT/r/probe-build.log 2>&1; echo "[probe build rc=$?]" > $OUT/r/probe-done) &
san3() {  # TAG FILTER: the three tools over FILTER, each log kept as san-TAG-TOOL.log
  local t
  for t in memcheck racecheck synccheck; do
    san_t $t 150 "$2"
    mv "$OUT/r/san-$t.log" "$OUT/r/san-$1-$t.log"
  done | sed "s/^\[san /[san $1 /"
}
export MHC_TEST_VARIANTS=cuda_n4_decode_chunk
run_t decode 150 'Modes/GpuDecode.*'  # 1000 graph replays, now with a shape of H = 7168, T = 128
export MHC_TEST_VARIANTS=cuda_n4_decode_chunk,cuda_n4
san3 extra 'Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H7168:Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H5120'
export MHC_TEST_VARIANTS=cuda_n4_staged_rb
san3 rb 'Grid/GpuGrid.MatchesReference/mixes_n4_H4096:Grid/GpuGrid.MatchesReference/post_pre_normal_norm_n4_H5120'
unset MHC_TEST_VARIANTS
grep -h "Race reported" $OUT/r/san-*-racecheck.log | sed 's/(.*//' | sort | uniq -c | sed 's/^/[racecheck] /'
wait
cat $OUT/r/probe-done
for lvl in 1 2 3 4 5 6 0; do
  MHC_DECODE_PROBE=$lvl timeout 25 ../build-probe/tools/mhc bench --ops post_pre --modes normal_fold --H 4096,7168 \
    --T 1,16,128 --variant post_pre.cuda_n4_decode_chunk --budget-s 10 2>&1 | grep "^\[" | sed "s/^/[probe $lvl] /"
done
