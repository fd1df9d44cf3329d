// src/core/cuda_hooks.hpp - the few entry points the core needs from the CUDA backend.
//
// Implemented in src/cuda/backend.cu when the build has CUDA, and by src/core/no_cuda.cpp
// (which throws "built without CUDA") otherwise, so the core never includes CUDA headers.
#pragma once

#include "mhc/weights.hpp"
#include "src/core/prepared.hpp"

namespace mhc::detail {

/// Number of visible CUDA devices (0 when none or when built without CUDA).
int cuda_device_count();
/// Uploads the host copies of `w` into the device layout the kernels read (w.device).
void cuda_upload_weights(PreparedWeights::Impl& w);
/// Allocates and initialises the workspace on ws.device (synchronous).
void cuda_create_workspace(Workspace::Impl& ws);

}  // namespace mhc::detail
