"""The mHC operators on any array (spec section 4): numpy, torch, CuPy, JAX, ... (DLPack).

Every operator takes its inputs by the spec's names, ``config=`` (an mhc.Config), and its
outputs as keyword arguments with the spec's names (destination passing: the arrays are written
in place and returned). An output left out is allocated like the primary input (numpy arrays
for numpy input, torch tensors for torch input); other frameworks must pass every output.
Optional outputs (``pre_mix_out``, pre_broadcast's ``residual_out``) are produced only when
given an array, or ``True`` to have them allocated.

Execution keywords, on every operator:
  stream     CUDA stream: int (cudaStream_t), torch.cuda.Stream or CuPy stream. Default: torch's
             current stream for torch CUDA tensors, else 0 (the legacy default stream).
  workspace  mhc.Workspace for CUDA calls. Default: the one registered for the device with
             mhc.set_default_workspace (mhc.torch.init registers one). CPU calls need none.
  variant    force a variant id, e.g. "post_pre.cpu_ref" (see mhc.list_variants()).

Nothing is written when validation fails; errors are mhc.MhcError naming the tensor.
"""

from typing import Dict, NamedTuple, Optional, Tuple

from mhc import _mhc
from mhc._arrays import (DEVICE_CUDA, Allocator, device_of, device_string, leading, mhc_error,
                         native, parse_device, stream_handle)
from mhc._config import Config

_default_workspaces: Dict[Tuple[int, int], object] = {}


def set_default_workspace(workspace) -> None:
    """Registers ``workspace`` (mhc.Workspace.create(...)) as the default for its device.

    Operators on that device use it when called without ``workspace=``. One workspace serves one
    stream at a time; create one per stream for concurrent streams and pass it explicitly.
    """
    if not isinstance(workspace, _mhc.Workspace):
        raise mhc_error(f"set_default_workspace: expected an mhc.Workspace, got {type(workspace).__name__}")
    _default_workspaces[parse_device(workspace.device)] = workspace


def default_workspace(device):
    """The workspace registered for ``device`` ('cuda:0', torch.device, ...), or None."""
    return _default_workspaces.get(parse_device(device))


def clear_default_workspaces() -> None:
    """Forgets every registered default workspace (they are freed once nothing else holds them)."""
    _default_workspaces.clear()


def _config(config, op):
    if not isinstance(config, Config):
        raise mhc_error(f"{op}: config: expected an mhc.Config (e.g. mhc.model_preset(name).config), "
                       f"got {type(config).__name__}")
    return config._native


def _weights(weights, op, name="weights"):
    if weights is None or isinstance(weights, _mhc.PreparedWeights):
        return weights
    prepared = getattr(weights, "prepared", None)  # mhc.torch.Weights and engine blocks wrap one
    if isinstance(prepared, _mhc.PreparedWeights):
        return prepared
    raise mhc_error(f"{op}: {name}: expected prepared weights (mhc.prepare / mhc.prepare_head), "
                   f"got {type(weights).__name__}")


def _exec(primary, stream, workspace, op):
    s = stream_handle(stream, primary)
    if workspace is None:
        dev = device_of(primary)
        if dev[0] == DEVICE_CUDA:
            workspace = _default_workspaces.get(dev)
    elif not isinstance(workspace, _mhc.Workspace):
        raise mhc_error(f"{op}: workspace: expected an mhc.Workspace, got {type(workspace).__name__}")
    return s, workspace


def _optional_out(value, allocate):
    if value is None or value is False:
        return None
    if value is True:
        return allocate()
    return value


class Mixes(NamedTuple):
    pre_mix: object   #: [T,n] fp32
    post_mix: object  #: [T,n] fp32
    comb_mix: object  #: [T,n,n] fp32, [source j, destination k]


class Pre(NamedTuple):
    layer_input: object  #: [T,H] bf16
    post_mix: object     #: [T,n] fp32
    comb_mix: object     #: [T,n,n] fp32
    pre_mix_out: object  #: [T,n] fp32 or None


class PreBroadcast(NamedTuple):
    layer_input: object   #: [T,H] bf16
    post_mix: object      #: [T,n] fp32
    comb_mix: object      #: [T,n,n] fp32
    pre_mix_out: object   #: [T,n] fp32 or None
    residual_out: object  #: [T,n,H] bf16 or None


class PostPre(NamedTuple):
    residual_out: object  #: [T,n,H] bf16
    layer_input: object   #: [T,H] bf16
    post_mix_out: object  #: [T,n] fp32
    comb_mix_out: object  #: [T,n,n] fp32
    pre_mix_out: object   #: [T,n] fp32 or None


