#!/usr/bin/env bash
# A session's device calls (sessions 7 and 8). Runs from a snapshot of a commit (so other
# engineers' uncommitted edits in the shared checkout never reach the GPU build):
#   here:   bash scripts/prepare_device.sh
#           bash scripts/snap.sh .snap HEAD [PATCH...]   (git archive, the patches applied and checked)
#           (.snap and .deps are ignored; the call carries both)
#   device: cd .snap && bash scripts/device_session.sh STEP...
# Steps: record (the benchmark of record), test (GPU subset), decode (decode rows by variant),
# ncu (decode_chunk_kernel), probe (decode_chunk_kernel's parts), ncugemm, wg (wgmma rows),
# sinkhorn (bench/probes/sinkhorn_forms.cu), step (V4-Flash decode step), prefill (rows given in MHC_S7_PREFILL),
# warmup (mhc warmup's create and first-call rows), gemmprobe (gemm_kernel taken apart), ncuchain
# (each kernel of a staged call), ab (this tree against another), san (the tools of
# MHC_S7_SAN_TOOLS over MHC_S7_SAN_FILTER).
# Everything lands under $OUT/r; $OUT/summary.txt and $OUT/results.tgz come back. The prefill
# step's command list may call run_t (below) for a subset of the GPU tests, shards_t for one in
# parallel shards, build_tree for another carried tree, san_t for a sanitizer over a subset,
# ab_rows for the same rows from several trees, grid_filter for the filter of some n4 grid
# cases and ncu_kernels for Nsight Compute's figures of each kernel of one bench call.
set -u
export OUT=${OUT:-/tmp/o}
R=$OUT/r; mkdir -p "$R"
[ -e .deps ] || ln -s ../.deps .deps
# The build folder is the tree's own (a warm machine keeps ../build-s7-.snap of an earlier call;
# another tree configured into it fails, session 41 call 6), and MHC_S7_BD names another.
BD=${MHC_S7_BD:-../build-s7-$(basename "$PWD")}
B=$BD/tools/mhc
pack() { tar -C "$R" -czf "$OUT/results.tgz" . 2>/dev/null; cp "$R/summary.txt" "$OUT/summary.txt" 2>/dev/null; }
S() { pack; echo "== $* ($(date +%s))" | tee -a "$R/summary.txt"; }
# rows: the bench's row lines, and its errors (a bad argument would otherwise vanish from the summary).
rows() { grep -E "^\[|error" | sed 's/(p10[^)]*)//; s/, chain.*//'; }
# run_t TAG TIMEOUT FILTER: test_gpu on FILTER, one "[tests TAG ...]" line and the failures (for the
# prefill step's command lists, which run as their own shell: exported with BD and OUT).
# t_lines LABEL LOG [PREFIX]: a test_gpu log's "[tests LABEL PREFIX<counts> <time>]" line and its
# failures (run_t and shards_t).
t_lines() {
  echo "[tests $1 ${3:-}$(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$2" | head -3 | tr '\n' ' ') $(grep 'ms total' "$2")]"
  grep -E "^\[  FAILED" "$2" | head -10 | sed "s|^|[tests $1] |"
}
run_t() {
  timeout "$2" "$BD/tests/test_gpu" --gtest_brief=1 --gtest_filter="$3" > "$OUT/r/t-$1.log" 2>&1
  t_lines "$1" "$OUT/r/t-$1.log" "rc=$? "
}
# shards_t TAG N TIMEOUT FILTER [SHARDS]: test_gpu on FILTER as N gtest shards at once (or only the
# shard indices listed in SHARDS, e.g. "0 1": a suite too long for one call split over two), each
# with OMP_NUM_THREADS = cores / N and passive OpenMP waits: the CPU reference is OpenMP, and N
# processes of a spinning thread a core each thrash (session 40: 12 shards of 16 threads ran the
# grid ~4x slower than one process).
# One "[tests TAG/i ...]" line a shard (its log $OUT/r/t-TAG-i.log) and its failures.
shards_t() {
  local tag=$1 n=$2 limit=$3 filter=$4 idx=${5:-} i pids=""
  local threads=$(( $(nproc) / n )); [ "$threads" -ge 1 ] || threads=1
  [ -n "$idx" ] || idx=$(seq 0 $((n - 1)))
  for i in $idx; do
    OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i timeout "$limit" "$BD/tests/test_gpu" \
      --gtest_brief=1 --gtest_filter="$filter" > "$OUT/r/t-$tag-$i.log" 2>&1 &
    pids="$pids $!"
  done
  wait $pids
  for i in $idx; do t_lines "$tag/$i" "$OUT/r/t-$tag-$i.log"; done
}
# build_tree DIR NAME: mhc_cli of another tree carried beside this one (../DIR, e.g. .snap2, the
# commit before a change) into ../build-NAME, for A/B rows in one call; appends "[NAME build
# rc=..]" to $OUT/r/builds-done (command lists run it in the background and `wait`).
build_tree() {
  cmake -S "../$1" -B "../build-$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_BUILD_TESTS=OFF -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$OUT/r/$2-configure.log" 2>&1 &&
    cmake --build "../build-$2" --target mhc_cli > "$OUT/r/$2-build.log" 2>&1
  echo "[$2 build rc=$?]" >> "$OUT/r/builds-done"
}
# san_t TOOL TIMEOUT FILTER: compute-sanitizer's TOOL over test_gpu on FILTER, one "[san TOOL rc=..
# SUMMARY]" line (the log in $OUT/r/san-TOOL.log).
san_t() {
  timeout "$2" compute-sanitizer --tool "$1" ${MHC_S7_SAN_ARGS:-} --error-exitcode 9 "$BD/tests/test_gpu" \
    --gtest_filter="$3" --gtest_brief=1 > "$OUT/r/san-$1.log" 2>&1
  echo "[san $1 rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/r/san-$1.log" | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/r/san-$1.log" | head -2 | tr '\n' ' ')]"
}
# ab_rows ROUNDS TREES TIMEOUT BENCH_ARGS...: the same bench rows from each tree of TREES, ROUNDS
# rounds in tree order (one process a tree and round), each row tagged "[NAME ROUND]". NAME `this`
# is this call's tree ($BD); any other NAME is ../build-NAME/tools/mhc (build_tree).
ab_rows() {
  local rounds=$1 trees=$2 limit=$3 round tree x
  shift 3
  for round in $(seq 1 "$rounds"); do
    for tree in $trees; do
      x="$BD/tools/mhc"
      [ "$tree" != this ] && x="../build-$tree/tools/mhc"
      timeout "$limit" "$x" bench "$@" 2>&1 | grep -E "^\[|error" | sed "s/^/[$tree $round] /"
    done
  done
}
# grid_filter "H ..." MODE...: the gtest filter of the n4 grid cases of those modes at those H.
grid_filter() {
  local f="" m H hs=$1
  shift
  for m in "$@"; do for H in $hs; do f="$f:Grid/GpuGrid.MatchesReference/${m}_n4_H$H"; done; done
  echo "${f#:}"
}
# ncu_kernels TAG REGEX SKIP COUNT BENCH_ARGS...: Nsight Compute over COUNT launches (after SKIP) of
# the kernels matching REGEX in one `mhc bench BENCH_ARGS` of this tree: each kernel's duration,
# DRAM bytes, active warps and instructions (the log in $OUT/r/ncu-TAG.txt).
ncu_kernels() {
  local tag=$1 regex=$2 skip=$3 count=$4
  shift 4
  timeout 100 ncu --clock-control none ${MHC_S7_NCUCHAIN_ARGS:-} -k regex:"$regex" --launch-skip "$skip" \
    --launch-count "$count" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum \
    "$BD/tools/mhc" bench "$@" --reps 2 --budget-s 20 > "$OUT/r/ncu-$tag.txt" 2>&1
  echo "ncu $tag rc=$?"
  grep -E "_kernel|duration|dram__|warps_active|inst_executed" "$OUT/r/ncu-$tag.txt" | grep -v PROF |
    sed 's/^ */  /; s/(N4Params).*//; s/(FinalizeParams).*//'
}
export -f rows t_lines run_t shards_t build_tree san_t ab_rows grid_filter ncu_kernels
export BD OUT
steps=" $* "
S build
cmake -S . -B $BD -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DMHC_GTEST_SOURCE="$PWD/.deps/googletest" -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$R/configure.log" 2>&1 ||
  { tail -n 5 "$R/configure.log" | tee -a "$R/summary.txt"; pack; exit 1; }
