#!/usr/bin/env bash
# bench/run_device.sh - the benchmark on a GPU machine, in one bounded command: builds mhc for
# sm_90a in a fresh build folder, runs `mhc bench`, then the plain-PyTorch baseline, draws the
# plots and the mhc-vs-torch table, and prints a short summary last.
#
#   bash bench/run_device.sh [OUT]          OUT: output folder (default $OUT, else /tmp/mhc-bench)
#
# Environment (all optional):
#   MHC_BENCH_SIZE     quick | default | full (default: default)
#                        quick    mhc bench --quick; torch baseline --quick           (~3 min)
#                        default  the whole mhc sweep (8 op/modes x 3 H x 16 T); torch eager
#                                 T 1,4,16,128,1024,8192,16384,65536 and compile T without
#                                 65536, 3 H; both cut by the time budget (~8 min)
#                        full     as default, torch on every T of the mhc sweep; budget 30 min
#                                 (too long for one 10-minute device command: split it with
#                                 MHC_BENCH_STAGES)
#   MHC_BENCH_TOTAL_S  wall-clock budget of the whole script (default 450 s; quick 240; full 1800).
#                      After the build, mhc bench gets half of what is left and the torch
#                      baseline the rest minus a margin for the plots; each stops starting new rows
#                      when its share is spent (--budget-s) and is killed 60 s after that.
#   MHC_BUILD_DIR      reuse this build when it holds tools/mhc (scripts/device.sh passes
#                      build-dev); otherwise a fresh build goes there (default build-bench-device)
#   MHC_BENCH_STAGES   which of "mhc torch plot" to run (default all three)
#   MHC_BENCH_ARGS     extra arguments for mhc bench (e.g. "--ops post_pre --H 4096")
#   MHC_TORCH_ARGS     extra arguments for bench/torch_baseline.py
#
# Output (few files, so that a device tool that fetches at most 8 brings all back):
#   $OUT/bench-mhc.jsonl, bench-torch.jsonl   JSON lines (docs/performance.md: schema)
#   $OUT/bench-compare.md                     the full mhc vs torch table
#   $OUT/bench-logs.txt                       build, mhc bench, torch baseline and plot logs
#   $OUT/bench-results.tar                    <date>-<device>/ with all of the above and img/*.png:
#                                             untar it into bench/results/ to keep a run
set -uo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
OUT="${1:-${OUT:-/tmp/mhc-bench}}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export PYTHONUNBUFFERED=1
t_start=$(date +%s)
elapsed() { echo $(( $(date +%s) - t_start )); }

size="${MHC_BENCH_SIZE:-default}"
case "$size" in
  quick)
    total="${MHC_BENCH_TOTAL_S:-240}"
    mhc_size_args=(--quick)
    torch_size_args=(--quick) ;;
  default)
    total="${MHC_BENCH_TOTAL_S:-450}"
    mhc_size_args=()
    torch_size_args=() ;;
  full)
    total="${MHC_BENCH_TOTAL_S:-1800}"
    mhc_size_args=()
    torch_size_args=(--T 1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384,65536
                     --T-compile 1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384) ;;
  *) echo "run_device.sh: MHC_BENCH_SIZE must be quick, default or full, got '$size'" >&2; exit 2 ;;
esac
stages=" ${MHC_BENCH_STAGES:-mhc torch plot} "
read -r -a extra_mhc <<< "${MHC_BENCH_ARGS:-}"
read -r -a extra_torch <<< "${MHC_TORCH_ARGS:-}"

work="$(mktemp -d /tmp/mhc-bench-work.XXXXXX)"
logs="$work/logs.txt"
: > "$logs"
status=0
say() { echo "== $*" | tee -a "$logs"; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty tree)')"
  echo "size: $size, total budget ${total} s, stages:${stages}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 || true
  nvcc --version 2>&1 | tail -1 || true
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 || true
} > "$work/env.txt"
cat "$work/env.txt" | tee -a "$logs"

# ---- build ------------------------------------------------------------------------------------
build="${MHC_BUILD_DIR:-build-bench-device}"
if [ -x "$build/tools/mhc" ] && [ -n "${MHC_BUILD_DIR:-}" ]; then
  say "reusing the build in $build"
else
  say "building mhc (sm_90a, Release) in a fresh $build"
  rm -rf "$build"
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  [ -d .deps/cli11 ] && gen+=(-DMHC_CLI11_INCLUDE="$PWD/.deps/cli11")  # scripts/prepare_device.sh
  if ! { cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
           -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_BUILD_TESTS=OFF -DMHC_BUILD_PYTHON=OFF &&
         cmake --build "$build" -j"$(nproc)" --target mhc_cli; } > "$work/build.log" 2>&1; then
    grep -E "error|Error" -A3 "$work/build.log" | head -40
    cat "$work/build.log" >> "$logs"
    cp "$logs" "$OUT/bench-logs.txt"
    say "build failed (log: $OUT/bench-logs.txt)"
    exit 1
  fi
  grep -v -E "ptxas info|Compiling entry|Function properties|bytes stack frame|Used [0-9]+ registers" \
    "$work/build.log" >> "$logs"
  say "build ok ($(elapsed) s)"