def mixes(residual, weights, *, config, pre_mix=None, post_mix=None, comb_mix=None,
          stream=None, workspace=None, variant=None) -> Mixes:
    """mixes: residual [T,n,H] bf16 -> pre_mix [T,n], post_mix [T,n], comb_mix [T,n,n] (fp32)."""
    op = "mixes"
    cfg = _config(config, op)
    T, n = leading(residual, op, "residual"), config.n
    alloc = Allocator(residual, op)
    pre_mix = pre_mix if pre_mix is not None else alloc.f32((T, n), "pre_mix")
    post_mix = post_mix if post_mix is not None else alloc.f32((T, n), "post_mix")
    comb_mix = comb_mix if comb_mix is not None else alloc.f32((T, n, n), "comb_mix")
    s, ws = _exec(residual, stream, workspace, op)
    _mhc.mixes(config=cfg, residual=native(residual, op, "residual"), weights=_weights(weights, op),
               pre_mix=native(pre_mix, op, "pre_mix"), post_mix=native(post_mix, op, "post_mix"),
               comb_mix=native(comb_mix, op, "comb_mix"), stream=s, workspace=ws, variant=variant)
    return Mixes(pre_mix, post_mix, comb_mix)


def collapse(residual, pre_mix=None, *, config, pre_source="carried", rmsnorm_weight=None, layer_input=None,
             stream=None, workspace=None, variant=None):
    """collapse: residual [T,n,H], pre_mix [T,n] -> layer_input [T,H] bf16 (returned).

    pre_source "carried" weights the streams by ``pre_mix``; "identity" selects stream 0 bit for
    bit. ``rmsnorm_weight`` [H] bf16 folds the sublayer's RMSNorm.
    """
    op = "collapse"
    cfg = _config(config, op)
    T = leading(residual, op, "residual")
    if layer_input is None:
        layer_input = Allocator(residual, op).bf16((T, config.H), "layer_input")
    s, ws = _exec(residual, stream, workspace, op)
    _mhc.collapse(config=cfg, pre_source=pre_source, residual=native(residual, op, "residual"),
                  pre_mix=native(pre_mix, op, "pre_mix"),
                  rmsnorm_weight=native(rmsnorm_weight, op, "rmsnorm_weight"),
                  layer_input=native(layer_input, op, "layer_input"), stream=s, workspace=ws, variant=variant)
    return layer_input


def pre(residual, weights, *, config, pre_source="computed", pre_mix_in=None, rmsnorm_weight=None,
        layer_input=None, post_mix=None, comb_mix=None, pre_mix_out=None,
        stream=None, workspace=None, variant=None, _select=False) -> Pre:
    """pre = mixes + collapse: residual [T,n,H] -> layer_input [T,H], post_mix, comb_mix [, pre_mix_out].

    pre_source: "computed" (normal mode: collapse with the fresh pre), "carried" (shifted mode:
    collapse with ``pre_mix_in``) or "identity" (stream 0). ``pre_mix_out`` receives the fresh pre.
    """
    op = "pre"
    cfg = _config(config, op)
    T, n, H = leading(residual, op, "residual"), config.n, config.H
    alloc = Allocator(residual, op)
    layer_input = layer_input if layer_input is not None else alloc.bf16((T, H), "layer_input")
    post_mix = post_mix if post_mix is not None else alloc.f32((T, n), "post_mix")
    comb_mix = comb_mix if comb_mix is not None else alloc.f32((T, n, n), "comb_mix")
    pre_mix_out = _optional_out(pre_mix_out, lambda: alloc.f32((T, n), "pre_mix_out"))
    s, ws = _exec(residual, stream, workspace, op)
    picked = _mhc.pre(config=cfg, pre_source=pre_source, residual=native(residual, op, "residual"),
                      weights=_weights(weights, op), pre_mix_in=native(pre_mix_in, op, "pre_mix_in"),
                      rmsnorm_weight=native(rmsnorm_weight, op, "rmsnorm_weight"),
                      layer_input=native(layer_input, op, "layer_input"), post_mix=native(post_mix, op, "post_mix"),
                      comb_mix=native(comb_mix, op, "comb_mix"), pre_mix_out=native(pre_mix_out, op, "pre_mix_out"),
                      stream=s, workspace=ws, variant=variant, select_only=_select)
    return picked if _select else Pre(layer_input, post_mix, comb_mix, pre_mix_out)