cmake --build $BD --target mhc_cli test_gpu test_engine > "$R/build.log" 2>&1 || { grep -E "error" -A3 "$R/build.log" | head -40 | tee -a "$R/summary.txt"; pack; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader >> "$R/summary.txt"

if [[ "$steps" == *" record "* ]]; then
  # The benchmark of record: every op in its folded modes, 3 H, T from decode to prefill.
  S record
  timeout 130 $B bench --ops post_pre,pre,head,pre_broadcast,post,mixes,collapse \
    --modes normal_fold,shifted_fold,learned_fold,full,plain,carried_fold --H 4096,5120,7168 \
    --T 1,4,16,32,64,128,1024,4096,16384 --budget-s "${MHC_S7_RECORD_S:-115}" --out "$R/mhc.jsonl" > "$R/record.log" 2>&1
  echo "record rc=$? $(grep -E "rows measured" "$R/record.log")" | tee -a "$R/summary.txt"
  head -2 "$R/record.log" | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" test "* ]]; then
  S test
  F=${MHC_S7_FILTER:-'Grid/GpuGrid.MatchesReference/*n4_H*:Modes/GpuFamily.*:Modes/GpuDecode.*:Modes/GpuBatch.*:Modes/GpuGraph.*:GpuErrors.*'}
  timeout "${MHC_S7_TEST_S:-300}" $BD/tests/test_gpu --gtest_brief=1 --gtest_filter="$F" > "$R/gpu-tests.log" 2>&1
  echo "gpu tests rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$R/gpu-tests.log" | head -3 | tr '\n' ' ')" | tee -a "$R/summary.txt"
  grep -E "^\[  FAILED" "$R/gpu-tests.log" | head -30 | tee -a "$R/summary.txt"
  grep -E "variant comparisons" "$R/gpu-tests.log" > "$R/family-counts.txt"
  timeout 60 $BD/tests/test_engine --gtest_brief=1 > "$R/test-engine.log" 2>&1
  echo "test_engine rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$R/test-engine.log" | head -3 | tr '\n' ' ')" | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" decode "* ]]; then
  S decode
  # MHC_S7_DECODE_VARIANTS: variant suffixes (cuda_n4_decode_chunk, cuda_n4_decode, cuda_n4: the
  # two-kernel plan); MHC_S7_DECODE_OPS: "op modes" pairs separated by ';'; MHC_S7_DECODE_ARGS:
  # extra bench arguments (e.g. --decode-max-tokens 128).
  IFS=';' read -ra dops <<< "${MHC_S7_DECODE_OPS:-post_pre normal_fold,shifted_fold;pre normal_fold;head learned_fold;pre_broadcast normal_fold;mixes plain}"
  for v in ${MHC_S7_DECODE_VARIANTS:-cuda_n4_decode_chunk cuda_n4_decode}; do
    for op in "${dops[@]}"; do
      set -- $op
      timeout 40 $B bench --ops "$1" --modes "$2" --H ${MHC_S7_DECODE_H:-4096,5120,7168} --T ${MHC_S7_DECODE_T:-1,2,4,8,16,32,64} --variant "$1.$v" \
        ${MHC_S7_DECODE_ARGS:-} --budget-s ${MHC_S7_DECODE_S:-20} --out "$R/decode-$1-$v.jsonl" 2>&1 | rows
    done
  done | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" ncu "* ]]; then
  S ncu
  for T in 1 16; do
    timeout 40 ncu --clock-control none -k regex:decode_chunk --launch-skip 4 --launch-count 1 --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section InstructionStats \
      $B bench --ops post_pre --modes normal_fold --H 4096 --T $T --reps 2 --budget-s 15 > "$R/ncu-decode_chunk-T$T.txt" 2>&1
    echo "ncu T=$T rc=$?" | tee -a "$R/summary.txt"
  done
