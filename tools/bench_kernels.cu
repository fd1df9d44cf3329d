// tools/bench_kernels.cu - the one kernel `mhc bench` owns: an empty kernel whose per-node
// cost inside a CUDA graph is reported next to the copy bandwidth (protocol step 1).
#include <cuda_runtime.h>

namespace mhc::tools::bench {

namespace {
__global__ void empty_kernel() {}
}  // namespace

/// Launches one empty kernel (1 block of 1 thread) on `stream`; returns the launch status.
cudaError_t launch_empty_kernel(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

}  // namespace mhc::tools::bench
