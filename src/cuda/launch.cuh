// src/cuda/launch.cuh - how every kernel is launched: cudaLaunchKernelEx with programmatic
// dependent launch where the device has it (sm_90+), so a kernel's prologue (weight loads,
// block scheduling) overlaps the end of the kernel before it in the stream; the kernel itself
// orders its reads of earlier outputs after pdl_wait() (src/cuda/ptx.cuh).
#pragma once

#include <cuda_runtime.h>

#include "src/core/launch_record.hpp"
#include "src/cuda/check.cuh"

namespace mhc::cuda {

/// Where and how a launcher launches: the stream, whether to allow programmatic dependent
/// launch, and the device's multiprocessor count (grid sizing).
struct LaunchCtx {
  cudaStream_t stream = nullptr;
  bool pdl = false;     // compute capability >= 9
  int32_t num_sms = 0;
};

/// Launches kernel<<<grid, threads, smem, ctx.stream>>>(params) with the PDL attribute when
/// ctx.pdl (and the cooperative attribute when `cooperative`: every block co-resident).
template <typename Params>
void launch_kernel(void (*kernel)(Params), dim3 grid, int threads, size_t smem, const LaunchCtx& ctx,
                   const Params& params, bool cooperative = false) {
  cudaLaunchAttribute attrs[2]{};
  unsigned count = 0;
  if (ctx.pdl) {
    attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (cooperative) {
    attrs[count].id = cudaLaunchAttributeCooperative;
    attrs[count].val.cooperative = 1;
    ++count;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = ctx.stream;
  cfg.attrs = attrs;
  cfg.numAttrs = count;
  // Test-only: report the kernel to an installed recorder (src/core/launch_record.hpp).
  const detail::LaunchRecorderSlot& rec = detail::g_launch_recorder;
  if (rec.recorder != nullptr) rec.recorder(reinterpret_cast<const void*>(kernel), rec.user);
  MHC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, params));
}

/// Allows `kernel` `bytes` of dynamic shared memory on `device` (the current device); false
/// where the device's opt-in limit per block is smaller (the kernel then cannot run there).
template <typename Params>
bool allow_dynamic_smem(void (*kernel)(Params), int device, int bytes) {
  int optin = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (optin < bytes) return false;
  MHC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return true;
}

/// The grid of a kernel that gives each block an equal contiguous range of `items` work items:
/// one block per multiprocessor, fewer where there are fewer items. 32-bit item indices.
inline unsigned item_grid(int64_t items, int32_t num_sms, const char* kernel) {
  MHC_CHECK(items < (int64_t{1} << 31), kernel, ": too many tokens in one slice");
  return static_cast<unsigned>(items < num_sms ? items : num_sms);
}

}  // namespace mhc::cuda
