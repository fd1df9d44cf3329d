// src/cuda/reduce.cuh - the deterministic block-wide sum (fixed order: warp butterflies, then
// warps in index order).
#pragma once

namespace mhc::cuda {

/// The sum of v over the warp's 32 lanes by the xor butterfly 16, 8, 4, 2, 1 (every lane gets
/// the same bits): block_sum's first step.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/// Sums `values[0..count)` over the block, in a fixed order (warp shuffles, then warps in
/// index order): deterministic. `scratch` holds count * warps floats. The result is in `values`
/// of every thread on return. kWarps = 0: every thread of the block calls it (warps =
/// blockDim.x / 32, block barriers); kWarps > 0: exactly the first kWarps warps call it and
/// synchronise on named barrier kBarrier (1..15), so other warps of the block may do other work;
/// the same order, so the same bits as a block of kWarps warps.
template <int kCount, int kWarps = 0, int kBarrier = 1>
__device__ __forceinline__ void block_sum(float (&values)[kCount], float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = kWarps > 0 ? kWarps : static_cast<int>(blockDim.x >> 5);
  auto sync = [] {
    if (kWarps > 0) {
      asm volatile("bar.sync %0, %1;\n" ::"n"(kBarrier), "n"(kWarps * 32) : "memory");
    } else {
      __syncthreads();
    }
  };
#pragma unroll
  for (int i = 0; i < kCount; ++i) values[i] = warp_sum(values[i]);
  sync();  // scratch may still be read by a previous reduction
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) scratch[i * warps + warp] = values[i];
  }
  sync();
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    float s = 0.0f;
    for (int w = 0; w < warps; ++w) s += scratch[i * warps + w];
    values[i] = s;
  }
}

}  // namespace mhc::cuda
