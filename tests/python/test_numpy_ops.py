"""Every operator on numpy (CPU) against the float64 spec implementation in mhc_reference."""

import numpy as np
import pytest

import mhc
import mhc_reference as ref
from conftest import Block, assert_bf16_close, assert_mix_close, bf16_slice, bf16_values, random_bf16

SHAPES = [(1, 4, 64), (5, 4, 7), (3, 1, 19), (7, 3, 33), (2, 8, 5), (0, 4, 16)]


def make(rng, T, n, H, **cfg):
    config = mhc.Config(n=n, H=H, **cfg)
    blk = Block(rng, n, H)
    w = mhc.prepare(blk.fn, blk.scale, blk.base, config=config)
    return config, blk, w, ref.Scalars(config)


def norm_pair(rng, H):
    v = ref.bf16_round(1.0 + 0.1 * rng.standard_normal(H))
    return mhc.to_bf16(v.astype(np.float32)), v


@pytest.mark.parametrize("T,n,H", SHAPES)
def test_mixes(rng, T, n, H):
    config, blk, w, s = make(rng, T, n, H)
    res, res_v = random_bf16(rng, (T, n, H))
    out = mhc.mixes(res, w, config=config)
    p, q, c = ref.mixes(res_v, blk.fn, blk.scale, blk.base, s)
    assert_mix_close(out.pre_mix, p, "pre_mix")
    assert_mix_close(out.post_mix, q, "post_mix")
    assert_mix_close(out.comb_mix, c, "comb_mix")
    assert out.comb_mix.shape == (T, n, n) and out.comb_mix.dtype == np.float32


@pytest.mark.parametrize("T,n,H", SHAPES)
@pytest.mark.parametrize("pre_source", ["computed", "carried", "identity"])
@pytest.mark.parametrize("folded", [False, True])
def test_pre(rng, T, n, H, pre_source, folded):
    config, blk, w, s = make(rng, T, n, H)
    res, res_v = random_bf16(rng, (T, n, H))
    pre_in = rng.uniform(0.1, 1.0, (T, n)).astype(np.float32)
    nw, nw_v = norm_pair(rng, H) if folded else (None, None)
    out = mhc.pre(res, w, config=config, pre_source=pre_source,
                  pre_mix_in=pre_in if pre_source == "carried" else None, rmsnorm_weight=nw, pre_mix_out=True)
    li, q, c, p = ref.pre(res_v, blk.fn, blk.scale, blk.base, s, pre_source, pre_in, nw_v)
    assert_bf16_close(out.layer_input, li, "layer_input")
    assert_mix_close(out.post_mix, q, "post_mix")
    assert_mix_close(out.comb_mix, c, "comb_mix")
    assert_mix_close(out.pre_mix_out, p, "pre_mix_out")
    if pre_source == "identity" and not folded:  # stream 0, bit for bit
        np.testing.assert_array_equal(bf16_values(out.layer_input), res_v[:, 0, :])


@pytest.mark.parametrize("T,n,H", SHAPES)
@pytest.mark.parametrize("pre_source", ["carried", "identity"])
def test_collapse(rng, T, n, H, pre_source):
    config, _, _, s = make(rng, T, n, H)
    res, res_v = random_bf16(rng, (T, n, H))
    pre_mix = rng.uniform(0.1, 1.0, (T, n)).astype(np.float32)
    nw, nw_v = norm_pair(rng, H)
    for weight, weight_v in [(None, None), (nw, nw_v)]:
        li = mhc.collapse(res, pre_mix if pre_source == "carried" else None, config=config, pre_source=pre_source,
                          rmsnorm_weight=weight)
        want = (ref.collapse(res_v, pre_mix, s, weight_v) if pre_source == "carried"
                else ref.identity(res_v, s, weight_v))
        assert_bf16_close(li, want, "layer_input")


