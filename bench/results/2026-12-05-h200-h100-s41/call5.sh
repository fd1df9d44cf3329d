# Session 41 call 5 (a `prefill` step command list): pre_broadcast's collapse with an L2 prefetch
# of a later token's embedding row (N4Params::prefetch_ahead, one cp.async.bulk.prefetch.L2 by
# thread 0 of each block), this tree (.snap: b3f3c6e + broadcast-prefetch.patch, whose
# MHC_BCAST_PREFETCH sets the distance for this sweep; default 512) against base (.snap2: b3f3c6e).
# Why: call 4's ncu (H100, H = 4096, T = 16384) had pre_broadcast's collapse_stream_kernel at
# 121.8 us for 134.5 MB read + 109.8 MB written (67% of copy), where the carried collapse streams
# at 95-99%: a block holds 2 H bytes of loads a token, too few in flight for DRAM.
# Predicted: collapse 122 -> ~95 us, pre_broadcast at T = 16384 from ~183 us (48.5%) to ~150-160
# (55-59%) on the H100; T <= 512 unchanged (nothing ahead); the same bits.
set -u
build_tree .snap2 base &
A='--ops pre_broadcast --modes normal_fold --H 4096,5120,7168 --T 1024,4096,16384 --budget-s 12'
for D in 512 0 256 1024; do
  MHC_BCAST_PREFETCH=$D timeout 80 "$BD/tools/mhc" bench $A 2>&1 | grep -E "^\[|error" | sed "s/^/[D$D 1] /"
done
wait
cat "$OUT/r/builds-done" 2>/dev/null
timeout 80 ../build-base/tools/mhc bench $A 2>&1 | grep -E "^\[|error" | sed "s/^/[base 1] /"
timeout 80 "$BD/tools/mhc" bench $A 2>&1 | grep -E "^\[|error" | sed "s/^/[D512 2] /"
timeout 80 ../build-base/tools/mhc bench $A 2>&1 | grep -E "^\[|error" | sed "s/^/[base 2] /"
# The bits (default distance): every pre_broadcast grid case and mode suite, 4 shards, beside
# memcheck and synccheck over the grid case whose T = 989 and 4096 prefetch.
G='Grid/GpuGrid.MatchesReference/pre_broadcast*:Modes/*.*/pre_broadcast*'
SF='Grid/GpuGrid.MatchesReference/pre_broadcast_computed_norm_n4_H4096'
san_t memcheck 200 "$SF" > "$OUT/r/san-m.txt" &
MHC_S7_SAN_ARGS= san_t synccheck 200 "$SF" > "$OUT/r/san-s.txt" &
shards_t bcast 4 200 "$G"
wait
cat "$OUT/r/san-m.txt" "$OUT/r/san-s.txt"
