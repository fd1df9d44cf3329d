// src/cuda/n4/collapse_kernel.cu - phase B of the n = 4 path: the mixes epilogue and the
// collapse of one token per block.
//
// Grid mapping: one 256-thread block per token. With a mixes stage, the partials of the token
// are summed over chunks in the canonical order (src/cuda/n4/config.cuh: 8 interleaved groups,
// then the groups in order), and one thread runs the epilogue (sigmoids, Sinkhorn;
// src/cuda/epilogue.cuh), writing the requested mixes. Then the collapse with the computed,
// carried or identity pre (or the mean head), 16-byte vectors, each output the exact sum
// rounded once (exact_sum_bf16x2), and the optional RMSNorm fold (the bf16 row kept in dynamic
// shared memory, its sum of squares by block_sum).
// Accumulation: fp32 partial sums; exact sums for the collapse; fp32 RMS.
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows.
#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

// Five blocks per SM on Hopper (48 registers, the build measured on the H200); three elsewhere,
// where ptxas would spill at that bound.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define MHC_COLLAPSE_MIN_BLOCKS 5
#else
#define MHC_COLLAPSE_MIN_BLOCKS 3
#endif
__global__ void __launch_bounds__(kThreadsB, MHC_COLLAPSE_MIN_BLOCKS) collapse_kernel(const N4Params p) {
  extern __shared__ __align__(16) unsigned char row_smem[];  // the collapsed row (RMSNorm fold)
  __shared__ float scratch[kThreadsB / 32];
  __shared__ float s_part[kPartialSplit][kPartial];
  __shared__ float s_dot[kPartial];
  __shared__ float s_pre[kN];
  pdl_launch_dependents();
  pdl_wait();  // the partials (and the streams) come from the kernels before this one
  const int tid = threadIdx.x;
  const int64_t t = blockIdx.x;
  if (p.has_mixes) {
    // Sum of the partials over chunks in a fixed order, the same for every token: thread
    // (part, r) adds chunks part, part + 8, ... in order (all its loads in flight at once),
    // then thread r adds the 8 part sums in order.
    if (tid < kPartialSplit * kPartial) {
      const int part = tid / kPartial, r = tid % kPartial;
      const float s = chunk_group_sum(part, p.chunks, [&](int c) { return partial_at(p, t, c)[r]; });
      s_part[part][r] = s;
    }
    __syncthreads();
    if (tid < kPartial) s_dot[tid] = groups_total(s_part, tid);
    __syncthreads();
    if (tid == 0) {
      float pre[kN];
      mixes_epilogue<kN>(p.epi, s_dot, s_dot[kRows], p.inv_k, t, pre);
      if (p.pre_source == PreSource::kComputed && !p.head_mean) {
#pragma unroll
        for (int j = 0; j < kN; ++j) s_pre[j] = pre[j];
      }
    }
  }
  if (!p.has_collapse) return;
  if (tid < kN && p.pre_source == PreSource::kCarried) s_pre[tid] = p.pre_mix_in[t * p.pre_mix_in_stride + tid];
  __syncthreads();
  collapse_row(p, t, s_pre, row_smem, scratch);
}

}  // namespace

void launch_collapse_kernel(const N4Params& p, const LaunchCtx& ctx) {
  const size_t row_bytes = p.has_collapse && p.rmsnorm_weight != nullptr ? static_cast<size_t>(p.H) * 2 : 0;
  launch_kernel(collapse_kernel, dim3(static_cast<unsigned>(p.T)), kThreadsB, row_bytes, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_collapse_kernels(KernelList& out) { add_kernel(out, collapse_kernel, "n4::collapse_kernel"); }