@pytest.mark.parametrize("T,n,H", SHAPES)
@pytest.mark.parametrize("pre_source", ["computed", "carried", "identity"])
def test_pre_broadcast(rng, T, n, H, pre_source):
    config, blk, w, s = make(rng, T, n, H)
    emb, emb_v = random_bf16(rng, (T, H))
    pre_in = rng.uniform(0.1, 1.0, (T, n)).astype(np.float32)
    nw, nw_v = norm_pair(rng, H)
    out = mhc.pre_broadcast(emb, w, config=config, pre_source=pre_source,
                            pre_mix_in=pre_in if pre_source == "carried" else None, rmsnorm_weight=nw,
                            pre_mix_out=True, residual_out=True)
    streams = np.repeat(emb_v[:, None, :], n, axis=1)
    li, q, c, p = ref.pre(streams, blk.fn, blk.scale, blk.base, s, pre_source, pre_in, nw_v)
    assert_bf16_close(out.layer_input, li, "layer_input")
    assert_mix_close(out.post_mix, q, "post_mix")
    assert_mix_close(out.comb_mix, c, "comb_mix")
    assert_mix_close(out.pre_mix_out, p, "pre_mix_out")
    np.testing.assert_array_equal(bf16_values(out.residual_out), streams)
    # optional outputs stay absent unless asked for
    plain = mhc.pre_broadcast(emb, w, config=config, pre_source=pre_source,
                              pre_mix_in=pre_in if pre_source == "carried" else None)
    assert plain.pre_mix_out is None and plain.residual_out is None


def random_mixes(rng, T, n):
    post_mix = rng.uniform(0.0, 2.0, (T, n)).astype(np.float32)
    comb = rng.uniform(0.0, 1.0, (T, n, n))
    comb = (comb / comb.sum(axis=1, keepdims=True)).astype(np.float32)
    return post_mix, comb


@pytest.mark.parametrize("T,n,H", SHAPES)
@pytest.mark.parametrize("broadcast", [False, True])
def test_post(rng, T, n, H, broadcast):
    config = mhc.Config(n=n, H=H)
    out_, out_v = random_bf16(rng, (T, H))
    res, res_v = random_bf16(rng, (T, H) if broadcast else (T, n, H))
    post_mix, comb = random_mixes(rng, T, n)
    got = mhc.post(out_, res, post_mix, comb, config=config)
    assert_bf16_close(got, ref.post(out_v, res_v, post_mix, comb), "residual_out")


@pytest.mark.parametrize("T,n,H", SHAPES)
@pytest.mark.parametrize("pre_source", ["computed", "carried"])
@pytest.mark.parametrize("broadcast", [False, True])
def test_post_pre_matches_spec_and_unfused(rng, T, n, H, pre_source, broadcast):
    config, blk, w, s = make(rng, T, n, H)
    y, y_v = random_bf16(rng, (T, H))
    res, res_v = random_bf16(rng, (T, H) if broadcast else (T, n, H))
    post_mix, comb = random_mixes(rng, T, n)
    pre_in = rng.uniform(0.1, 1.0, (T, n)).astype(np.float32) if pre_source == "carried" else None
    nw, nw_v = norm_pair(rng, H)
    fused = mhc.post_pre(y, res, post_mix, comb, w, config=config, pre_source=pre_source, pre_mix_in=pre_in,
                         rmsnorm_weight=nw, pre_mix_out=True)
    new_v = ref.post(y_v, res_v, post_mix, comb)
    li, q, c, p = ref.pre(new_v, blk.fn, blk.scale, blk.base, s, pre_source, pre_in, nw_v)
    assert_bf16_close(fused.residual_out, new_v, "residual_out")
    assert_bf16_close(fused.layer_input, li, "layer_input")
    assert_mix_close(fused.post_mix_out, q, "post_mix_out")
    assert_mix_close(fused.comb_mix_out, c, "comb_mix_out")
    assert_mix_close(fused.pre_mix_out, p, "pre_mix_out")
    # unfused post then pre gives the same answer (bit-equal on the CPU backend)
    r2 = mhc.post(y, res, post_mix, comb, config=config)
    un = mhc.pre(r2, w, config=config, pre_source=pre_source, pre_mix_in=pre_in, rmsnorm_weight=nw, pre_mix_out=True)
    np.testing.assert_array_equal(bf16_values(fused.residual_out), bf16_values(r2))
    np.testing.assert_array_equal(bf16_values(fused.layer_input), bf16_values(un.layer_input))
    np.testing.assert_array_equal(fused.comb_mix_out, un.comb_mix)


