#!/usr/bin/env python3
"""Turns the JSON lines of `mhc bench --out` and bench/torch_baseline.py --out into PNG charts.

One figure per (op, mode): left, time per op against T (log-log) with the spec's 5 us decode
target; right, % of the copy bandwidth (measured in the same process) against T with the 85%
prefill target (90% for post). One line per H and implementation (mhc solid, torch.compile
dashed, torch eager dotted); the targets are thin gray dashed lines with their own legend
entries. Also overview.png: every (op, mode) in one grid.

usage: python3 bench/plot.py RESULTS.jsonl [MORE.jsonl ...] [--outdir docs/img] [--title TEXT]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

LINESTYLE = {"mhc": "-", "torch_compile": "--", "torch_eager": ":"}
MARKER = {"mhc": "o", "torch_compile": "s", "torch_eager": "^"}


def group(rows):
    """{(op, mode): {(impl, H): [(T, us, pct), ...]}} of the usable rows, sorted by T."""
    out = {}
    for r in rows:
        if not benchlib.usable(r):
            continue
        series = out.setdefault((r["op"], r["mode"]), {}).setdefault((r.get("impl", "mhc"), r["H"]), [])
        series.append((r["T"], r["us"], r.get("pct_copy")))
    for by_series in out.values():
        for pts in by_series.values():
            pts.sort()
    return out


def order_key(op_mode):
    known = benchlib.OP_MODES
    return known.index(op_mode) if op_mode in known else len(known)


def draw(ax_time, ax_pct, op, series, colors):
    """Plots the series and the target lines; returns the pct axis's target line (its legend)."""
    for (impl, H), pts in sorted(series.items(), key=lambda kv: (benchlib.IMPL_ORDER.index(kv[0][0])
                                                                 if kv[0][0] in benchlib.IMPL_ORDER else 9,
                                                                 kv[0][1])):
        Ts = [p[0] for p in pts]
        style = dict(color=colors.get(H, "k"), linestyle=LINESTYLE.get(impl, "-."),
                     marker=MARKER.get(impl, "x"), markersize=3, linewidth=1.3,
                     label="%s H=%d" % (impl, H))
        ax_time.plot(Ts, [p[1] for p in pts], **style)
        pct = [(p[0], p[2]) for p in pts if p[2] is not None]
        if pct:
            ax_pct.plot([p[0] for p in pct], [p[1] for p in pct], **style)
    ax_time.set_xscale("log", base=2)
    ax_time.set_yscale("log")
    ax_time.axhline(5.0, color="gray", linestyle="--", linewidth=0.8, label="target 5 us (T <= 16)")
    ax_time.set_xlabel("T (tokens)")
    ax_time.set_ylabel("us per op (median)")
    ax_time.grid(True, which="both", alpha=0.3)
    target = 90.0 if op == "post" else 85.0
    ax_pct.set_xscale("log", base=2)
    target_line = ax_pct.axhline(target, color="gray", linestyle="--", linewidth=0.8,
                                 label="target %.0f%% of copy (prefill)" % target)
    ax_pct.set_ylim(0, max(105.0, ax_pct.get_ylim()[1]))
    ax_pct.set_xlabel("T (tokens)")
    ax_pct.set_ylabel("% of copy bandwidth (ideal bytes)")
    ax_pct.grid(True, which="both", alpha=0.3)
    return target_line


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="JSON-lines files")
    p.add_argument("--outdir", default=os.path.join("docs", "img"), help="where the PNGs go (default docs/img)")
    p.add_argument("--title", default="", help="prefix of every figure title (default: the device name)")
    p.add_argument("--dpi", type=int, default=110)
    a = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs, rows = benchlib.load_jsonl(a.files)
    groups = group(rows)
    if not groups:
        print("plot.py: no usable rows in %s" % ", ".join(a.files), file=sys.stderr)
        return 1
    os.makedirs(a.outdir, exist_ok=True)
    devices = sorted({e.get("device", "?") for e in envs} | {r.get("device", "?") for r in rows if "device" in r})
    title = a.title or ", ".join(devices)
    copy = ", ".join("%s copy %.0f GB/s" % (e.get("impl", "?"), e["copy_gbps"]) for e in envs
                     if isinstance(e.get("copy_gbps"), (int, float)))
    Hs = sorted({H for s in groups.values() for (_, H) in s})
    cmap = plt.get_cmap("tab10")
    colors = {H: cmap(i % 10) for i, H in enumerate(Hs)}

    written = []
    keys = sorted(groups, key=order_key)
    for op, mode in keys:
        fig, (ax_t, ax_p) = plt.subplots(1, 2, figsize=(12, 4.5))
        target_line = draw(ax_t, ax_p, op, groups[(op, mode)], colors)
        ax_t.set_title("%s / %s: time per op" % (op, mode))
        ax_p.set_title("%s / %s: %% of copy bandwidth" % (op, mode))
        ax_t.legend(fontsize=7, ncol=2)
        ax_p.legend(handles=[target_line], fontsize=7, loc="upper left")
        fig.suptitle("%s%s" % (title, ("  (" + copy + ")") if copy else ""), fontsize=9)
        fig.tight_layout()
        path = os.path.join(a.outdir, "%s_%s.png" % (op, mode))
        fig.savefig(path, dpi=a.dpi)
        plt.close(fig)
        written.append(path)

    fig, axes = plt.subplots(len(keys), 2, figsize=(12, 3.2 * len(keys)), squeeze=False)
    for i, (op, mode) in enumerate(keys):
        target_line = draw(axes[i][0], axes[i][1], op, groups[(op, mode)], colors)
        axes[i][1].legend(handles=[target_line], fontsize=6, loc="upper left")
        axes[i][0].set_title("%s / %s: us per op" % (op, mode), fontsize=9)
        axes[i][1].set_title("%s / %s: %% of copy" % (op, mode), fontsize=9)
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.suptitle("%s%s" % (title, ("  (" + copy + ")") if copy else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.99))
    path = os.path.join(a.outdir, "overview.png")
    fig.savefig(path, dpi=max(60, a.dpi * 3 // 4))
    plt.close(fig)
    written.append(path)
    for w in written:
        print(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