def pre_broadcast(embedding, weights, *, config, pre_source="computed", pre_mix_in=None, rmsnorm_weight=None,
                  layer_input=None, post_mix=None, comb_mix=None, pre_mix_out=None, residual_out=None,
                  stream=None, workspace=None, variant=None, _select=False) -> PreBroadcast:
    """First-layer pre: embedding [T,H] stands for n identical streams (never materialised unless
    ``residual_out`` [T,n,H] is requested). Same outputs as ``pre``. V4.1 uses pre_source="identity"."""
    op = "pre_broadcast"
    cfg = _config(config, op)
    T, n, H = leading(embedding, op, "embedding"), config.n, config.H
    alloc = Allocator(embedding, op)
    layer_input = layer_input if layer_input is not None else alloc.bf16((T, H), "layer_input")
    post_mix = post_mix if post_mix is not None else alloc.f32((T, n), "post_mix")
    comb_mix = comb_mix if comb_mix is not None else alloc.f32((T, n, n), "comb_mix")
    pre_mix_out = _optional_out(pre_mix_out, lambda: alloc.f32((T, n), "pre_mix_out"))
    residual_out = _optional_out(residual_out, lambda: alloc.bf16((T, n, H), "residual_out"))
    s, ws = _exec(embedding, stream, workspace, op)
    picked = _mhc.pre_broadcast(
        config=cfg, pre_source=pre_source, embedding=native(embedding, op, "embedding"),
        weights=_weights(weights, op), pre_mix_in=native(pre_mix_in, op, "pre_mix_in"),
        rmsnorm_weight=native(rmsnorm_weight, op, "rmsnorm_weight"),
        layer_input=native(layer_input, op, "layer_input"), post_mix=native(post_mix, op, "post_mix"),
        comb_mix=native(comb_mix, op, "comb_mix"), pre_mix_out=native(pre_mix_out, op, "pre_mix_out"),
        residual_out=native(residual_out, op, "residual_out"), stream=s, workspace=ws, variant=variant,
        select_only=_select)
    return picked if _select else PreBroadcast(layer_input, post_mix, comb_mix, pre_mix_out, residual_out)


def post(layer_output, residual, post_mix, comb_mix, *, config, residual_out=None,
         stream=None, workspace=None, variant=None, _select=False):
    """post: residual_out[k] = bf16(post_mix[k]*layer_output + sum_j comb_mix[j,k]*residual[j]).

    ``residual`` is [T,n,H], or the first layer's embedding [T,H] (broadcast form). Returns
    residual_out [T,n,H] bf16.
    """
    op = "post"
    cfg = _config(config, op)
    T = leading(layer_output, op, "layer_output")
    if residual_out is None:
        residual_out = Allocator(layer_output, op).bf16((T, config.n, config.H), "residual_out")
    s, ws = _exec(layer_output, stream, workspace, op)
    picked = _mhc.post(config=cfg, layer_output=native(layer_output, op, "layer_output"),
                       residual=native(residual, op, "residual"), post_mix=native(post_mix, op, "post_mix"),
                       comb_mix=native(comb_mix, op, "comb_mix"), residual_out=native(residual_out, op, "residual_out"),
                       stream=s, workspace=ws, variant=variant, select_only=_select)
    return picked if _select else residual_out


