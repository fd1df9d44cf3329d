"""PyTorch integration: the mHC operators as torch custom operators (``torch.ops.mhc.*``).

Each operator comes in two forms with one schema family (``OPERATORS``):

* functional, ``torch.ops.mhc.<op>``: allocates and returns its outputs;
* destination passing, ``torch.ops.mhc.<op>_out``: writes outputs the caller gives (mutable
  arguments ``Tensor(a!)``) and returns nothing: the engine's form, no allocation per call.

Both have fake implementations, so they work under ``torch.compile(fullgraph=True)``, inside
CUDA-graph capture and replay, and pass ``torch.library.opcheck``. Inference only: no autograd.
Where the package was built with its torch extension (``mhc/_mhc_torch*.so``, built against the
installed torch) the operators are registered from C++ (TORCH_LIBRARY: one call costs a few
microseconds of host time); otherwise, or with ``MHC_TORCH_OPS=python``, the same schemas are
registered in Python (``torch.library``). ``BACKEND`` says which.

Created explicitly, before the first call (and before any capture):

* weights: ``w = mhc.torch.prepare(fn, scale, base, config=cfg, device="cuda:0")`` (or
  ``prepare_head``) once at load time. The prepared copies live in a torch tensor,
  ``w.buffer`` (uint8, ``prepared_bytes`` long), which the operators receive: keep it as a
  buffer of your module (``register_buffer``) and it is counted, saved and loaded like any
  other; ``out=`` prepares into a tensor you allocated; ``Weights.from_buffer`` re-attaches a
  loaded buffer without preparing again.
* workspaces: ``mhc.torch.init("cuda:0", max_tokens)`` creates the device's default workspace
  (synchronously, loading every kernel: no first-call stall) and registers it;
  ``init(device, max_tokens, stream=s)`` creates one bound to stream ``s`` (for work on a side
  stream). A CUDA call uses the workspace registered for its stream (torch's current stream),
  else the device's default; a call on a device without one raises mhc.MhcError. CPU calls need
  none. One workspace serves one stream at a time: give every stream that runs mHC concurrently
  its own (docs/integration.md).
"""

import atexit
import os
import re
import sys
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from mhc import _mhc
from mhc import ops as _ops
from mhc._arrays import MhcError, mhc_error, native
from mhc._config import Config
from mhc.ops import Mixes, Pre, PreBroadcast, PostPre

Workspace = _mhc.Workspace

# ---- devices and workspaces --------------------------------------------------------------------

# (device index, stream or None) -> Workspace: what init() registered (mirrored in the native
# registry the C++ operators look up).
_workspaces: Dict[Tuple[int, Optional[int]], "Workspace"] = {}


def _device(device) -> torch.device:
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    if d.type not in ("cpu", "cuda"):
        raise mhc_error(f"device: expected a cpu or cuda device, got {d}")
    return d


def _stream_int(stream) -> Optional[int]:
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if handle is None:
        raise mhc_error(f"stream: expected a torch.cuda.Stream or an int, got {type(stream).__name__}")
    return int(handle)


def init(device, max_tokens: int, max_n: int = 8, *, stream=None, warmup: bool = True) -> Optional["Workspace"]:
    """Creates and registers a workspace of ``device`` for calls of up to ``max_tokens`` tokens.

    Without ``stream``: the device's default workspace (used by calls on any stream that has no
    workspace of its own). With ``stream`` (a torch.cuda.Stream): a workspace bound to that stream,
    used by the calls made while it is torch's current stream. Call outside any CUDA-graph capture
    (it allocates, synchronises and loads every kernel). Calling again replaces the workspace;
    graphs captured with the old one keep referencing its memory, so recapture. Returns the
    workspace (None for a CPU device, which needs none).
    """
    d = _device(device)
    if d.type == "cpu":
        return None
    s = _stream_int(stream)
    ws = _mhc.Workspace.create(f"cuda:{d.index}", int(max_tokens), int(max_n), stream=s, warmup=warmup)
    _workspaces[(d.index, s)] = ws
    _mhc.register_workspace(ws, s)
    if s is None:
        _ops.set_default_workspace(ws)
    if warmup:
        _warm_calls(d, s)
    return ws


