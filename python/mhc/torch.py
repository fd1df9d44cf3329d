"""PyTorch integration: the mHC operators as torch custom operators (``torch.ops.mhc.*``).

Every operator is registered with ``torch.library.custom_op`` (functional: it allocates and
returns its outputs) and a fake implementation, so it works under ``torch.compile(fullgraph=True)``,
inside CUDA-graph capture and replay, and passes ``torch.library.opcheck``. Inference only: no
autograd formulas are registered.

Two things are created explicitly, before the first call (and before any capture):

* weights: ``w = mhc.torch.prepare(fn, scale, base, config=cfg, device="cuda:0")`` (or
  ``prepare_head``) once at load time. The returned ``Weights`` object owns the prepared copies;
  the operators receive its integer ``handle`` (custom-op schemas cannot carry opaque objects).
  Keep the Weights object alive as long as the model; a handle whose Weights was garbage
  collected fails closed.
* workspaces: ``mhc.torch.init("cuda:0", max_tokens)`` creates the device's workspace
  (synchronously) and registers it. CUDA calls look it up and never allocate one lazily; a CUDA
  call on a device without one raises mhc.MhcError. CPU calls need none.

CUDA calls run on torch's current stream of the tensors' device. One workspace serves one stream
at a time: the usual single-stream forward (eager, compiled or graph-captured) is fine; for
concurrent streams on one device create more workspaces with mhc.Workspace.create and use
mhc.ops directly with ``workspace=``.
"""

import functools
import itertools
import weakref
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from mhc import _mhc
from mhc import ops as _ops
from mhc._arrays import mhc_error
from mhc._config import Config
from mhc.ops import Mixes, Pre, PreBroadcast, PostPre

Workspace = _mhc.Workspace

# ---- devices and workspaces --------------------------------------------------------------------

_workspaces: Dict[int, "Workspace"] = {}


def _device(device) -> torch.device:
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    if d.type not in ("cpu", "cuda"):
        raise mhc_error(f"device: expected a cpu or cuda device, got {d}")
    return d


def init(device, max_tokens: int, max_n: int = 8) -> Optional["Workspace"]:
    """Creates and registers the workspace of ``device`` for calls of up to ``max_tokens`` tokens.

    Call once per CUDA device before the first operator call, outside any CUDA-graph capture
    (it allocates and synchronises). Calling again replaces the workspace (e.g. to grow
    max_tokens); graphs captured with the old one keep referencing its memory, so recapture.
    Returns the workspace (None for a CPU device, which needs none).
    """
    d = _device(device)
    if d.type == "cpu":
        return None
    ws = _mhc.Workspace.create(f"cuda:{d.index}", int(max_tokens), int(max_n))
    _workspaces[d.index] = ws
    _ops.set_default_workspace(ws)
    return ws


def workspace(device) -> Optional["Workspace"]:
    """The workspace registered by init() for ``device``, or None."""
    d = _device(device)
    return _workspaces.get(d.index) if d.type == "cuda" else None


# ---- weights -----------------------------------------------------------------------------------

_registry: "weakref.WeakValueDictionary[int, Weights]" = weakref.WeakValueDictionary()
_handles = itertools.count(1)


class Weights:
    """Prepared weights for the torch operators: ``prepared`` (mhc.PreparedWeights) and ``handle``
    (the int the operators receive). Create with mhc.torch.prepare / prepare_head."""

    def __init__(self, prepared):
        if not isinstance(prepared, _mhc.PreparedWeights):
            raise mhc_error(f"Weights: expected an mhc.PreparedWeights, got {type(prepared).__name__}")
        self.prepared = prepared
        self.handle = next(_handles)
        _registry[self.handle] = self

    @property
    def device(self) -> torch.device:
        return torch.device(self.prepared.device)

    def __repr__(self):
        return f"mhc.torch.Weights(handle={self.handle}, {self.prepared!r})"


def _target(device, fn):
    if device is None:
        device = fn.device if isinstance(fn, Tensor) else "cpu"
    return str(_device(device))