fi

if [[ "$steps" == *" probe "* ]]; then
  # decode_chunk_kernel stopped after each part (MHC_DECODE_PROBE, decode_chunk_kernel.cu), chained.
  S probe
  cmake -S . -B $BD-probe -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DMHC_DECODE_PROBE -DMHC_BUILD_TESTS=OFF \
    -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$R/probe-configure.log" 2>&1
  cmake --build $BD-probe --target mhc_cli > "$R/probe-build.log" 2>&1 || tail -5 "$R/probe-build.log"
  for lvl in ${MHC_S7_PROBE_LEVELS:-1 2 3 4 5 6 0}; do
    IFS=';' read -ra pops <<< "${MHC_S7_PROBE_OPS:-post_pre normal_fold;head learned_fold;pre normal_fold}"
    for op in "${pops[@]}"; do
      set -- $op
      MHC_DECODE_PROBE=$lvl timeout 20 $BD-probe/tools/mhc bench --ops "$1" --modes "$2" --H 4096 --T 1,16 \
        --variant "$1.cuda_n4_decode_chunk" --budget-s 10 2>&1 | rows | sed "s/^/probe $lvl: /"
    done
  done | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" ncugemm "* ]]; then
  S ncugemm
  # MHC_S7_NCU_GEMM: the kernel (gemm_kernel, or gemm_wg_kernel with variant mixes.cuda_n4_staged_wg).
  K=${MHC_S7_NCU_GEMM:-gemm_kernel}
  V=""; [ "$K" = gemm_wg_kernel ] && V="--variant mixes.cuda_n4_staged_wg"
  timeout 60 ncu --clock-control none -k regex:"^.*${K}" --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats \
    ${MHC_S7_NCU_ARGS:-} --print-details all $B bench --ops mixes --modes plain --H 4096 --T 8192 --reps 2 --budget-s 20 $V \
    > "$R/ncu-$K.txt" 2>&1; echo "ncu $K rc=$?" | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" ncuchain "* ]]; then
  # Each kernel of one staged call (post_pre and pre normal_fold, H = 4096, T = 16384): its
  # duration and DRAM bytes, so the composition's time splits into its stages.
  S ncuchain
  for op in post_pre pre; do
    ncu_kernels "chain-$op" "post_flat_kernel|gemm_kernel|finalize_kernel|collapse_stream_kernel" 16 4 \
      --ops $op --modes normal_fold --H 4096 --T 16384
  done | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" wg "* ]]; then
  # The wgmma rows (explicit variants) against the dispatched staged plan, same run.
  S wg
  {
    for v in staged_wg staged; do
      timeout 20 $B bench --ops mixes --modes plain --H 4096,7168 --T 4096,16384 --variant mixes.cuda_n4_$v \
        --budget-s ${MHC_S7_WG_S:-14} --out "$R/wg-mixes-$v.jsonl" 2>&1 | rows
      timeout 20 $B bench --ops pre --modes normal_fold --H 4096,7168 --T 4096,16384 --variant pre.cuda_n4_$v \
        --budget-s ${MHC_S7_WG_S:-14} --out "$R/wg-pre-$v.jsonl" 2>&1 | rows
    done
    for v in staged_wg staged; do
      timeout 20 $B bench --ops post_pre --modes normal_fold --H 4096,7168 --T 4096,16384 \
        --variant post_pre.cuda_n4_$v --budget-s ${MHC_S7_WG_S:-14} --out "$R/wg-post_pre-$v.jsonl" 2>&1 | rows
    done
  } | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" sinkhorn "* ]]; then
  # bench/probes/sinkhorn_forms.cu: cycles and errors of the Sinkhorn forms.
  S sinkhorn
  nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I. -Iinclude -o ../sk bench/probes/sinkhorn_forms.cu \
    > "$R/sinkhorn-build.log" 2>&1 && timeout 60 ../sk 2>&1 | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" ab "* ]]; then
  # The same bench rows from this tree and from the tree at MHC_S7_AB_DIR (a `git archive` of the
  # commit before a change), built alike and run in turn, MHC_S7_AB_ROUNDS times.
  S ab
  A=${MHC_S7_AB_DIR:?MHC_S7_AB_DIR: the other tree}
  (cd "$A" && ln -sfn ../.deps .deps 2>/dev/null; cmake -S . -B ../build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_BUILD_TESTS=OFF -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$R/ab-configure.log" 2>&1 &&
    cmake --build ../build-ab --target mhc_cli > "$R/ab-build.log" 2>&1) || { tail -5 "$R/ab-build.log" | tee -a "$R/summary.txt"; }
  IFS=';' read -ra abops <<< "${MHC_S7_AB_OPS:-mixes plain;pre normal_fold;head learned_fold;post_pre normal_fold}"
  for round in $(seq ${MHC_S7_AB_ROUNDS:-1}); do
    for which in before after; do
      bin=$B; [ $which = before ] && bin=$(dirname "$A")/build-ab/tools/mhc
      for op in "${abops[@]}"; do
        set -- $op
        timeout 40 $bin bench --ops "$1" --modes "$2" --H ${MHC_S7_AB_H:-4096,7168} --T ${MHC_S7_AB_T:-4096,16384} \
          --budget-s ${MHC_S7_AB_S:-6} --out "$R/ab-$which.jsonl" 2>&1 | rows | sed "s/^/ab $round $which: /"
      done
    done
  done | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" step "* ]]; then
  S step
  timeout 40 $B run --graph-step 1,4,16 > "$R/step.txt" 2>&1; grep -v "^{" "$R/step.txt" | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" prefill "* ]]; then
  S prefill
  eval "${MHC_S7_PREFILL:-true}" 2>&1 | rows | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" warmup "* ]]; then
  # Fresh processes: Workspace::create, then each operator's first call against its steady state,
  # with and without the warmup, in two operator orders (is a first call slow for being the
  # process's first, or its operator's first?).
  S warmup
  for args in "" "--no-warmup" "--ops post,head,pre_broadcast,post_pre,pre" "--ops post,head,pre_broadcast,post_pre,pre --no-warmup"; do
    for T in 1 4096; do
      timeout 30 $B warmup --max-tokens 65536 --first-call --tokens $T $args --out "$R/warmup.jsonl" > /dev/null 2>>"$R/warmup.log"
    done
  done
  # The first call against a control after a second busy period, with the busy buffer allocated
  # once before the workspace (the default above) or afresh for each busy period.
  for args in "--busy-alloc each" "--busy-alloc each --ops post,head,pre_broadcast,post_pre,pre"; do
    timeout 30 $B warmup --max-tokens 65536 --first-call --tokens 1 $args --out "$R/warmup-env.jsonl" > /dev/null 2>>"$R/warmup.log"
  done
  python3 - "$R/warmup.jsonl" "$R/warmup-env.jsonl" <<'EOF' | tee -a "$R/summary.txt"