def post_pre(layer_output, residual, post_mix, comb_mix, weights, *, config, pre_source="computed",
             pre_mix_in=None, rmsnorm_weight=None, residual_out=None, layer_input=None, post_mix_out=None,
             comb_mix_out=None, pre_mix_out=None, stream=None, workspace=None, variant=None,
             _select=False) -> PostPre:
    """The sublayer boundary: post of sublayer k-1, then pre of sublayer k, in one call.

    pre_source "computed" (normal: V4, GLM-5-Next) or "carried" (shifted: V4.1, collapse with
    ``pre_mix_in``; request ``pre_mix_out`` for the next boundary). The mixes of sublayer k are
    computed from the bf16-rounded residual_out, exactly as ``post`` then ``pre``.
    """
    op = "post_pre"
    cfg = _config(config, op)
    T, n, H = leading(layer_output, op, "layer_output"), config.n, config.H
    alloc = Allocator(layer_output, op)
    residual_out = residual_out if residual_out is not None else alloc.bf16((T, n, H), "residual_out")
    layer_input = layer_input if layer_input is not None else alloc.bf16((T, H), "layer_input")
    post_mix_out = post_mix_out if post_mix_out is not None else alloc.f32((T, n), "post_mix_out")
    comb_mix_out = comb_mix_out if comb_mix_out is not None else alloc.f32((T, n, n), "comb_mix_out")
    pre_mix_out = _optional_out(pre_mix_out, lambda: alloc.f32((T, n), "pre_mix_out"))
    s, ws = _exec(layer_output, stream, workspace, op)
    picked = _mhc.post_pre(
        config=cfg, pre_source=pre_source, layer_output=native(layer_output, op, "layer_output"),
        residual=native(residual, op, "residual"), post_mix=native(post_mix, op, "post_mix"),
        comb_mix=native(comb_mix, op, "comb_mix"), weights=_weights(weights, op),
        pre_mix_in=native(pre_mix_in, op, "pre_mix_in"), rmsnorm_weight=native(rmsnorm_weight, op, "rmsnorm_weight"),
        residual_out=native(residual_out, op, "residual_out"), layer_input=native(layer_input, op, "layer_input"),
        post_mix_out=native(post_mix_out, op, "post_mix_out"), comb_mix_out=native(comb_mix_out, op, "comb_mix_out"),
        pre_mix_out=native(pre_mix_out, op, "pre_mix_out"), stream=s, workspace=ws, variant=variant,
        select_only=_select)
    return picked if _select else PostPre(residual_out, layer_input, post_mix_out, comb_mix_out, pre_mix_out)


def head(residual, *, config, kind="learned", weights=None, pre_mix_in=None, rmsnorm_weight=None, output=None,
         stream=None, workspace=None, variant=None, _select=False):
    """head (after the last post): residual [T,n,H] -> output [T,H] bf16 (returned).

    kind "learned" (V4: ``weights`` from mhc.prepare_head), "carried" (V4.1: collapse with
    ``pre_mix_in``, the last FFN boundary's pre) or "mean" (GLM-5-Next). ``rmsnorm_weight`` folds
    the final norm.
    """
    op = "head"
    cfg = _config(config, op)
    T = leading(residual, op, "residual")
    if output is None:
        output = Allocator(residual, op).bf16((T, config.H), "output")
    s, ws = _exec(residual, stream, workspace, op)
    picked = _mhc.head(config=cfg, kind=kind, residual=native(residual, op, "residual"),
                       weights=_weights(weights, op), pre_mix_in=native(pre_mix_in, op, "pre_mix_in"),
                       rmsnorm_weight=native(rmsnorm_weight, op, "rmsnorm_weight"),
                       output=native(output, op, "output"), stream=s, workspace=ws, variant=variant,
                       select_only=_select)
    return picked if _select else output


_SELECTABLE = {"pre": pre, "pre_broadcast": pre_broadcast, "post": post, "post_pre": post_pre, "head": head}


def selected_variant(op: str, *args, **kwargs) -> str:
    """The variant id the dispatcher would pick for ``op`` called with these arguments (validated,
    not run). ``op`` is one of pre, pre_broadcast, post, post_pre, head."""
    fn = _SELECTABLE.get(op)
    if fn is None:
        raise mhc_error(f"selected_variant: op: expected one of {', '.join(_SELECTABLE)}, got '{op}'")
    return fn(*args, _select=True, **kwargs)


# ---- weights, workspace, introspection ---------------------------------------------------------

def _host(x):
    """Checkpoint tensors are read from host memory: torch tensors are detached and moved to CPU."""
    from mhc._arrays import is_torch

    if is_torch(x):
        return x.detach().cpu()
    return x


def _infer_mix_dims(fn, n, H):
    shape = getattr(fn, "shape", None)
    if (n is None or H is None) and shape is not None and len(shape) == 2:
        rows, K = int(shape[0]), int(shape[1])
        if n is None:
            n = next((c for c in range(1, 9) if (c + 2) * c == rows), None)
        if H is None and n:
            H = K // n if K % n == 0 else None
    if n is None or H is None:
        raise mhc_error(f"prepare: fn: cannot infer n and H from shape {tuple(shape) if shape else shape}; "
                       f"expected [(n+2)*n, n*H] or pass n= and H=")
    return n, H


def _check_dims(op, n, H):
    """n and H as ints in range; mhc.MhcError otherwise (the native call would raise TypeError for
    values beyond int32 / int64)."""
    n, H = int(n), int(H)
    if not 1 <= n <= _mhc.MAX_STREAMS:
        raise mhc_error(f"{op}: n must be in 1..{_mhc.MAX_STREAMS}, got {n}")
    if not 1 <= H <= _mhc.MAX_HIDDEN:
        raise mhc_error(f"{op}: H must be in 1..{_mhc.MAX_HIDDEN} (mhc::kMaxHidden), got {H}")
    return n, H


