"""Failing closed: wrong arrays, dtypes, shapes, devices, configs and weights raise mhc.MhcError
naming the tensor, and nothing is written."""

import numpy as np
import pytest

import mhc
from conftest import Block, bf16_copy, bf16_slice, bf16_values, random_bf16


@pytest.fixture
def setup(rng):
    T, n, H = 3, 4, 8
    config = mhc.Config(n=n, H=H)
    blk = Block(rng, n, H)
    w = mhc.prepare(blk.fn, blk.scale, blk.base, config=config)
    res, _ = random_bf16(rng, (T, n, H))
    y, _ = random_bf16(rng, (T, H))
    post_mix = np.full((T, n), 0.5, np.float32)
    comb = np.full((T, n, n), 0.25, np.float32)
    return dict(T=T, n=n, H=H, config=config, w=w, res=res, y=y, post_mix=post_mix, comb=comb, blk=blk)


def test_error_class_and_attributes(setup):
    assert issubclass(mhc.MhcError, RuntimeError)
    with pytest.raises(mhc.MhcError) as info:
        mhc.pre(bf16_values(setup["res"]).astype(np.float32), setup["w"], config=setup["config"])
    e = info.value
    assert e.message == "pre: residual: expected dtype bf16, got fp32"
    assert str(e).endswith(e.message) and ":" in str(e)
    assert e.file and e.line > 0


def test_non_array_fails_closed(setup):
    with pytest.raises(mhc.MhcError, match="residual"):
        mhc.pre([[1.0]], setup["w"], config=setup["config"])
    with pytest.raises(mhc.MhcError, match="post_mix: expected an array"):
        mhc.post(setup["y"], setup["res"], "not an array", setup["comb"], config=setup["config"])
    with pytest.raises(mhc.MhcError, match="weights"):
        mhc.pre(setup["res"], object(), config=setup["config"])
    with pytest.raises(mhc.MhcError, match="config"):
        mhc.pre(setup["res"], setup["w"], config={"n": 4})


@pytest.mark.parametrize("dtype,name", [(np.float16, "fp16"), (np.float64, "fp64"), (np.int32, "int32")])
def test_wrong_dtype_names_tensor_and_both_dtypes(setup, dtype, name):
    bad = setup["post_mix"].astype(dtype)
    with pytest.raises(mhc.MhcError, match=f"post: post_mix: expected dtype fp32, got {name}"):
        mhc.post(setup["y"], setup["res"], bad, setup["comb"], config=setup["config"])


def test_unsupported_dtype(setup):
    with pytest.raises(mhc.MhcError, match="comb_mix: unsupported dtype"):
        mhc.post(setup["y"], setup["res"], setup["post_mix"], setup["comb"] > 0, config=setup["config"])
    with pytest.raises(mhc.MhcError, match="comb_mix: unsupported dtype"):
        mhc.post(setup["y"], setup["res"], setup["post_mix"], setup["comb"].astype(np.complex64),
                 config=setup["config"])


def test_uint16_needs_explicit_bf16_view(setup):
    bits = np.zeros((setup["T"], setup["n"], setup["H"]), np.uint16)
    with pytest.raises(mhc.MhcError, match="bf16_view"):
        mhc.pre(bits, setup["w"], config=setup["config"])
    with pytest.raises(mhc.MhcError, match="uint16"):
        mhc.bf16_view(np.zeros(3, np.int16))
    with pytest.raises(mhc.MhcError):
        mhc.bf16_view([1, 2, 3])


