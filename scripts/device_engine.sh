#!/usr/bin/env bash
# Issue 16 on the GPU machine, in one call: builds mhc for sm_90a, then runs (all by default, or
# the steps named on the command line)
#
#   test     tests/test_engine (EngineGpu.*: warmup's exact coverage of every variant, weights in
#            the caller's device memory, two streams with two workspaces, the bound-workspace
#            error, the event rule) and the CPU cases, as gtest JSON
#   warmup   `mhc warmup` in fresh processes: Workspace::create for max_tokens = 65536 (target
#            < 100 ms), each operator's first call against its steady state with warmup (target
#            within 1.5x) and without it (the stall it removes), at T = 1 and T = 4096
#   python   the Python package with the CUDA backend and the torch extension (built against the
#            machine's torch), pytest of test_engine*.py and test_torch_cuda.py, then the host time
#            per call of every operator at T = 0 and T = 1 on the GPU and on the CPU
#            (tests/python/bench_host_overhead.py; target <= 10 us through torch.ops.mhc.*_out)
#
# One call runs all three in about 6-9 minutes on the H200 (two builds); to stay well inside a
# 10-minute command, split it: `bash scripts/device_engine.sh test warmup`, then
# `bash scripts/device_engine.sh python` (the python step builds on its own).
# Writes under $OUT (default /tmp/mhc-out): summary.txt, env.txt, *.log, test_engine.json,
# warmup.jsonl, host_overhead.jsonl, engine-summary.json. Needs .deps (GoogleTest and CLI11
# sources): run `bash scripts/prepare_device.sh` here first and carry [".deps"].
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/mhc-out}"
mkdir -p "$OUT"
steps=" ${*:-test warmup python} "
status=0
note() { echo "== $*" | tee -a "$OUT/summary.txt"; }
declare -A rc_of

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nvcc --version | tail -2
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)" 2>&1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

deps=()
[ -d .deps/googletest ] && deps=(-DMHC_GTEST_SOURCE="$PWD/.deps/googletest")
[ -d .deps/cli11 ] && deps+=(-DMHC_CLI11_INCLUDE="$PWD/.deps/cli11")
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# The C++ build (test_engine, mhc): only for the test and warmup steps.
if [[ "$steps" == *" test "* || "$steps" == *" warmup "* ]]; then
  t0=$(date +%s)
  cmake -S . -B build-engine "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
    -DCMAKE_CUDA_ARCHITECTURES=90a "${deps[@]}" > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
  cmake --build build-engine -j"$(nproc)" --target mhc_cli test_engine > "$OUT/build.log" 2>&1 \
    || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
  note "build ok in $(( $(date +%s) - t0 )) s"
fi

if [[ "$steps" == *" test "* ]]; then
  t0=$(date +%s)
  timeout 300 ./build-engine/tests/test_engine --gtest_output="json:$OUT/test_engine.json" > "$OUT/test_engine.log" 2>&1
  rc=$?
  rc_of[test]=$rc
  [ $rc -eq 0 ] || status=1
  note "test_engine: rc=$rc, $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]' "$OUT/test_engine.log" | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
  grep -E "^\[  FAILED  \]|Failure|launched by" "$OUT/test_engine.log" | head -30
fi

if [[ "$steps" == *" warmup "* ]]; then
  : > "$OUT/warmup.jsonl"
  rc=0
  mhc=./build-engine/tools/mhc
  # Each a fresh process: what they time happens once per process.
  $mhc warmup --model deepseek-v4-flash --max-tokens 65536 --out "$OUT/warmup.jsonl" >> "$OUT/warmup.log" 2>&1 || rc=1
  $mhc warmup --model deepseek-v4-pro --max-tokens 65536 --out "$OUT/warmup.jsonl" >> "$OUT/warmup.log" 2>&1 || rc=1
  for T in 1 4096; do
    $mhc warmup --model deepseek-v4-flash --max-tokens 65536 --first-call --tokens $T --out "$OUT/warmup.jsonl" \
      >> "$OUT/warmup.log" 2>&1 || rc=1
    $mhc warmup --model deepseek-v4-flash --max-tokens 65536 --first-call --tokens $T --no-warmup \
      --out "$OUT/warmup.jsonl" >> "$OUT/warmup.log" 2>&1 || rc=1
  done
  rc_of[warmup]=$rc
  [ $rc -eq 0 ] || status=1
  note "mhc warmup: rc=$rc; $(python3 - "$OUT/warmup.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = []
