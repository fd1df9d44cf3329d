// src/cuda/common.cuh - device helpers shared by every CUDA variant: bf16 conversion, the
// deterministic block reduction, and the per-token mixes epilogue (sigmoids + Sinkhorn).
//
// Numerics: fp32 throughout with IEEE exp/sqrt; divisions are multiplications by a reciprocal
// from rcp.approx (relative error <= 2^-23, so x * rcp(d) is within ~2 ulp of x / d), which
// keeps the epilogue within ~1e-6 of the float64 reference. A one-thread Sinkhorn with 32 IEEE
// divisions per iteration took ~13 us per token.
#pragma once

#include <cuda_bf16.h>
#include <cfloat>
#include <cstdint>

#include "src/core/problem.hpp"
#include "src/core/prepared.hpp"

namespace mhc::cuda {

using detail::bf16_t;

__device__ __forceinline__ float bf16_bits_to_float(bf16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ bf16_t float_to_bf16_bits(float f) {
  const __nv_bfloat16 b = __float2bfloat16_rn(f);
  return *reinterpret_cast<const bf16_t*>(&b);
}

/// double -> bf16 with one rounding (nearest even). The post and collapse sums are formed in
/// double (products of an fp32 weight and a bf16 value are exact there) and rounded once, so
/// they match the float64 reference even where the terms cancel.
__device__ __forceinline__ bf16_t double_to_bf16_bits(double d) {
  const __nv_bfloat16 b = __double2bfloat16(d);
  return *reinterpret_cast<const bf16_t*>(&b);
}

/// bf16 of the exact sum_j w[j] * v[j] (fp32 weights, bf16 values held in fp32), rounded once
/// to nearest even: what the float64 reference gives, also where the terms cancel.
/// Fast path: the fp32 FMA chain s (w[0]*v[0], then fma in j order) and an a-priori bound
/// e >= |s - exact| from the caller (see sum_error_scale / sum_error_bound). Rounding is
/// monotone, so when s - e and s + e round to one bf16 the exact sum rounds to it too. Otherwise
/// (about 1 output in 1000, or a non-finite input or overflow) the sum is redone in double,
/// where every product is exact, and rounded once: the path every output took before.
template <int N>
__device__ __forceinline__ bf16_t exact_sum_bf16(const float (&w)[N], const float (&v)[N], float e) {
  float s = w[0] * v[0];
#pragma unroll
  for (int j = 1; j < N; ++j) s = fmaf(w[j], v[j], s);
  const __nv_bfloat162 ends = __floats2bfloat162_rn(s - e, s + e);
  const uint32_t bits = *reinterpret_cast<const uint32_t*>(&ends);
  if (fabsf(s) + e <= FLT_MAX && (bits & 0xffffu) == (bits >> 16)) return static_cast<bf16_t>(bits & 0xffffu);
  double acc = static_cast<double>(w[0]) * static_cast<double>(v[0]);
#pragma unroll
  for (int j = 1; j < N; ++j) acc = fma(static_cast<double>(w[j]), static_cast<double>(v[j]), acc);
  return double_to_bf16_bits(acc);
}

/// Up to 5 weights and two value columns, passed by value to the out-of-line double path.
struct SumTerms {
  float w[5], v0[5], v1[5];
};

/// The double path of exact_sum_bf16x2: both sums formed in double (every product exact) and
/// rounded once. Out of line, so that the fast path's registers do not have to make room for it.
template <int N>
__device__ __noinline__ uint32_t exact_sum_bf16x2_slow(const SumTerms t) {
  double acc0 = static_cast<double>(t.w[0]) * static_cast<double>(t.v0[0]);
  double acc1 = static_cast<double>(t.w[0]) * static_cast<double>(t.v1[0]);
#pragma unroll
  for (int j = 1; j < N; ++j) {
    acc0 = fma(static_cast<double>(t.w[j]), static_cast<double>(t.v0[j]), acc0);
    acc1 = fma(static_cast<double>(t.w[j]), static_cast<double>(t.v1[j]), acc1);
  }
  return static_cast<uint32_t>(double_to_bf16_bits(acc0)) | (static_cast<uint32_t>(double_to_bf16_bits(acc1)) << 16);
}

/// exact_sum_bf16x2's double path for one pair (for callers that certify several pairs first).
template <int N>
__device__ __forceinline__ uint32_t exact_sum_bf16x2_redo(const float (&w)[N], const float (&v0)[N],
                                                          const float (&v1)[N]) {
  static_assert(N <= 5, "SumTerms holds 5 terms");
  SumTerms t{};
#pragma unroll
  for (int j = 0; j < N; ++j) {
    t.w[j] = w[j];
    t.v0[j] = v0[j];
    t.v1[j] = v1[j];
  }
  return exact_sum_bf16x2_slow<N>(t);
}

/// The fast path of exact_sum_bf16x2: two adjacent outputs with the same weights, packed as a
/// bf16x2 word (first output in the low half). `certified` says whether the word is the exact
/// sums rounded once: both interval ends round alike (one compare of two packed conversions)
/// and both fp32 sums are finite (an fp32 overflow of a finite exact sum, or a NaN/Inf input,
/// needs the double path). No branch, so a caller can run many pairs back to back and test once.
template <int N>
__device__ __forceinline__ uint32_t sum_bf16x2_fast(const float (&w)[N], const float (&v0)[N], const float (&v1)[N],
                                                    float e0, float e1, bool& certified) {
  float s0 = w[0] * v0[0], s1 = w[0] * v1[0];
#pragma unroll
  for (int j = 1; j < N; ++j) {
    s0 = fmaf(w[j], v0[j], s0);
    s1 = fmaf(w[j], v1[j], s1);
  }
  const __nv_bfloat162 lo = __floats2bfloat162_rn(s0 - e0, s1 - e1);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(s0 + e0, s1 + e1);
  const uint32_t a = *reinterpret_cast<const uint32_t*>(&lo);
  const uint32_t b = *reinterpret_cast<const uint32_t*>(&hi);
  certified = a == b && fabsf(s0) <= FLT_MAX && fabsf(s1) <= FLT_MAX;
  return a;
}

/// Two outputs of exact_sum_bf16 (same bits), certified together (sum_bf16x2_fast), else
/// formed in double.
template <int N>
__device__ __forceinline__ uint32_t exact_sum_bf16x2(const float (&w)[N], const float (&v0)[N], const float (&v1)[N],
                                                     float e0, float e1) {
  bool certified;
  const uint32_t a = sum_bf16x2_fast(w, v0, v1, e0, e1, certified);
  return certified ? a : exact_sum_bf16x2_redo(w, v0, v1);
}

/// (N + 3) u max_j |w[j]| (u = 2^-24): with sum_j |v[j]| it bounds the error of the N-term
/// fp32 chain of exact_sum_bf16 (N roundings, each <= u times a partial sum <= max|w| sum|v|;
/// the 3 spare u cover the rounding of the bound itself and of s -/+ e).
template <int N>
__device__ __forceinline__ float sum_error_scale(const float (&w)[N]) {
  float m = fabsf(w[0]);
#pragma unroll
  for (int j = 1; j < N; ++j) m = fmaxf(m, fabsf(w[j]));
  return m * (static_cast<float>(N + 3) * 0x1p-24f);
}

/// The bound e for values whose absolute sum is `abs_sum`; 2^-140 covers fp32 underflow.
__device__ __forceinline__ float sum_error_bound(float scale, float abs_sum) {
  return fmaf(scale, abs_sum, 0x1p-140f);
}

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

/// 1/x by the multi-function unit (rcp.approx: relative error <= 2^-23, one instruction). The
/// epilogue's serial chain (Sinkhorn: 8 reciprocals per iteration) runs on one thread per token,
/// so its latency is the decode latency: __frcp_rn cost ~10 us per token there.
__device__ __forceinline__ float fast_rcp(float x) {
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float sigmoid(float x) { return fast_rcp(1.0f + expf(-x)); }

/// The spec's Sinkhorn (section 3), in registers, on an N x N matrix c[j*N + k].
template <int N>
__device__ __forceinline__ void sinkhorn(float (&c)[N * N], int iters, float eps) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float mx = c[j * N];
#pragma unroll
    for (int k = 1; k < N; ++k) mx = (c[j * N + k] > mx || isnan(c[j * N + k])) ? c[j * N + k] : mx;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      c[j * N + k] = expf(c[j * N + k] - mx);
      sum += c[j * N + k];
    }
    const float r = fast_rcp(sum);
#pragma unroll
    for (int k = 0; k < N; ++k) c[j * N + k] = fmaf(c[j * N + k], r, eps);
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < N; ++k) sum += c[j * N + k];
        const float r = fast_rcp(sum + eps);
#pragma unroll
        for (int k = 0; k < N; ++k) c[j * N + k] *= r;
      }
    }
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < N; ++j) sum += c[j * N + k];
      const float r = fast_rcp(sum + eps);