def test_wrong_shape_and_rank(setup):
    T, n, H = setup["T"], setup["n"], setup["H"]
    with pytest.raises(mhc.MhcError, match=r"comb_mix: expected dimension 2 to be 4, got 3"):
        mhc.post(setup["y"], setup["res"], setup["post_mix"], np.zeros((T, n, 3), np.float32), config=setup["config"])
    with pytest.raises(mhc.MhcError, match=r"post_mix: expected rank 2"):
        mhc.post(setup["y"], setup["res"], np.zeros((T, n, 1), np.float32), setup["comb"], config=setup["config"])
    with pytest.raises(mhc.MhcError, match=r"layer_output: expected dimension 1 to be 8"):
        mhc.post(mhc.to_bf16(np.zeros((T, H + 1), np.float32)), setup["res"], setup["post_mix"], setup["comb"],
                 config=setup["config"])
    with pytest.raises(mhc.MhcError, match="rank"):
        mhc.post(setup["y"], setup["res"], setup["post_mix"], np.zeros((T, n, n, 1, 1), np.float32),
                 config=setup["config"])


def test_non_contiguous_inner_dimension_rejected(setup):
    wide, _ = random_bf16(np.random.default_rng(0), (setup["T"], 2 * setup["H"]))
    with pytest.raises(mhc.MhcError, match="layer_output: expected contiguous inner dimensions"):
        mhc.post(bf16_slice(wide, np.s_[:, ::2]), setup["res"], setup["post_mix"], setup["comb"],
                 config=setup["config"])


def test_read_only_output_rejected(setup):
    out = np.zeros((setup["T"], setup["n"]), np.float32)
    out.flags.writeable = False
    with pytest.raises(mhc.MhcError, match="post_mix: expected a writable array"):
        mhc.pre(setup["res"], setup["w"], config=setup["config"], post_mix=out)


def test_read_only_input_accepted(setup):
    res = bf16_copy(setup["res"], writeable=False)
    mhc.pre(res, setup["w"], config=setup["config"])


def test_nothing_written_when_validation_fails(setup):
    T, n, H = setup["T"], setup["n"], setup["H"]
    li = mhc.to_bf16(np.full((T, H), 3.0, np.float32))
    pm = np.full((T, n), 3.0, np.float32)
    cm = np.full((T, n, n), 3.0, np.float32)
    bad_norm = mhc.to_bf16(np.ones(H + 1, np.float32))
    with pytest.raises(mhc.MhcError, match="rmsnorm_weight"):
        mhc.pre(setup["res"], setup["w"], config=setup["config"], rmsnorm_weight=bad_norm, layer_input=li,
                post_mix=pm, comb_mix=cm)
    assert np.all(bf16_values(li) == 3.0) and np.all(pm == 3.0) and np.all(cm == 3.0)


def test_overlapping_output_rejected(setup):
    res = bf16_copy(setup["res"])
    with pytest.raises(mhc.MhcError, match="residual_out: expected an output that does not overlap"):
        mhc.post(setup["y"], res, setup["post_mix"], setup["comb"], config=setup["config"], residual_out=res)


def test_config_validation():
    with pytest.raises(mhc.MhcError, match="n must be in 1..8"):
        mhc.Config(n=9, H=8)
    with pytest.raises(mhc.MhcError, match="H must be in 1.."):
        mhc.Config(n=4, H=0)
    with pytest.raises(mhc.MhcError, match="sinkhorn_iters must be in 1.."):
        mhc.Config(sinkhorn_iters=0)
    with pytest.raises(mhc.MhcError, match="norm_eps must be finite and >= 0"):
        mhc.Config(norm_eps=-1.0)
    with pytest.raises(TypeError):
        mhc.Config(4, 4096)  # named fields only


def test_unknown_preset_lists_names():
    with pytest.raises(mhc.MhcError, match="known models: deepseek-v4-flash"):
        mhc.model_preset("deepseek-v5")


def test_config_and_weights_disagree(setup, rng):
    blk2 = Block(rng, 2, setup["H"])
    w2 = mhc.prepare(blk2.fn, blk2.scale, blk2.base)  # n inferred = 2
    assert (w2.n, w2.H) == (2, setup["H"])
    with pytest.raises(mhc.MhcError, match="expected weights for n = 4, got n = 2"):
        mhc.pre(setup["res"], w2, config=setup["config"])
    hb = Block(rng, 4, setup["H"], head=True)
    hw = mhc.prepare_head(hb.fn, hb.scale, hb.base)
    assert hw.is_head and not setup["w"].is_head
    with pytest.raises(mhc.MhcError, match="expected mix-block weights"):
        mhc.pre(setup["res"], hw, config=setup["config"])
    with pytest.raises(mhc.MhcError, match="expected head weights"):
        mhc.head(setup["res"], config=setup["config"], kind="learned", weights=setup["w"])
    with pytest.raises(mhc.MhcError, match="weights"):
        mhc.head(setup["res"], config=setup["config"], kind="learned")


