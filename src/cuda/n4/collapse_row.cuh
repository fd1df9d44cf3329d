// src/cuda/n4/collapse_row.cuh - the collapse of one token by one 256-thread block: layer_input
// = bf16(sum_j pre[j] * x[j]) (each output the exact sum rounded once, adjacent columns
// certified together), or stream 0 bit for bit (identity pre), or the mean head (the exact
// double sum divided by n, rounded once); then the optional RMSNorm fold, whose sum of squares is
// each thread's fmaf chain over its vectors v = tid, tid + 256, ... followed by block_sum. Every
// n = 4 kernel that collapses runs this code, so they give the same bits.
#pragma once

#include "src/cuda/exact_sum.cuh"
#include "src/cuda/n4/config.cuh"
#include "src/cuda/ptx.cuh"
#include "src/cuda/reduce.cuh"

namespace mhc::cuda::n4 {

/// Called by all kThreadsB threads of the block (it has block barriers). s_pre: the pre weights
/// in shared memory (ignored for identity and the mean head); row_smem: H * 2 bytes when folding;
/// scratch: kThreadsB / 32 floats. kFromL2: read the streams from L2 only (ldcg16), for streams
/// written by other blocks of the same kernel (decode_kernel); otherwise streaming loads.
template <bool kFromL2 = false>
__device__ __forceinline__ void collapse_row(const N4Params& p, int64_t t, const float* s_pre,
                                             unsigned char* row_smem, float* scratch) {
  const int tid = threadIdx.x;
  const int64_t vecs = p.H / 8;
  const bf16_t* x = p.x + t * p.x_stride;
  bf16_t* dst = p.layer_input + t * p.layer_input_stride;
  uint4* row = reinterpret_cast<uint4*>(row_smem);
  const bool fold = p.rmsnorm_weight != nullptr;
  const bool weighted = p.pre_source != PreSource::kIdentity && !p.head_mean;
  float pre[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) pre[j] = weighted ? s_pre[j] : 0.0f;
  const float pre_scale = sum_error_scale(pre);
  float sq[1] = {0.0f};
  for (int64_t v = tid; v < vecs; v += kThreadsB) {
    uint4 u;
    if (p.pre_source == PreSource::kIdentity) {
      u = kFromL2 ? ldcg16(x + v * 8) : ld16(x + v * 8);
    } else if (weighted) {
      // Each output rounded once from the exact sum, adjacent columns certified together
      // (exact_sum_bf16x2); the streams are read for the last time here (streaming loads).
      uint4 r[kN];
#pragma unroll
      for (int j = 0; j < kN; ++j) r[j] = kFromL2 ? ldcg16(x + j * p.x_stream_stride + v * 8) : ldcs16(x + j * p.x_stream_stride + v * 8);
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v0[kN], v1[kN], abs0, abs1;
        column_pair(r, i, v0, v1, abs0, abs1);
        w[i] = exact_sum_bf16x2(pre, v0, v1, sum_error_bound(pre_scale, abs0), sum_error_bound(pre_scale, abs1));
      }
      u = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      // the mean head: the exact sum (double), divided by n, rounded once
      double acc[8];
      float f[8];
      unpack8(kFromL2 ? ldcg16(x + v * 8) : ld16(x + v * 8), f);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = f[e];
#pragma unroll
      for (int j = 1; j < kN; ++j) {
        unpack8(kFromL2 ? ldcg16(x + j * p.x_stream_stride + v * 8) : ld16(x + j * p.x_stream_stride + v * 8), f);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += f[e];
      }
      uint32_t w[4];
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        w[e / 2] = static_cast<uint32_t>(double_to_bf16_bits(acc[e] / kN)) |
                   (static_cast<uint32_t>(double_to_bf16_bits(acc[e + 1] / kN)) << 16);
      }
      u = make_uint4(w[0], w[1], w[2], w[3]);
    }
    if (!fold) {
      st16(dst + v * 8, u);
    } else {
      row[v] = u;  // read back below by this thread only
      float f[8];
      unpack8(u, f);
#pragma unroll
      for (int e = 0; e < 8; ++e) sq[0] = fmaf(f[e], f[e], sq[0]);
    }
  }
  if (!fold) return;
  block_sum(sq, scratch);
  const float inv = 1.0f / sqrtf(sq[0] / static_cast<float>(p.H) + p.rmsnorm_eps);
  for (int64_t v = tid; v < vecs; v += kThreadsB) {
    float f[8], w[8], y[8];
    unpack8(row[v], f);
    unpack8(ld16(p.rmsnorm_weight + v * 8), w);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = f[e] * inv * w[e];
    st16(dst + v * 8, pack8(y));
  }
}

}  // namespace mhc::cuda::n4
