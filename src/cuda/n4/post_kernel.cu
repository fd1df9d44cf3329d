// src/cuda/n4/post_kernel.cu - post alone for n = 4: residual_out[t,k,:] =
// bf16(post[k] * layer_output[t,:] + sum_j comb[j,k] * residual[t,j,:]).
//
// Grid mapping: one thread per (token, 8-column vector) of all 4 streams, grid-stride over
// tokens x vectors (at most 16 blocks of 256 threads per multiprocessor).
// Accumulation: post8 (src/cuda/n4/post8.cuh), each output the exact sum rounded once.
// Envelope: n = 4, H % 8 == 0 within the n = 4 envelope, 16-byte aligned rows; the residual may
// be the broadcast [T,H] form (res_stream_stride 0).
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

/// post alone: one thread per (token, 8 columns), all 4 streams.
__global__ void __launch_bounds__(kThreadsB, 3) post_kernel(const N4Params p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t vecs = p.H / 8;
  const int64_t total = p.T * vecs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / vecs, v = i % vecs;
    const bf16_t* res = p.residual + t * p.residual_stride + v * 8;
    uint4 r[kN], out[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) r[j] = ld16(res + j * p.res_stream_stride);
    const uint4 lo = ld16(p.layer_output + t * p.layer_output_stride + v * 8);
    float post[kN], comb[kN * kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) post[j] = __ldg(p.post_mix + t * p.post_mix_stride + j);
#pragma unroll
    for (int j = 0; j < kN * kN; ++j) comb[j] = __ldg(p.comb_mix + t * p.comb_mix_stride + j);
    post8(post_weights(post, comb), r, lo, out);
    bf16_t* dst = p.residual_out + t * p.residual_out_stride + v * 8;
#pragma unroll
    for (int j = 0; j < kN; ++j) st16(dst + j * p.H, out[j]);
  }
}

}  // namespace

void launch_post_kernel(const N4Params& p, const LaunchCtx& ctx) {
  const int64_t total = p.T * (p.H / 8);
  const int64_t blocks_needed = (total + kThreadsB - 1) / kThreadsB;
  const int64_t cap = static_cast<int64_t>(ctx.num_sms) * kPostBlocksPerSm;
  launch_kernel(post_kernel, dim3(static_cast<unsigned>(blocks_needed < cap ? blocks_needed : cap)), kThreadsB,
                0, ctx, p);
}

}  // namespace mhc::cuda::n4