fi
case "$build" in
  /*) mhc="$build/tools/mhc" ;;
  *) mhc="$root/$build/tools/mhc" ;;
esac
"$mhc" variants >> "$logs" 2>&1 || true

# ---- mhc bench ----------------------------------------------------------------------------------
left=$(( total - $(elapsed) ))
if [[ "$stages" == *" mhc "* ]]; then
  if [[ "$stages" == *" torch "* ]]; then mhc_budget=$(( left / 2 )); else mhc_budget=$(( left - 30 )); fi
  (( mhc_budget < 30 )) && mhc_budget=30
  say "mhc bench: budget ${mhc_budget} s ($(elapsed) s elapsed)"
  timeout -k 10 $(( mhc_budget + 60 )) "$mhc" bench "${mhc_size_args[@]}" --budget-s "$mhc_budget" \
    --out "$work/mhc.jsonl" "${extra_mhc[@]}" > "$work/mhc.log" 2>&1
  rc=$?
  cat "$work/mhc.log" >> "$logs"
  say "mhc bench: exit $rc ($(elapsed) s elapsed; 4 = some rows failed, 124 = killed by the time limit)"
  [ $rc -eq 0 ] || { status=1; tail -4 "$work/mhc.log"; }
fi

# ---- torch baseline -------------------------------------------------------------------------------
if [[ "$stages" == *" torch "* ]]; then
  torch_budget=$(( total - $(elapsed) - 40 - 45 ))  # plots and the row in flight
  (( torch_budget < 30 )) && torch_budget=30
  say "torch baseline: budget ${torch_budget} s"
  timeout -k 10 $(( torch_budget + 60 )) python3 bench/torch_baseline.py "${torch_size_args[@]}" \
    --budget-s "$torch_budget" --out "$work/torch.jsonl" "${extra_torch[@]}" > "$work/torch.log" 2>&1
  rc=$?
  cat "$work/torch.log" >> "$logs"
  say "torch baseline: exit $rc ($(elapsed) s elapsed; 4 = some rows failed, 124 = killed by the time limit)"
  [ $rc -eq 0 ] || { status=1; tail -4 "$work/torch.log"; }
fi

# ---- plots, table, bundle --------------------------------------------------------------------------
inputs=()
[ -s "$work/mhc.jsonl" ] && inputs+=("$work/mhc.jsonl")
[ -s "$work/torch.jsonl" ] && inputs+=("$work/torch.jsonl")
device_slug="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 |
               tr 'A-Z' 'a-z' | sed -E 's/^nvidia //; s/[^a-z0-9]+/-/g; s/^-|-$//g')"
run_name="$(date -u +%Y-%m-%d)-${device_slug:-unknown-gpu}"
bundle="$work/$run_name"
mkdir -p "$bundle/img"
if [ ${#inputs[@]} -gt 0 ]; then
  if [[ "$stages" == *" plot "* ]]; then
    python3 bench/plot.py "${inputs[@]}" --outdir "$bundle/img" >> "$logs" 2>&1 || { say "plot.py failed"; status=1; }
  fi
  python3 bench/compare.py "${inputs[@]}" --out "$bundle/compare.md" >> "$logs" 2>&1 || status=1
  python3 bench/compare.py "${inputs[@]}" --short --out "$bundle/compare-short.md" >> "$logs" 2>&1 || status=1
fi
for f in env.txt mhc.jsonl torch.jsonl mhc.log torch.log build.log; do
  [ -f "$work/$f" ] && cp "$work/$f" "$bundle/$f"
done
cp "$logs" "$bundle/logs.txt"
(cd "$work" && tar cf "$OUT/bench-results.tar" "$run_name")
[ -f "$work/mhc.jsonl" ] && cp "$work/mhc.jsonl" "$OUT/bench-mhc.jsonl"
[ -f "$work/torch.jsonl" ] && cp "$work/torch.jsonl" "$OUT/bench-torch.jsonl"
[ -f "$bundle/compare.md" ] && cp "$bundle/compare.md" "$OUT/bench-compare.md"
cp "$logs" "$OUT/bench-logs.txt"

# ---- summary (last) ---------------------------------------------------------------------------------
echo
echo "================ mhc benchmark summary ($(elapsed) s, size $size) ================"
grep -E "^mhc bench: .*copy|^torch_baseline: .*copy" "$work/mhc.log" "$work/torch.log" 2>/dev/null | sed 's/^[^:]*: */  /'
for f in mhc torch; do
  [ -f "$work/$f.log" ] && grep -E "rows measured|budget-s .* reached" "$work/$f.log" | sed "s/^/  $f: /"
done
if [ -s "$work/mhc.jsonl" ]; then
  python3 - "$work/mhc.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("kind") == "row" and r.get("us") is not None]
miss = [r for r in rows if not r.get("meets_target")]
print("  mhc rows within the generic target 1.3 x max(5 us, ideal / (0.85 x copy)): %d of %d"
      % (len(rows) - len(miss), len(rows)))
for r in miss[:12]:
    print("    misses: %s/%s H=%d T=%d: %.2f us > %.2f us (%.1f%% of copy)"
          % (r["op"], r["mode"], r["H"], r["T"], r["us"], r["target_us"], r.get("pct_copy", 0)))
if len(miss) > 12:
    print("    ... and %d more" % (len(miss) - 12))
EOF
fi
[ -f "$bundle/compare-short.md" ] && { echo; cat "$bundle/compare-short.md"; }
echo
echo "files: $OUT/bench-{mhc,torch}.jsonl, bench-compare.md, bench-logs.txt, bench-results.tar"
echo "keep the run: tar xf $OUT/bench-results.tar -C bench/results/   (-> bench/results/$run_name/)"
rm -rf "$work"
exit $status
