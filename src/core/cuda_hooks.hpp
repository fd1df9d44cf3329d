// src/core/cuda_hooks.hpp - the few entry points the core needs from the CUDA backend.
//
// Implemented in src/cuda/backend.cu when the build has CUDA, and by src/core/no_cuda.cpp
// (which throws "built without CUDA") otherwise, so the core never includes CUDA headers.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "mhc/weights.hpp"
#include "src/core/prepared.hpp"

namespace mhc::detail {

/// Number of visible CUDA devices (0 when none or when built without CUDA).
int cuda_device_count();
/// Bytes of the CUDA layout of prepared weights (fragments, fn_t, fn_b_t, scale, base).
size_t cuda_prepared_bytes(int32_t n, int64_t H, int32_t rows);
/// Uploads the host copies of `w` into the device layout the kernels read (w.device): into
/// `destination` (cuda_prepared_bytes of the caller's device memory) or, where null, into memory
/// it allocates.
void cuda_upload_weights(PreparedWeights::Impl& w, void* destination = nullptr);
/// Points the device fields of `w` (n, H, rows, device set) into `buffer`, laid out as
/// cuda_upload_weights writes it. No copy.
void cuda_attach_weights(PreparedWeights::Impl& w, const void* buffer);
/// Allocates and initialises the workspace on ws.device (synchronous); warms the device up
/// where ws.warmup.
void cuda_create_workspace(Workspace::Impl& ws);
/// `bytes` of zeroed device memory on `device` (synchronous), freed with the last owner.
std::shared_ptr<void> cuda_zeroed(Device device, size_t bytes);
/// Waits for `stream` (a cudaStream_t; null: the legacy default stream) on `device`.
void cuda_sync(Device device, void* stream);
/// mhc::warmup on a CUDA device; where `loaded` is not null it receives the host function
/// pointer of every kernel loaded.
WarmupReport cuda_warmup(Device device, std::vector<const void*>* loaded = nullptr);

/// One kernel of the CUDA kernel list (src/cuda/kernel_list.cuh), for tests and reports.
struct KernelName {
  const void* fn;
  const char* name;
};
/// Every CUDA kernel of the build (empty without CUDA). Needs no device.
std::vector<KernelName> cuda_kernel_names();

}  // namespace mhc::detail
