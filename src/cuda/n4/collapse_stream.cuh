// src/cuda/n4/collapse_stream.cuh - the collapse of one token by a 256-thread block, streaming
// (collapse_stream_kernel, and tail_kernel of the overlap plan): layer_input[t] =
// bf16(sum_j pre[j] * x[t,j,:]) for the weighted pre, stream 0 bit for bit (identity), or the
// mean head bf16(sum_j x[t,j,:] / 4); optionally RMSNorm-folded.
//
// Thread tid owns the 8-column vectors v = tid, tid + 256, ... (at most kVecs of them, a template
// choice by H), loads the 4 streams of kCollapseBatch vectors at once (16-byte streaming loads:
// the streams' last read) before any arithmetic, and keeps its collapsed vectors in registers
// for the fold.
// Accumulation: the arithmetic of collapse_kernel's collapse, bit for bit: exact_sum_bf16x2 with
// the same weights and bounds (weighted), the double sum (mean), and the fold's sum of squares
// in collapse_kernel's order (per thread a fmaf chain over its vectors in order, then block_sum
// over the 256 threads), 1 / sqrtf(sum / H + eps), bf16(u * inv * w).
// With p.copy_x_out (pre_broadcast by fn_b: x is the embedding at stream stride 0), the thread
// also stores each vector it loaded to the n streams of residual_out, so the materialised
// residual costs its writes and no second read of the embedding.
#pragma once

#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/reduce.cuh"

namespace mhc::cuda::n4 {

constexpr int kCollapseBatch = 2;  // vectors per thread whose loads are issued together

/// Token t's collapse with the pre weights `pre` (weighted; unused otherwise), by all kThreadsB
/// threads of the block (the fold has block barriers); scratch: kThreadsB / 32 floats.
template <int kVecs>
__device__ __forceinline__ void collapse_stream_token(const N4Params& p, int64_t t, CollapseKind mode,
                                                      const float (&pre)[kN], float* scratch) {
  const int tid = threadIdx.x;
  const int64_t vecs = p.H / 8;
  const int streams = mode == CollapseKind::kIdentity ? 1 : kN;
  const bool fold = p.rmsnorm_weight != nullptr;
  const float pre_scale = sum_error_scale(pre);
  const bf16_t* x = p.x + t * p.x_stride;
  bf16_t* dst = p.layer_input + t * p.layer_input_stride;
  bf16_t* copies = p.copy_x_out ? p.residual_out + t * p.residual_out_stride : nullptr;
  uint4 u[kVecs];  // this thread's collapsed vectors (kept for the fold)
  float sq[1] = {0.0f};
#pragma unroll
  for (int b = 0; b < kVecs; b += kCollapseBatch) {
    uint4 r[kCollapseBatch][kN];
#pragma unroll
    for (int q = 0; q < kCollapseBatch; ++q) {
      const int64_t v = tid + static_cast<int64_t>(b + q) * kThreadsB;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        r[q][j] = v < vecs && j < streams ? ldcs16(x + j * p.x_stream_stride + v * 8) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int q = 0; q < kCollapseBatch; ++q) {
      const int64_t v = tid + static_cast<int64_t>(b + q) * kThreadsB;
      if (v < vecs) {
        if (copies != nullptr) {
#pragma unroll
          for (int j = 0; j < kN; ++j) st16(copies + j * p.H + v * 8, r[q][0]);
        }
        u[b + q] = collapse_vec(mode, pre, pre_scale, r[q]);
        if (!fold) {
          st16(dst + v * 8, u[b + q]);
        } else {
          add_squares(u[b + q], sq[0]);
        }
      }
    }
  }
  if (!fold) return;  // block-uniform
  block_sum(sq, scratch);
  const float inv = 1.0f / sqrtf(sq[0] / static_cast<float>(p.H) + p.rmsnorm_eps);
#pragma unroll
  for (int q = 0; q < kVecs; ++q) {
    const int64_t v = tid + static_cast<int64_t>(q) * kThreadsB;
    if (v < vecs) st16(dst + v * 8, fold_vec(u[q], ld16(p.rmsnorm_weight + v * 8), inv));
  }
}

}  // namespace mhc::cuda::n4