def prepare(fn, scale, base, *, n: Optional[int] = None, H: Optional[int] = None, config: Optional[Config] = None,
            device="cpu", out=None):
    """Prepares one mix block (hc_attn_* or hc_ffn_*) for ``device``, once, at load time.

    fn [M,K], scale [3], base [M] are fp32 (numpy or torch, any device: they are read from host
    memory). n and H come from ``config``, from n=/H=, or are inferred from fn's shape.
    Returns an opaque mhc.PreparedWeights. With ``out`` (an array or tensor the caller owns: any
    dtype, contiguous, 16-byte aligned, ``prepared_bytes(...)`` long, on the CPU or a CUDA device)
    the prepared copies go there and the weights read them from there (``device`` is out's).
    """
    if config is not None:
        n, H = config.n, config.H
    n, H = _infer_mix_dims(fn, n, H)
    n, H = _check_dims("prepare", n, H)
    return _mhc.prepare(native(_host(fn), "prepare", "fn"), native(_host(scale), "prepare", "scale"),
                        native(_host(base), "prepare", "base"), n=n, H=H,
                        device=device_string(parse_device(device)), out=native(out, "prepare", "out"))


def prepared_bytes(*, n: Optional[int] = None, H: Optional[int] = None, config: Optional[Config] = None,
                   head: bool = False, device="cpu") -> int:
    """Bytes of the buffer prepare(..., out=) / prepare_head(..., out=) fill for ``device``."""
    if config is not None:
        n, H = config.n, config.H
    if n is None or H is None:
        raise mhc_error("prepared_bytes: pass config= or n= and H=")
    n, H = _check_dims("prepared_bytes", n, H)
    return int(_mhc.prepared_bytes(n, H, bool(head), device_string(parse_device(device))))


def attach_prepared(buffer, *, n: Optional[int] = None, H: Optional[int] = None, config: Optional[Config] = None,
                    head: bool = False):
    """mhc.PreparedWeights over ``buffer``, which prepare(..., out=) filled for the same n, H and
    head (e.g. loaded back from a checkpoint): nothing copied or computed."""
    if config is not None:
        n, H = config.n, config.H
    if n is None or H is None:
        raise mhc_error("attach_prepared: pass config= or n= and H=")
    n, H = _check_dims("attach_prepared", n, H)
    return _mhc.attach_prepared(native(buffer, "attach_prepared", "buffer"), n, H, bool(head))


def warmup(device):
    """Loads every CUDA kernel ``device`` can run (Workspace.create does it): (kernels, loaded, seconds)."""
    return _mhc.warmup(device_string(parse_device(device)))


def prepare_head(fn, scale, base, *, n: Optional[int] = None, H: Optional[int] = None,
                 config: Optional[Config] = None, device="cpu", out=None):
    """Prepares the learned head (hc_head_fn [n,K], hc_head_scale [1], hc_head_base [n]) for
    ``device`` (or into ``out``, as prepare)."""
    if config is not None:
        n, H = config.n, config.H
    shape = getattr(fn, "shape", None)
    if (n is None or H is None) and shape is not None and len(shape) == 2:
        n = int(shape[0]) if n is None else n
        H = int(shape[1]) // n if (H is None and n and int(shape[1]) % n == 0) else H
    if n is None or H is None:
        raise mhc_error(f"prepare_head: fn_head: cannot infer n and H from shape {shape}; pass n= and H=")
    n, H = _check_dims("prepare_head", n, H)
    return _mhc.prepare_head(native(_host(fn), "prepare_head", "fn_head"),
                             native(_host(scale), "prepare_head", "scale_head"),
                             native(_host(base), "prepare_head", "base_head"), n=n, H=H,
                             device=device_string(parse_device(device)), out=native(out, "prepare_head", "out"))


class Variant(NamedTuple):
    id: str        #: "<op>.<variant>"
    device: str    #: "cpu" or "cuda"
    envelope: str  #: what its supports() accepts, in words
    kernels: str   #: the plan: the kernels it runs, in order ("mix_kernel -> collapse_kernel")
    family: str    #: variants of one family give bit-identical outputs


def list_variants():
    """Every variant compiled into this build, in dispatch priority order."""
    return [Variant(*t) for t in _mhc.list_variants()]


def cuda_available() -> bool:
    """True when this build has the CUDA backend and a CUDA device is visible."""
    return bool(_mhc.cuda_available())