def _warm_calls(d: torch.device, stream: Optional[int]) -> None:
    """One call of every operator through this module (n = 4, H = 512, T = 1, zero weights) on the
    workspace's stream, so that a process's first real call does not pay the first pass through
    the torch dispatcher, this module and the extension (Workspace.create's own warm calls cover
    the kernels and the C++ path; session 9 measured a first torch call of 308 us against 40
    without these)."""
    cfg = Config(n=4, H=512)
    z = lambda *shape, dt=torch.float32: torch.zeros(shape, dtype=dt, device=d)  # noqa: E731
    ts = torch.cuda.current_stream(d) if stream is None else torch.cuda.ExternalStream(stream, device=d)
    with torch.cuda.device(d), torch.cuda.stream(ts):
        w = prepare(torch.zeros(24, 2048), torch.ones(3), torch.zeros(24), config=cfg, device=d)
        hw = prepare_head(torch.zeros(4, 2048), torch.ones(1), torch.zeros(4), config=cfg, device=d)
        res, y, nw = z(1, 4, 512, dt=torch.bfloat16), z(1, 512, dt=torch.bfloat16), z(512, dt=torch.bfloat16)
        pm, cm = z(1, 4), z(1, 4, 4)
        mixes(res, w, config=cfg)
        collapse(res, pm, config=cfg, rmsnorm_weight=nw)
        pre(res, w, config=cfg, rmsnorm_weight=nw)
        pre_broadcast(y, w, config=cfg, rmsnorm_weight=nw)
        post(y, res, pm, cm)
        post_pre(y, res, pm, cm, w, config=cfg, rmsnorm_weight=nw)
        post_pre(y, res, pm, cm, w, config=cfg, pre_source="carried", pre_mix_in=pm, rmsnorm_weight=nw)
        head(res, config=cfg, weights=hw, rmsnorm_weight=nw)
        head(res, config=cfg, kind="carried", pre_mix_in=pm)
        head(res, config=cfg, kind="mean")
        torch.cuda.synchronize(d)


def workspace(device, stream=None) -> Optional["Workspace"]:
    """The workspace init() registered for ``device`` (and ``stream``), or None."""
    d = _device(device)
    return _workspaces.get((d.index, _stream_int(stream))) if d.type == "cuda" else None


def warmup(device) -> Tuple[int, int, float]:
    """Loads every CUDA kernel the device can run (init does it): (kernels, loaded, seconds)."""
    return _mhc.warmup(str(_device(device)))


# ---- weights -----------------------------------------------------------------------------------


def prepared_bytes(*, config: Optional[Config] = None, n: Optional[int] = None, H: Optional[int] = None,
                   head: bool = False, device="cpu") -> int:
    """Bytes of the buffer that holds one prepared block (or head) on ``device``."""
    if config is not None:
        n, H = config.n, config.H
    if n is None or H is None:
        raise mhc_error("prepared_bytes: pass config= or n= and H=")
    return int(_mhc.prepared_bytes(int(n), int(H), bool(head), str(_device(device))))


class Weights:
    """Prepared weights in a torch tensor: ``buffer`` (uint8, on the weights' device), what the
    operators receive; ``prepared`` (mhc.PreparedWeights over the same memory) for mhc.ops.
    Create with mhc.torch.prepare / prepare_head, or over a buffer with from_buffer."""

    def __init__(self, buffer: Tensor, n: int, H: int, head: bool, prepared=None):
        if not isinstance(buffer, Tensor):
            raise mhc_error(f"Weights: buffer: expected a torch.Tensor, got {type(buffer).__name__}")
        self.buffer, self.n, self.H, self.head = buffer, int(n), int(H), bool(head)
        if prepared is None:
            prepared = _mhc.attach_prepared(native(buffer, "Weights", "buffer"), self.n, self.H, self.head)
        self.prepared = prepared

    @classmethod
    def from_buffer(cls, buffer: Tensor, *, config: Config, head: bool = False) -> "Weights":
        """Weights over a buffer that prepare() filled (e.g. loaded from a state dict): no copy."""
        return cls(buffer, config.n, config.H, head)

    @property
    def device(self) -> torch.device:
        return self.buffer.device

    def __repr__(self):
        return f"mhc.torch.Weights({self.prepared!r}, buffer={tuple(self.buffer.shape)} {self.buffer.dtype})"


