"""mhc: manifold-constrained hyper-connection (mHC) operators for inference.

DeepSeek-V4 / V4.1 and GLM-5-Next. The operators of spec section 4 on numpy arrays, torch
tensors and any DLPack producer (``mhc.ops``), PyTorch custom operators for torch.compile and
CUDA graphs (``mhc.torch``), and the engine-facing call boundaries (``mhc.engine``).
See docs/integration.md.

bf16 on numpy: numpy has no bf16 dtype. Pass ``ml_dtypes.bfloat16`` arrays, or wrap a uint16
array of raw bf16 bits with ``mhc.bf16_view(bits)``; a bare uint16 array is rejected.
"""

from mhc import _mhc
from mhc._arrays import Bf16View, MhcError, bf16_to_float32, bf16_view, float32_to_bf16_bits, to_bf16
from mhc._config import Config, ModelPreset, model_preset, model_presets
from mhc.ops import (Mixes, Pre, PreBroadcast, PostPre, Variant, attach_prepared, clear_default_workspaces, collapse,
                     cuda_available, default_workspace, head, list_variants, mixes, post, post_pre, pre,
                     pre_broadcast, prepare, prepare_head, prepared_bytes, selected_variant, set_default_workspace,
                     warmup)

PreparedWeights = _mhc.PreparedWeights
Workspace = _mhc.Workspace

__version__ = _mhc.version()  # mhc::version(): the project(mhc VERSION ...) line of CMakeLists.txt

__all__ = [
    "Bf16View", "Config", "MhcError", "Mixes", "ModelPreset", "Pre", "PreBroadcast", "PostPre", "PreparedWeights",
    "Variant", "Workspace", "attach_prepared", "bf16_to_float32", "bf16_view", "clear_default_workspaces", "collapse",
    "cuda_available", "default_workspace", "float32_to_bf16_bits", "head", "list_variants", "mixes",
    "model_preset", "model_presets", "post", "post_pre", "pre", "pre_broadcast", "prepare", "prepare_head",
    "prepared_bytes", "selected_variant", "set_default_workspace", "to_bf16", "warmup",
]
