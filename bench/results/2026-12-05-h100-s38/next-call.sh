# Prepared in session 38 (device time spent): the next session's first call, no command list of
# its own; it runs device_session.sh's steps `record sinkhorn step test san` on the tree of the
# session's HEAD (after 6b8b28f: decode_chunk_kernel's phase-2-only blocks and its post_pre rows at
# H > 5120, T = 97-128; session 37's fences; the overlap pre window dispatched since session 35).
# Invocation (about 9 minutes; the record first, so a cut call still returns it):
#   bash scripts/prepare_device.sh (if .deps is missing); bash scripts/snap.sh .snap HEAD;
#   carry [".deps", ".snap"]; timeout_s 595;
#   run: R0=$OUT; cd .snap && export OUT=/tmp/o MHC_S7_TEST_S=200 MHC_S7_SAN_S=45; rm -rf /tmp/o;
#        timeout 570 bash scripts/device_session.sh record sinkhorn step test san > $R0/o.log 2>&1;
#        cp /tmp/o/summary.txt $R0/; tar -czf $R0/results.tgz -C /tmp/o .
# What it answers:
#   - the record on that card (216 rows; on an H200 comparable with session 32's: predicted
#     unchanged but for post_pre at H = 7168, T = 128, ~25 -> ~19.5 us, and T = 120-128 rows of
#     pre and head at H = 5120 / 7168, -2 to -3 us);
#   - sinkhorn_forms with session 38's ablations: `norcp*` (no reciprocals: what the MUFU adds to
#     the ~160 cycles an iteration), `cols*` (the column step alone) and the candidate `fma`
#     (column sums by fused multiply-adds; other bits). If `fma` is >= 10% faster than shipped with
#     a max relative error <= 4e-6, it is worth putting in epilogue.cuh (every variant shares it);
#   - the V4-Flash step; the GPU suite's main filter (grid, family, decode, batch, graph, errors)
#     and the three sanitizers over the default subset.
