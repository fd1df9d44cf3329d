#!/usr/bin/env python3
"""The spec's mHC math (docs/spec.md section 3) in plain PyTorch, timed with the protocol of
`mhc bench` (docs/performance-spec.md), eager and under torch.compile.

What is measured, per (impl, op, mode, H, T):
  * in this process first: device-to-device copy bandwidth through torch (1 GiB, read + write
    bytes, median of 10 copies timed with CUDA events);
  * enough distinct weight sets (fn, scale, base, RMSNorm weight) that the fn bytes exceed 2x the
    L2 size, and at least --min-sets (86 = the boundaries of V4-Flash);
  * the op chained over them (post_pre and post: each output residual, and for post_pre the
    mixes, feed the next call), the chain captured in one torch.cuda.CUDAGraph, replayed
    --reps times after 3 warm-up replays; us per op = replay time / chained calls, median;
  * the chain length is capped so that one replay takes about --graph-ms (sized by a few eager
    calls first), and the inputs rotate through a ring of slots whose bytes exceed 2x L2 where
    that is cheap (small T), 2 slots otherwise.

Ops and modes (the same names as `mhc bench`): post_pre normal / normal_fold / shifted /
shifted_fold, pre normal_fold, post full. fp32 matmuls run at the highest precision
(TF32 off). torch.compile uses mode="default" with torch's default dynamic-shape policy
(--compile-dynamic auto: the first recompile of a function makes the changed sizes dynamic, so
each (op, mode) compiles a few times, not once per shape); the compiled callable is warmed up
on each shape and then captured into a CUDA graph by this script, like the eager one.

The compile T list is shorter than the eager one (compilation costs seconds per new shape
class); rows run in priority order (post_pre normal_fold first, eager then compile for each H)
and --budget-s stops starting new rows, so a bounded run keeps the most important rows.

Output: JSON lines, first {"kind": "env", "impl": "torch", ...} with the copy bandwidth, then
one {"kind": "row", "impl": "torch_eager" | "torch_compile", ...} per row with the schema of
`mhc bench --out`. torch is imported only after the arguments are parsed.
"""

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

# Priority order: a run cut short by --budget-s keeps the first ones.
TORCH_OP_MODES = [
    ("post_pre", "normal_fold"),
    ("post_pre", "shifted_fold"),
    ("post", "full"),
    ("pre", "normal_fold"),
    ("post_pre", "normal"),
    ("post_pre", "shifted"),
]

DEFAULT_H = "4096,5120,7168"
DEFAULT_T_EAGER = "1,4,16,128,1024,8192,16384,65536"
DEFAULT_T_COMPILE = "1,4,16,128,1024,8192,16384"
QUICK_H = "4096"
QUICK_T = "1,16,128,1024,16384"

