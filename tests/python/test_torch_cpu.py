"""torch on the CPU: the core API with torch tensors, the custom operators (eager, opcheck,
torch.compile(fullgraph=True)), the engine module and the docs example. Skipped without torch."""

import os
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mhc  # noqa: E402
import mhc.torch as mt  # noqa: E402
import mhc_reference as ref  # noqa: E402
from conftest import REPO_ROOT, Block, assert_bf16_close, assert_mix_close, bf16_bits_of  # noqa: E402
from mhc import engine  # noqa: E402


def tbf16(rng, shape, sigma=1.0):
    """A random torch bf16 CPU tensor and its float64 values."""
    v = ref.bf16_round(sigma * rng.standard_normal(shape))
    return torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16), v


def tnorm(rng, H):
    v = ref.bf16_round(1.0 + 0.1 * rng.standard_normal(H))
    return torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16), v


def tweights(rng, config, head=False):
    blk = Block(rng, config.n, config.H, head=head)
    tensors = [torch.from_numpy(a) for a in (blk.fn, blk.scale, blk.base)]
    return blk, tensors


def same_bits(a, b):
    np.testing.assert_array_equal(bf16_bits_of(a), bf16_bits_of(b))


@pytest.fixture
def small(rng):
    config = mhc.Config(n=4, H=24)
    blk, t = tweights(rng, config)
    return config, blk, mt.prepare(*t, config=config)


def test_core_api_allocates_torch_outputs(rng, small):
    config, blk, w = small
    res, res_v = tbf16(rng, (5, 4, 24))
    out = mhc.pre(res, w, config=config, pre_mix_out=True)
    assert isinstance(out.layer_input, torch.Tensor) and out.layer_input.dtype == torch.bfloat16
    assert out.comb_mix.dtype == torch.float32 and out.comb_mix.shape == (5, 4, 4)
    li, q, c, p = ref.pre(res_v, blk.fn, blk.scale, blk.base, ref.Scalars(config))
    assert_bf16_close(out.layer_input, li, "layer_input")
    assert_mix_close(out.comb_mix, c, "comb_mix")
    # torch input and numpy input give the same bits
    np_out = mhc.pre(mhc.to_bf16(res_v.astype(np.float32)), w, config=config)
    same_bits(out.layer_input, np_out.layer_input)


def test_core_api_accepts_tensors_that_require_grad(rng):
    config = mhc.Config(n=4, H=8)
    blk, (fn, scale, base) = tweights(rng, config)
    params = [torch.nn.Parameter(t) for t in (fn, scale, base)]
    w = mhc.prepare(*params, config=config)
    res = torch.randn(3, 4, 8).to(torch.bfloat16).requires_grad_(False)
    y = torch.randn(3, 8, dtype=torch.float32).to(torch.bfloat16).requires_grad_(True)
    out = mhc.post_pre(y, res, torch.rand(3, 4), torch.rand(3, 4, 4), w, config=config)
    assert out.residual_out.shape == (3, 4, 8)


def test_torch_errors(rng, small):
    config, _, w = small
    res = torch.zeros(2, 4, 24, dtype=torch.complex64)
    with pytest.raises(mhc.MhcError, match="residual: unsupported dtype torch.complex64"):
        mhc.pre(res, w, config=config)
    with pytest.raises(mhc.MhcError, match="residual: expected dtype bf16, got fp32"):
        mt.pre(torch.zeros(2, 4, 24), w, config=config)
    meta = torch.empty(2, 4, 24, dtype=torch.bfloat16, device="meta")
    with pytest.raises(mhc.MhcError, match="unsupported device meta"):
        mhc.pre(meta, w, config=config)


