# Session 27 call 2: no command list; .snap = main 7e9ab8b (the ownfold post_collapse_kernel), run as
#   cd .snap && MHC_S7_TEST_S=330 \
#     MHC_S7_FILTER='Grid/GpuGrid.MatchesReference/*n4_H*:Modes/GpuFamily.*:Modes/GpuDecode.*:Modes/GpuBatch.*:Modes/GpuGraph.*:GpuErrors.*:GpuSinkhorn.*' \
#     bash scripts/device_session.sh record step test
# record: `mhc bench` over every op in its folded modes, H = 4096 / 5120 / 7168, T = 1 .. 16384
# (216 rows, call2-record-mhc.jsonl); step: `mhc run --graph-step 1,4,16`; test: the filter above
# (322 tests) and test_engine.