# Scalars of the presets (include/mhc/config.hpp): normal mode = DeepSeek-V4, shifted = V4.1.
SCALARS = {
    "normal": dict(norm_eps=1e-6, pre_eps=1e-6, sinkhorn_eps=1e-6, sinkhorn_iters=20, post_scale=2.0,
                   rmsnorm_eps=1e-6),
    "shifted": dict(norm_eps=1e-20, pre_eps=1e-6, sinkhorn_eps=1e-6, sinkhorn_iters=20, post_scale=2.0,
                    rmsnorm_eps=1e-20),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impls", default="eager,compile", help="eager,compile (default both)")
    p.add_argument("--ops", default="post_pre,post,pre", help="post_pre,post,pre (default all)")
    p.add_argument("--modes", default="", help="only these modes (default: every mode of each op)")
    p.add_argument("--H", default=None, help="hidden sizes (default %s)" % DEFAULT_H)
    p.add_argument("--T", default=None, help="token counts of the eager rows (default %s)" % DEFAULT_T_EAGER)
    p.add_argument("--T-compile", default=None,
                   help="token counts of the torch.compile rows (default %s)" % DEFAULT_T_COMPILE)
    p.add_argument("--quick", action="store_true", help="H %s, T %s for both impls" % (QUICK_H, QUICK_T))
    p.add_argument("--out", default="", help="JSON-lines output file")
    p.add_argument("--reps", type=int, default=20, help="timed replays per row (protocol: >= 20)")
    p.add_argument("--graph-ms", type=float, default=50.0, help="target duration of one replay (default 50)")
    p.add_argument("--min-sets", type=int, default=86, help="weight sets at least (default 86)")
    p.add_argument("--act-gib", type=float, default=8.0, help="memory for the input ring of one row")
    p.add_argument("--budget-s", type=float, default=0.0, help="start no new row after this many seconds")
    p.add_argument("--compile-dynamic", default="auto", choices=["auto", "true", "false"],
                   help="torch.compile dynamic= None / True / False (default auto = None)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", type=int, default=0)
    a = p.parse_args(argv)
    a.impls = benchlib.parse_list(a.impls)
    for impl in a.impls:
        if impl not in ("eager", "compile"):
            p.error("--impls: unknown impl %r" % impl)
    a.ops = benchlib.parse_list(a.ops)
    for op in a.ops:
        if op not in {o for o, _ in TORCH_OP_MODES}:
            p.error("--ops: unknown op %r (torch baseline has post_pre, post, pre)" % op)
    a.modes = benchlib.parse_list(a.modes) if a.modes else []
    a.H = benchlib.parse_ints(a.H or (QUICK_H if a.quick else DEFAULT_H))
    a.T = benchlib.parse_ints(a.T or (QUICK_T if a.quick else DEFAULT_T_EAGER))
    a.T_compile = benchlib.parse_ints(a.T_compile or (QUICK_T if a.quick else DEFAULT_T_COMPILE))
    if a.reps < 20:
        print("torch_baseline: warning: --reps %d is below the protocol's 20 replays" % a.reps, file=sys.stderr)
    return a


# ------------------------------------------------------------------------------------------------
# The math of docs/spec.md section 3, written once with a torch module handle.

def make_ops(torch, n, sc):
    bf16 = torch.bfloat16
    norm_eps, pre_eps = sc["norm_eps"], sc["pre_eps"]
    s_eps, iters = sc["sinkhorn_eps"], sc["sinkhorn_iters"]
    post_scale, rms_eps = sc["post_scale"], sc["rmsnorm_eps"]

    def sinkhorn(c):
        c = torch.softmax(c, dim=-1) + s_eps                 # row softmax (over k), then + eps
        c = c / (c.sum(dim=-2, keepdim=True) + s_eps)        # column normalise (sum over j)
        for _ in range(iters - 1):
            c = c / (c.sum(dim=-1, keepdim=True) + s_eps)    # row normalise
            c = c / (c.sum(dim=-2, keepdim=True) + s_eps)    # column normalise
        return c

    def mixes(residual, fn, scale, base):
        T = residual.shape[0]
        x = residual.float().reshape(T, -1)                  # [T, K]
        K = x.shape[1]
        r = 1.0 / torch.sqrt((x * x).sum(dim=-1, keepdim=True) / K + norm_eps)
        m = (x @ fn.t()) * r                                  # [T, M]; GEMM first, then scale by r
        pre = torch.sigmoid(m[:, :n] * scale[0] + base[:n]) + pre_eps
        post = post_scale * torch.sigmoid(m[:, n:2 * n] * scale[1] + base[n:2 * n])
        c = m[:, 2 * n:].reshape(T, n, n) * scale[2] + base[2 * n:].reshape(n, n)
        return pre, post, sinkhorn(c)

    def collapse(residual, pre):
        return (pre.unsqueeze(-1) * residual.float()).sum(dim=1).to(bf16)

    def rmsnorm(u, w):
        uf = u.float()
        return (uf * (1.0 / torch.sqrt((uf * uf).mean(dim=-1, keepdim=True) + rms_eps)) * w.float()).to(bf16)

    def post(layer_output, residual, post_mix, comb_mix):
        # new[k] = post[k] * lo + sum_j comb[j, k] * residual[j]
        mixed = torch.bmm(comb_mix.transpose(1, 2), residual.float())
        return (post_mix.unsqueeze(-1) * layer_output.float().unsqueeze(1) + mixed).to(bf16)

    def post_pre(layer_output, residual, post_mix, comb_mix, fn, scale, base, norm_w, pre_in):
        new = post(layer_output, residual, post_mix, comb_mix)
        pre, post_out, comb_out = mixes(new, fn, scale, base)
        li = collapse(new, pre if pre_in is None else pre_in)
        if norm_w is not None:
            li = rmsnorm(li, norm_w)
        return new, li, post_out, comb_out, pre

    def pre_op(residual, fn, scale, base, norm_w):
        pre, post_out, comb_out = mixes(residual, fn, scale, base)
        li = collapse(residual, pre)
        if norm_w is not None:
            li = rmsnorm(li, norm_w)
        return li, post_out, comb_out

    return {"post_pre": post_pre, "pre": pre_op, "post": post}


# ------------------------------------------------------------------------------------------------

class Bench:
    def __init__(self, torch, args):
        self.torch = torch
        self.a = args
        self.dev = torch.device("cuda", args.device)
        torch.cuda.set_device(self.dev)
        props = torch.cuda.get_device_properties(self.dev)
        self.device_name = props.name
        self.sm_count = props.multi_processor_count
        self.l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2 ** 20)
        self.memory = int(props.total_memory)
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(args.seed)
        self.weights = {}  # H -> list of (fn, scale, base, norm_w)
        self.compiled = {}
        self.copy_gbps = 0.0
        self.copy_spread = (0.0, 0.0)

    # -- timing helpers ----------------------------------------------------------------------
    def time_runs(self, count, fn):
        torch = self.torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        stops = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        for i in range(count):
            starts[i].record()
            fn()
            stops[i].record()
        torch.cuda.synchronize()
        return [starts[i].elapsed_time(stops[i]) for i in range(count)]

    def measure_copy(self):
        torch = self.torch
        nbytes = 1 << 30
        src = torch.randn(nbytes // 2, device=self.dev, dtype=torch.bfloat16, generator=self.gen)
        dst = torch.empty_like(src)
        self.time_runs(2, lambda: dst.copy_(src))
        ms = self.time_runs(10, lambda: dst.copy_(src))
        gbps = sorted(2.0 * nbytes / (t * 1e-3) / 1e9 for t in ms)
        self.copy_gbps = benchlib.percentile(gbps, 0.5)
        self.copy_spread = (gbps[0], gbps[-1])
        del src, dst
        torch.cuda.empty_cache()

    # -- data ----------------------------------------------------------------------------------
    def weight_sets(self, H, count, n=4):
        torch = self.torch
        have = self.weights.setdefault(H, [])
        M, K = (n + 2) * n, n * H
        while len(have) < count:
            fn = torch.randn(M, K, device=self.dev, generator=self.gen) / math.sqrt(K)
            scale = 0.5 + torch.rand(3, device=self.dev, generator=self.gen)
            base = 0.5 * torch.randn(M, device=self.dev, generator=self.gen)
            norm_w = (1.0 + 0.1 * torch.randn(H, device=self.dev, generator=self.gen)).to(torch.bfloat16)
            have.append((fn, scale, base, norm_w))
        return have[:count]

    def doubly_stochastic(self, T, n):
        torch = self.torch
        c = 0.5 + torch.rand(T, n, n, device=self.dev, generator=self.gen)
        for _ in range(8):
            c = c / c.sum(dim=-1, keepdim=True)
            c = c / c.sum(dim=-2, keepdim=True)
        return c.contiguous()

    def ring(self, op, shifted, T, H, slots, n=4):
        torch = self.torch
        out = []
        for _ in range(slots):
            s = {}
            s["residual"] = torch.randn(T, n, H, device=self.dev, generator=self.gen).to(torch.bfloat16)
            if op in ("post_pre", "post"):
                s["layer_output"] = torch.randn(T, H, device=self.dev, generator=self.gen).to(torch.bfloat16)
            s["post_mix"] = 0.2 + 1.6 * torch.rand(T, n, device=self.dev, generator=self.gen)
            s["comb_mix"] = self.doubly_stochastic(T, n)
            if shifted:
                s["pre_mix"] = 0.2 + 0.8 * torch.rand(T, n, device=self.dev, generator=self.gen)
            out.append(s)
        return out

    # -- one row ---------------------------------------------------------------------------------
    def callable_for(self, impl, op, mode):
        key = (impl, op, mode)
        if key not in self.compiled:
            base_mode = "shifted" if mode.startswith("shifted") else "normal"
            fn = make_ops(self.torch, 4, SCALARS[base_mode])[op]
            if impl == "compile":
                dyn = {"auto": None, "true": True, "false": False}[self.a.compile_dynamic]
                fn = self.torch.compile(fn, mode="default", dynamic=dyn)
            self.compiled[key] = fn
        return self.compiled[key]

    def measure(self, impl, op, mode, H, T, row):
        torch = self.torch
        a = self.a
        n = 4
        shifted = mode.startswith("shifted")
        fold = mode.endswith("fold")
        f = self.callable_for(impl, op, mode)

        wb = benchlib.weight_bytes(op, H, n)
        sets = a.min_sets
        if wb > 0:
            sets = max(sets, int(math.ceil(2.0 * self.l2 / wb)) + 1)
        W = self.weight_sets(H, sets, n) if op != "post" else []
        row["sets"] = sets

        slot_bytes = T * n * H * 2 + T * (n + n * n + n) * 4 + (T * H * 2 if op != "pre" else 0)
        R = int(math.ceil(2.0 * self.l2 / slot_bytes)) + 1
        R = max(2, min(R, sets + 1, int(a.act_gib * 2 ** 30 / slot_bytes)))
        ring = self.ring(op, shifted, T, H, R, n)
        row["ring"] = R

        def chain(L):
            s0 = ring[0]
            res, pm, cm = s0["residual"], s0["post_mix"], s0["comb_mix"]
            pre_in = s0.get("pre_mix") if shifted else None
            out = None
            for i in range(L):
                s = ring[i % R]
                if op == "post_pre":
                    fn, scale, base, norm_w = W[i % sets]
                    res, li, pm, cm, pre = f(s["layer_output"], res, pm, cm, fn, scale, base,
                                             norm_w if fold else None, pre_in)
                    if shifted:
                        pre_in = pre
                    out = (res, li, pm, cm, pre)
                elif op == "post":
                    res = f(s["layer_output"], res, s["post_mix"], s["comb_mix"])
                    out = res
                else:  # pre
                    fn, scale, base, norm_w = W[i % sets]
                    out = f(s["residual"], fn, scale, base, norm_w if fold else None)
            return out

        # Warm-up (compiles under torch.compile), then a pilot graph of 3 calls measures the GPU
        # time per call, which sizes the chain: all the weight sets unless one replay would then
        # exceed --graph-ms; never fewer calls than stream 2x L2 per replay.
        chain(2)
        torch.cuda.synchronize()
        pilot = torch.cuda.CUDAGraph()
        with torch.cuda.graph(pilot):
            keep = chain(3)
        pilot.replay()
        per_call_ms = self.time_runs(1, pilot.replay)[0] / 3
        del pilot, keep
        ideal = benchlib.ideal_bytes(op, T, H, n)
        l_time = int(math.floor(a.graph_ms / max(per_call_ms, 1e-6)))
        l_cold = int(math.ceil(2.0 * self.l2 / ideal))
        L = max(1, min(sets, max(l_time, l_cold)))
        row["chain"] = L
        chain(L)  # every call of the chain once more outside capture (same shapes: no recompile)
        torch.cuda.synchronize()

        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            keep = chain(L)
        self.time_runs(3, g.replay)
        ms = self.time_runs(a.reps, g.replay)
        del keep, g, ring
        row.update(benchlib.summarize([t * 1e3 / L for t in ms]))
        row["reps"] = a.reps

    def command(self, impl, op, mode, H, T):
        a = self.a
        cmd = ["python3", "bench/torch_baseline.py", "--impls", impl, "--ops", op, "--modes", mode,
               "--H", str(H), "--T" if impl == "eager" else "--T-compile", str(T), "--reps", str(a.reps)]
        if a.graph_ms != 50.0:
            cmd += ["--graph-ms", str(a.graph_ms)]
        if a.min_sets != 86:
            cmd += ["--min-sets", str(a.min_sets)]
        if a.compile_dynamic != "auto" and impl == "compile":
            cmd += ["--compile-dynamic", a.compile_dynamic]
        if a.seed != 1:
            cmd += ["--seed", str(a.seed)]
        return " ".join(cmd)


def main(argv=None):
    import json

    a = parse_args(sys.argv[1:] if argv is None else argv)
    t_start = time.time()
    import torch  # lazily: --help works without torch

    if not torch.cuda.is_available():
        print("torch_baseline: error: torch sees no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    import torch._dynamo

    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 256))

    b = Bench(torch, a)
    b.measure_copy()
    print("torch_baseline: %s, %d SMs, L2 %.1f MiB, torch %s: copy %.1f GB/s (read+write, min %.1f, max %.1f)"
          % (b.device_name, b.sm_count, b.l2 / 2 ** 20, torch.__version__, b.copy_gbps, b.copy_spread[0],
             b.copy_spread[1]), file=sys.stderr, flush=True)
    out = open(a.out, "w") if a.out else None

    def emit(obj):
        if out:
            out.write(json.dumps(obj) + "\n")
            out.flush()

    emit({"kind": "env", "impl": "torch", "device": b.device_name, "sm_count": b.sm_count, "l2_bytes": b.l2,
          "memory_bytes": b.memory, "copy_gbps": b.copy_gbps, "copy_gbps_min": b.copy_spread[0],
          "copy_gbps_max": b.copy_spread[1], "copy_bytes": 1 << 30, "graph_node_us": None,
          "torch": torch.__version__, "cuda": torch.version.cuda, "cmd": " ".join(["python3"] + sys.argv)})

    plan = []
    for op, mode in TORCH_OP_MODES:
        if op not in a.ops or (a.modes and mode not in a.modes):
            continue
        for H in a.H:
            for impl in ("eager", "compile"):
                if impl not in a.impls:
                    continue
                for T in (a.T if impl == "eager" else a.T_compile):
                    plan.append((impl, op, mode, H, T))
    rows, skipped = [], []
    for index, (impl, op, mode, H, T) in enumerate(plan, 1):
        if a.budget_s > 0 and time.time() - t_start > a.budget_s:
            skipped.append("%s %s/%s H=%d T=%d" % (impl, op, mode, H, T))
            continue
        ideal = benchlib.ideal_bytes(op, T, H)
        row = {"kind": "row", "impl": "torch_" + impl, "device": b.device_name, "op": op, "mode": mode, "n": 4,
               "H": H, "T": T, "us": None, "ideal_bytes": ideal, "copy_gbps": b.copy_gbps,
               "target_us": benchlib.target_us(ideal, b.copy_gbps), "variant": "torch_" + impl,
               "chain": 0, "sets": 0, "ring": 0, "reps": 0}
        t_row = time.time()
        try:
            b.measure(impl, op, mode, H, T, row)
            row["gbps"] = ideal / (row["us"] * 1e-6) / 1e9
            row["pct_copy"] = 100.0 * row["gbps"] / b.copy_gbps
            row["meets_target"] = row["us"] <= row["target_us"]
            print("[%d/%d] %s %s %s H=%d T=%d: %.2f us (p10 %.2f, p90 %.2f), %.1f%% of copy, chain %d (%.1f s)"
                  % (index, len(plan), row["impl"], op, mode, H, T, row["us"], row["us_p10"], row["us_p90"],
                     row["pct_copy"], row["chain"], time.time() - t_row), file=sys.stderr, flush=True)
        except Exception as e:  # a failed row is recorded, the sweep goes on
            row["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            print("[%d/%d] %s %s %s H=%d T=%d: error: %s" % (index, len(plan), row["impl"], op, mode, H, T,
                                                             row["error"]), file=sys.stderr, flush=True)
            try:
                torch.cuda.synchronize()
            except Exception as sticky:
                row["cmd"] = b.command(impl, op, mode, H, T)
                emit(row)
                print("torch_baseline: CUDA context broken (%s); stopping" % sticky, file=sys.stderr)
                return 1
        torch.cuda.empty_cache()
        row["cmd"] = b.command(impl, op, mode, H, T)
        emit(row)
        rows.append(row)

    print("\ntorch baseline on %s: copy %.1f GB/s" % (b.device_name, b.copy_gbps))
    print("%-14s %-9s %-13s %5s %6s %10s %10s %10s %9s %6s" % ("impl", "op", "mode", "H", "T", "us/op", "p10",
                                                                "p90", "GB/s", "%copy"))
    for r in rows:
        if r.get("error"):
            print("%-14s %-9s %-13s %5d %6d  error: %s" % (r["impl"], r["op"], r["mode"], r["H"], r["T"],
                                                          r["error"]))
        else:
            print("%-14s %-9s %-13s %5d %6d %10.2f %10.2f %10.2f %9.1f %6.1f" % (
                r["impl"], r["op"], r["mode"], r["H"], r["T"], r["us"], r["us_p10"], r["us_p90"], r["gbps"],
                r["pct_copy"]))
    if skipped:
        msg = "--budget-s %.0f reached: %d rows not run (first: %s, last: %s)" % (a.budget_s, len(skipped),
                                                                                skipped[0], skipped[-1])
        print("\n" + msg)
        emit({"kind": "note", "impl": "torch", "text": msg})
    failed = sum(1 for r in rows if r.get("error"))
    print("%d rows measured, %d failed, %d skipped, %.0f s" % (len(rows) - failed, failed, len(skipped),
                                                              time.time() - t_start))
    if out:
        out.close()
    return 0 if failed == 0 else 4


if __name__ == "__main__":
    sys.exit(main())
