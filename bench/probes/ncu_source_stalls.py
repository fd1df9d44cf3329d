#!/usr/bin/env python3
"""Where a kernel's warps wait, by SASS instruction, from Nsight Compute's source page.

Input: `ncu -i REPORT.ncu-rep --page source --csv --print-source sass > k.csv` of a report
collected with the SourceCounters section (session 26 call 3, bench/results/2026-12-04-h200-s26).
Prints the stall samples by reason, the instructions with the most samples (top N, default 12),
and the instructions grouped by how often each ran: a ring kernel's per-token body runs
(tokens x warps) times, its rare paths (the exact sums' double redo) other counts, so the groups
say what share of the samples each path takes against its share of the instructions.

    python3 bench/probes/ncu_source_stalls.py k.csv [N]
"""
import collections
import csv
import sys


def main() -> int:
    rows = list(csv.reader(open(sys.argv[1])))
    top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}

    def f(r, k):
        try:
            return float(r[ix[k]].replace(",", ""))
        except (KeyError, ValueError):
            return 0.0

    samples, executed = "Warp Stall Sampling (All Samples)", "Instructions Executed"
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    tot_s = sum(f(r, samples) for r in data) or 1.0
    tot_i = sum(f(r, executed) for r in data) or 1.0
    print(f"{rows[0][1] if len(rows[0]) > 1 else ''}\nsamples {tot_s:.0f}, warp instructions {tot_i:.0f}")
    by_reason = collections.Counter()
    for r in data:
        for k in reasons:
            by_reason[k[6:]] += f(r, k)
    print("by reason (% of samples): " + ", ".join(f"{k} {100 * v / tot_s:.1f}" for k, v in by_reason.most_common(12)))
    print(f"top {top_n} instructions:")
    for r in sorted(data, key=lambda r: -f(r, samples))[:top_n]:
        worst = sorted(((f(r, k), k[6:]) for k in reasons), reverse=True)[:3]
        print(f"  {100 * f(r, samples) / tot_s:5.2f}%  ran {f(r, executed):>10.0f}  {r[ix['Source']].strip()[:56]:56s} "
              + " ".join(f"{k}:{v:.0f}" for v, k in worst))
    groups = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in data:
        g = groups[f(r, executed)]
        g[0] += 1
        g[1] += f(r, executed)
        g[2] += f(r, samples)
    print("by execution count (the largest 10 by samples):")
    for e, (n, ins, s) in sorted(groups.items(), key=lambda kv: -kv[1][2])[:10]:
        print(f"  ran {e:>10.0f} times: {n:5d} instructions, {100 * ins / tot_i:5.1f}% of instructions, "
              f"{100 * s / tot_s:5.1f}% of samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
