// src/cuda/n4/collapse_row.cuh - the collapse of one token by one 256-thread block: layer_input
// = bf16(sum_j pre[j] * x[j]) (each output the exact sum rounded once, adjacent columns
// certified together), or stream 0 bit for bit (identity pre), or the mean head (the exact
// double sum divided by n, rounded once); then the optional RMSNorm fold, whose sum of squares is
// each thread's fmaf chain over its vectors v = tid, tid + 256, ... followed by block_sum. Every
// n = 4 kernel that collapses runs this code, so they give the same bits.
#pragma once

#include "src/cuda/exact_sum.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/config.cuh"
#include "src/cuda/ptx.cuh"
#include "src/cuda/reduce.cuh"

namespace mhc::cuda::n4 {

enum class CollapseKind { kIdentity, kWeighted, kMean };

__device__ __forceinline__ CollapseKind collapse_kind(const N4Params& p) {
  if (p.pre_source == PreSource::kIdentity) return CollapseKind::kIdentity;
  return p.head_mean ? CollapseKind::kMean : CollapseKind::kWeighted;
}

/// The streams of 8-column vector v of a token's x that its collapse reads (identity: stream 0).
/// kFromL2: L2 only (ldcg16), for streams another block of the same kernel wrote; otherwise
/// streaming loads for the weighted collapse (the last read of the streams).
template <bool kFromL2>
__device__ __forceinline__ void load_streams(const N4Params& p, CollapseKind kind, const bf16_t* x, int64_t v,
                                             uint4 (&r)[kN]) {
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    if (j > 0 && kind == CollapseKind::kIdentity) break;
    const bf16_t* src = x + j * p.x_stream_stride + v * 8;
    r[j] = kFromL2 ? ldcg16(src) : kind == CollapseKind::kWeighted ? ldcs16(src) : ld16(src);
  }
}