import json, sys
for i, path in enumerate(sys.argv[1:]):
  print(f"-- {path}")
  for r in map(json.loads, open(path)):
    if r["what"] == "driver_control":
        print(f"  driver control ({r['call']}, {r['busy_alloc']}): after a busy period {r['after_busy_us']:.1f} us "
              f"(host {r['after_busy_host_us']:.1f}), steady {r['steady_us']:.1f} (host {r['steady_host_us']:.1f})")
    elif r["what"] == "workspace_create":
        print(f"create warmup={r['warmup']}: {r['create_ms']:.1f} ms ({r['loaded']}/{r['kernels']}), context {r['context_ms']:.0f} ms")
    else:
        print(f"  {r['op']} T={r['T']} {r.get('busy_alloc', '')}: first {r['first_us']:.1f} us (host {r['first_host_us']:.1f}) steady {r['steady_us']:.1f} "
              f"(host {r['steady_host_us']:.1f}) ratio {r['ratio']:.2f}; after another busy period {r['after_busy_us']:.1f} "
              f"(host {r['after_busy_host_us']:.1f}); faults {r.get('first_page_faults')}/{r.get('after_busy_page_faults')} "
              f"switches {r.get('first_context_switches')}/{r.get('after_busy_context_switches')}")
EOF
fi