def _target(device, fn, out):
    if out is not None:
        return out.device
    if device is None:
        device = fn.device if isinstance(fn, Tensor) else "cpu"
    return _device(device)


def _prepare(kind, fn, scale, base, config, n, H, device, out):
    if config is not None:
        n, H = config.n, config.H
    if kind == "head":
        shape = tuple(fn.shape) if hasattr(fn, "shape") else ()
        if (n is None or H is None) and len(shape) == 2:
            n = shape[0] if n is None else n
            H = shape[1] // n if H is None and n and shape[1] % n == 0 else H
    else:
        n, H = _ops._infer_mix_dims(fn, n, H)
    if n is None or H is None:
        raise mhc_error(f"prepare_{kind}: cannot infer n and H; pass config= or n= and H=")
    n, H = _ops._check_dims("prepare" if kind == "mix" else "prepare_head", n, H)
    d = _target(device, fn, out)
    if out is None:
        out = torch.empty(prepared_bytes(n=n, H=H, head=kind == "head", device=d), dtype=torch.uint8, device=d)
    prep = _ops.prepare if kind == "mix" else _ops.prepare_head
    prepared = prep(fn, scale, base, n=n, H=H, out=out)
    return Weights(out, n, H, kind == "head", prepared)


def prepare(fn, scale, base, *, config: Optional[Config] = None, n: Optional[int] = None,
            H: Optional[int] = None, device=None, out: Optional[Tensor] = None) -> Weights:
    """Prepares one mix block (hc_attn_* / hc_ffn_*) into a torch tensor on ``device`` (default:
    fn's device): ``out`` when given (any dtype, contiguous, at least prepared_bytes long), else a
    new uint8 tensor. Returns Weights; ``.buffer`` is that tensor."""
    return _prepare("mix", fn, scale, base, config, n, H, device, out)


def prepare_head(fn, scale, base, *, config: Optional[Config] = None, n: Optional[int] = None,
                 H: Optional[int] = None, device=None, out: Optional[Tensor] = None) -> Weights:
    """Prepares the learned head (hc_head_fn / hc_head_scale / hc_head_base); see prepare."""
    return _prepare("head", fn, scale, base, config, n, H, device, out)


# ---- schemas (shared by the C++ and the Python registration) -----------------------------------

# The config is one list of eight floats (config_values): torch converts a list argument in about
# the time of three scalar ones, so eight scalars would cost ~1.4 us more per call.
_S = "float[] config"

