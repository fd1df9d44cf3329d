#!/usr/bin/env bash
# scripts/sass.sh FILE.cu [ARCH]: the SASS of one kernel file on a machine without a GPU (this
# repository's CI machines, the development host). Compiles FILE with the library's device flags
# to a cubin for ARCH (default sm_90a), prints ptxas's resource report to stderr and the
# disassembly to stdout. cuobjdump and nvdisasm come from PyPI (nvidia-cuda-cuobjdump,
# nvidia-cuda-nvdisasm), fetched once into .tools/ (ignored by git): the toolkit's own copies are
# used where it has them.
#   scripts/sass.sh src/cuda/n4/post_collapse_kernel.cu > /tmp/pc.sass
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: scripts/sass.sh src/cuda/n4/<name>_kernel.cu [sm_XX]}
arch=${2:-sm_90a}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
bin=$(dirname "$nvcc")
if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
  tools=.tools/cuda-disasm
  if [ -z "$(find "$tools" -name nvdisasm -type f 2>/dev/null)" ]; then
    mkdir -p "$tools/wheels"
    python3 -m pip download --quiet --no-deps -d "$tools/wheels" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
    for w in "$tools"/wheels/*.whl; do python3 -m zipfile -e "$w" "$tools"; done
  fi
  bin=$(dirname "$(find "$tools" -name nvdisasm -type f | head -1)")
  chmod +x "$bin"/*
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$nvcc" -DMHC_WITH_CUDA=1 -I. -Iinclude -O3 -DNDEBUG -arch="$arch" --expt-relaxed-constexpr -std=c++17 \
  -Xptxas -v -x cu -cubin "$src" -o "$out/kernel.cubin" 2>&1 | grep -E "Compiling|Used|spill" >&2 || true
PATH="$bin:$PATH" "$bin/cuobjdump" -sass "$out/kernel.cubin"