if [[ "$steps" == *" gemmprobe "* ]]; then
  # gemm_kernel taken apart (MHC_GEMM_PROBE="part warps slots", gemm_kernel.cu): the mixes rows
  # of a diagnostics build with only the copies (1), copies + squares (2), copies + dots (3),
  # dots + squares without copies (4), copies without partial stores (5), arithmetic without
  # copies or stores (6), the square sums on the tensor cores (7, not the canonical order), the
  # kernel (0), in several ring shapes (5, 6 and 7: 8 x 2 only).
  S gemmprobe
  cmake -S . -B $BD-gprobe -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DMHC_GEMM_PROBE -DMHC_BUILD_TESTS=OFF \
    -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" > "$R/gprobe-configure.log" 2>&1
  cmake --build $BD-gprobe --target mhc_cli > "$R/gprobe-build.log" 2>&1 || tail -5 "$R/gprobe-build.log"
  IFS=';' read -ra shapes <<< "${MHC_S7_GPROBE:-0 8 2;1 8 2;2 8 2;3 8 2;4 8 2;0 6 3;1 6 3;3 6 3;4 6 3;0 4 4;0 8 1;1 8 1;0 4 2}"
  for sh in "${shapes[@]}"; do
    # a shape "part warps slots nofin" runs without finalize_kernel (MHC_STAGED_SKIP=f), one
    # ending in "fin4" with finalize_kernel<4, 2> (MHC_FINALIZE_PROBE=1: one wave at T = 16384)
    nofin=""; [[ "$sh" == *nofin ]] && nofin=f
    fin4=""; [[ "$sh" == *fin4 ]] && fin4=1
    shape="${sh% nofin}"; shape="${shape% fin4}"
    MHC_GEMM_PROBE="$shape" MHC_STAGED_SKIP=$nofin MHC_FINALIZE_PROBE=$fin4 timeout 30 $BD-gprobe/tools/mhc bench --ops mixes --modes plain --H 4096,7168 --T 4096,16384 \
      --variant mixes.cuda_n4_staged --budget-s ${MHC_S7_GPROBE_S:-5} 2>&1 | rows | sed "s/^/gprobe $sh: /"
  done | tee -a "$R/summary.txt"
  # MHC_S7_GPROBE_SKIP: stage sets the staged post_pre and pre leave out (MHC_STAGED_SKIP, staged.cu:
  # p post, g GEMM, f finalize, c collapse; "-" for none), to split a call's time by stage.
  for skip in ${MHC_S7_GPROBE_SKIP:-}; do
    [ "$skip" = - ] && skip=""
    for op in "post_pre normal_fold" "pre normal_fold"; do
      set -- $op
      MHC_STAGED_SKIP=$skip timeout 30 $BD-gprobe/tools/mhc bench --ops $1 --modes $2 --H 4096,7168 --T 16384 \
        --variant $1.cuda_n4_staged --budget-s ${MHC_S7_GPROBE_S:-5} 2>&1 | rows | sed "s/^/gprobe skip '$skip': /"
    done
  done | tee -a "$R/summary.txt"
  # MHC_S7_GPROBE_NCU: probe parts whose gemm_kernel and finalize_kernel Nsight Compute times
  # (duration, DRAM bytes read and written) at H = 4096, T = 16384.
  for part in ${MHC_S7_GPROBE_NCU:-}; do
    MHC_GEMM_PROBE="$part 8 2" timeout 60 ncu --clock-control none -k regex:"gemm_kernel|finalize_kernel" --launch-skip 4 --launch-count 2 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum${MHC_S7_GPROBE_NCU_METRICS:+,$MHC_S7_GPROBE_NCU_METRICS} \
      ${MHC_S7_GPROBE_NCU_ARGS:-} $BD-gprobe/tools/mhc bench --ops mixes --modes plain --H 4096 --T 16384 --variant mixes.cuda_n4_staged --reps 2 --budget-s 20 \
      > "$R/gprobe-ncu-$part.txt" 2>&1
    echo "gprobe ncu part $part rc=$?"; grep -E "gemm_kernel|finalize_kernel|duration|dram__|lts__|Pipe|Issue|Stall|stall|Bank|Warp Cycles|Eligible|Shared|Throughput" "$R/gprobe-ncu-$part.txt" | sed 's/^ */  /' | head -${MHC_S7_GPROBE_NCU_LINES:-24}
  done | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" envs "* ]]; then
  # Rows of the diagnostics build (the gemmprobe step builds it) under environment settings:
  # MHC_S7_ENVS is a ';' list of "NAME=VALUE ..." (or "-" for none), MHC_S7_ENV_ROWS a ';' list of
  # "op modes variant H T" rows or "run ARGS" (mhc run ARGS).
  S envs
  IFS=';' read -ra envs <<< "${MHC_S7_ENVS:--}"
  IFS=';' read -ra erows <<< "${MHC_S7_ENV_ROWS:-post_pre normal_fold post_pre.cuda_n4_staged 4096,7168 16384}"
  for e in "${envs[@]}"; do
    [ "$e" = - ] && e=""
    for r in "${erows[@]}"; do
      set -- $r
      if [ "$1" = run ]; then  # "run ARGS": mhc run ARGS (e.g. run --graph-step 1,4,16)
        shift
        env $e timeout 40 $BD-gprobe/tools/mhc run "$@" 2>&1 | grep -v "^{" | sed "s/^/env '$e': /"
        continue
      fi
      env $e timeout 30 $BD-gprobe/tools/mhc bench --ops $1 --modes $2 --variant $3 --H $4 --T $5 \
        --budget-s ${MHC_S7_GPROBE_S:-5} 2>&1 | rows | sed "s/^/env '$e': /"
    done
  done | tee -a "$R/summary.txt"
fi

if [[ "$steps" == *" san "* ]]; then
  S san
  SF=${MHC_S7_SAN_FILTER:-'Grid/GpuGrid.MatchesReference/post_pre_shifted_norm_n4_H4096:Grid/GpuGrid.MatchesReference/pre_computed_norm_n4_H4096:Grid/GpuGrid.MatchesReference/head_learned_norm_n4_H4096:GpuErrors.*'}
  for tool in ${MHC_S7_SAN_TOOLS:-memcheck synccheck racecheck}; do
    san_t $tool "${MHC_S7_SAN_S:-45}" "$SF" | tee -a "$R/summary.txt"
  done
fi
S done
pack