#pragma unroll
      for (int j = 0; j < N; ++j) c[j * N + k] *= r;
    }
  }
}

/// Everything the mixes epilogue needs: scalars, weights' scale/base, output pointers.
struct EpilogueParams {
  const float* scale;  // [3] (head: [1])
  const float* base;   // [rows]
  float pre_eps, sinkhorn_eps, post_scale, norm_eps;
  int32_t sinkhorn_iters;
  bool head;           // learned head: pre only
  float* pre_mix_out;  int64_t pre_mix_out_stride;
  float* post_mix_out; int64_t post_mix_out_stride;
  float* comb_mix_out; int64_t comb_mix_out_stride;
};

/// From the raw dot products dot[r] = x . fn[r] and sum(x^2) of one token, computes
/// m = dot * r and then pre/post/comb; writes the requested outputs of token t and returns the
/// fresh pre in `pre`. Runs on one thread.
template <int N>
__device__ __forceinline__ void mixes_epilogue(const EpilogueParams& e, const float* dot, float sumsq,
                                               float inv_k, int64_t t, float (&pre)[N]) {
  const float r = 1.0f / sqrtf(sumsq * inv_k + e.norm_eps);
#pragma unroll
  for (int j = 0; j < N; ++j) pre[j] = sigmoid(dot[j] * r * e.scale[0] + e.base[j]) + e.pre_eps;
  if (e.head) return;
  if (e.pre_mix_out != nullptr) {
#pragma unroll
    for (int j = 0; j < N; ++j) e.pre_mix_out[t * e.pre_mix_out_stride + j] = pre[j];
  }
  if (e.post_mix_out != nullptr) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      e.post_mix_out[t * e.post_mix_out_stride + j] =
          e.post_scale * sigmoid(dot[N + j] * r * e.scale[1] + e.base[N + j]);
    }
  }
  if (e.comb_mix_out != nullptr) {
    float c[N * N];
#pragma unroll
    for (int i = 0; i < N * N; ++i) c[i] = dot[2 * N + i] * r * e.scale[2] + e.base[2 * N + i];
    sinkhorn<N>(c, e.sinkhorn_iters, e.sinkhorn_eps);
#pragma unroll
    for (int i = 0; i < N * N; ++i) e.comb_mix_out[t * e.comb_mix_out_stride + i] = c[i];
  }
}

/// Builds the epilogue params of a problem.
inline EpilogueParams make_epilogue(const detail::Problem& p) {
  EpilogueParams e{};
  if (p.weights != nullptr) {
    e.scale = p.weights->d_scale;
    e.base = p.weights->d_base;
    e.head = p.weights->head;
  }
  e.pre_eps = p.pre_eps;
  e.sinkhorn_eps = p.sinkhorn_eps;
  e.post_scale = p.post_scale;
  e.norm_eps = p.norm_eps;
  e.sinkhorn_iters = p.sinkhorn_iters;
  e.pre_mix_out = p.pre_mix_out;
  e.pre_mix_out_stride = p.pre_mix_out_stride;
  e.post_mix_out = p.post_mix_out;
  e.post_mix_out_stride = p.post_mix_out_stride;
  e.comb_mix_out = p.comb_mix_out;
  e.comb_mix_out_stride = p.comb_mix_out_stride;
  return e;
}

}  // namespace mhc::cuda
