"""Spec section 3 in plain numpy float64: the oracle the Python tests compare against.

Written from docs/spec (shared/spec/mhc.md) alone, independently of src/cpu. Every bf16 rounding
point of the spec is applied (round to nearest even, once, from float64); nothing else is
rounded. Arrays of bf16 values are carried as float64 arrays holding exactly representable
values; ``bf16_bits`` turns them into uint16 bit patterns for bitwise comparison.
"""

import numpy as np

BF16_OVERFLOW = 2.0 ** 128  # anything rounding to this or beyond is inf in bf16


def bf16_round(v):
    """float64 -> nearest bf16 value (ties to even), as float64. Single rounding."""
    v = np.asarray(v, dtype=np.float64)
    a = np.abs(v)
    _, e = np.frexp(a)                        # a = m * 2**e, m in [0.5, 1)
    ulp_exp = np.maximum(e - 8, -133)         # 8 significant bits; subnormal spacing 2**-133
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.rint(np.ldexp(a, -ulp_exp))    # rint rounds half to even
        r = np.ldexp(q, ulp_exp)
    r = np.where(r >= BF16_OVERFLOW, np.inf, r)
    r = np.where(np.isnan(v), np.nan, r)
    return np.copysign(r, v)


def bf16_bits(values):
    """bf16-representable float64 values -> uint16 bit patterns."""
    f = np.asarray(values, dtype=np.float64).astype(np.float32)
    bits = (f.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), bits).astype(np.uint16)


def bits_to_f64(bits):
    """uint16 bf16 bit patterns -> float64 values (exact)."""
    u = np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)
    return u.view(np.float32).astype(np.float64)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class Scalars:
    """The config scalars as the library sees them: fp32 values widened to float64."""

    def __init__(self, cfg):
        f = lambda v: float(np.float32(v))  # noqa: E731
        self.n, self.H = cfg.n, cfg.H
        self.norm_eps, self.pre_eps, self.sinkhorn_eps = f(cfg.norm_eps), f(cfg.pre_eps), f(cfg.sinkhorn_eps)
        self.sinkhorn_iters, self.post_scale, self.rmsnorm_eps = cfg.sinkhorn_iters, f(cfg.post_scale), f(cfg.rmsnorm_eps)


def sinkhorn(c, s):
    """c [T,n,n] float64, c[t, j, k]: rows are j (sum over k), columns are k (sum over j)."""
    eps = s.sinkhorn_eps
    e = np.exp(c - c.max(axis=2, keepdims=True))
    c = e / e.sum(axis=2, keepdims=True) + eps
    c = c / (c.sum(axis=1, keepdims=True) + eps)
    for _ in range(s.sinkhorn_iters - 1):
        c = c / (c.sum(axis=2, keepdims=True) + eps)
        c = c / (c.sum(axis=1, keepdims=True) + eps)
    return c


def mixes(streams, fn, scale, base, s):
    """streams [T,n,H] float64 (bf16 values) -> (pre [T,n], post [T,n], comb [T,n,n]) float64."""
    T, n = streams.shape[0], s.n
    K = streams.shape[1] * streams.shape[2]
    x = streams.reshape(T, K)
    r = 1.0 / np.sqrt((x * x).sum(axis=1) / K + s.norm_eps)
    m = (x @ np.asarray(fn, np.float64).T) * r[:, None]
    scale = np.asarray(scale, np.float64)
    base = np.asarray(base, np.float64)
    pre = _sigmoid(m[:, :n] * scale[0] + base[:n]) + s.pre_eps
    post = s.post_scale * _sigmoid(m[:, n:2 * n] * scale[1] + base[n:2 * n])
    c = m[:, 2 * n:].reshape(T, n, n) * scale[2] + base[2 * n:].reshape(n, n)
    return pre, post, sinkhorn(c, s)


def rmsnorm(u, w, s):
    """u [T,H] bf16 values (already rounded), w [H] bf16 values -> bf16 values."""
    inv = 1.0 / np.sqrt((u * u).mean(axis=1, keepdims=True) + s.rmsnorm_eps)
    return bf16_round(u * inv * w[None, :])


def collapse(streams, pre, s, norm_weight=None):
    """bf16(sum_j pre[j] * streams[j]) then the optional folded RMSNorm."""
    u = bf16_round(np.einsum("tj,tjh->th", np.asarray(pre, np.float64), streams))
    return u if norm_weight is None else rmsnorm(u, norm_weight, s)


def identity(streams, s, norm_weight=None):
    u = streams[:, 0, :].copy()
    return u if norm_weight is None else rmsnorm(u, norm_weight, s)


def post(layer_output, streams, post_mix, comb_mix):
    """new[k] = bf16(post[k]*out + sum_j comb[j,k]*streams[j]); streams [T,n,H] (or [T,H] broadcast)."""
    post_mix = np.asarray(post_mix, np.float64)
    comb_mix = np.asarray(comb_mix, np.float64)
    n = post_mix.shape[1]
    if streams.ndim == 2:
        streams = np.repeat(streams[:, None, :], n, axis=1)
    v = post_mix[:, :, None] * layer_output[:, None, :] + np.einsum("tjk,tjh->tkh", comb_mix, streams)
    return bf16_round(v)


def pre(streams, fn, scale, base, s, pre_source="computed", pre_mix_in=None, norm_weight=None):
    """-> layer_input, post_mix, comb_mix, fresh pre (float64)."""
    p, q, c = mixes(streams, fn, scale, base, s)
    if pre_source == "computed":
        li = collapse(streams, p, s, norm_weight)
    elif pre_source == "carried":
        li = collapse(streams, pre_mix_in, s, norm_weight)
    else:
        li = identity(streams, s, norm_weight)
    return li, q, c, p


def head(streams, s, kind, fn=None, scale=None, base=None, pre_mix_in=None, norm_weight=None):
    T = streams.shape[0]
    if kind == "learned":
        K = streams.shape[1] * streams.shape[2]
        x = streams.reshape(T, K)
        r = 1.0 / np.sqrt((x * x).sum(axis=1) / K + s.norm_eps)
        m = (x @ np.asarray(fn, np.float64).T) * r[:, None]
        p = _sigmoid(m * float(np.float64(scale[0])) + np.asarray(base, np.float64)) + s.pre_eps
        return collapse(streams, p, s, norm_weight)
    if kind == "carried":
        return collapse(streams, pre_mix_in, s, norm_weight)
    u = bf16_round(streams.mean(axis=1))
    return u if norm_weight is None else rmsnorm(u, norm_weight, s)


def ulp_distance(a_bits, b_bits):
    """Distance in bf16 ulps between two uint16 bit arrays (sign-magnitude -> ordered ints)."""
    def ordered(b):
        b = np.asarray(b, np.uint16).astype(np.int32)
        return np.where(b & 0x8000, 0x8000 - b, b)  # negative values below positive ones
    return np.abs(ordered(a_bits) - ordered(b_bits))
