// src/cuda/exact_sum.cuh - bf16 conversions and the exact bf16 sums of the post and collapse
// stages: bf16(sum_j w[j] * v[j]) for fp32 weights and bf16 values, rounded once from the exact
// sum (what the float64 reference gives, also where the terms cancel).
//
// The fast path is the fp32 FMA chain with an a-priori error bound; where both ends of the
// bound round to one bf16, that is the answer (certified). Otherwise, and for non-finite
// inputs, the sum is redone in double, where every product is exact.
#pragma once

#include <cuda_bf16.h>
#include <cfloat>
#include <cstdint>

#include "src/core/problem.hpp"

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

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = static_cast<uint32_t>(float_to_bf16_bits(f[2 * i])) |
           (static_cast<uint32_t>(float_to_bf16_bits(f[2 * i + 1])) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
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

/// The fp32 chains s0, s1 of two adjacent outputs with the same weights (w[0]*v[0], then fma in
/// j order) and the bf16 roundings of their intervals' ends, packed as bf16x2 words (first output
/// in the low half): a from s -/+ e's lower ends, b from the upper ends.
template <int N>
__device__ __forceinline__ void sum_bf16x2_interval(const float (&w)[N], const float (&v0)[N], const float (&v1)[N],
                                                    float e0, float e1, float& s0, float& s1, uint32_t& a,
                                                    uint32_t& b) {
  s0 = w[0] * v0[0];
  s1 = w[0] * v1[0];
#pragma unroll
  for (int j = 1; j < N; ++j) {
    s0 = fmaf(w[j], v0[j], s0);
    s1 = fmaf(w[j], v1[j], s1);
  }
  const __nv_bfloat162 lo = __floats2bfloat162_rn(s0 - e0, s1 - e1);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(s0 + e0, s1 + e1);
  a = *reinterpret_cast<const uint32_t*>(&lo);
  b = *reinterpret_cast<const uint32_t*>(&hi);
}

/// The failure bits of one pair from sum_bf16x2_interval's words a (lower ends) and b (upper
/// ends): nonzero where the ends round apart (a ^ b) or where a half of a is Inf or NaN
/// (exponent all ones: an fp32 chain that overflowed or met a non-finite term ends there and
/// stays there, so a finite a means the chain's bound holds). Zero: the pair is certified.
/// Three integer operations, no branch. (Or-ing the bits of many pairs and redoing them all
/// where any fails measured slower in post8, session 16: rare for a lane is common for a warp.)
__device__ __forceinline__ uint32_t pair_failure(uint32_t a, uint32_t b) {
  // a half's (exponent bits + 0x80) reaches bit 15 of the half only for exponent 0xff
  const uint32_t nonfinite = ((a & 0x7f807f80u) + 0x00800080u) & 0x80008000u;
  return (a ^ b) | nonfinite;
}

/// The fast path of exact_sum_bf16x2: two adjacent outputs with the same weights, packed as a
/// bf16x2 word (first output in the low half). `certified` says whether the word is the exact
/// sums rounded once: both interval ends round alike and are finite (pair_failure; an fp32
/// overflow of a finite exact sum, or a NaN/Inf input, needs the double path). No branch.
template <int N>
__device__ __forceinline__ uint32_t sum_bf16x2_fast(const float (&w)[N], const float (&v0)[N], const float (&v1)[N],
                                                    float e0, float e1, bool& certified) {
  float s0, s1;
  uint32_t a, b;
  sum_bf16x2_interval(w, v0, v1, e0, e1, s0, s1, a, b);
  certified = pair_failure(a, b) == 0;
  return a;
}

/// sum_bf16x2_fast without the overflow checks, for callers whose bounds already exclude
/// overflow and non-finite terms (post8_fast): `certified` is and-ed with the interval test, so
/// one flag collects many pairs.
template <int N>
__device__ __forceinline__ uint32_t sum_bf16x2_unchecked(const float (&w)[N], const float (&v0)[N], const float (&v1)[N],
                                                         float e0, float e1, bool& certified) {
  float s0, s1;
  uint32_t a, b;
  sum_bf16x2_interval(w, v0, v1, e0, e1, s0, s1, a, b);
  certified = certified && a == b;
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

/// max(a, b), NaN where either is NaN (fmaxf returns the other operand).
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

/// (N + 3) u (u = 2^-24): times max_j |w[j]| and sum_j |v[j]|, it bounds the error of the N-term
/// fp32 chain of exact_sum_bf16 (N roundings, each <= u times a partial sum <= max|w| sum|v|;
/// the 3 spare u cover the rounding of the bound itself and of s -/+ e).
template <int N>
__device__ __forceinline__ constexpr float sum_error_unit() {
  return static_cast<float>(N + 3) * 0x1p-24f;
}

/// The error scale sum_error_unit<N>() max_j |w[j]| of the weights w.
template <int N>
__device__ __forceinline__ float sum_error_scale(const float (&w)[N]) {
  float m = fabsf(w[0]);
#pragma unroll
  for (int j = 1; j < N; ++j) m = fmaxf(m, fabsf(w[j]));
  return m * sum_error_unit<N>();
}

/// The bound e for values whose absolute sum is `abs_sum`; 2^-140 covers fp32 underflow.
__device__ __forceinline__ float sum_error_bound(float scale, float abs_sum) {
  return fmaf(scale, abs_sum, 0x1p-140f);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

/// The terms of columns 2i and 2i + 1 of M vectors of 8 bf16 (the two halves of word i of each),
/// with their absolute sums in vector order.
template <int M>
__device__ __forceinline__ void column_pair(const uint4 (&vec)[M], int i, float (&v0)[M], float (&v1)[M],
                                            float& abs0, float& abs1) {
#pragma unroll
  for (int j = 0; j < M; ++j) {
    const uint32_t xw = word(vec[j], i);
    v0[j] = __uint_as_float(xw << 16);
    v1[j] = __uint_as_float(xw & 0xffff0000u);
    abs0 = j == 0 ? fabsf(v0[j]) : abs0 + fabsf(v0[j]);
    abs1 = j == 0 ? fabsf(v1[j]) : abs1 + fabsf(v1[j]);
  }
}

}  // namespace mhc::cuda
