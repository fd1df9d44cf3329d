// src/cuda/reduce.cuh - the deterministic block-wide sum (fixed order: warp butterflies, then
// warps in index order).
#pragma once

namespace mhc::cuda {

/// Sums `values[0..count)` over the block, in a fixed order (warp shuffles, then warps in
/// index order): deterministic. `scratch` holds count * (blockDim.x / 32) floats. The result is
/// in `values` of every thread on return. Every thread of the block must call it.
template <int kCount>
__device__ __forceinline__ void block_sum(float (&values)[kCount], float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) values[i] += __shfl_xor_sync(0xffffffffu, values[i], off);
  }
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) scratch[i * warps + warp] = values[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    float s = 0.0f;
    for (int w = 0; w < warps; ++w) s += scratch[i * warps + w];
    values[i] = s;
  }
}

}  // namespace mhc::cuda
