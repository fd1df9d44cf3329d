"""Engine readiness (issue 16) without torch: prepared weights in the caller's memory (numpy).
The torch side is test_engine_torch.py, the CUDA side test_torch_cuda.py."""

import numpy as np
import pytest

import mhc
from conftest import Block, bf16_bits_of, random_bf16

# ---- prepare into caller memory: numpy (no torch needed) ----------------------------------------


def test_prepare_into_numpy_buffer_is_what_the_call_reads(rng):
    config = mhc.Config(n=4, H=24)
    blk = Block(rng, 4, 24)
    nbytes = mhc.prepared_bytes(config=config)
    assert nbytes == (24 * 96 + 24 * 24 + 3 + 24) * 4
    buf = np.zeros(nbytes // 4, dtype=np.float32)
    w_own = mhc.prepare(blk.fn, blk.scale, blk.base, config=config)
    w_buf = mhc.prepare(blk.fn, blk.scale, blk.base, config=config, out=buf)
    np.testing.assert_array_equal(buf[: blk.fn.size], blk.fn.ravel())  # the CPU layout starts with fn
    res, _ = random_bf16(rng, (5, 4, 24))
    a = mhc.pre(res, w_own, config=config)
    b = mhc.pre(res, w_buf, config=config)
    np.testing.assert_array_equal(bf16_bits_of(a.layer_input), bf16_bits_of(b.layer_input))
    np.testing.assert_array_equal(np.asarray(a.comb_mix), np.asarray(b.comb_mix))
    # attach_prepared over a copy: the same; change the copy's scale and the mixes change
    copy = buf.copy()
    w_att = mhc.attach_prepared(copy, config=config)
    c = mhc.pre(res, w_att, config=config)
    np.testing.assert_array_equal(np.asarray(c.comb_mix), np.asarray(a.comb_mix))
    scale_at = blk.fn.size + 24 * 24
    copy[scale_at: scale_at + 3] *= 2
    d = mhc.pre(res, w_att, config=config)
    assert not np.array_equal(np.asarray(d.post_mix), np.asarray(a.post_mix))


def test_prepare_into_too_small_a_buffer_fails_closed(rng):
    blk = Block(rng, 4, 8)
    short = np.zeros(mhc.prepared_bytes(n=4, H=8) // 4 - 1, dtype=np.float32)
    with pytest.raises(mhc.MhcError, match=r"destination: holds \d+ bytes, .* need \d+ \(mhc::prepared_bytes\)"):
        mhc.prepare(blk.fn, blk.scale, blk.base, n=4, H=8, out=short)
    assert not short.any()
