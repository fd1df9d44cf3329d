"""Array plumbing shared by the mhc Python API: frameworks, devices, bf16, output allocation.

Nothing here imports torch: a torch tensor is recognised through ``sys.modules`` (if torch
was never imported, no argument can be a torch tensor).
"""

import sys

import numpy as np

from mhc import _mhc

MhcError = _mhc.MhcError
Bf16View = _mhc.Bf16View


def mhc_error(message):
    """An mhc.MhcError raised by the Python layer (file and line are None; the C++ layer's carry
    its source location)."""
    e = MhcError(message)
    e.message, e.file, e.line = message, None, None
    return e


# mhc::DType codes (include/mhc/tensor.hpp) and DLPack device types.
DTYPE_BF16, DTYPE_F16, DTYPE_F32, DTYPE_F64, DTYPE_I32, DTYPE_I64, DTYPE_U8 = range(7)
DEVICE_CPU, DEVICE_CUDA = 1, 2

try:  # optional: numpy bf16 arrays
    import ml_dtypes as _ml_dtypes

    BF16_NUMPY = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None
    BF16_NUMPY = None

_torch_dtypes = None  # torch.dtype -> mhc dtype code, built on first use


def torch_module():
    """The torch module if it has been imported by anyone, else None (never imports it)."""
    return sys.modules.get("torch")