def prepare(fn, scale, base, *, config: Optional[Config] = None, n: Optional[int] = None,
            H: Optional[int] = None, device=None) -> Weights:
    """Prepares one mix block (hc_attn_* / hc_ffn_*) for ``device`` (default: fn's device)."""
    return Weights(_ops.prepare(fn, scale, base, config=config, n=n, H=H, device=_target(device, fn)))


def prepare_head(fn, scale, base, *, config: Optional[Config] = None, n: Optional[int] = None,
                 H: Optional[int] = None, device=None) -> Weights:
    """Prepares the learned head (hc_head_fn / hc_head_scale / hc_head_base) for ``device``."""
    return Weights(_ops.prepare_head(fn, scale, base, config=config, n=n, H=H, device=_target(device, fn)))


def _lookup(handle: int, op: str):
    if handle < 0:
        return None
    w = _registry.get(handle)
    if w is None:
        raise mhc_error(f"{op}: weights: handle {handle} does not name live mhc.torch.Weights "
                        f"(keep the object returned by mhc.torch.prepare alive)")
    return w.prepared


# ---- running a call ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def _config(n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps) -> Config:
    return Config(n=n, H=H, norm_eps=norm_eps, pre_eps=pre_eps, sinkhorn_eps=sinkhorn_eps,
                  sinkhorn_iters=sinkhorn_iters, post_scale=post_scale, rmsnorm_eps=rmsnorm_eps)


def _run(fn, primary: Tensor, op: str, **kwargs):
    dev = primary.device
    if dev.type != "cuda":
        return fn(**kwargs)
    ws = _workspaces.get(dev.index)
    if ws is None:
        raise mhc_error(f"{op}: no mhc workspace for {dev}: call mhc.torch.init('{dev}', max_tokens) once "
                        f"before the first call (and before any CUDA-graph capture)")
    stream = torch.cuda.current_stream(dev).cuda_stream
    if torch.cuda.current_device() == dev.index:
        return fn(stream=stream, workspace=ws, **kwargs)
    with torch.cuda.device(dev.index):
        return fn(stream=stream, workspace=ws, **kwargs)


def _bf16(shape, like: Tensor) -> Tensor:
    return torch.empty(shape, dtype=torch.bfloat16, device=like.device)


def _f32(shape, like: Tensor) -> Tensor:
    return torch.empty(shape, dtype=torch.float32, device=like.device)


# ---- custom operators --------------------------------------------------------------------------
# Schemas carry the Config as scalars (n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters,
# post_scale, rmsnorm_eps) and weights as the Weights handle (-1: none). Outputs are fresh,
# contiguous tensors; the fake implementations allocate the same shapes.

def _mixes_out(residual, n):
    T = residual.shape[0]
    return _f32((T, n), residual), _f32((T, n), residual), _f32((T, n, n), residual)


@torch.library.custom_op("mhc::mixes", mutates_args=())
def _mixes_op(residual: Tensor, weights: int, n: int, H: int, norm_eps: float, pre_eps: float,
              sinkhorn_eps: float, sinkhorn_iters: int, post_scale: float,
              rmsnorm_eps: float) -> Tuple[Tensor, Tensor, Tensor]:
    cfg = _config(n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps)
    pre_mix, post_mix, comb_mix = _mixes_out(residual, n)
    _run(_ops.mixes, residual, "mixes", residual=residual, weights=_lookup(weights, "mixes"), config=cfg,
         pre_mix=pre_mix, post_mix=post_mix, comb_mix=comb_mix)
    return pre_mix, post_mix, comb_mix


@_mixes_op.register_fake
def _(residual, weights, n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps):
    return _mixes_out(residual, n)