/// The collapse of one vector: stream 0 bit for bit (identity); each output the exact sum
/// rounded once, adjacent columns certified together (weighted); the exact double sum divided
/// by n, rounded once (mean head).
__device__ __forceinline__ uint4 collapse_vec(CollapseKind kind, const float (&pre)[kN], float pre_scale,
                                              const uint4 (&r)[kN]) {
  if (kind == CollapseKind::kIdentity) return r[0];
  uint32_t w[4];
  if (kind == CollapseKind::kWeighted) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v0[kN], v1[kN], abs0, abs1;
      column_pair(r, i, v0, v1, abs0, abs1);
      w[i] = exact_sum_bf16x2(pre, v0, v1, sum_error_bound(pre_scale, abs0), sum_error_bound(pre_scale, abs1));
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
  double acc[8];
  float f[8];
  unpack8(r[0], f);
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = f[e];
#pragma unroll
  for (int j = 1; j < kN; ++j) {
    unpack8(r[j], f);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += f[e];
  }
#pragma unroll
  for (int e = 0; e < 8; e += 2) {
    w[e / 2] = static_cast<uint32_t>(double_to_bf16_bits(acc[e] / kN)) |
               (static_cast<uint32_t>(double_to_bf16_bits(acc[e + 1] / kN)) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// The RMSNorm fold's factor 1 / sqrt(mean(u^2) + eps) of a collapsed row from its sum of squares
/// (one expression for every kernel that folds: the same bits).
__device__ __forceinline__ float fold_factor(const N4Params& p, float sumsq) {
  return 1.0f / sqrtf(sumsq / static_cast<float>(p.H) + p.rmsnorm_eps);
}

/// The folded output of one vector: bf16(u * inv * w).
__device__ __forceinline__ uint4 fold_vec(const uint4& u, const uint4& wv, float inv) {
  float f[8], w[8], y[8];
  unpack8(u, f);
  unpack8(wv, w);
#pragma unroll
  for (int e = 0; e < 8; ++e) y[e] = f[e] * inv * w[e];
  return pack8(y);
}

/// The pre weights of the collapse from shared memory (zero where unused) and their error scale.
__device__ __forceinline__ float collapse_pre(CollapseKind kind, const float* s_pre, float (&pre)[kN]) {
#pragma unroll
  for (int j = 0; j < kN; ++j) pre[j] = kind == CollapseKind::kWeighted ? s_pre[j] : 0.0f;
  return sum_error_scale(pre);
}

/// Called by all kThreadsB threads of the block (it has block barriers). s_pre: the pre weights
/// in shared memory (ignored for identity and the mean head); row_smem: H * 2 bytes when folding;
/// scratch: kThreadsB / 32 floats. kFromL2: the streams from L2 only (load_streams).
template <bool kFromL2 = false>
__device__ __forceinline__ void collapse_row(const N4Params& p, int64_t t, const float* s_pre,
                                             unsigned char* row_smem, float* scratch) {
  const int tid = threadIdx.x;
  const int64_t vecs = p.H / 8;
  const bf16_t* x = p.x + t * p.x_stride;
  bf16_t* dst = p.layer_input + t * p.layer_input_stride;
  uint4* row = reinterpret_cast<uint4*>(row_smem);
  const bool fold = p.rmsnorm_weight != nullptr;
  const CollapseKind kind = collapse_kind(p);
  float pre[kN];
  const float pre_scale = collapse_pre(kind, s_pre, pre);
  float sq[1] = {0.0f};
  for (int64_t v = tid; v < vecs; v += kThreadsB) {
    uint4 r[kN];
    load_streams<kFromL2>(p, kind, x, v, r);
    const uint4 u = collapse_vec(kind, pre, pre_scale, r);
    if (!fold) {
      st16(dst + v * 8, u);
    } else {
      row[v] = u;  // read back below by this thread only
      add_squares(u, sq[0]);
    }
  }
  if (!fold) return;
  block_sum(sq, scratch);
  const float inv = fold_factor(p, sq[0]);
  for (int64_t v = tid; v < vecs; v += kThreadsB) st16(dst + v * 8, fold_vec(row[v], ld16(p.rmsnorm_weight + v * 8), inv));
}

/// The same collapse with every load of the row issued up front (latency-bound small-T use):
/// load_row fills r for the thread's vectors v = tid + i * kThreadsB (i < kMaxV, H <= kMaxV *
/// kThreadsB * 8), collapse_loaded computes exactly what collapse_row computes, with the
/// thread's vectors of the RMSNorm weight already loaded (wr[i] for vector v = tid + i *
/// kThreadsB) when folding. kWarps > 0: only the block's first kWarps = kThreadsB / 32 warps call
/// collapse_loaded (block_sum's named barrier), so other warps may run the epilogue meanwhile.
/// all_streams: the 4 streams whatever the collapse reads (for their sums of squares).
template <int kMaxV>
__device__ __forceinline__ void load_row(const N4Params& p, int64_t t, uint4 (&r)[kMaxV][kN], bool all_streams) {
  const int64_t vecs = p.H / 8;
  const bf16_t* x = p.x + t * p.x_stride;
  const CollapseKind kind = all_streams ? CollapseKind::kWeighted : collapse_kind(p);
#pragma unroll
  for (int i = 0; i < kMaxV; ++i) {
    const int64_t v = threadIdx.x + i * kThreadsB;
    if (v < vecs) load_streams<true>(p, kind, x, v, r[i]);
  }
}

template <int kMaxV, int kWarps = 0>
__device__ __forceinline__ void collapse_loaded(const N4Params& p, int64_t t, const float* s_pre,
                                                const uint4 (&r)[kMaxV][kN], const uint4 (&wr)[kMaxV], float* scratch) {
  const int64_t vecs = p.H / 8;
  bf16_t* dst = p.layer_input + t * p.layer_input_stride;
  const bool fold = p.rmsnorm_weight != nullptr;
  const CollapseKind kind = collapse_kind(p);
  float pre[kN];
  const float pre_scale = collapse_pre(kind, s_pre, pre);
  float sq[1] = {0.0f};
  uint4 u[kMaxV];
#pragma unroll
  for (int i = 0; i < kMaxV; ++i) {
    const int64_t v = threadIdx.x + i * kThreadsB;
    u[i] = make_uint4(0, 0, 0, 0);
    if (v < vecs) {
      u[i] = collapse_vec(kind, pre, pre_scale, r[i]);
      if (!fold) {
        st16(dst + v * 8, u[i]);
      } else {
        add_squares(u[i], sq[0]);
      }
    }
  }
  if (!fold) return;
  block_sum<1, kWarps>(sq, scratch);
  const float inv = fold_factor(p, sq[0]);
#pragma unroll
  for (int i = 0; i < kMaxV; ++i) {
    const int64_t v = threadIdx.x + i * kThreadsB;
    if (v < vecs) st16(dst + v * 8, fold_vec(u[i], wr[i], inv));
  }
}

}  // namespace mhc::cuda::n4