def test_custom_ops_match_spec(rng):
    config = mhc.Config(n=4, H=40)
    s = ref.Scalars(config)
    blk, t = tweights(rng, config)
    w = mt.prepare(*t, config=config)
    hb, ht = tweights(rng, config, head=True)
    hw = mt.prepare_head(*ht, config=config)
    T = 6
    res, res_v = tbf16(rng, (T, 4, 40))
    emb, emb_v = tbf16(rng, (T, 40))
    y, y_v = tbf16(rng, (T, 40))
    nw, nw_v = tnorm(rng, 40)
    pre_in = torch.rand(T, 4) + 0.1
    pre_in_v = pre_in.double().numpy()

    m = mt.mixes(res, w, config=config)
    p, q, c = ref.mixes(res_v, blk.fn, blk.scale, blk.base, s)
    assert_mix_close(m.pre_mix, p)
    assert_mix_close(m.comb_mix, c)

    li = mt.collapse(res, pre_in, config=config, rmsnorm_weight=nw)
    assert_bf16_close(li, ref.collapse(res_v, pre_in_v, s, nw_v), "collapse")

    for src in ["computed", "carried", "identity"]:
        o = mt.pre(res, w, config=config, pre_source=src, pre_mix_in=pre_in if src == "carried" else None,
                   rmsnorm_weight=nw)
        li, q, c, p = ref.pre(res_v, blk.fn, blk.scale, blk.base, s, src, pre_in_v, nw_v)
        assert_bf16_close(o.layer_input, li, f"pre {src}")
        assert_mix_close(o.post_mix, q)
        assert_mix_close(o.pre_mix_out, p)

        o = mt.pre_broadcast(emb, w, config=config, pre_source=src, pre_mix_in=pre_in if src == "carried" else None,
                             materialize_residual=True)
        streams = np.repeat(emb_v[:, None, :], 4, axis=1)
        li, q, c, p = ref.pre(streams, blk.fn, blk.scale, blk.base, s, src, pre_in_v)
        assert_bf16_close(o.layer_input, li, f"pre_broadcast {src}")
        assert_bf16_close(o.residual_out, streams, "residual_out")
        assert_mix_close(o.comb_mix, c)
    assert mt.pre_broadcast(emb, w, config=config).residual_out is None

    post_mix, comb = torch.rand(T, 4) * 2, torch.rand(T, 4, 4)
    pm_v, cm_v = post_mix.double().numpy(), comb.double().numpy()
    new_v = ref.post(y_v, res_v, pm_v, cm_v)
    assert_bf16_close(mt.post(y, res, post_mix, comb, config=config), new_v, "post")
    assert_bf16_close(mt.post(y, emb, post_mix, comb), ref.post(y_v, emb_v, pm_v, cm_v), "post broadcast")

    for src in ["computed", "carried"]:
        o = mt.post_pre(y, res, post_mix, comb, w, config=config, pre_source=src,
                        pre_mix_in=pre_in if src == "carried" else None, rmsnorm_weight=nw)
        li, q, c, p = ref.pre(new_v, blk.fn, blk.scale, blk.base, s, src, pre_in_v, nw_v)
        assert_bf16_close(o.residual_out, new_v, "post_pre residual_out")
        assert_bf16_close(o.layer_input, li, f"post_pre {src}")
        assert_mix_close(o.comb_mix_out, c)
        assert_mix_close(o.pre_mix_out, p)

    assert_bf16_close(mt.head(res, config=config, kind="learned", weights=hw, rmsnorm_weight=nw),
                      ref.head(res_v, s, "learned", hb.fn, hb.scale, hb.base, norm_weight=nw_v), "head learned")
    assert_bf16_close(mt.head(res, config=config, kind="carried", pre_mix_in=pre_in),
                      ref.head(res_v, s, "carried", pre_mix_in=pre_in_v), "head carried")
    assert_bf16_close(mt.head(res, config=config, kind="mean"), ref.head(res_v, s, "mean"), "head mean")