@torch.library.custom_op("mhc::collapse", mutates_args=())
def _collapse_op(residual: Tensor, pre_mix: Optional[Tensor], rmsnorm_weight: Optional[Tensor], pre_source: str,
                 n: int, H: int, norm_eps: float, pre_eps: float, sinkhorn_eps: float, sinkhorn_iters: int,
                 post_scale: float, rmsnorm_eps: float) -> Tensor:
    cfg = _config(n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps)
    out = _bf16((residual.shape[0], H), residual)
    _run(_ops.collapse, residual, "collapse", residual=residual, pre_mix=pre_mix, config=cfg, pre_source=pre_source,
         rmsnorm_weight=rmsnorm_weight, layer_input=out)
    return out


@_collapse_op.register_fake
def _(residual, pre_mix, rmsnorm_weight, pre_source, n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters,
      post_scale, rmsnorm_eps):
    return _bf16((residual.shape[0], H), residual)


def _pre_out(x, n, H):
    T = x.shape[0]
    return _bf16((T, H), x), _f32((T, n), x), _f32((T, n, n), x), _f32((T, n), x)


@torch.library.custom_op("mhc::pre", mutates_args=())
def _pre_op(residual: Tensor, weights: int, pre_mix_in: Optional[Tensor], rmsnorm_weight: Optional[Tensor],
            pre_source: str, n: int, H: int, norm_eps: float, pre_eps: float, sinkhorn_eps: float,
            sinkhorn_iters: int, post_scale: float, rmsnorm_eps: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    cfg = _config(n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps)
    layer_input, post_mix, comb_mix, pre_mix_out = _pre_out(residual, n, H)
    _run(_ops.pre, residual, "pre", residual=residual, weights=_lookup(weights, "pre"), config=cfg,
         pre_source=pre_source, pre_mix_in=pre_mix_in, rmsnorm_weight=rmsnorm_weight, layer_input=layer_input,
         post_mix=post_mix, comb_mix=comb_mix, pre_mix_out=pre_mix_out)
    return layer_input, post_mix, comb_mix, pre_mix_out


@_pre_op.register_fake
def _(residual, weights, pre_mix_in, rmsnorm_weight, pre_source, n, H, norm_eps, pre_eps, sinkhorn_eps,
      sinkhorn_iters, post_scale, rmsnorm_eps):
    return _pre_out(residual, n, H)


def _pre_broadcast_out(embedding, n, H, materialize):
    T = embedding.shape[0]
    residual_out = _bf16((T, n, H) if materialize else (0, n, H), embedding)
    return _pre_out(embedding, n, H) + (residual_out,)


@torch.library.custom_op("mhc::pre_broadcast", mutates_args=())
def _pre_broadcast_op(embedding: Tensor, weights: int, pre_mix_in: Optional[Tensor],
                      rmsnorm_weight: Optional[Tensor], pre_source: str, materialize_residual: bool, n: int, H: int,
                      norm_eps: float, pre_eps: float, sinkhorn_eps: float, sinkhorn_iters: int, post_scale: float,
                      rmsnorm_eps: float) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    cfg = _config(n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps)
    outs = _pre_broadcast_out(embedding, n, H, materialize_residual)
    layer_input, post_mix, comb_mix, pre_mix_out, residual_out = outs
    _run(_ops.pre_broadcast, embedding, "pre_broadcast", embedding=embedding,
         weights=_lookup(weights, "pre_broadcast"), config=cfg, pre_source=pre_source, pre_mix_in=pre_mix_in,
         rmsnorm_weight=rmsnorm_weight, layer_input=layer_input, post_mix=post_mix, comb_mix=comb_mix,
         pre_mix_out=pre_mix_out, residual_out=residual_out if materialize_residual else None)
    return outs


@_pre_broadcast_op.register_fake
def _(embedding, weights, pre_mix_in, rmsnorm_weight, pre_source, materialize_residual, n, H, norm_eps, pre_eps,
      sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps):
    return _pre_broadcast_out(embedding, n, H, materialize_residual)


@torch.library.custom_op("mhc::post", mutates_args=())
def _post_op(layer_output: Tensor, residual: Tensor, post_mix: Tensor, comb_mix: Tensor, n: int, H: int,
             norm_eps: float, pre_eps: float, sinkhorn_eps: float, sinkhorn_iters: int, post_scale: float,
             rmsnorm_eps: float) -> Tensor:
    cfg = _config(n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps)
    out = _bf16((layer_output.shape[0], n, H), layer_output)
    _run(_ops.post, layer_output, "post", layer_output=layer_output, residual=residual, post_mix=post_mix,
         comb_mix=comb_mix, config=cfg, residual_out=out)
    return out


@_post_op.register_fake
def _(layer_output, residual, post_mix, comb_mix, n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters,
      post_scale, rmsnorm_eps):
    return _bf16((layer_output.shape[0], n, H), layer_output)


def _post_pre_out(layer_output, n, H):
    T = layer_output.shape[0]
    return (_bf16((T, n, H), layer_output), _bf16((T, H), layer_output), _f32((T, n), layer_output),
            _f32((T, n, n), layer_output), _f32((T, n), layer_output))


@torch.library.custom_op("mhc::post_pre", mutates_args=())
def _post_pre_op(layer_output: Tensor, residual: Tensor, post_mix: Tensor, comb_mix: Tensor, weights: int,
                 pre_mix_in: Optional[Tensor], rmsnorm_weight: Optional[Tensor], pre_source: str, n: int, H: int,
                 norm_eps: float, pre_eps: float, sinkhorn_eps: float, sinkhorn_iters: int, post_scale: float,
                 rmsnorm_eps: float) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    cfg = _config(n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps)
    outs = _post_pre_out(layer_output, n, H)
    residual_out, layer_input, post_mix_out, comb_mix_out, pre_mix_out = outs
    _run(_ops.post_pre, layer_output, "post_pre", layer_output=layer_output, residual=residual, post_mix=post_mix,
         comb_mix=comb_mix, weights=_lookup(weights, "post_pre"), config=cfg, pre_source=pre_source,
         pre_mix_in=pre_mix_in, rmsnorm_weight=rmsnorm_weight, residual_out=residual_out, layer_input=layer_input,
         post_mix_out=post_mix_out, comb_mix_out=comb_mix_out, pre_mix_out=pre_mix_out)
    return outs


@_post_pre_op.register_fake
def _(layer_output, residual, post_mix, comb_mix, weights, pre_mix_in, rmsnorm_weight, pre_source, n, H,
      norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps):
    return _post_pre_out(layer_output, n, H)


@torch.library.custom_op("mhc::head", mutates_args=())
def _head_op(residual: Tensor, weights: int, pre_mix_in: Optional[Tensor], rmsnorm_weight: Optional[Tensor],
             kind: str, n: int, H: int, norm_eps: float, pre_eps: float, sinkhorn_eps: float, sinkhorn_iters: int,
             post_scale: float, rmsnorm_eps: float) -> Tensor:
    cfg = _config(n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps)
    out = _bf16((residual.shape[0], H), residual)
    _run(_ops.head, residual, "head", residual=residual, config=cfg, kind=kind, weights=_lookup(weights, "head"),
         pre_mix_in=pre_mix_in, rmsnorm_weight=rmsnorm_weight, output=out)
    return out


@_head_op.register_fake
def _(residual, weights, pre_mix_in, rmsnorm_weight, kind, n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters,
      post_scale, rmsnorm_eps):
    return _bf16((residual.shape[0], H), residual)


#: The registered operators (torch.ops.mhc.<name>), e.g. for torch.library.opcheck.
OPERATORS: List[str] = ["mixes", "collapse", "pre", "pre_broadcast", "post", "post_pre", "head"]


# ---- the Python API over the operators ---------------------------------------------------------

def _scalars(config: Config):
    return (config.n, config.H, config.norm_eps, config.pre_eps, config.sinkhorn_eps, config.sinkhorn_iters,
            config.post_scale, config.rmsnorm_eps)


# Valid placeholders for the scalars post does not use (norm_eps .. rmsnorm_eps).
_POST_ONLY_SCALARS = (1e-6, 1e-6, 1e-6, 20, 2.0, 1e-6)


def _handle(weights) -> int:
    return -1 if weights is None else weights.handle


def mixes(residual: Tensor, weights: Weights, *, config: Config) -> Mixes:
    """torch.ops.mhc.mixes: residual [T,n,H] bf16 -> Mixes(pre_mix, post_mix, comb_mix)."""
    return Mixes(*torch.ops.mhc.mixes(residual, _handle(weights), *_scalars(config)))


def collapse(residual: Tensor, pre_mix: Optional[Tensor] = None, *, config: Config, pre_source: str = "carried",
             rmsnorm_weight: Optional[Tensor] = None) -> Tensor:
    """torch.ops.mhc.collapse: residual [T,n,H], pre_mix [T,n] -> layer_input [T,H] bf16."""
    return torch.ops.mhc.collapse(residual, pre_mix, rmsnorm_weight, pre_source, *_scalars(config))


def pre(residual: Tensor, weights: Weights, *, config: Config, pre_source: str = "computed",
        pre_mix_in: Optional[Tensor] = None, rmsnorm_weight: Optional[Tensor] = None) -> Pre:
    """torch.ops.mhc.pre -> Pre(layer_input, post_mix, comb_mix, pre_mix_out); pre_mix_out is the
    fresh pre (always returned)."""
    return Pre(*torch.ops.mhc.pre(residual, _handle(weights), pre_mix_in, rmsnorm_weight, pre_source,
                                  *_scalars(config)))


def pre_broadcast(embedding: Tensor, weights: Weights, *, config: Config, pre_source: str = "computed",
                  pre_mix_in: Optional[Tensor] = None, rmsnorm_weight: Optional[Tensor] = None,
                  materialize_residual: bool = False) -> PreBroadcast:
    """torch.ops.mhc.pre_broadcast (first layer) -> PreBroadcast(layer_input, post_mix, comb_mix,
    pre_mix_out, residual_out); residual_out is [T,n,H] when materialize_residual, else None (use
    the embedding itself as the broadcast-form residual of the next post)."""
    li, pm, cm, pmo, ro = torch.ops.mhc.pre_broadcast(embedding, _handle(weights), pre_mix_in, rmsnorm_weight,
                                                      pre_source, materialize_residual, *_scalars(config))
    return PreBroadcast(li, pm, cm, pmo, ro if materialize_residual else None)


def post(layer_output: Tensor, residual: Tensor, post_mix: Tensor, comb_mix: Tensor, *,
         config: Optional[Config] = None) -> Tensor:
    """torch.ops.mhc.post -> residual_out [T,n,H] bf16 (residual may be the [T,H] broadcast form).

    post uses no eps: without ``config``, n and H are read from post_mix and layer_output."""
    if config is None:
        scalars = (post_mix.shape[-1], layer_output.shape[-1]) + _POST_ONLY_SCALARS
    else:
        scalars = _scalars(config)
    return torch.ops.mhc.post(layer_output, residual, post_mix, comb_mix, *scalars)


def post_pre(layer_output: Tensor, residual: Tensor, post_mix: Tensor, comb_mix: Tensor, weights: Weights, *,
             config: Config, pre_source: str = "computed", pre_mix_in: Optional[Tensor] = None,
             rmsnorm_weight: Optional[Tensor] = None) -> PostPre:
    """torch.ops.mhc.post_pre -> PostPre(residual_out, layer_input, post_mix_out, comb_mix_out, pre_mix_out)."""
    return PostPre(*torch.ops.mhc.post_pre(layer_output, residual, post_mix, comb_mix, _handle(weights), pre_mix_in,
                                           rmsnorm_weight, pre_source, *_scalars(config)))


def head(residual: Tensor, *, config: Config, kind: str = "learned", weights: Optional[Weights] = None,
         pre_mix_in: Optional[Tensor] = None, rmsnorm_weight: Optional[Tensor] = None) -> Tensor:
    """torch.ops.mhc.head -> output [T,H] bf16 (kind learned / carried / mean)."""
    return torch.ops.mhc.head(residual, _handle(weights), pre_mix_in, rmsnorm_weight, kind, *_scalars(config))
