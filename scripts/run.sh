#!/usr/bin/env bash
# Sets up, builds and runs the main job: `mhc run` with its embedded default
# (DeepSeek-V4-Flash preset, seeded synthetic weights, 4 layers, 16 tokens; GPU when present).
# Extra arguments go to `mhc run` (see `build/tools/mhc run --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
arch=()
# With a GPU here, build only for it (CMake's "native"); otherwise every supported architecture.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  arch=(-DMHC_CUDA_ARCHITECTURES=native)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMHC_BUILD_TESTS=OFF "${arch[@]}" >/dev/null
cmake --build build -j"$(nproc)" --target mhc_cli
./build/tools/mhc run "$@"
