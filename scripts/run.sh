#!/usr/bin/env bash
# Sets up, builds and runs the main job: `mhc run` with its embedded default
# (DeepSeek-V4-Flash preset, seeded synthetic weights, 4 layers, 16 tokens; GPU when present).
# Extra arguments go to `mhc run` (see `mhc run --help`).
#
# Without a GPU (no nvidia-smi, or it sees no device) it builds the CPU backend only, in
# build-cpu/. With one it builds the CUDA backend for that GPU's architecture only, in build/
# (compute capability 8.x -> sm_80, 9.0 -> sm_90a, 10.0 -> sm_100a, 12.0 -> sm_120a; another
# capability X.Y is built as sm_XY). MHC_CUDA_ARCHITECTURES=<list> overrides the choice.
# The build's output goes to <dir>/build.log (shown if the build fails).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

cap=""
if command -v nvidia-smi >/dev/null 2>&1; then
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')" || cap=""
fi
arch="${MHC_CUDA_ARCHITECTURES:-}"
if [ -z "$arch" ] && [ -n "$cap" ]; then
  case "$cap" in
    8.*) arch=80 ;;
    9.0) arch=90a ;;
    10.0) arch=100a ;;
    12.0) arch=120a ;;
    [0-7].*) echo "run.sh: compute capability $cap is below the CUDA backend's sm_80; building the CPU backend" ;;
    *) arch="${cap/./}"; echo "run.sh: compute capability $cap is not one mhc is tuned for; building sm_$arch" ;;
  esac
fi

if [ -n "$arch" ]; then
  dir=build
  what="CUDA backend for sm_$arch"
  opts=(-DMHC_ENABLE_CUDA=ON -DMHC_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_ARCHITECTURES="$arch")
else
  dir=build-cpu
  what="CPU backend only (no GPU found)"
  opts=(-DMHC_ENABLE_CUDA=OFF)
fi
gen=()
if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi

echo "run.sh: building mhc, $what, in $dir/"
t0=$(date +%s)
cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMHC_BUILD_TESTS=OFF "${opts[@]}" \
  > "$dir.configure.log" 2>&1 || { tail -30 "$dir.configure.log"; exit 1; }
mv -f "$dir.configure.log" "$dir/configure.log"
cmake --build "$dir" -j"$(nproc)" --target mhc_cli > "$dir/build.log" 2>&1 \
  || { grep -E "error|warning" -A3 "$dir/build.log" | head -60; tail -20 "$dir/build.log"; exit 1; }
grep -iE "warning" "$dir/build.log" | sort -u | head -20 || true
echo "run.sh: built $dir/tools/mhc in $(( $(date +%s) - t0 )) s (log: $dir/build.log)"
"./$dir/tools/mhc" run "$@"
