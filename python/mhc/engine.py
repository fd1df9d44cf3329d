"""The mHC call boundaries of an inference engine's DeepSeek-V4 / V4.1 / GLM-5-Next decoder.

Each function mirrors one call an engine makes today (vLLM / SGLang style model code, after the
DeepSeek reference ``Block.hc_pre`` / ``hc_post`` / ``Transformer.hc_head``) and runs it through
the torch custom operators of ``mhc.torch`` (so it compiles with torch.compile(fullgraph=True)
and captures into CUDA graphs). docs/integration.md maps every engine-side call to these.

Shapes: any leading dimensions (``[T, ...]`` or ``[batch, seq, ...]``) are flattened to tokens;
outputs come back with the same leading dimensions. ``x`` is the sublayer output/input
``[..., H]`` bf16, ``residual`` the streams ``[..., n, H]`` bf16 (or, right after the first
layer's broadcast pre, the embedding ``[..., H]`` itself), ``post`` ``[..., n]`` and ``comb``
``[..., n, n]`` fp32 (comb indexed [source, destination]), ``pre`` ``[..., n]`` fp32.

Weights are prepared once at load time into an ``HcBlock`` (``load_block`` / ``load_head``);
CUDA needs ``mhc.torch.init(device, max_tokens)`` once before the first call.
"""

from typing import NamedTuple, Optional, Tuple

from torch import Tensor

import mhc.torch as _mt
from mhc._config import Config


class HcBlock(NamedTuple):
    """The prepared weights and scalars of one mHC boundary (hc_attn_*, hc_ffn_* or hc_head_*)."""

    weights: "_mt.Weights"
    config: Config


def load_block(fn, scale, base, *, config: Config, device=None) -> HcBlock:
    """Prepares ``layers.i.hc_attn_{fn,scale,base}`` or ``hc_ffn_*`` (fp32) for ``device``."""
    return HcBlock(_mt.prepare(fn, scale, base, config=config, device=device), config)


def load_head(fn, scale, base, *, config: Config, device=None) -> HcBlock:
    """Prepares ``hc_head_{fn,scale,base}`` (V4's learned head) for ``device``."""
    return HcBlock(_mt.prepare_head(fn, scale, base, config=config, device=device), config)


def _tokens(t: Tensor, inner: int) -> Tuple[Tensor, Tuple[int, ...]]:
    """Flattens all but the last ``inner`` dimensions into tokens; returns the leading shape."""
    lead = tuple(t.shape[: t.dim() - inner])
    return t.reshape((-1,) + tuple(t.shape[t.dim() - inner:])), lead


def _restore(t: Tensor, lead) -> Tensor:
    return t.reshape(tuple(lead) + tuple(t.shape[1:]))