def op_samples(rng):
    """(op name, args) for torch.library.opcheck, one or more per operator."""
    config = mhc.Config(n=4, H=16)
    _, t = tweights(rng, config)
    w = mt.prepare(*t, config=config)
    _, ht = tweights(rng, config, head=True)
    hw = mt.prepare_head(*ht, config=config)
    sc = mt._scalars(config)
    T = 3
    res = tbf16(rng, (T, 4, 16))[0]
    emb = tbf16(rng, (T, 16))[0]
    y = tbf16(rng, (T, 16))[0]
    nw = tnorm(rng, 16)[0]
    pre_in = torch.rand(T, 4) + 0.1
    post_mix, comb = torch.rand(T, 4), torch.rand(T, 4, 4)
    keep = (w, hw)
    samples = [
        ("mixes", (res, w.buffer) + sc),
        ("collapse", (res, pre_in, nw, "carried") + sc),
        ("collapse", (res, None, None, "identity") + sc),
        ("pre", (res, w.buffer, None, nw, "computed") + sc),
        ("pre", (res, w.buffer, pre_in, None, "carried") + sc),
        ("pre_broadcast", (emb, w.buffer, None, nw, "computed", False) + sc),
        ("pre_broadcast", (emb, w.buffer, None, None, "identity", True) + sc),
        ("post", (y, res, post_mix, comb) + sc),
        ("post", (y, emb, post_mix, comb) + sc),
        ("post_pre", (y, res, post_mix, comb, w.buffer, None, nw, "computed") + sc),
        ("post_pre", (y, res, post_mix, comb, w.buffer, pre_in, nw, "carried") + sc),
        ("head", (res, hw.buffer, None, nw, "learned") + sc),
        ("head", (res, None, pre_in, None, "carried") + sc),
        ("head", (res, None, None, nw, "mean") + sc),
    ]
    return samples, keep


def test_opcheck_every_operator(rng):
    samples, keep = op_samples(rng)
    assert sorted({name for name, _ in samples}) == sorted(mt.OPERATORS)
    for name, args in samples:
        torch.library.opcheck(getattr(torch.ops.mhc, name).default, args)
    del keep


class TinyModel(torch.nn.Module):
    """Two layers with stand-in sublayers; forward in the fused (post_pre) or unfused form."""

    def __init__(self, rng, config, mode, device="cpu"):
        super().__init__()
        self.config, self.mode = config, mode
        H = config.H
        self.blocks = []
        self.norms = []
        for _ in range(2):
            for _ in ("attn", "ffn"):
                _, t = tweights(rng, config)
                self.blocks.append(engine.load_block(*t, config=config, device=device))
                self.norms.append(tnorm(rng, H)[0].to(device))
        _, ht = tweights(rng, config, head=True)
        self.head = engine.load_head(*ht, config=config, device=device)
        self.final_norm = tnorm(rng, H)[0].to(device)

    @staticmethod
    def sublayer(x, i):
        return (torch.sin(1.5 * x.float() + 0.1 * i) * 0.5).to(torch.bfloat16)

    def forward(self, embedding, fused=True):
        shifted = self.mode == "shifted"
        if shifted:
            x, post, comb, pre = engine.hc_pre_first_shifted(embedding, self.blocks[0], self.norms[0])
        else:
            x, post, comb = engine.hc_pre_first(embedding, self.blocks[0], self.norms[0])
        residual = embedding
        for i in range(1, len(self.blocks)):
            y = self.sublayer(x, i)
            blk, nw = self.blocks[i], self.norms[i]
            if fused and shifted:
                residual, x, post, comb, pre = engine.hc_post_pre_shifted(y, residual, post, comb, blk, pre, nw)
            elif fused:
                residual, x, post, comb = engine.hc_post_pre(y, residual, post, comb, blk, nw)
            else:
                residual = engine.hc_post(y, residual, post, comb)
                if shifted:
                    x, post, comb, pre = engine.hc_pre_shifted(residual, blk, pre, nw)
                else:
                    x, post, comb = engine.hc_pre(residual, blk, nw)
        y = self.sublayer(x, len(self.blocks))
        residual = engine.hc_post(y, residual, post, comb)
        if shifted:
            return engine.hc_head_carried(residual, pre, self.config, self.final_norm)
        return engine.hc_head(residual, self.head, self.final_norm)


