# Prepared in session 39 (no device): the first run of cluster_pre_kernel (the `pre.cuda_n4_cluster`
# and `head.cuda_n4_cluster` rows: pre with the computed pre and the learned head, H = 4096,
# 16-block clusters). A `prefill` step command list.
# Invocation (about 7 minutes): bash scripts/prepare_device.sh (if .deps is missing);
#   bash scripts/snap.sh .snap HEAD; cp <this file> .snap/call.sh; carry [".deps", ".snap"];
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_PREFILL='bash call.sh'; rm -rf /tmp/o;
#        timeout 560 bash scripts/device_session.sh prefill > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .      (timeout_s 595)
# Predicted (written before any run): every test passes, the sanitizers are clean. The kernel runs
# its tiles one after another (three cluster barriers a tile with the fold; the next tile
# prefetched into L2; the comb Sinkhorns queued, 32 at a time): ~3.2 us a tile, so on an H100
# with 7 resident clusters pre normal_fold at H = 4096, T = 16384 takes ~420-600 us against
# staged's ~455 us; T = 16 (one tile, one cluster, the Sinkhorn at the end) ~7-9 us. The rows
# say what a tile costs (T = 112: one tile a cluster); the pipelined form comes next.
set -u
# 1. Does it run at all (a hang of a cluster barrier shows here, under a timeout)?
timeout 20 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096 --T 16 --variant pre.cuda_n4_cluster \
  --budget-s 3 2>&1 | rows | sed 's/^/[smoke] /'
echo "[smoke rc=${PIPESTATUS[0]}]"
"$BD/tools/mhc" variants 2>&1 | grep -i cluster | head -3 | sed 's/^/[variants] /'
# 1b. The SM-to-SM network's bulk rate (bench/probes/dsmem_stream.cu; the owner-row form's question:
#     would a gather of 8 H bytes a token through it keep up with DRAM?).
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/ds bench/probes/dsmem_stream.cu > "$OUT/r/ds-build.log" 2>&1 &&
  timeout 60 /tmp/ds 2>&1 | sed 's/^/[dsmem] /'
# 2. Bits: the family (every pre mode: only the computed ones accept it) against the staged plan,
#    the grid against the reference (pre_computed and pre_computed_norm at H = 4096), then the
#    suites that loop over the variants: graph capture (H = 4096, T = 33), determinism (T = 4096),
#    NaN/Inf.
export MHC_TEST_VARIANTS=cuda_n4_cluster,cuda_n4_staged,cuda_n4_decode_chunk
run_t family 180 'Modes/GpuFamily.*/pre_computed*:Modes/GpuFamily.*/head_learned*'
run_t grid 150 "$(grid_filter 4096 pre_computed pre_computed_norm head_learned head_learned_norm)"
run_t loops 150 'Modes/GpuGraph.*/pre_computed*:Modes/GpuDeterminism.*/pre_computed*:Modes/GpuNanInf.*/pre_computed*:Modes/GpuGraph.*/head_learned_norm:Modes/GpuDeterminism.*/head_learned_norm'
grep -E "variant comparisons" "$OUT/r/t-family.log" | sed 's/^/[family] /'
# 3. Rows: cluster against staged, two rounds (T = 16, 112: one tile a cluster), then head.
for round in 1 2; do
  for v in cuda_n4_cluster cuda_n4_staged; do
    timeout 40 "$BD/tools/mhc" bench --ops pre --modes normal_fold --H 4096 --T 16,112,1024,4096,16384 \
      --variant pre.$v --budget-s 12 2>&1 | rows | sed "s/^/[$v $round] /"
  done
done
for v in cuda_n4_cluster cuda_n4_staged; do
  timeout 30 "$BD/tools/mhc" bench --ops head --modes learned_fold --H 4096 --T 1024,16384 \
    --variant head.$v --budget-s 8 2>&1 | rows | sed "s/^/[head $v] /"
done
# 4. The sanitizers over the cluster rows alone (the family cases of pre_computed_norm at small T).
export MHC_TEST_VARIANTS=cuda_n4_cluster
F="$(grid_filter 4096 pre_computed_norm head_learned)"
san_t memcheck 100 "$F"
san_t synccheck 100 "$F"
MHC_S7_SAN_ARGS="--racecheck-report all" san_t racecheck 140 "$F"