def hc_pre(x: Tensor, block: HcBlock, norm_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """Normal-mode pre (V4, GLM-5-Next): ``layer_input, post, comb = hc_pre(residual, hc_fn, ...)``.

    ``x`` is the residual streams [..., n, H]. With ``norm_weight`` (the sublayer's
    attn_norm / ffn_norm weight) the RMSNorm is folded in and layer_input is already normed.
    """
    r, lead = _tokens(x, 2)
    o = _mt.pre(r, block.weights, config=block.config, pre_source="computed", rmsnorm_weight=norm_weight)
    return _restore(o.layer_input, lead), _restore(o.post_mix, lead), _restore(o.comb_mix, lead)


def hc_pre_shifted(x: Tensor, block: HcBlock, pre: Tensor,
                   norm_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Shifted-mode pre (V4.1): collapse with the previous sublayer's ``pre``; returns
    ``layer_input, post, comb, next_pre`` (the fresh pre, for the next sublayer)."""
    r, lead = _tokens(x, 2)
    p, _ = _tokens(pre, 1)
    o = _mt.pre(r, block.weights, config=block.config, pre_source="carried", pre_mix_in=p,
                rmsnorm_weight=norm_weight)
    return (_restore(o.layer_input, lead), _restore(o.post_mix, lead), _restore(o.comb_mix, lead),
            _restore(o.pre_mix_out, lead))


def hc_pre_first(embedding: Tensor, block: HcBlock,
                 norm_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """First layer, normal mode: replaces ``h = embed(ids).unsqueeze(-2).repeat(.., n, ..)`` followed by
    ``hc_pre(h, ...)``. The n copies are never made: pass ``embedding`` itself as the ``residual``
    of the following hc_post / hc_post_pre. Returns ``layer_input, post, comb``."""
    e, lead = _tokens(embedding, 1)
    o = _mt.pre_broadcast(e, block.weights, config=block.config, pre_source="computed", rmsnorm_weight=norm_weight)
    return _restore(o.layer_input, lead), _restore(o.post_mix, lead), _restore(o.comb_mix, lead)


def hc_pre_first_shifted(embedding: Tensor, block: HcBlock,
                         norm_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """First layer, shifted mode (V4.1): identity collapse (layer_input = the embedding, bit for
    bit, then the optional norm) and the fresh pre. Returns ``layer_input, post, comb, next_pre``."""
    e, lead = _tokens(embedding, 1)
    o = _mt.pre_broadcast(e, block.weights, config=block.config, pre_source="identity", rmsnorm_weight=norm_weight)
    return (_restore(o.layer_input, lead), _restore(o.post_mix, lead), _restore(o.comb_mix, lead),
            _restore(o.pre_mix_out, lead))


def hc_post(x: Tensor, residual: Tensor, post: Tensor, comb: Tensor) -> Tensor:
    """``residual = hc_post(sublayer_out, residual, post, comb)``: [..., n, H] bf16.

    ``residual`` may be the first layer's embedding [..., H] (broadcast form)."""
    o, lead = _tokens(x, 1)
    broadcast = residual.dim() == x.dim()
    r, _ = _tokens(residual, 1 if broadcast else 2)
    p, _ = _tokens(post, 1)
    c, _ = _tokens(comb, 2)
    out = _mt.post(o, r, p, c)
    return _restore(out, lead)


def hc_post_pre(x: Tensor, residual: Tensor, post: Tensor, comb: Tensor, block: HcBlock,
                norm_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Fused ``hc_post`` of sublayer k-1 then ``hc_pre`` of sublayer k (normal mode).

    Returns ``residual, layer_input, post, comb`` for sublayer k; equal to the unfused pair."""
    o, lead = _tokens(x, 1)
    broadcast = residual.dim() == x.dim()
    r, _ = _tokens(residual, 1 if broadcast else 2)
    p, _ = _tokens(post, 1)
    c, _ = _tokens(comb, 2)
    out = _mt.post_pre(o, r, p, c, block.weights, config=block.config, pre_source="computed",
                       rmsnorm_weight=norm_weight)
    return (_restore(out.residual_out, lead), _restore(out.layer_input, lead), _restore(out.post_mix_out, lead),
            _restore(out.comb_mix_out, lead))


def hc_post_pre_shifted(x: Tensor, residual: Tensor, post: Tensor, comb: Tensor, block: HcBlock, pre: Tensor,
                        norm_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Fused post then shifted pre (V4.1, delayed pre): collapse with ``pre`` (the previous
    boundary's fresh pre). Returns ``residual, layer_input, post, comb, next_pre``."""
    o, lead = _tokens(x, 1)
    broadcast = residual.dim() == x.dim()
    r, _ = _tokens(residual, 1 if broadcast else 2)
    p, _ = _tokens(post, 1)
    c, _ = _tokens(comb, 2)
    q, _ = _tokens(pre, 1)
    out = _mt.post_pre(o, r, p, c, block.weights, config=block.config, pre_source="carried", pre_mix_in=q,
                       rmsnorm_weight=norm_weight)
    return (_restore(out.residual_out, lead), _restore(out.layer_input, lead), _restore(out.post_mix_out, lead),
            _restore(out.comb_mix_out, lead), _restore(out.pre_mix_out, lead))


def hc_head(x: Tensor, block: HcBlock, norm_weight: Optional[Tensor] = None) -> Tensor:
    """V4 learned head: ``hc_head(x, hc_head_fn, hc_head_scale, hc_head_base)`` [..., n, H] -> [..., H].
    With ``norm_weight`` (the final ``norm``) the RMSNorm is folded in."""
    r, lead = _tokens(x, 2)
    return _restore(_mt.head(r, config=block.config, kind="learned", weights=block.weights,
                             rmsnorm_weight=norm_weight), lead)


def hc_head_carried(x: Tensor, pre: Tensor, config: Config, norm_weight: Optional[Tensor] = None) -> Tensor:
    """V4.1 head: collapse with the last FFN boundary's fresh pre."""
    r, lead = _tokens(x, 2)
    p, _ = _tokens(pre, 1)
    return _restore(_mt.head(r, config=config, kind="carried", pre_mix_in=p, rmsnorm_weight=norm_weight), lead)


def hc_head_mean(x: Tensor, config: Config, norm_weight: Optional[Tensor] = None) -> Tensor:
    """GLM-5-Next head: bf16 mean over the streams."""
    r, lead = _tokens(x, 2)
    return _restore(_mt.head(r, config=config, kind="mean", rmsnorm_weight=norm_weight), lead)


__all__ = [
    "HcBlock", "load_block", "load_head", "hc_pre", "hc_pre_shifted", "hc_pre_first", "hc_pre_first_shifted",
    "hc_post", "hc_post_pre", "hc_post_pre_shifted", "hc_head", "hc_head_carried", "hc_head_mean",
]
