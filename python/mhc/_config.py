"""Config (every scalar of an mHC block) and the shipped model presets (spec section 2)."""

import dataclasses
from typing import List

from mhc import _mhc


def _bounded_int(name, value, hi):
    """int(value) when it is in 1..hi; a larger or smaller one raises mhc.MhcError here (the native
    field would raise TypeError for a value that does not fit its C++ type)."""
    from mhc._arrays import mhc_error
    v = int(value)
    if not 1 <= v <= hi:
        raise mhc_error(f"config: {name} must be in 1..{hi}, got {v}")
    return v


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Every scalar of an mHC block. Keyword arguments only; the defaults are DeepSeek-V4's.

    Use ``mhc.model_preset(name).config`` for a shipped model and ``dataclasses.replace`` (or
    ``config.replace(H=...)``) to change a field. Validated on construction (n in 1..8, H in
    1..2^20, sinkhorn_iters in 1..2^20, every eps finite and >= 0); a bad value raises mhc.MhcError.
    """

    n: int = 4                    #: streams (hc_mult), 1..8
    H: int = 4096                 #: hidden size
    norm_eps: float = 1e-6        #: eps inside the stream RMS used for the mixes (rms_norm_eps)
    pre_eps: float = 1e-6         #: added after the pre sigmoid (hc_eps)
    sinkhorn_eps: float = 1e-6    #: Sinkhorn eps (hc_eps)
    sinkhorn_iters: int = 20      #: hc_sinkhorn_iters
    post_scale: float = 2.0       #: post = post_scale * sigmoid(..)
    rmsnorm_eps: float = 1e-6     #: eps of the folded sublayer RMSNorm
    _native: object = dataclasses.field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self):
        c = _mhc.NativeConfig()
        c.n = _bounded_int("n", self.n, _mhc.MAX_STREAMS)
        c.H = _bounded_int("H", self.H, _mhc.MAX_HIDDEN)
        c.norm_eps = float(self.norm_eps)
        c.pre_eps = float(self.pre_eps)
        c.sinkhorn_eps = float(self.sinkhorn_eps)
        c.sinkhorn_iters = _bounded_int("sinkhorn_iters", self.sinkhorn_iters, _mhc.MAX_SINKHORN_ITERS)
        c.post_scale = float(self.post_scale)
        c.rmsnorm_eps = float(self.rmsnorm_eps)
        _mhc.validate_config(c)
        object.__setattr__(self, "_native", c)

    @property
    def K(self) -> int:
        """n*H, the flattened stream width."""
        return self.n * self.H

    @property
    def M(self) -> int:
        """(n+2)*n, the mixes per token."""
        return (self.n + 2) * self.n

    def replace(self, **changes) -> "Config":
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def _from_native(cls, c) -> "Config":
        # fp32 fields widened to Python floats: round them to the nearest short decimal that
        # reads back to the same fp32 value, so that presets print as 1e-06, not 9.99e-07.
        def f(v):
            import numpy as np

            return float(str(np.float32(v)))

        return cls(n=c.n, H=c.H, norm_eps=f(c.norm_eps), pre_eps=f(c.pre_eps), sinkhorn_eps=f(c.sinkhorn_eps),
                   sinkhorn_iters=c.sinkhorn_iters, post_scale=f(c.post_scale), rmsnorm_eps=f(c.rmsnorm_eps))


@dataclasses.dataclass(frozen=True)
class ModelPreset:
    """A shipped model: its scalars, layer count, forward mode and head kind."""

    name: str          #: e.g. "deepseek-v4-flash"
    config: Config     #: every scalar of spec section 2
    num_layers: int    #: transformer layers (2 mHC boundaries each)
    mode: str          #: "normal" (V4, GLM-5-Next) or "shifted" (V4.1)
    head: str          #: "learned" (V4), "carried" (V4.1) or "mean" (GLM-5-Next)


def _preset(t) -> ModelPreset:
    name, cfg, layers, mode, head = t
    return ModelPreset(name=name, config=Config._from_native(cfg), num_layers=layers, mode=mode, head=head)


def model_presets() -> List[ModelPreset]:
    """Every shipped preset: deepseek-v4-flash, deepseek-v4-pro, deepseek-v4.1-flash, glm-5-next."""
    return [_preset(t) for t in _mhc.model_presets()]


def model_preset(name: str) -> ModelPreset:
    """The preset called ``name``; raises mhc.MhcError listing the known names otherwise."""
    return _preset(_mhc.model_preset(name))
