"""Engine readiness (issue 16) with torch: weights as torch buffers (caller-allocated, module
buffers through state_dict), the operators' registration (C++ where built, else Python: the same
schemas and bits), the destination-passing forms (opcheck, torch.compile), no nanobind leak
warning at exit, and docs/integration.md's engine example. Skipped without torch."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mhc  # noqa: E402
import mhc.torch as mt  # noqa: E402
from conftest import REPO_ROOT, Block  # noqa: E402




def _tbf16(rng, shape):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(torch.bfloat16)


def _weights(rng, config, head=False):
    blk = Block(rng, config.n, config.H, head=head)
    return [torch.from_numpy(a) for a in (blk.fn, blk.scale, blk.base)]


def test_backend_is_cpp_where_required():
    """MHC_REQUIRE_TORCH_CPP=1 (scripts/test_python.sh's run with the built extension): the
    operators must be the C++ ones."""
    if os.environ.get("MHC_REQUIRE_TORCH_CPP") == "1":
        assert mt.BACKEND == "cpp"
    assert mt.BACKEND in ("cpp", "python")


def _norm(schema: str) -> str:
    return re.sub(r"\s+", " ", schema).strip()


def test_registered_schemas_are_mhc_torch_schemas():
    for name, schema in mt.SCHEMAS.items():
        got = str(getattr(torch.ops.mhc, name).default._schema)
        assert _norm(got) == _norm(f"mhc::{name}{schema}"), name
    assert sorted(mt.SCHEMAS) == sorted(mt.OPERATORS + [f"{op}_out" for op in mt.OPERATORS])


def test_weights_are_a_torch_buffer(rng):
    config = mhc.Config(n=4, H=32)
    w = mt.prepare(*_weights(rng, config), config=config)
    assert w.buffer.dtype == torch.uint8 and w.buffer.device.type == "cpu"
    assert w.buffer.numel() == mt.prepared_bytes(config=config)
    # caller-allocated destination, any dtype
    dst = torch.empty(mt.prepared_bytes(config=config) // 4, dtype=torch.float32)
    w2 = mt.prepare(*_weights(np.random.default_rng(1234), config), config=config, out=dst)
    assert w2.buffer is dst
    res = _tbf16(rng, (3, 4, 32))
    assert torch.equal(mt.pre(res, w, config=config).layer_input, mt.pre(res, w2, config=config).layer_input)


def test_module_buffer_state_dict_round_trip(rng):
    """An engine keeps w.buffer as a module buffer: saved, loaded in place, counted."""
    config = mhc.Config(n=4, H=32)

    class Boundary(torch.nn.Module):
        def __init__(self, tensors):
            super().__init__()
            w = mt.prepare(*tensors, config=config)
            self.register_buffer("hc_prepared", w.buffer)
            self.w = w

        def forward(self, res):
            return mt.pre(res, self.w, config=config).layer_input

    a = Boundary(_weights(rng, config))
    b = Boundary(_weights(np.random.default_rng(99), config))  # other weights
    res = _tbf16(rng, (4, 4, 32))
    assert not torch.equal(a(res), b(res))
    b.load_state_dict(a.state_dict())  # copies into b's buffer in place: b now computes a's
    assert torch.equal(a(res), b(res))
    assert sum(t.numel() for t in b.buffers()) == mt.prepared_bytes(config=config)


def test_out_forms_equal_functional_forms(rng):
    config = mhc.Config(n=4, H=32)
    w = mt.prepare(*_weights(rng, config), config=config)
    hw = mt.prepare_head(*_weights(rng, config, head=True), config=config)
    sc = mt._scalars(config)
    T = 5
    res, y = _tbf16(rng, (T, 4, 32)), _tbf16(rng, (T, 32))
    pm, cm = torch.rand(T, 4), torch.rand(T, 4, 4)
    nw = torch.ones(32, dtype=torch.bfloat16)
    ro, li = torch.empty(T, 4, 32, dtype=torch.bfloat16), torch.empty(T, 32, dtype=torch.bfloat16)
    po, co, pre_o = torch.empty(T, 4), torch.empty(T, 4, 4), torch.empty(T, 4)
    ref = torch.ops.mhc.post_pre(y, res, pm, cm, w.buffer, None, nw, "computed", *sc)
    assert torch.ops.mhc.post_pre_out(y, res, pm, cm, w.buffer, None, nw, "computed", ro, li, po, co, pre_o,
                                      *sc) is None
    for got, want in zip((ro, li, po, co, pre_o), ref):
        assert torch.equal(got, want)
    out = torch.empty(T, 32, dtype=torch.bfloat16)
    torch.ops.mhc.head_out(res, hw.buffer, None, nw, "learned", out, *sc)
    assert torch.equal(out, torch.ops.mhc.head(res, hw.buffer, None, nw, "learned", *sc))
    torch.ops.mhc.pre_out(res, w.buffer, None, None, "computed", li, po, co, None, *sc)  # optional output absent
    assert torch.equal(li, mt.pre(res, w, config=config).layer_input)


def test_out_forms_opcheck_and_compile(rng):
    config = mhc.Config(n=4, H=16)
    w = mt.prepare(*_weights(rng, config), config=config)
    sc = mt._scalars(config)
    T = 3
    res, y = _tbf16(rng, (T, 4, 16)), _tbf16(rng, (T, 16))
    pm, cm = torch.rand(T, 4), torch.rand(T, 4, 4)
    outs = lambda: (torch.empty(T, 4, 16, dtype=torch.bfloat16), torch.empty(T, 16, dtype=torch.bfloat16),  # noqa
                    torch.empty(T, 4), torch.empty(T, 4, 4), torch.empty(T, 4))
    torch.library.opcheck(torch.ops.mhc.post_pre_out.default, (y, res, pm, cm, w.buffer, None, None, "computed")
                          + outs() + sc)
    torch.library.opcheck(torch.ops.mhc.post_out.default, (y, res, pm, cm, outs()[0]) + sc)

    def step(y, res, pm, cm, buf, ro, li, po, co, pre_o):
        torch.ops.mhc.post_pre_out(y, res, pm, cm, buf, None, None, "computed", ro, li, po, co, pre_o, *sc)
        return li * 2

    eager_outs, comp_outs = outs(), outs()
    eager = step(y, res, pm, cm, w.buffer, *eager_outs)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    got = compiled(y, res, pm, cm, w.buffer, *comp_outs)
    assert torch.equal(got, eager)
    for a, b in zip(eager_outs, comp_outs):
        assert torch.equal(a, b)


_CHILD = r"""
import torch, mhc, mhc.torch as mt
from mhc import engine
c = mhc.Config(n=4, H=8)
g = torch.Generator().manual_seed(0)
blk = engine.load_block(torch.randn(24, 32, generator=g), torch.ones(3), torch.zeros(24), config=c)
r = torch.randn(2, 4, 8, generator=g).bfloat16()
x, post, comb = engine.hc_pre(r, blk)
out = mt.post(x, r, post, comb, config=c)
print(mt.BACKEND, out.view(torch.int16).sum().item())
if torch.cuda.is_available() and mhc.cuda_available():  # registered workspaces are released at exit too
    side = torch.cuda.Stream()
    mt.init("cuda", 16)
    mt.init("cuda", 16, stream=side)
    blk_gpu = engine.load_block(torch.randn(24, 32, generator=g), torch.ones(3), torch.zeros(24), config=c,
                                device="cuda")
    engine.hc_pre(r.cuda(), blk_gpu)
    torch.cuda.synchronize()
"""


def _child(env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=300,
                          cwd=os.path.dirname(__file__))


def test_no_nanobind_leak_warning_at_exit():
    p = _child({})
    assert p.returncode == 0, p.stderr
    assert "leaked" not in p.stderr, p.stderr
    p = _child({"MHC_TORCH_OPS": "python"})
    assert p.returncode == 0, p.stderr
    assert "leaked" not in p.stderr, p.stderr


def test_python_registration_gives_the_bits_of_the_current_one():
    a = _child({})
    b = _child({"MHC_TORCH_OPS": "python"})
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    backend_a, sum_a = a.stdout.split()
    backend_b, sum_b = b.stdout.split()
    assert backend_b == "python" and backend_a == mt.BACKEND
    assert sum_a == sum_b


def _doc_block(name):
    path = os.path.join(REPO_ROOT, "docs", "integration.md")
    if not os.path.exists(path):
        pytest.skip("docs/integration.md is not next to the tests")
    text = open(path, encoding="utf-8").read()
    blocks = re.findall(rf"<!-- example: {name} -->\s*```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, f"docs/integration.md must hold one '{name}' example block"
    return blocks[0]


def test_docs_engine_buffers_two_streams_example_runs():
    """docs/integration.md's engine example (CUDA with two streams where available, else the CPU)."""
    code = _doc_block("engine-buffers")
    scope = {"__name__": "docs_example"}
    exec(compile(code, "docs/integration.md", "exec"), scope)
    assert scope["ok"]


def test_operator_argument_errors_raise(rng):
    """The C++ operators' own checks (the config list, the mode strings) raise MhcError, never crash;
    until issue 16 no test reached them (the first to, on CUDA, was the missing-workspace check)."""
    config = mhc.Config(n=4, H=16)
    values = mt.config_values(config)
    res, pm = _tbf16(rng, (2, 4, 16)), torch.rand(2, 4)
    collapse = torch.ops.mhc.collapse.default
    assert collapse(res, pm, None, "carried", values).shape == (2, 16)
    cases = [
        (values[:7], "expected 8 values"),
        ((4.5,) + values[1:], "n must be an integer"),
        ((0.0,) + values[1:], r"n must be (an integer )?in 1\.\.8"),
        (values[:5] + (2.5,) + values[6:], "sinkhorn_iters must be an integer"),
    ]
    for bad, message in cases:
        with pytest.raises(RuntimeError, match=message):
            collapse(res, pm, None, "carried", bad)
    with pytest.raises(mhc.MhcError, match="pre_source: expected 'computed', 'carried' or 'identity', got 'bogus'"):
        mt.collapse(res, pm, config=config, pre_source="bogus")
    with pytest.raises(mhc.MhcError, match="kind: expected 'learned', 'carried' or 'mean', got 'bogus'"):
        mt.head(res, config=config, kind="bogus")