def is_torch(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _torch_dtype_codes(torch):
    global _torch_dtypes
    if _torch_dtypes is None:
        _torch_dtypes = {
            torch.bfloat16: DTYPE_BF16,
            torch.float16: DTYPE_F16,
            torch.float32: DTYPE_F32,
            torch.float64: DTYPE_F64,
            torch.int32: DTYPE_I32,
            torch.int64: DTYPE_I64,
            torch.uint8: DTYPE_U8,
        }
    return _torch_dtypes


def raw_torch(t, op, name):
    """A torch.Tensor as an _mhc.RawTensor: pointer and metadata, no DLPack round trip."""
    torch = sys.modules["torch"]
    code = _torch_dtype_codes(torch).get(t.dtype)
    if code is None:
        raise mhc_error(f"{op}: {name}: unsupported dtype {t.dtype} (mhc operators take bf16 and fp32)")
    # The cheap attributes first (this runs for every tensor of every call): is_cuda / is_cpu and
    # get_device() rather than building a torch.device; no is_conj() (the dtypes above are real).
    if t.is_cuda:
        dtype_dev, index = DEVICE_CUDA, t.get_device()
    elif t.is_cpu:
        dtype_dev, index = DEVICE_CPU, 0
    else:
        raise mhc_error(f"{op}: {name}: unsupported device {t.device} (mhc takes cpu and cuda tensors)")
    if t.layout is not torch.strided:
        raise mhc_error(f"{op}: {name}: expected a strided (dense) tensor, got layout {t.layout}")
    if t.is_neg():
        raise mhc_error(f"{op}: {name}: expected a tensor without a lazy negative bit")
    return _mhc.RawTensor(t.data_ptr(), code, dtype_dev, index, t.shape, t.stride(), t)


def native(x, op, name):
    """Converts one tensor argument for the extension: torch tensors become RawTensors."""
    if x is None or x.__class__ is Bf16View:
        return x
    if is_torch(x):
        return raw_torch(x, op, name)
    return x


def device_of(x):
    """(device_type, ordinal) of an array argument, DLPack numbering; CPU for host arrays."""
    if x is None or isinstance(x, np.ndarray):
        return (DEVICE_CPU, 0)
    if isinstance(x, Bf16View):  # raw bits may live on a GPU (e.g. a CuPy uint16 array)
        return device_of(x.bits)
    if is_torch(x):
        return (DEVICE_CUDA, x.get_device()) if x.is_cuda else (DEVICE_CPU, 0)
    dl = getattr(x, "__dlpack_device__", None)
    if dl is not None:
        try:
            kind, index = dl()
            return (int(kind), int(index))
        except Exception:  # noqa: BLE001 - a producer that cannot say is treated as host memory
            return (DEVICE_CPU, 0)
    return (DEVICE_CPU, 0)


def parse_device(device):
    """'cpu' | 'cuda' | 'cuda:N' | torch.device | (type, ordinal) -> (device_type, ordinal).

    A bare 'cuda' means cuda:0 here (mhc.torch resolves torch's current device itself).
    """
    if isinstance(device, tuple) and len(device) == 2:
        return (int(device[0]), int(device[1]))
    kind, index = _mhc.device_of(str(device))
    return (kind, index)


def device_string(device):
    kind, index = device
    return "cpu" if kind == DEVICE_CPU else f"cuda:{index}"


def stream_handle(stream, primary):
    """The cudaStream_t (as an int) for a call.

    Explicit ``stream`` wins: an int, a torch.cuda.Stream (``.cuda_stream``) or a CuPy stream
    (``.ptr``). Otherwise torch's current stream for torch CUDA inputs, else 0 (the legacy
    default stream). CPU calls ignore it.
    """
    if stream is not None:
        if isinstance(stream, int):
            return stream
        for attr in ("cuda_stream", "ptr"):
            value = getattr(stream, attr, None)
            if isinstance(value, int):
                return value
        raise mhc_error(f"stream: expected an int (cudaStream_t), a torch.cuda.Stream or a CuPy stream, "
                       f"got {type(stream).__name__}")
    if is_torch(primary) and primary.is_cuda:
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what inductor's code calls
        if raw is not None:
            return raw(primary.get_device())
        return torch.cuda.current_stream(primary.device).cuda_stream
    return 0


# ---- bf16 on numpy -----------------------------------------------------------------------------

def bf16_view(bits):
    """Declares a uint16 numpy array (or any uint16 DLPack array) to hold raw bf16 bits.

    The result is an ``mhc.Bf16View``: operators read and write it as bf16, and ``.bits`` is the
    underlying uint16 array (shared memory, no copy). Without this wrapper a uint16 array is
    rejected, so integers are never mistaken for bf16 by accident.
    """
    return _mhc.bf16_view(bits)


def _bits_of(x):
    """uint16 bit pattern (numpy) of a bf16 value holder: Bf16View, ml_dtypes array, torch bf16."""
    if isinstance(x, Bf16View):
        return np.asarray(x.bits)
    if is_torch(x):
        torch = sys.modules["torch"]
        if x.dtype != torch.bfloat16:
            raise mhc_error(f"expected a bf16 tensor, got {x.dtype}")
        return x.detach().cpu().view(torch.int16).numpy().view(np.uint16)
    arr = np.asarray(x)
    if arr.dtype == np.uint16:
        raise mhc_error("expected bf16 values, got a plain uint16 array; wrap raw bits with mhc.bf16_view()")
    if arr.dtype.name != "bfloat16":
        raise mhc_error(f"expected bf16 values (mhc.Bf16View, ml_dtypes.bfloat16 or torch.bfloat16), got {arr.dtype}")
    return arr.view(np.uint16)


def bf16_to_float32(x):
    """bf16 values (Bf16View, ml_dtypes.bfloat16 array or torch bf16 tensor) -> float32 numpy (exact)."""
    bits = _bits_of(x)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def float32_to_bf16_bits(x):
    """float32 (or float64, rounded to float32 first) -> uint16 bf16 bits, round to nearest even."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    word = f.view(np.uint32).astype(np.uint64)
    is_nan = np.isnan(f)
    rounded = (word + np.uint64(0x7FFF) + ((word >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    out = rounded.astype(np.uint16)
    out[is_nan] = ((word[is_nan] >> np.uint64(16)) | np.uint64(0x0040)).astype(np.uint16)
    return out


def to_bf16(x):
    """float array -> bf16 numpy values: an ml_dtypes.bfloat16 array when ml_dtypes is installed,
    else an mhc.Bf16View of the rounded bits. Rounds to nearest even."""
    bits = float32_to_bf16_bits(x)
    if BF16_NUMPY is not None:
        return bits.view(BF16_NUMPY)
    return bf16_view(bits)


# ---- output allocation -------------------------------------------------------------------------

class Allocator:
    """Allocates outputs like the call's primary input: torch tensors on its device, or numpy
    arrays (bf16 as ml_dtypes arrays, or Bf16View when the input was one / ml_dtypes is absent)."""

    def __init__(self, primary, op):
        self.op = op
        self.primary = primary
        if is_torch(primary):
            self.kind = "torch"
        elif isinstance(primary, Bf16View):
            self.kind = "bf16view"
        elif isinstance(primary, np.ndarray):
            self.kind = "numpy" if BF16_NUMPY is not None else "bf16view"
        else:
            self.kind = None

    def _need(self, name):
        if self.kind is None:
            raise mhc_error(f"{self.op}: {name}: mhc allocates outputs only for numpy and torch inputs; "
                           f"pass {name}= explicitly for a {type(self.primary).__name__} input")

    def bf16(self, shape, name):
        self._need(name)
        if self.kind == "torch":
            torch = sys.modules["torch"]
            return torch.empty(shape, dtype=torch.bfloat16, device=self.primary.device)
        if self.kind == "numpy":
            return np.empty(shape, dtype=BF16_NUMPY)
        return bf16_view(np.empty(shape, dtype=np.uint16))

    def f32(self, shape, name):
        self._need(name)
        if self.kind == "torch":
            torch = sys.modules["torch"]
            return torch.empty(shape, dtype=torch.float32, device=self.primary.device)
        return np.empty(shape, dtype=np.float32)


def leading(x, op, name):
    """Extent of dimension 0 (tokens) of an array argument."""
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) == 0:
        raise mhc_error(f"{op}: {name}: expected an array with a token dimension, got {type(x).__name__}")
    return int(shape[0])