#: The operator schemas, name -> arguments and returns (python/src/mhc_torch.cpp registers the same).
SCHEMAS: Dict[str, str] = {
    "mixes": f"(Tensor residual, Tensor weights, {_S}) -> (Tensor, Tensor, Tensor)",
    "mixes_out": f"(Tensor residual, Tensor weights, Tensor(a!) pre_mix, Tensor(b!) post_mix, "
                 f"Tensor(c!) comb_mix, {_S}) -> ()",
    "collapse": f"(Tensor residual, Tensor? pre_mix, Tensor? rmsnorm_weight, str pre_source, {_S}) -> Tensor",
    "collapse_out": f"(Tensor residual, Tensor? pre_mix, Tensor? rmsnorm_weight, str pre_source, "
                    f"Tensor(a!) layer_input, {_S}) -> ()",
    "pre": f"(Tensor residual, Tensor weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, str pre_source, {_S}) "
           f"-> (Tensor, Tensor, Tensor, Tensor)",
    "pre_out": f"(Tensor residual, Tensor weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, str pre_source, "
               f"Tensor(a!) layer_input, Tensor(b!) post_mix, Tensor(c!) comb_mix, Tensor(d!)? pre_mix_out, {_S}) -> ()",
    "pre_broadcast": f"(Tensor embedding, Tensor weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, str pre_source, "
                     f"bool materialize_residual, {_S}) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "pre_broadcast_out": f"(Tensor embedding, Tensor weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, "
                         f"str pre_source, Tensor(a!) layer_input, Tensor(b!) post_mix, Tensor(c!) comb_mix, "
                         f"Tensor(d!)? pre_mix_out, Tensor(e!)? residual_out, {_S}) -> ()",
    "post": f"(Tensor layer_output, Tensor residual, Tensor post_mix, Tensor comb_mix, {_S}) -> Tensor",
    "post_out": f"(Tensor layer_output, Tensor residual, Tensor post_mix, Tensor comb_mix, Tensor(a!) residual_out, "
                f"{_S}) -> ()",
    "post_pre": f"(Tensor layer_output, Tensor residual, Tensor post_mix, Tensor comb_mix, Tensor weights, "
                f"Tensor? pre_mix_in, Tensor? rmsnorm_weight, str pre_source, {_S}) "
                f"-> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "post_pre_out": f"(Tensor layer_output, Tensor residual, Tensor post_mix, Tensor comb_mix, Tensor weights, "
                    f"Tensor? pre_mix_in, Tensor? rmsnorm_weight, str pre_source, Tensor(a!) residual_out, "
                    f"Tensor(b!) layer_input, Tensor(c!) post_mix_out, Tensor(d!) comb_mix_out, "
                    f"Tensor(e!)? pre_mix_out, {_S}) -> ()",
    "head": f"(Tensor residual, Tensor? weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, str kind, {_S}) -> Tensor",
    "head_out": f"(Tensor residual, Tensor? weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, str kind, "
                f"Tensor(a!) output, {_S}) -> ()",
}

#: The functional operators (torch.ops.mhc.<name>); each has a <name>_out form.
OPERATORS: List[str] = ["mixes", "collapse", "pre", "pre_broadcast", "post", "post_pre", "head"]


# ---- output shapes (the functional forms and the fake implementations) -------------------------

def _bf16(shape, like: Tensor) -> Tensor:
    return torch.empty(shape, dtype=torch.bfloat16, device=like.device)


def _f32(shape, like: Tensor) -> Tensor:
    return torch.empty(shape, dtype=torch.float32, device=like.device)


def _mixes_out(residual, n):
    T = residual.shape[0]
    return _f32((T, n), residual), _f32((T, n), residual), _f32((T, n, n), residual)


def _pre_out(x, n, H):
    T = x.shape[0]
    return _bf16((T, H), x), _f32((T, n), x), _f32((T, n, n), x), _f32((T, n), x)


def _pre_broadcast_out(embedding, n, H, materialize):
    T = embedding.shape[0]
    residual_out = _bf16((T, n, H) if materialize else (0, n, H), embedding)
    return _pre_out(embedding, n, H) + (residual_out,)


def _post_pre_out(layer_output, n, H):
    T = layer_output.shape[0]
    return (_bf16((T, n, H), layer_output), _bf16((T, H), layer_output), _f32((T, n), layer_output),
            _f32((T, n, n), layer_output), _f32((T, n), layer_output))


def _n(values) -> int:
    return int(values[0])


def _H(values) -> int:
    return int(values[1])


def _fakes():
    """name -> fake implementation (shapes only), for both registrations."""
    def none(*args):
        return None

    return {
        "mixes": lambda residual, weights, c: _mixes_out(residual, _n(c)),
        "collapse": lambda residual, pre_mix, nw, src, c: _bf16((residual.shape[0], _H(c)), residual),
        "pre": lambda residual, weights, pre_in, nw, src, c: _pre_out(residual, _n(c), _H(c)),
        "pre_broadcast": lambda emb, weights, pre_in, nw, src, mat, c: _pre_broadcast_out(emb, _n(c), _H(c), mat),
        "post": lambda y, residual, pm, cm, c: _bf16((y.shape[0], _n(c), _H(c)), y),
        "post_pre": lambda y, residual, pm, cm, weights, pre_in, nw, src, c: _post_pre_out(y, _n(c), _H(c)),
        "head": lambda residual, weights, pre_in, nw, kind, c: _bf16((residual.shape[0], _H(c)), residual),
        **{f"{op}_out": none for op in OPERATORS},
    }


# ---- the C++ registration, where the extension was built --------------------------------------

def _load_cpp() -> bool:
    if os.environ.get("MHC_TORCH_OPS", "").lower() == "python":
        return False
    here = os.path.dirname(os.path.abspath(__file__))
    libs = sorted(f for f in os.listdir(here) if f.startswith("_mhc_torch") and f.endswith(".so"))
    if not libs:
        return False
    path = os.path.join(here, libs[0])
    try:
        torch.ops.load_library(path)
        import ctypes

        lib = ctypes.CDLL(path)
        lib.mhc_torch_set_api.restype = ctypes.c_char_p
        lib.mhc_torch_set_api.argtypes = [ctypes.c_void_p]
        err = lib.mhc_torch_set_api(ctypes.c_void_p(_mhc.api_table_address()))
    except (OSError, RuntimeError, AttributeError) as e:  # built for another torch: fall back
        import warnings

        warnings.warn(f"mhc.torch: the C++ operators ({path}) did not load ({e}); using the Python "
                      f"registration (slower per call)", RuntimeWarning, stacklevel=3)
        return False
    if err:
        raise mhc_error(f"mhc.torch: {err.decode()}")
    return True


# ---- the Python registration (no extension, or MHC_TORCH_OPS=python) ---------------------------

_attached: Dict[tuple, object] = {}


def _weights_of(buffer: Optional[Tensor], n: int, H: int, head: bool, op: str):
    """PreparedWeights over the operator's weights buffer (views cached by address and shape: the
    buffer is an argument of the call, so it is alive; what it holds is read at the call)."""
    if buffer is None:
        return None
    key = (buffer.data_ptr(), buffer.device, buffer.nbytes, n, H, head)
    w = _attached.get(key)
    if w is None:
        if len(_attached) > 4096:
            _attached.clear()
        w = _mhc.attach_prepared(native(buffer, op, "weights"), n, H, head)
        _attached[key] = w
    return w


def _run(fn, primary: Tensor, op: str, **kwargs):
    dev = primary.device
    if dev.type != "cuda":
        return fn(**kwargs)
    stream = torch.cuda.current_stream(dev).cuda_stream
    ws = _workspaces.get((dev.index, stream)) or _workspaces.get((dev.index, None))
    if ws is None:
        raise mhc_error(f"{op}: no mhc workspace for {dev}: call mhc.torch.init('{dev}', max_tokens) once "
                        f"before the first call (and before any CUDA-graph capture)")
    if torch.cuda.current_device() == dev.index:
        return fn(stream=stream, workspace=ws, **kwargs)
    with torch.cuda.device(dev.index):
        return fn(stream=stream, workspace=ws, **kwargs)


_configs: Dict[tuple, Config] = {}


def _integer(values, i: int, name: str) -> int:
    v = values[i]
    if v != int(v):
        raise mhc_error(f"config: {name} must be an integer, got {v}")
    return int(v)


def _config(values) -> Config:
    """The Config of an operator's ``float[] config`` argument (config_values order)."""
    key = tuple(values)
    c = _configs.get(key)
    if c is None:
        if len(key) != 8:
            raise mhc_error(f"config: expected 8 values (n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, "
                            f"post_scale, rmsnorm_eps: mhc.torch.config_values), got {len(key)}")
        norm_eps, pre_eps, sinkhorn_eps, post_scale, rmsnorm_eps = key[2], key[3], key[4], key[6], key[7]
        c = Config(n=_integer(key, 0, "n"), H=_integer(key, 1, "H"), norm_eps=norm_eps, pre_eps=pre_eps,
                   sinkhorn_eps=sinkhorn_eps, sinkhorn_iters=_integer(key, 5, "sinkhorn_iters"),
                   post_scale=post_scale, rmsnorm_eps=rmsnorm_eps)
        if len(_configs) > 1024:
            _configs.clear()
        _configs[key] = c
    return c


def _py_impls():
    """name -> implementation of the destination-passing forms, on _ops."""
    def mixes_out(residual, weights, pre_mix, post_mix, comb_mix, c):
        cfg = _config(c)
        _run(_ops.mixes, residual, "mixes", residual=residual, config=cfg,
             weights=_weights_of(weights, cfg.n, cfg.H, False, "mixes"),
             pre_mix=pre_mix, post_mix=post_mix, comb_mix=comb_mix)

    def collapse_out(residual, pre_mix, nw, src, layer_input, c):
        _run(_ops.collapse, residual, "collapse", residual=residual, pre_mix=pre_mix, config=_config(c),
             pre_source=src, rmsnorm_weight=nw, layer_input=layer_input)

    def pre_out(residual, weights, pre_in, nw, src, layer_input, post_mix, comb_mix, pre_mix_out, c):
        cfg = _config(c)
        _run(_ops.pre, residual, "pre", residual=residual, weights=_weights_of(weights, cfg.n, cfg.H, False, "pre"),
             config=cfg, pre_source=src, pre_mix_in=pre_in, rmsnorm_weight=nw, layer_input=layer_input,
             post_mix=post_mix, comb_mix=comb_mix, pre_mix_out=pre_mix_out)

    def pre_broadcast_out(emb, weights, pre_in, nw, src, layer_input, post_mix, comb_mix, pre_mix_out,
                          residual_out, c):
        cfg = _config(c)
        _run(_ops.pre_broadcast, emb, "pre_broadcast", embedding=emb,
             weights=_weights_of(weights, cfg.n, cfg.H, False, "pre_broadcast"), config=cfg, pre_source=src,
             pre_mix_in=pre_in, rmsnorm_weight=nw, layer_input=layer_input, post_mix=post_mix, comb_mix=comb_mix,
             pre_mix_out=pre_mix_out, residual_out=residual_out)

    def post_out(y, residual, pm, cm, residual_out, c):
        _run(_ops.post, y, "post", layer_output=y, residual=residual, post_mix=pm, comb_mix=cm, config=_config(c),
             residual_out=residual_out)

    def post_pre_out(y, residual, pm, cm, weights, pre_in, nw, src, residual_out, layer_input, post_mix_out,
                     comb_mix_out, pre_mix_out, c):
        cfg = _config(c)
        _run(_ops.post_pre, y, "post_pre", layer_output=y, residual=residual, post_mix=pm, comb_mix=cm,
             weights=_weights_of(weights, cfg.n, cfg.H, False, "post_pre"), config=cfg, pre_source=src,
             pre_mix_in=pre_in, rmsnorm_weight=nw, residual_out=residual_out, layer_input=layer_input,
             post_mix_out=post_mix_out, comb_mix_out=comb_mix_out, pre_mix_out=pre_mix_out)

    def head_out(residual, weights, pre_in, nw, kind, output, c):
        cfg = _config(c)
        _run(_ops.head, residual, "head", residual=residual, config=cfg, kind=kind,
             weights=_weights_of(weights, cfg.n, cfg.H, True, "head"), pre_mix_in=pre_in, rmsnorm_weight=nw,
             output=output)

    # The functional forms: the outputs allocated, then the destination-passing form.
    def mixes(residual, weights, c):
        outs = _mixes_out(residual, _n(c))
        mixes_out(residual, weights, *outs, c)
        return outs

    def collapse(residual, pre_mix, nw, src, c):
        out = _bf16((residual.shape[0], _H(c)), residual)
        collapse_out(residual, pre_mix, nw, src, out, c)
        return out

    def pre(residual, weights, pre_in, nw, src, c):
        outs = _pre_out(residual, _n(c), _H(c))
        pre_out(residual, weights, pre_in, nw, src, *outs, c)
        return outs

    def pre_broadcast(emb, weights, pre_in, nw, src, mat, c):
        outs = _pre_broadcast_out(emb, _n(c), _H(c), mat)
        pre_broadcast_out(emb, weights, pre_in, nw, src, *outs[:4], outs[4] if mat else None, c)
        return outs

    def post(y, residual, pm, cm, c):
        out = _bf16((y.shape[0], _n(c), _H(c)), y)
        post_out(y, residual, pm, cm, out, c)
        return out

    def post_pre(y, residual, pm, cm, weights, pre_in, nw, src, c):
        outs = _post_pre_out(y, _n(c), _H(c))
        post_pre_out(y, residual, pm, cm, weights, pre_in, nw, src, *outs, c)
        return outs

    def head(residual, weights, pre_in, nw, kind, c):
        out = _bf16((residual.shape[0], _H(c)), residual)
        head_out(residual, weights, pre_in, nw, kind, out, c)
        return out

    return dict(mixes=mixes, mixes_out=mixes_out, collapse=collapse, collapse_out=collapse_out, pre=pre,
                pre_out=pre_out, pre_broadcast=pre_broadcast, pre_broadcast_out=pre_broadcast_out, post=post,
                post_out=post_out, post_pre=post_pre, post_pre_out=post_pre_out, head=head, head_out=head_out)


def _register():
    if _load_cpp():
        backend = "cpp"
    else:
        backend = "python"
        lib = torch.library.Library("mhc", "DEF")
        impls = _py_impls()
        for name, schema in SCHEMAS.items():
            lib.define(name + schema)
            lib.impl(name, impls[name], "CPU")
            lib.impl(name, impls[name], "CUDA")
        _register.lib = lib  # the registration lives as long as the module
    for name, fake in _fakes().items():
        torch.library.register_fake(f"mhc::{name}")(fake)
    return backend


#: "cpp" (the operators registered from C++) or "python".
BACKEND: str = _register()

# The OpOverloads, resolved once: calling torch.ops.mhc.<op> (the packet) resolves the overload
# on every call, about 3 us of host time; <op>.default does not.
_mixes_op = torch.ops.mhc.mixes.default
_collapse_op = torch.ops.mhc.collapse.default
_pre_op = torch.ops.mhc.pre.default
_pre_broadcast_op = torch.ops.mhc.pre_broadcast.default
_post_op = torch.ops.mhc.post.default
_post_pre_op = torch.ops.mhc.post_pre.default
_head_op = torch.ops.mhc.head.default


def _release():
    """At exit, before the extension's teardown: drop every native object this module holds (the
    registered workspaces, the cached weights views and configs), so nanobind reports no leak."""
    _workspaces.clear()
    _attached.clear()
    _configs.clear()
    _mhc.clear_registered_workspaces()
    _ops.clear_default_workspaces()


atexit.register(_release)


# ---- the Python API over the operators ---------------------------------------------------------

_LOCATION = re.compile(r"^\S+:\d+: ")


def _mhc_error(e: RuntimeError) -> Exception:
    """A library error raised through a C++ operator (a RuntimeError 'file:line: message') as
    mhc.MhcError; anything else unchanged."""
    if isinstance(e, MhcError):
        return e
    text = str(e).split("\n", 1)[0]
    return mhc_error(text) if _LOCATION.match(text) else e


def config_values(config: Config) -> Tuple[float, ...]:
    """The operators' ``float[] config`` argument: (n, H, norm_eps, pre_eps, sinkhorn_eps,
    sinkhorn_iters, post_scale, rmsnorm_eps) as floats. Compute it once per model and pass it to
    every call of ``torch.ops.mhc.*``."""
    return (float(config.n), float(config.H), float(config.norm_eps), float(config.pre_eps),
            float(config.sinkhorn_eps), float(config.sinkhorn_iters), float(config.post_scale),
            float(config.rmsnorm_eps))


def _scalars(config: Config):
    """The trailing arguments of every operator for ``config`` (a one-element tuple: ``*_scalars(c)``)."""
    return (config_values(config),)


# Valid placeholders for the config values post does not use (norm_eps .. rmsnorm_eps).
_POST_ONLY_SCALARS = (1e-6, 1e-6, 1e-6, 20.0, 2.0, 1e-6)


def _buffer(weights) -> Optional[Tensor]:
    if weights is None:
        return None
    buf = getattr(weights, "buffer", None)
    if not isinstance(buf, Tensor):
        raise mhc_error(f"weights: expected mhc.torch.Weights (mhc.torch.prepare), got {type(weights).__name__}")
    return buf


def mixes(residual: Tensor, weights: Weights, *, config: Config) -> Mixes:
    """torch.ops.mhc.mixes: residual [T,n,H] bf16 -> Mixes(pre_mix, post_mix, comb_mix)."""
    try:
        return Mixes(*_mixes_op(residual, _buffer(weights), *_scalars(config)))
    except RuntimeError as e:
        raise _mhc_error(e) from None


def collapse(residual: Tensor, pre_mix: Optional[Tensor] = None, *, config: Config, pre_source: str = "carried",
             rmsnorm_weight: Optional[Tensor] = None) -> Tensor:
    """torch.ops.mhc.collapse: residual [T,n,H], pre_mix [T,n] -> layer_input [T,H] bf16."""
    try:
        return _collapse_op(residual, pre_mix, rmsnorm_weight, pre_source, *_scalars(config))
    except RuntimeError as e:
        raise _mhc_error(e) from None


def pre(residual: Tensor, weights: Weights, *, config: Config, pre_source: str = "computed",
        pre_mix_in: Optional[Tensor] = None, rmsnorm_weight: Optional[Tensor] = None) -> Pre:
    """torch.ops.mhc.pre -> Pre(layer_input, post_mix, comb_mix, pre_mix_out); pre_mix_out is the
    fresh pre (always returned)."""
    try:
        return Pre(*_pre_op(residual, _buffer(weights), pre_mix_in, rmsnorm_weight, pre_source,
                                      *_scalars(config)))
    except RuntimeError as e:
        raise _mhc_error(e) from None


def pre_broadcast(embedding: Tensor, weights: Weights, *, config: Config, pre_source: str = "computed",
                  pre_mix_in: Optional[Tensor] = None, rmsnorm_weight: Optional[Tensor] = None,
                  materialize_residual: bool = False) -> PreBroadcast:
    """torch.ops.mhc.pre_broadcast (first layer) -> PreBroadcast(layer_input, post_mix, comb_mix,
    pre_mix_out, residual_out); residual_out is [T,n,H] when materialize_residual, else None (use
    the embedding itself as the broadcast-form residual of the next post)."""
    try:
        li, pm, cm, pmo, ro = _pre_broadcast_op(embedding, _buffer(weights), pre_mix_in, rmsnorm_weight,
                                                          pre_source, materialize_residual, *_scalars(config))
    except RuntimeError as e:
        raise _mhc_error(e) from None
    return PreBroadcast(li, pm, cm, pmo, ro if materialize_residual else None)


def post(layer_output: Tensor, residual: Tensor, post_mix: Tensor, comb_mix: Tensor, *,
         config: Optional[Config] = None) -> Tensor:
    """torch.ops.mhc.post -> residual_out [T,n,H] bf16 (residual may be the [T,H] broadcast form).

    post uses no eps: without ``config``, n and H are read from post_mix and layer_output."""
    if config is None:
        scalars = ((float(post_mix.shape[-1]), float(layer_output.shape[-1])) + _POST_ONLY_SCALARS,)
    else:
        scalars = _scalars(config)
    try:
        return _post_op(layer_output, residual, post_mix, comb_mix, *scalars)
    except RuntimeError as e:
        raise _mhc_error(e) from None


def post_pre(layer_output: Tensor, residual: Tensor, post_mix: Tensor, comb_mix: Tensor, weights: Weights, *,
             config: Config, pre_source: str = "computed", pre_mix_in: Optional[Tensor] = None,
             rmsnorm_weight: Optional[Tensor] = None) -> PostPre:
    """torch.ops.mhc.post_pre -> PostPre(residual_out, layer_input, post_mix_out, comb_mix_out, pre_mix_out)."""
    try:
        return PostPre(*_post_pre_op(layer_output, residual, post_mix, comb_mix, _buffer(weights),
                                               pre_mix_in, rmsnorm_weight, pre_source, *_scalars(config)))
    except RuntimeError as e:
        raise _mhc_error(e) from None


def head(residual: Tensor, *, config: Config, kind: str = "learned", weights: Optional[Weights] = None,
         pre_mix_in: Optional[Tensor] = None, rmsnorm_weight: Optional[Tensor] = None) -> Tensor:
    """torch.ops.mhc.head -> output [T,H] bf16 (kind learned / carried / mean)."""
    try:
        return _head_op(residual, _buffer(weights), pre_mix_in, rmsnorm_weight, kind, *_scalars(config))
    except RuntimeError as e:
        raise _mhc_error(e) from None


__all__ = ["BACKEND", "OPERATORS", "SCHEMAS", "Weights", "Workspace", "collapse", "config_values", "head", "init",
           "mixes", "post",
           "post_pre", "pre", "pre_broadcast", "prepare", "prepare_head", "prepared_bytes", "warmup", "workspace"]
