"""Shared fixtures and helpers of the Python tests.

The tests import the installed ``mhc`` package (pip install .); see docs/integration.md.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import mhc  # noqa: E402
import mhc_reference as ref  # noqa: E402

# Optional dependencies (ml_dtypes, torch, cupy) skip the tests that need them, by name. In CI
# (MHC_REQUIRE_TORCH=1, set by .ci/run) a missing torch is an error instead of skipped torch tests.
if os.environ.get("MHC_REQUIRE_TORCH") == "1":
    import torch  # noqa: E402,F401

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class Block:
    """Random fp32 weights of one mix block (or head) with checkpoint-like magnitudes."""

    def __init__(self, rng, n, H, head=False):
        rows = n if head else (n + 2) * n
        K = n * H
        self.fn = (rng.standard_normal((rows, K)) / np.sqrt(K)).astype(np.float32)
        self.scale = rng.uniform(0.5, 1.5, size=1 if head else 3).astype(np.float32)
        self.base = (0.5 * rng.standard_normal(rows)).astype(np.float32)


def bf16_bits_of(x):
    """uint16 bit patterns of any bf16 holder: ml_dtypes array, mhc.Bf16View, torch bf16 tensor."""
    if isinstance(x, mhc.Bf16View):
        return np.array(x.bits, dtype=np.uint16)
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch

        assert x.dtype == torch.bfloat16, x.dtype
        return x.detach().cpu().contiguous().view(torch.int16).numpy().view(np.uint16)
    arr = np.asarray(x)
    assert arr.dtype.name == "bfloat16", arr.dtype
    return arr.view(np.uint16).copy()


def f32_of(x):
    mod = type(x).__module__
    if mod.startswith("torch"):
        return x.detach().cpu().numpy().astype(np.float64)
    return np.asarray(x, dtype=np.float64)


def assert_bf16_close(actual, expected_values, what=""):
    """bf16 outputs: within 1 ulp of the float64 value rounded once, and >= 99.9% bit-equal."""
    a = bf16_bits_of(actual)
    e = ref.bf16_bits(expected_values)
    assert a.shape == e.shape, (what, a.shape, e.shape)
    if a.size == 0:
        return
    nan_a, nan_e = np.isnan(ref.bits_to_f64(a)), np.isnan(ref.bits_to_f64(e))
    assert np.array_equal(nan_a, nan_e), f"{what}: NaN positions differ"
    ok = ~nan_a
    d = ref.ulp_distance(a[ok], e[ok])
    assert d.max(initial=0) <= 1, f"{what}: max ulp distance {d.max()}"
    equal = np.mean(d == 0) if d.size else 1.0
    assert equal >= 0.999 or np.sum(d != 0) <= 1 and d.size < 1000, f"{what}: only {equal:.4%} bit-equal"


def assert_mix_close(actual, expected, what=""):
    """fp32 mixes: relative error <= 1e-5 against float64."""
    a = f32_of(actual)
    assert a.shape == expected.shape, (what, a.shape, expected.shape)
    np.testing.assert_allclose(a, expected, rtol=1e-5, atol=1e-7, err_msg=what)


def bf16_values(x):
    """float64 values of a bf16 holder."""
    return ref.bits_to_f64(bf16_bits_of(x))


def bf16_slice(x, index):
    """x[index] of a bf16 holder, as a view of the same kind (ml_dtypes array or mhc.Bf16View,
    which has no indexing of its own: its .bits are sliced and wrapped again)."""
    if isinstance(x, mhc.Bf16View):
        return mhc.bf16_view(np.asarray(x.bits)[index])
    return x[index]


def bf16_copy(x, writeable=True):
    """A copy of a bf16 holder, of the same kind (an mhc.Bf16View copies its .bits), optionally
    read-only."""
    if isinstance(x, mhc.Bf16View):
        bits = np.array(x.bits)
        bits.flags.writeable = writeable
        return mhc.bf16_view(bits)
    y = x.copy()
    y.flags.writeable = writeable
    return y


def random_bf16(rng, shape, sigma=1.0):
    """A random ml_dtypes bf16 array (or Bf16View without ml_dtypes) and its float64 values."""
    v = ref.bf16_round(sigma * rng.standard_normal(shape))
    return mhc.to_bf16(v.astype(np.float32)), v


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def have_ml_dtypes():
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        return False
    return True
