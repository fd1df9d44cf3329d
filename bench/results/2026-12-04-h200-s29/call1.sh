# Session 29 call 1 ran session 28's prepared command list unchanged:
# bench/results/2026-12-04-h200-s28/next-call.sh (trees .snap = main 7738428, .snap2 = main + that
# session's next-finalize-pdl.patch).