@pytest.mark.parametrize("T,n,H", SHAPES)
@pytest.mark.parametrize("kind", ["learned", "carried", "mean"])
@pytest.mark.parametrize("folded", [False, True])
def test_head(rng, T, n, H, kind, folded):
    config = mhc.Config(n=n, H=H)
    s = ref.Scalars(config)
    hb = Block(rng, n, H, head=True)
    hw = mhc.prepare_head(hb.fn, hb.scale, hb.base, config=config) if kind == "learned" else None
    res, res_v = random_bf16(rng, (T, n, H))
    pre_in = rng.uniform(0.1, 1.0, (T, n)).astype(np.float32)
    nw, nw_v = norm_pair(rng, H) if folded else (None, None)
    got = mhc.head(res, config=config, kind=kind, weights=hw, pre_mix_in=pre_in if kind == "carried" else None,
                   rmsnorm_weight=nw)
    want = ref.head(res_v, s, kind, hb.fn, hb.scale, hb.base, pre_in, nw_v)
    assert_bf16_close(got, want, "output")


def test_presets_eps_reach_the_math(rng):
    """V4.1's norm_eps = 1e-20 and GLM's 1e-5 are used as given (the preset, shrunk to a small H)."""
    for name in ["deepseek-v4-flash", "deepseek-v4.1-flash", "glm-5-next"]:
        config = mhc.model_preset(name).config.replace(H=24)
        blk = Block(rng, config.n, config.H)
        w = mhc.prepare(blk.fn, blk.scale, blk.base, config=config)
        res, res_v = random_bf16(rng, (3, config.n, config.H), sigma=1e-3)
        out = mhc.pre(res, w, config=config, rmsnorm_weight=norm_pair(rng, config.H)[0])
        p, q, c = ref.mixes(res_v, blk.fn, blk.scale, blk.base, ref.Scalars(config))
        assert_mix_close(out.post_mix, q, name)
        assert_mix_close(out.comb_mix, c, name)


def test_destination_passing_writes_in_place(rng):
    T, n, H = 4, 4, 16
    config, blk, w, s = make(rng, T, n, H)
    res, res_v = random_bf16(rng, (T, n, H))
    li = mhc.to_bf16(np.full((T, H), np.nan, np.float32))
    pm = np.full((T, n), np.nan, np.float32)
    cm = np.full((T, n, n), np.nan, np.float32)
    po = np.full((T, n), np.nan, np.float32)
    got = mhc.pre(res, w, config=config, layer_input=li, post_mix=pm, comb_mix=cm, pre_mix_out=po)
    assert got.layer_input is li and got.post_mix is pm and got.comb_mix is cm and got.pre_mix_out is po
    assert not np.isnan(pm).any() and not np.isnan(cm).any() and not np.isnan(po).any()
    assert not np.isnan(bf16_values(li)).any()
    want = mhc.pre(res, w, config=config, pre_mix_out=True)
    np.testing.assert_array_equal(bf16_values(li), bf16_values(want.layer_input))
    np.testing.assert_array_equal(po, want.pre_mix_out)


def test_strided_token_rows(rng):
    """[T,H] slices of a wider buffer (row stride > row length) are read and written in place."""
    T, n, H = 5, 4, 16
    config = mhc.Config(n=n, H=H)
    wide, wide_v = random_bf16(rng, (T, 3 * H))
    y, y_v = bf16_slice(wide, np.s_[:, H:2 * H]), wide_v[:, H:2 * H]
    res, res_v = random_bf16(rng, (T, n, H))
    post_mix, comb = random_mixes(rng, T, n)
    got = mhc.post(y, res, post_mix, comb, config=config)
    assert_bf16_close(got, ref.post(y_v, res_v, post_mix, comb), "residual_out")
    # a strided output: rows of a wider buffer, neighbours untouched
    blk = Block(rng, n, H)
    w = mhc.prepare(blk.fn, blk.scale, blk.base, config=config)
    canvas = mhc.to_bf16(np.full((T, 2 * H), 7.0, np.float32))
    mhc.pre(res, w, config=config, layer_input=bf16_slice(canvas, np.s_[:, :H]))
    assert np.all(bf16_values(canvas)[:, H:] == 7.0)
    li = ref.pre(res_v, blk.fn, blk.scale, blk.base, ref.Scalars(config))[0]
    assert_bf16_close(bf16_slice(canvas, np.s_[:, :H]), li, "strided layer_input")


def test_nan_stays_in_its_token(rng):
    T, n, H = 6, 4, 16
    config, blk, w, s = make(rng, T, n, H)
    res, res_v = random_bf16(rng, (T, n, H))
    res_v[2, 1, 3] = np.nan
    res = mhc.to_bf16(res_v.astype(np.float32))
    out = mhc.pre(res, w, config=config)
    li = bf16_values(out.layer_input)
    assert np.isnan(li[2]).all() or np.isnan(out.comb_mix[2]).all()
    others = [t for t in range(T) if t != 2]
    assert not np.isnan(li[others]).any() and not np.isnan(out.comb_mix[others]).any()