for r in rows:
    if r["what"] == "workspace_create":
        out.append(f"create {r['model']} {r['max_tokens']} warmup={r['warmup']}: {r['create_ms']:.1f} ms "
                   f"({r['loaded']}/{r['kernels']} kernels)")
    else:
        out.append(f"{r['op']} T={r['T']} warmup={r['warmup']}: first/steady {r['ratio']:.2f}")
print("; ".join(out))
EOF
)"
fi

# pybuild: only the package build (e.g. in the background while other work runs); python reuses
# it when the same commit's build is there (/tmp/mhc-py-engine/.built), else builds first.
py_build() {
  rm -rf /tmp/mhc-py-engine
  cli11=()
  [ -d .deps/cli11 ] && cli11=(-C "cmake.define.MHC_CLI11_INCLUDE=$PWD/.deps/cli11")
  # No build isolation: the machine's torch is visible, so the torch extension is built (ON: an
  # error otherwise).
  python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/mhc-py-engine \
    -C cmake.define.MHC_CUDA_ARCHITECTURES=90a -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90a \
    -C cmake.define.MHC_BUILD_TORCH=ON "${cli11[@]}" -C build-dir=build-py-engine . > "$OUT/python-build.log" 2>&1 || return 1
  (git rev-parse HEAD 2>/dev/null || echo unknown) > /tmp/mhc-py-engine/.built
}
if [[ "$steps" == *" pybuild "* ]]; then
  t0=$(date +%s)
  py_build
  note "python build rc=$? ($(( $(date +%s) - t0 )) s)"
fi

if [[ "$steps" == *" python "* ]]; then
  t0=$(date +%s)
  rc=0
  if [ ! -f /tmp/mhc-py-engine/.built ] || [ "$(cat /tmp/mhc-py-engine/.built)" != "$(git rev-parse HEAD 2>/dev/null || echo unknown)" ]; then
    py_build
    rc=$?
  fi
  if [ $rc -eq 0 ]; then
    (cd tests/python && PYTHONPATH=/tmp/mhc-py-engine MHC_REQUIRE_TORCH_CPP=1 timeout 420 python3 -m pytest -q \
      -p no:cacheprovider test_engine.py test_engine_torch.py test_torch_cuda.py) > "$OUT/python-tests.log" 2>&1 || rc=1
    note "python tests: $(tail -1 "$OUT/python-tests.log") ($(( $(date +%s) - t0 )) s)"
    : > "$OUT/host_overhead.jsonl"
    for dev in cuda cpu; do
      PYTHONPATH=/tmp/mhc-py-engine timeout 240 python3 tests/python/bench_host_overhead.py --device $dev \
        --out "$OUT/host_overhead.jsonl" > "$OUT/host_overhead-$dev.log" 2>&1 || rc=1
    done
    note "host time per call (us, median; out = torch.ops.mhc.*_out): $(python3 - "$OUT/host_overhead.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(" ".join(f"{r['device']}/{r['op']}/T{r['T']}/{r['path']}={r['host_us']:.1f}" for r in rows if r["path"] in ("out", "mt")))
EOF
)"
  else
    tail -30 "$OUT/python-build.log"
    note "python build failed"
  fi
  rc_of[python]=$rc
  [ $rc -eq 0 ] || status=1
fi

python3 - "$OUT" "${rc_of[test]:-}" "${rc_of[warmup]:-}" "${rc_of[python]:-}" <<'EOF'
import json, os, sys
out, test, warmup, python = sys.argv[1:5]
def rows(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
summary = {"rc": {"test": test, "warmup": warmup, "python": python},
           "warmup": rows("warmup.jsonl"), "host_overhead": rows("host_overhead.jsonl"),
           "env": open(os.path.join(out, "env.txt")).read()}
json.dump(summary, open(os.path.join(out, "engine-summary.json"), "w"), indent=1)
EOF
echo
cat "$OUT/summary.txt"
exit $status