def test_prepare_validation(setup):
    blk = setup["blk"]
    with pytest.raises(mhc.MhcError, match="fn: expected dtype fp32"):
        mhc.prepare(blk.fn.astype(np.float64), blk.scale, blk.base, config=setup["config"])
    with pytest.raises(mhc.MhcError, match="scale"):
        mhc.prepare(blk.fn, blk.scale[:2], blk.base, config=setup["config"])
    with pytest.raises(mhc.MhcError, match="cannot infer n and H"):
        mhc.prepare(np.zeros((5, 8), np.float32), blk.scale, blk.base)
    with pytest.raises(mhc.MhcError, match="fn: expected a contiguous tensor"):
        mhc.prepare(np.asfortranarray(blk.fn), blk.scale, blk.base, config=setup["config"])


def test_bad_mode_strings(setup):
    with pytest.raises(mhc.MhcError, match="pre_source: expected 'computed', 'carried' or 'identity', got 'shifted'"):
        mhc.pre(setup["res"], setup["w"], config=setup["config"], pre_source="shifted")
    with pytest.raises(mhc.MhcError, match="kind: expected 'learned', 'carried' or 'mean'"):
        mhc.head(setup["res"], config=setup["config"], kind="max")
    with pytest.raises(mhc.MhcError, match="pre_mix_in: required tensor is absent"):
        mhc.pre(setup["res"], setup["w"], config=setup["config"], pre_source="carried")
    with pytest.raises(mhc.MhcError, match="identity"):
        mhc.post_pre(setup["y"], setup["res"], setup["post_mix"], setup["comb"], setup["w"], config=setup["config"],
                     pre_source="identity")


def test_variant_errors(setup):
    with pytest.raises(mhc.MhcError, match="no variant named 'post.nope'"):
        mhc.post(setup["y"], setup["res"], setup["post_mix"], setup["comb"], config=setup["config"],
                 variant="post.nope")
    with pytest.raises(mhc.MhcError, match="implements pre, not post"):
        mhc.post(setup["y"], setup["res"], setup["post_mix"], setup["comb"], config=setup["config"],
                 variant="pre.cpu_ref")
    with pytest.raises(mhc.MhcError, match="selected_variant: op"):
        mhc.selected_variant("mixes", setup["res"], setup["w"], config=setup["config"])


def test_devices_fail_closed(setup):
    blk = setup["blk"]
    with pytest.raises(mhc.MhcError, match="device: expected 'cpu', 'cuda' or 'cuda:N'"):
        mhc.prepare(blk.fn, blk.scale, blk.base, config=setup["config"], device="tpu:0")
    with pytest.raises(mhc.MhcError, match="device"):
        mhc.Workspace.create("cuda:x", 16)
    if not mhc.cuda_available():
        with pytest.raises(mhc.MhcError, match="cuda"):
            mhc.prepare(blk.fn, blk.scale, blk.base, config=setup["config"], device="cuda:0")
        with pytest.raises(mhc.MhcError, match="cuda"):
            mhc.Workspace.create("cuda:0", 16)
    with pytest.raises(mhc.MhcError, match="stream"):
        mhc.pre(setup["res"], setup["w"], config=setup["config"], stream="fast")
    with pytest.raises(mhc.MhcError, match="workspace"):
        mhc.pre(setup["res"], setup["w"], config=setup["config"], workspace="big")
    ws = mhc.Workspace.create("cpu", 16)  # a CPU workspace is legal and unused
    assert ws.device == "cpu" and ws.max_tokens == 16
    mhc.pre(setup["res"], setup["w"], config=setup["config"], workspace=ws)


