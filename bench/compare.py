#!/usr/bin/env python3
"""Markdown table: mhc against the plain-PyTorch baseline, from the JSON lines of `mhc bench
--out` and bench/torch_baseline.py --out (any number of files, in any order).

One line per (op, mode, H, T) that mhc measured: mhc us per op, % of copy bandwidth, the spec's
generic target (1.3 x max(5 us, ideal / (0.85 x copy))) and whether it is met, then each torch
implementation's us per op and its ratio torch / mhc (> 1: mhc is faster). Rows only torch has
are listed too. Failed rows show their error in short.

usage: python3 bench/compare.py mhc.jsonl torch.jsonl [--short] [--ops LIST] [--H LIST] [--T LIST]
                                [--out FILE]
  --short   only post_pre normal_fold / shifted_fold, pre, post at T = 1, 16, 128, 1024, 16384
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

SHORT_OP_MODES = [("post_pre", "normal_fold"), ("post_pre", "shifted_fold"), ("pre", "normal_fold"),
                  ("post", "full")]
SHORT_T = [1, 16, 128, 1024, 16384]
TORCH_IMPLS = ["torch_compile", "torch_eager"]


def fmt_us(x):
    if x is None:
        return "-"
    return "%.1f" % x if x >= 100 else "%.2f" % x


def table(envs, rows, ops=None, Hs=None, Ts=None, short=False):
    keep = {}
    errors = {}
    for r in rows:
        key = (r["op"], r["mode"], r["H"], r["T"])
        if short and ((r["op"], r["mode"]) not in SHORT_OP_MODES or r["T"] not in SHORT_T):
            continue
        if ops and r["op"] not in ops:
            continue
        if Hs and r["H"] not in Hs:
            continue
        if Ts and r["T"] not in Ts:
            continue
        impl = r.get("impl", "mhc")
        if benchlib.usable(r):
            keep.setdefault(key, {})[impl] = r
        elif r.get("error"):
            errors.setdefault(key, {})[impl] = r["error"]
    keys = sorted(set(keep) | set(errors),
                  key=lambda k: (benchlib.OP_MODES.index((k[0], k[1])) if (k[0], k[1]) in benchlib.OP_MODES else 99,
                                 k[2], k[3]))
    impls_present = {impl for d in keep.values() for impl in d}
    torch_cols = [i for i in TORCH_IMPLS if i in impls_present]

    lines = []
    for e in envs:
        extra = ""
        if isinstance(e.get("graph_node_us"), (int, float)):
            extra = ", graph node %.2f us" % e["graph_node_us"]
        if e.get("torch"):
            extra += ", torch %s" % e["torch"]
        lines.append("- %s on %s: copy bandwidth %.0f GB/s (read + write)%s" % (
            e.get("impl", "?"), e.get("device", "?"), e.get("copy_gbps") or 0.0, extra))
    if lines:
        lines.append("")
    head = ["op", "mode", "H", "T", "mhc us", "mhc % copy", "target us", "meets"]
    for t in torch_cols:
        head += ["%s us" % t, "%s / mhc" % t]
    head.append("mhc variant")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] * len(head)) + "|")
    for key in keys:
        op, mode, H, T = key
        got = keep.get(key, {})
        err = errors.get(key, {})
        m = got.get("mhc")
        cells = ["`%s`" % op, mode, str(H), str(T)]
        if m:
            cells += [fmt_us(m["us"]), "%.1f" % m.get("pct_copy", 0.0), fmt_us(m.get("target_us")),
                      "yes" if m["us"] <= m.get("target_us", float("inf")) else "**no**"]
        elif "mhc" in err:
            cells += ["error", "-", "-", "-"]
        else:
            cells += ["-", "-", "-", "-"]
        for t in torch_cols:
            tr = got.get(t)
            if tr:
                cells.append(fmt_us(tr["us"]))
                cells.append("%.1fx" % (tr["us"] / m["us"]) if m else "-")
            else:
                cells += ["error" if t in err else "-", "-"]
        cells.append(m.get("variant", "") if m else (err.get("mhc", "")[:60] if "mhc" in err else ""))
        lines.append("| " + " | ".join(cells) + " |")
    n_err = sum(len(v) for v in errors.values())
    if n_err:
        lines.append("")
        lines.append("%d failed rows (see the JSON lines' \"error\" fields)." % n_err)
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--short", action="store_true")
    p.add_argument("--ops", default="")
    p.add_argument("--H", default="")
    p.add_argument("--T", default="")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    envs, rows = benchlib.load_jsonl(a.files)
    text = table(envs, rows,
                 ops=benchlib.parse_list(a.ops) if a.ops else None,
                 Hs=benchlib.parse_ints(a.H) if a.H else None,
                 Ts=benchlib.parse_ints(a.T) if a.T else None,
                 short=a.short)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
