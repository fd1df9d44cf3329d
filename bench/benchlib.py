"""Shared helpers of the benchmark scripts: ideal bytes, targets, statistics, JSON lines.

Pure Python (no torch, no matplotlib) so that every script can import it cheaply. The formulas
mirror tools/bench_common.cpp and docs/performance-spec.md; keep the two in step.
"""

import json
import math

# (op, mode) pairs in the order `mhc bench` sweeps them; the torch baseline implements the
# ones in TORCH_OP_MODES.
OP_MODES = [
    ("post_pre", "normal"),
    ("post_pre", "normal_fold"),
    ("post_pre", "shifted"),
    ("post_pre", "shifted_fold"),
    ("pre", "normal_fold"),
    ("pre_broadcast", "normal_fold"),
    ("post", "full"),
    ("head", "learned_fold"),
]

IMPL_ORDER = ["mhc", "torch_compile", "torch_eager"]


def ideal_bytes(op, T, H, n=4):
    """Bytes an ideal implementation moves (docs/performance-spec.md)."""
    M = (n + 2) * n
    K = n * H
    if op == "post_pre":
        return T * (20 * H + 4 * M) + 4 * M * K
    if op == "pre":
        return T * (10 * H + 4 * M) + 4 * M * K
    if op == "post":
        return T * (18 * H + 4 * (n + n * n))
    if op == "pre_broadcast":
        return T * (4 * H + 4 * M) + 4 * M * H
    if op == "head":
        return T * (2 * n * H + 2 * H) + 4 * n * K
    raise ValueError("unknown op %r" % op)


def weight_bytes(op, H, n=4):
    """Bytes of the weights one call reads (what must come from DRAM when sets rotate)."""
    M = (n + 2) * n
    if op in ("post_pre", "pre"):
        return 4 * M * n * H
    if op == "pre_broadcast":
        return 4 * M * H
    if op == "head":
        return 4 * n * n * H
    return 0


def target_us(ideal, copy_gbps):
    """The spec's generic target: 1.3 x max(5 us, ideal / (0.85 x copy bandwidth))."""
    stream_us = ideal / (0.85 * copy_gbps * 1e9) * 1e6 if copy_gbps > 0 else 0.0
    return 1.3 * max(5.0, stream_us)


def percentile(sorted_values, q):
    """Linear interpolation between closest ranks (as tools/bench_common.cpp)."""
    if not sorted_values:
        return float("nan")
    pos = q * (len(sorted_values) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac


def summarize(values):
    v = sorted(values)
    return {
        "us": percentile(v, 0.5),
        "us_min": v[0],
        "us_max": v[-1],
        "us_p10": percentile(v, 0.1),
        "us_p90": percentile(v, 0.9),
    }


def parse_ints(text):
    out = [int(x) for x in text.split(",") if x.strip()]
    if not out or any(x < 1 for x in out):
        raise ValueError("expected a comma-separated list of positive integers, got %r" % text)
    return out


def parse_list(text):
    out = [x.strip() for x in text.split(",") if x.strip()]
    if not out:
        raise ValueError("expected a comma-separated list, got %r" % text)
    return out


def load_jsonl(paths):
    """Reads JSON-lines files; returns (envs, rows). Lines that fail to parse are reported."""
    envs, rows = [], []
    for path in paths:
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    print("%s:%d: skipped (not JSON: %s)" % (path, lineno, e))
                    continue
                kind = obj.get("kind")
                if kind == "env":
                    envs.append(obj)
                elif kind == "row":
                    rows.append(obj)
    return envs, rows


def usable(row):
    """True for a row that carries a measurement."""
    us = row.get("us")
    return not row.get("error") and isinstance(us, (int, float)) and us > 0