def test_unallocatable_primary_needs_explicit_outputs(setup):
    class Weird:
        shape = (3, 4, 8)

    with pytest.raises(mhc.MhcError, match="pass layer_input= explicitly"):
        mhc.pre(Weird(), setup["w"], config=setup["config"])


# ---- hostile input (issue 17) ------------------------------------------------------------------

def test_out_of_range_integers_raise_mhc_error_not_type_error():
    # Finding 13: values beyond int32 / int64 raised TypeError from the native fields.
    with pytest.raises(mhc.MhcError, match="sinkhorn_iters must be in 1..1048576, got 2147483648"):
        mhc.Config(sinkhorn_iters=2**31)
    with pytest.raises(mhc.MhcError, match="n must be in 1..8, got 4294967300"):
        mhc.Config(n=2**32 + 4)
    with pytest.raises(mhc.MhcError, match="H must be in 1..1048576"):
        mhc.Config(H=2**63)
    # Finding 10: the API caps sinkhorn_iters like config.json does.
    with pytest.raises(mhc.MhcError, match="sinkhorn_iters must be in 1..1048576"):
        mhc.Config(sinkhorn_iters=2**31 - 1)


def test_prepare_rejects_huge_hidden_sizes():
    fn, scale, base = np.zeros((24, 64), np.float32), np.ones(3, np.float32), np.zeros(24, np.float32)
    # Finding 2: n*H wrapped to 64 for H = 2^62 + 16 and prepare wrote past its buffer.
    with pytest.raises(mhc.MhcError, match="H must be in 1..1048576"):
        mhc.prepare(fn, scale, base, n=4, H=2**62 + 16)
    # Finding 13: H = 2^63 raised TypeError.
    with pytest.raises(mhc.MhcError, match="H must be in 1..1048576"):
        mhc.prepare(fn, scale, base, n=4, H=2**63)
    with pytest.raises(mhc.MhcError, match="H must be in 1..1048576"):
        mhc.prepare_head(np.zeros((4, 64), np.float32), np.ones(1, np.float32), np.zeros(4, np.float32),
                         n=4, H=2**62 + 16)


def test_raw_tensor_with_overflowing_shape_is_refused(setup):
    # Finding 4: a RawTensor claiming 2^61 tokens reached the operator and read out of bounds.
    from mhc import _mhc
    res = np.zeros(4 * 8 * 4, np.uint16)  # backing memory only (the views claim far more)
    with pytest.raises(mhc.MhcError, match="overflows int64|expected at most"):
        raw = _mhc.RawTensor(res.ctypes.data, 0, 1, 0, (2**61, 4, 2**8), (2**10, 2**8, 1), res)
        mhc.pre(raw, setup["w"], config=setup["config"])
    with pytest.raises(mhc.MhcError, match="negative extent|extents >= 0"):
        raw = _mhc.RawTensor(res.ctypes.data, 0, 1, 0, (-3, 4, 8), (32, 8, 1), res)
        mhc.pre(raw, setup["w"], config=setup["config"])


def test_ignored_arguments_are_refused(setup):
    # Finding 9: pre_mix_in without pre_source="carried" silently ran the normal mode.
    bad = np.zeros((17, 3), np.float64)
    with pytest.raises(mhc.MhcError, match="pre_mix_in: expected absent"):
        mhc.pre(setup["res"], setup["w"], config=setup["config"], pre_source="computed", pre_mix_in=bad)


def test_error_location_is_relative_to_the_source_root(setup):
    # Finding 12: MhcError carried the build machine's absolute path.
    with pytest.raises(mhc.MhcError) as info:
        mhc.pre(setup["res"], setup["w"], config=setup["config"], pre_source="carried",
                pre_mix_in=np.zeros((17, 3), np.float64))
    assert info.value.file == "src/api/validate.cpp"
    assert not str(info.value).startswith("/")
