#!/usr/bin/env python3
"""Steady state and per-call fixed cost of each row family, from a record's T = 4096 and 16384 rows:
time(T) = intercept + T x slope (both T run the same kernels at T >= 4096), the slope as a share of
the record's copy bandwidth on the ideal bytes a token, and the T = 4096 share of copy for reference.

usage: python3 fixed_cost.py RECORD.jsonl [RECORD.jsonl ...]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import benchlib  # noqa: E402  (bench/benchlib.py)

ROWS = (("collapse", "carried_fold"), ("post", "full"), ("mixes", "plain"), ("pre", "normal_fold"),
        ("head", "learned_fold"), ("pre_broadcast", "normal_fold"), ("post_pre", "normal_fold"),
        ("post_pre", "shifted_fold"))

for path in sys.argv[1:]:
    envs, rows = benchlib.load_jsonl([path])
    env = envs[0]
    copy = env["copy_gbps"]
    print(f"{path}: {env['device']}, copy {copy:.1f} GB/s")
    print("| row | H | slope ns/token | slope % of copy | intercept us | T = 4096 % of copy |")
    print("|---|---|---|---|---|---|")
    for op, mode in ROWS:
        for H in (4096, 5120, 7168):
            d = {r["T"]: r for r in rows if benchlib.usable(r) and r["op"] == op and r["mode"] == mode and r["H"] == H}
            if 4096 not in d or 16384 not in d:
                continue
            a, b = d[4096], d[16384]
            slope = (b["us"] - a["us"]) / 12288 * 1e3  # ns a token
            intercept = a["us"] - 4096 * slope / 1e3
            floor = (b["ideal_bytes"] - a["ideal_bytes"]) / 12288 / copy  # ns a token at copy speed
            print(f"| {op} {mode} | {H} | {slope:.2f} | {100 * floor / slope:.1f} | {intercept:.2f} | {a['pct_copy']:.1f} |")
    print()
