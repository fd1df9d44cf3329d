"""bf16 on numpy: the helpers, ml_dtypes arrays and explicit raw-bit views."""

import numpy as np
import pytest

import mhc
import mhc_reference as ref
from conftest import Block, bf16_values

SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 1.00390625, 1.01171875, 3.0e38, -3.4e38, 1e-40, -1e-45,
                     np.inf, -np.inf, np.nan, 65504.0, 2.0 ** -133, 1.0 + 2.0 ** -8], dtype=np.float32)


def test_float32_to_bf16_rounds_to_nearest_even(rng):
    x = np.concatenate([SPECIALS, rng.standard_normal(4096).astype(np.float32) * 10.0])
    bits = mhc.float32_to_bf16_bits(x)
    want = ref.bf16_bits(ref.bf16_round(x.astype(np.float64)))
    nan = np.isnan(x)
    np.testing.assert_array_equal(bits[~nan], want[~nan])
    assert np.all(np.isnan(mhc.bf16_to_float32(mhc.bf16_view(bits[nan]))))
    # ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> even (1.0)
    assert mhc.float32_to_bf16_bits(np.float32(1.0 + 2.0 ** -8)) == 0x3F80
    assert mhc.float32_to_bf16_bits(np.float32(1.0 + 3 * 2.0 ** -8)) == 0x3F82


def test_bf16_to_float32_is_exact():
    bits = np.arange(0, 65536, dtype=np.uint32).astype(np.uint16)
    f = mhc.bf16_to_float32(mhc.bf16_view(bits))
    ok = ~np.isnan(f)
    np.testing.assert_array_equal(mhc.float32_to_bf16_bits(f[ok]), bits[ok])


def test_ml_dtypes_and_bf16_view_agree(rng, have_ml_dtypes):
    if not have_ml_dtypes:
        pytest.skip("ml_dtypes is not installed")
    import ml_dtypes

    T, n, H = 4, 4, 16
    config = mhc.Config(n=n, H=H)
    blk = Block(rng, n, H)
    w = mhc.prepare(blk.fn, blk.scale, blk.base, config=config)
    vals = rng.standard_normal((T, n, H)).astype(np.float32)
    as_ml = vals.astype(ml_dtypes.bfloat16)
    as_view = mhc.bf16_view(as_ml.view(np.uint16).copy())
    a = mhc.pre(as_ml, w, config=config)
    b = mhc.pre(as_view, w, config=config)
    assert a.layer_input.dtype == ml_dtypes.bfloat16
    assert isinstance(b.layer_input, mhc.Bf16View)
    np.testing.assert_array_equal(a.layer_input.view(np.uint16), b.layer_input.bits)
    # to_bf16 prefers ml_dtypes when present and matches its rounding
    np.testing.assert_array_equal(mhc.to_bf16(vals).view(np.uint16), as_ml.view(np.uint16))


def test_bf16_view_shares_memory():
    bits = np.zeros((2, 3), np.uint16)
    v = mhc.bf16_view(bits)
    assert v.bits is bits and v.shape == (2, 3) and v.dtype == "bf16" and "Bf16View" in repr(v)
    config = mhc.Config(n=1, H=3)
    res = mhc.bf16_view(mhc.float32_to_bf16_bits(np.ones((2, 1, 3), np.float32)))
    mhc.collapse(res, None, config=config, pre_source="identity", layer_input=v)
    np.testing.assert_array_equal(bf16_values(v), np.ones((2, 3)))
    assert np.all(bits == 0x3F80)


def test_helpers_reject_ambiguous_inputs():
    with pytest.raises(mhc.MhcError, match="bf16_view"):
        mhc.bf16_to_float32(np.zeros(3, np.uint16))
    with pytest.raises(mhc.MhcError, match="expected bf16 values"):
        mhc.bf16_to_float32(np.zeros(3, np.float32))
