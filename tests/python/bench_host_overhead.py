"""Host time per call of every mHC operator from Python (issue 16; docs/performance-spec.md's
host-overhead row: <= 10 us of CPU time per call through the torch operators, outputs given).

    python tests/python/bench_host_overhead.py [--device cpu|cuda] [--H 4096] [--out rows.jsonl]

For each operator and T in (0, 1) it times, per call, the paths an engine can take:
  out       torch.ops.mhc.<op>_out.default with every output given (the engine's form)
  func      torch.ops.mhc.<op>.default (allocates its outputs)
  mt        mhc.torch.<op> (the Python wrapper over the functional operator)
  ops       mhc.<op> (the array API, mhc.ops) with every output given
and, as the floor, torch.add(x, x, out=y) on an empty tensor. On the CPU, T = 0 is pure host
time (T = 1 adds the op's arithmetic). On a GPU each sample is one call timed alone after a
device synchronisation (`enqueue`: the GPU is idle, so the call never waits for a full launch
queue), so every row is host time; timing back-to-back batches instead (the CPU method) measured
the GPU's throughput at T = 1 whenever a kernel took longer than the host's call (session 8 on the
H200: 8-15 us "host" time at T = 1 against 4-5 at T = 0). Rows
are JSON lines: median, p10 and p90 over batches of calls, in microseconds, with the torch
version, the operator backend (mhc.torch.BACKEND: cpp or python) and the device.
"""

import argparse
import json
import statistics
import sys
import time

import torch

import mhc
import mhc.torch as mt


