#!/usr/bin/env bash
# Two trees side by side on the device: .snap (A, the change) and .snap2 (B, before it), each a
# `git archive` of a commit (see device_session.sh). Builds both, then runs the V4-Flash decode
# step and the rows of MHC_AB_ROWS ("op modes H T [bench arguments]" items separated by ';', e.g.
# "mixes plain 4096 16384 --variant mixes.cuda_n4_staged_wg"; MHC_AB_S seconds a row) alternately, twice, so
# that both trees meet the same machine state. Results: $OUT/ab.txt (and $OUT/ab-*.jsonl).
#   device: bash .snap/scripts/device_ab.sh         (from the repository root)
set -u
export OUT=${OUT:-/tmp/o}
mkdir -p "$OUT"
for t in snap snap2; do
  ( cmake -S .$t -B build-ab-$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_CUDA_ARCHITECTURES=90a \
      -DCMAKE_CUDA_ARCHITECTURES=90a -DMHC_GTEST_SOURCE="$PWD/.deps/googletest" \
      -DMHC_CLI11_INCLUDE="$PWD/.deps/cli11" -DMHC_BUILD_TESTS=OFF > "$OUT/ab-configure-$t.log" 2>&1 ) ||
    { echo "configure $t failed"; tail -20 "$OUT/ab-configure-$t.log"; exit 1; }
done
# Both builds at once (16 cores).
cmake --build build-ab-snap --target mhc_cli > "$OUT/ab-build-snap.log" 2>&1 &
cmake --build build-ab-snap2 --target mhc_cli > "$OUT/ab-build-snap2.log" 2>&1
wait
IFS=';' read -ra rows <<< "${MHC_AB_ROWS:-post_pre normal_fold 4096,7168 1,16}"
for round in 1 2; do
  for t in snap snap2; do
    B=build-ab-$t/tools/mhc
    echo "$t round $round: $(timeout 40 $B run --graph-step 1,16 2>&1 | grep -v '^{' | tr '\n' ' ')" >> "$OUT/ab.txt"
    for r in "${rows[@]}"; do
      set -- $r
      timeout 40 $B bench --ops "$1" --modes "$2" --H "$3" --T "$4" "${@:5}" --budget-s "${MHC_AB_S:-12}" --out "$OUT/ab-$t.jsonl" 2>&1 |
        grep "^\[" | sed "s/^/$t round $round: /; s/(p10[^)]*)//; s/, chain.*//" >> "$OUT/ab.txt"
    done
  done
done
cat "$OUT/ab.txt"
