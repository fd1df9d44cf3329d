// src/cuda/warm_kernel.cu - an empty kernel that warmup launches the way every launcher does
// (cudaLaunchKernelEx, with the programmatic-dependent-launch attribute on sm_90+), so that the
// driver's one-time work for the first such launch in a process happens in Workspace::create or
// mhc::warmup, not in the first operator call.
//
// What it computes: nothing (pdl_wait, then return). Grid mapping: one block of 32 threads.
// Accumulation: none. Envelope: every device the library builds for.
#include "src/cuda/kernel_list.cuh"
#include "src/cuda/launch.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda {

namespace {

struct WarmParams {
  int32_t unused;
};

__global__ void warm_kernel(const WarmParams) { pdl_wait(); }

}  // namespace

void launch_warm_kernel(bool pdl) {
  LaunchCtx ctx;
  ctx.stream = nullptr;
  ctx.pdl = pdl;
  launch_kernel(warm_kernel, dim3(1), 32, 0, ctx, WarmParams{0});
  launch_kernel(warm_kernel, dim3(1), 32, 0, ctx, WarmParams{0});  // the second one waits on the first
  MHC_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

void list_warm_kernels(KernelList& out) { add_kernel(out, warm_kernel, "warm_kernel (warmup's first launch)"); }

}  // namespace mhc::cuda