def _time_enqueue(fn, sync, samples=2000):
    """Median, p10, p90 of single calls, each after a synchronisation (GPU: pure enqueue cost)."""
    for _ in range(200):
        fn()
    sync()
    out = []
    for _ in range(samples):
        sync()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    out.sort()
    return statistics.median(out), out[len(out) // 10], out[(9 * len(out)) // 10]


def _time(fn, sync, batches=30, per_batch=200):
    for _ in range(per_batch):  # warm caches, allocator, dispatcher
        fn()
    sync()
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            fn()
        samples.append((time.perf_counter() - t0) / per_batch * 1e6)
        sync()
    samples.sort()
    return statistics.median(samples), samples[len(samples) // 10], samples[(9 * len(samples)) // 10]


class _Defaults:
    """torch.ops.mhc.<op>.default, the OpOverload an engine holds (the packet torch.ops.mhc.<op>
    resolves the overload on every call: about 3 us more). Resolved once and kept as an attribute,
    as an engine keeps it: until session 10 __getattr__ ran on every call, and the ~1.4 us of its
    two lookups (measured on the session's CPU) were in every row."""

    def __getattr__(self, name):  # runs only on the first lookup of a name
        op = getattr(torch.ops.mhc, name).default
        setattr(self, name, op)
        return op


def cases(device, H, T):
    """op -> {path: zero-argument callable}, all writing preallocated outputs where they can."""
    n = 4
    cfg = mhc.Config(n=n, H=H)
    g = torch.Generator().manual_seed(0)
    fn = torch.randn((n + 2) * n, n * H, generator=g) / (n * H) ** 0.5
    w = mt.prepare(fn, torch.ones(3), torch.zeros((n + 2) * n), config=cfg, device=device)
    hw = mt.prepare_head(torch.randn(n, n * H, generator=g) / (n * H) ** 0.5, torch.ones(1), torch.zeros(n),
                         config=cfg, device=device)
    bf = dict(dtype=torch.bfloat16, device=device)
    f32 = dict(dtype=torch.float32, device=device)
    res = torch.randn(T, n, H, **bf)
    emb = torch.randn(T, H, **bf)
    y = torch.randn(T, H, **bf)
    nw = torch.ones(H, **bf)
    pm = torch.rand(T, n, **f32)
    cm = torch.rand(T, n, n, **f32)
    res_out = torch.empty(T, n, H, **bf)
    li = torch.empty(T, H, **bf)
    pm_out, cm_out, pre_out = torch.empty(T, n, **f32), torch.empty(T, n, n, **f32), torch.empty(T, n, **f32)
    sc = mt._scalars(cfg)
    o = _Defaults()
    return {
        "mixes": {
            "out": lambda: o.mixes_out(res, w.buffer, pre_out, pm_out, cm_out, *sc),
            "func": lambda: o.mixes(res, w.buffer, *sc),
            "mt": lambda: mt.mixes(res, w, config=cfg),
            "ops": lambda: mhc.mixes(res, w, config=cfg, pre_mix=pre_out, post_mix=pm_out, comb_mix=cm_out),
        },
        "collapse": {
            "out": lambda: o.collapse_out(res, pm, nw, "carried", li, *sc),
            "func": lambda: o.collapse(res, pm, nw, "carried", *sc),
            "mt": lambda: mt.collapse(res, pm, config=cfg, rmsnorm_weight=nw),
            "ops": lambda: mhc.collapse(res, pm, config=cfg, rmsnorm_weight=nw, layer_input=li),
        },
        "pre": {
            "out": lambda: o.pre_out(res, w.buffer, None, nw, "computed", li, pm_out, cm_out, None, *sc),
            "func": lambda: o.pre(res, w.buffer, None, nw, "computed", *sc),
            "mt": lambda: mt.pre(res, w, config=cfg, rmsnorm_weight=nw),
            "ops": lambda: mhc.pre(res, w, config=cfg, rmsnorm_weight=nw, layer_input=li, post_mix=pm_out,
                                   comb_mix=cm_out),
        },
        "pre_broadcast": {
            "out": lambda: o.pre_broadcast_out(emb, w.buffer, None, nw, "computed", li, pm_out, cm_out, None, None,
                                               *sc),
            "func": lambda: o.pre_broadcast(emb, w.buffer, None, nw, "computed", False, *sc),
            "mt": lambda: mt.pre_broadcast(emb, w, config=cfg, rmsnorm_weight=nw),
            "ops": lambda: mhc.pre_broadcast(emb, w, config=cfg, rmsnorm_weight=nw, layer_input=li, post_mix=pm_out,
                                             comb_mix=cm_out),
        },
        "post": {
            "out": lambda: o.post_out(y, res, pm, cm, res_out, *sc),
            "func": lambda: o.post(y, res, pm, cm, *sc),
            "mt": lambda: mt.post(y, res, pm, cm, config=cfg),
            "ops": lambda: mhc.post(y, res, pm, cm, config=cfg, residual_out=res_out),
        },
        "post_pre": {
            "out": lambda: o.post_pre_out(y, res, pm, cm, w.buffer, None, nw, "computed", res_out, li, pm_out, cm_out,
                                          None, *sc),
            "func": lambda: o.post_pre(y, res, pm, cm, w.buffer, None, nw, "computed", *sc),
            "mt": lambda: mt.post_pre(y, res, pm, cm, w, config=cfg, rmsnorm_weight=nw),
            "ops": lambda: mhc.post_pre(y, res, pm, cm, w, config=cfg, rmsnorm_weight=nw, residual_out=res_out,
                                        layer_input=li, post_mix_out=pm_out, comb_mix_out=cm_out),
        },
        "head": {
            "out": lambda: o.head_out(res, hw.buffer, None, nw, "learned", li, *sc),
            "func": lambda: o.head(res, hw.buffer, None, nw, "learned", *sc),
            "mt": lambda: mt.head(res, config=cfg, weights=hw, rmsnorm_weight=nw),
            "ops": lambda: mhc.head(res, config=cfg, weights=hw, rmsnorm_weight=nw, output=li),
        },
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--H", type=int, default=4096)
    p.add_argument("--T", default="0,1")
    p.add_argument("--paths", default="out,func,mt,ops")
    p.add_argument("--out", default=None, help="append JSON lines here")
    a = p.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cuda":
        mt.init(device, 4096)
        sync = torch.cuda.synchronize
    else:
        sync = lambda: None  # noqa: E731
    x = torch.empty(0, device=device)
    y = torch.empty(0, device=device)
    timer = _time_enqueue if device.type == "cuda" else _time
    floor = timer(lambda: torch.add(x, x, out=y), sync)[0]
    rows = []
    for T in [int(t) for t in a.T.split(",")]:
        for op, paths in cases(device, a.H, T).items():
            for path in a.paths.split(","):
                med, p10, p90 = timer(paths[path], sync)
                row = dict(what="host_overhead", op=op, T=T, H=a.H, path=path, device=str(device),
                           method="enqueue" if device.type == "cuda" else "batch",
                           backend=mt.BACKEND, host_us=round(med, 3), p10_us=round(p10, 3), p90_us=round(p90, 3),
                           torch_add_empty_us=round(floor, 3), torch=torch.__version__, mhc=mhc.__version__)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if a.out:
        with open(a.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
