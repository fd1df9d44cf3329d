#!/usr/bin/env bash
# The hostile-input checks of issue 17: a CPU-only ASan + UBSan build (Clang when present, else
# GCC) of the CPU test binaries, the command line and the fuzz drivers; the CPU tests and the
# command line's hostile cases under the sanitizers; then each fuzz driver for a bounded time
# (libFuzzer: MHC_FUZZ_SECONDS each, default 60; without libFuzzer the seed corpus is replayed).
# Any sanitizer report fails the run. Build tree: build-san (kept between runs).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
seconds="${MHC_FUZZ_SECONDS:-60}"
out=build-san
t0=$(date +%s)

cc=gcc cxx=g++
if command -v clang++ >/dev/null 2>&1; then cc=clang cxx=clang++; fi
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DMHC_ENABLE_CUDA=OFF -DMHC_BUILD_PYTHON=OFF -DMHC_BUILD_FUZZ=ON -DMHC_WERROR=ON >/dev/null
cmake --build "$out" -j"$jobs" --target test_reference test_validation test_model test_checkpoint test_cpu_fast mhc_cli \
  fuzz_safetensors fuzz_config fuzz_index
echo "sanitize: built with $cxx in $(( $(date +%s) - t0 )) s"

# allocator_may_return_null: a huge allocation throws std::bad_alloc (which mhc reports) instead
# of ASan aborting; detect_leaks stays on.
export ASAN_OPTIONS="allocator_may_return_null=1:detect_stack_use_after_return=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
for t in test_reference test_validation test_model test_checkpoint test_cpu_fast; do
  "$out/tests/$t" --gtest_brief=1 >"$out/$t.log" 2>&1 || { tail -40 "$out/$t.log"; echo "sanitize: $t failed"; exit 1; }
  echo "sanitize: $t under ASan+UBSan: $(grep -o 'PASSED  \] [0-9]* tests\?' "$out/$t.log" | grep -o '[0-9]*') passed"
done
bash fuzz/cli_hostile.sh "$out/tools/mhc"

for target in safetensors config index; do
  bin="$out/fuzz/fuzz_$target"
  corpus="$out/corpus-$target"  # the seeds plus what this machine's runs found, kept between runs
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$target"/* "$corpus"/ 2>/dev/null || true
  if "$bin" -help=1 >/dev/null 2>&1; then
    "$bin" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$out/crash-$target-" "$corpus" >"$out/fuzz-$target.log" 2>&1 \
      || { tail -40 "$out/fuzz-$target.log"; echo "sanitize: fuzz_$target found a failure (artifact in $out)"; exit 1; }
    echo "sanitize: fuzz_$target: $(grep -m1 'stat::number_of_executed_units' "$out/fuzz-$target.log" | awk '{print $2}') runs in ${seconds} s, no failure"
  else
    "$bin" "$corpus"
  fi
done
echo "sanitize: done in $(( $(date +%s) - t0 )) s"