def test_batch_invariance(rng):
    T, n, H = 9, 4, 32
    config, blk, w, s = make(rng, T, n, H)
    res, res_v = random_bf16(rng, (T, n, H))
    full = mhc.pre(res, w, config=config)
    for t in [0, 4, 8]:
        one = mhc.pre(bf16_slice(res, np.s_[t:t + 1]), w, config=config)
        np.testing.assert_array_equal(bf16_values(one.layer_input), bf16_values(full.layer_input)[t:t + 1])
        np.testing.assert_array_equal(one.comb_mix, full.comb_mix[t:t + 1])


def test_forced_and_selected_variant(rng):
    T, n, H = 2, 4, 8
    config, blk, w, s = make(rng, T, n, H)
    res, _ = random_bf16(rng, (T, n, H))
    assert mhc.selected_variant("pre", res, w, config=config) == "pre.cpu_fast"  # n = 4: the fast CPU path
    a = mhc.pre(res, w, config=config, variant="pre.cpu_fast")
    b = mhc.pre(res, w, config=config)
    np.testing.assert_array_equal(a.comb_mix, b.comb_mix)
    ref = mhc.pre(res, w, config=config, variant="pre.cpu_ref")  # fp32 mixes within the spec's 1e-5
    np.testing.assert_allclose(ref.comb_mix, b.comb_mix, rtol=1e-5, atol=1e-7)
    ids = [v.id for v in mhc.list_variants()]
    for op in ["mixes", "collapse", "pre", "pre_broadcast", "post", "post_pre", "head"]:
        assert f"{op}.cpu_ref" in ids
    assert all(v.device in ("cpu", "cuda") and v.envelope for v in mhc.list_variants())


def test_presets_and_config():
    names = [p.name for p in mhc.model_presets()]
    assert names == ["deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4.1-flash", "glm-5-next"]
    v4 = mhc.model_preset("deepseek-v4-flash")
    assert (v4.config.n, v4.config.H, v4.mode, v4.head) == (4, 4096, "normal", "learned")
    assert v4.config.norm_eps == 1e-6 and v4.config.sinkhorn_iters == 20 and v4.config.post_scale == 2.0
    v41 = mhc.model_preset("deepseek-v4.1-flash")
    assert (v41.config.H, v41.config.norm_eps, v41.config.rmsnorm_eps, v41.mode, v41.head) == (
        5120, 1e-20, 1e-20, "shifted", "carried")
    glm = mhc.model_preset("glm-5-next")
    assert (glm.config.norm_eps, glm.head) == (1e-5, "mean")
    assert mhc.model_preset("deepseek-v4-pro").config.H == 7168
    c = mhc.Config(n=4, H=4096)
    assert c.K == 16384 and c.M == 24 and c.replace(H=8).H == 8 and c == mhc.Config()


def test_cuda_available_is_a_bool():
    assert isinstance(mhc.cuda_available(), bool)


def test_zero_tokens_is_a_noop(rng):
    config, blk, w, s = make(rng, 0, 4, 8)
    res, _ = random_bf16(rng, (0, 4, 8))
    out = mhc.post_pre(mhc.to_bf16(np.zeros((0, 8), np.float32)), res, np.zeros((0, 4), np.float32),
                       np.zeros((0, 4, 4), np.float32), w, config=config)
    assert out.residual_out.shape == (0, 4, 8) and out.comb_mix_out.shape == (0, 4, 4)


def test_bf16_view_inputs_give_bf16_view_outputs(rng):
    T, n, H = 3, 4, 8
    config, blk, w, s = make(rng, T, n, H)
    res, res_v = random_bf16(rng, (T, n, H))
    bits = mhc.float32_to_bf16_bits(res_v.astype(np.float32))
    out = mhc.pre(mhc.bf16_view(bits), w, config=config)
    assert isinstance(out.layer_input, mhc.Bf16View) and out.layer_input.bits.dtype == np.uint16
    li = ref.pre(res_v, blk.fn, blk.scale, blk.base, s)[0]
    assert_bf16_close(out.layer_input, li, "layer_input")