@pytest.mark.parametrize("mode", ["normal", "shifted"])
def test_engine_fused_equals_unfused_with_leading_dims(rng, mode):
    config = mhc.Config(n=4, H=32)
    model = TinyModel(rng, config, mode)
    emb = tbf16(rng, (2, 3, 32))[0]  # [batch, seq, H]
    fused = model(emb, fused=True)
    unfused = model(emb, fused=False)
    assert fused.shape == (2, 3, 32) and fused.dtype == torch.bfloat16
    assert torch.equal(fused, unfused)  # CPU backend: bit-equal
    flat = model(emb.reshape(6, 32))
    assert torch.equal(flat.reshape(2, 3, 32), fused)  # batch invariance through the layers


@pytest.mark.parametrize("mode", ["normal", "shifted"])
def test_compile_fullgraph_cpu(rng, mode):
    config = mhc.Config(n=4, H=32)
    model = TinyModel(rng, config, mode)
    emb = tbf16(rng, (5, 32))[0]
    eager = model(emb)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(emb), eager)
    emb2 = tbf16(rng, (5, 32))[0]
    assert torch.equal(compiled(emb2), model(emb2))


def test_weights_buffer_too_small_fails_closed(rng):
    """The operators take the prepared buffer itself; one too small for (n, H) is refused."""
    config = mhc.Config(n=4, H=8)
    _, t = tweights(rng, config)
    w = mt.prepare(*t, config=config)
    res = tbf16(rng, (2, 4, 8))[0]
    short = w.buffer[:-16]
    with pytest.raises(mhc.MhcError, match="buffer: holds .* bytes, prepared weights of n = 4, H = 8"):
        mt.Weights.from_buffer(short, config=config)
    with pytest.raises(RuntimeError, match="prepared_bytes"):
        torch.ops.mhc.pre(res, short, None, None, "computed", *mt._scalars(config))


def test_init_on_cpu_needs_nothing():
    assert mt.init("cpu", 128) is None and mt.workspace("cpu") is None


def doc_example():
    path = os.path.join(REPO_ROOT, "docs", "integration.md")
    if not os.path.exists(path):
        pytest.skip("docs/integration.md is not next to the tests")
    text = open(path, encoding="utf-8").read()
    blocks = re.findall(r"<!-- example: decoder -->\s*```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/integration.md must hold one decoder example block"
    return blocks[0]


def test_docs_decoder_example_runs():
    """The example picks CUDA when available, else the CPU, as a reader would run it."""
    code = doc_example()
    scope = {"__name__": "docs_example"}
    exec(compile(code, "docs/integration.md", "exec"), scope)
    assert scope["out"].shape == (scope["T"], scope["cfg"].H)


def test_out_forms_drop_their_arguments(rng):
    """The destination-passing forms are boxed kernels that drop their arguments themselves, under
    one GIL hold (python/src/mhc_torch.cpp, Boxed): after calls in and outside inference mode, from
    a second thread, and after a rejected call, every tensor holds the references it held before,
    and the outputs hold what the functional form returns."""
    import sys
    import threading

    config = mhc.Config(n=4, H=64)
    y, _ = tbf16(rng, (3, 64))
    res, _ = tbf16(rng, (3, 4, 64))
    pm = torch.rand(3, 4, generator=torch.Generator().manual_seed(1))
    cm = torch.rand(3, 4, 4, generator=torch.Generator().manual_seed(2))
    out = torch.empty(3, 4, 64, dtype=torch.bfloat16)
    bad = torch.full((3, 4, 64), 7.0)
    sc = mt._scalars(config)
    op = torch.ops.mhc.post_out.default
    tensors = (y, res, pm, cm, out, bad)
    before = [sys.getrefcount(t) for t in tensors]

    def calls(k):
        for _ in range(k):
            op(y, res, pm, cm, out, *sc)

    calls(50)
    with torch.inference_mode():
        calls(50)
    worker = threading.Thread(target=calls, args=(50,))
    worker.start()
    worker.join()
    bad_before = bad.clone()
    with pytest.raises(RuntimeError, match="residual_out"):
        op(y, res, pm, cm, bad, *sc)
    assert torch.equal(bad, bad_before)  # nothing written
    assert [sys.getrefcount(t) for t in tensors] == before
    same_bits(out, torch.ops.mhc.post.default(y, res, pm, cm, *sc))
