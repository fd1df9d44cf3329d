// src/cpu/exact_sum.hpp - the exact bf16 sums of the fast CPU path (post and collapse stages):
// bf16(sum_j w[j] * v[j]) for fp32 weights and bf16 values, rounded once from the exact sum, which
// is what the float64 oracle gives (the CPU twin of src/cuda/exact_sum.cuh).
//
// Per output: the fp32 chain s = w0*v0, then s = s + w_j*v_j in j order, and the a-priori bound
// e = (2N + 3) u max|w| sum|v| + 2^-126 (u = 2^-24: 2N - 1 roundings of products and partial
// sums, each <= u max|w| sum|v|; the spare cover the rounding of e and of s -/+ e, and a contracted
// FMA chain; 2^-126, the least normal fp32, covers underflow and keeps the bound out of the
// subnormal range, whose arithmetic costs a microcode assist per operation on x86). When s - e and s + e round to one bf16 and |s| + e is finite, that bf16 is the
// answer: rounding is monotone and the exact sum lies in [s - e, s + e]; the oracle's float64 sum
// (every product exact, at most N roundings of 2^-53) lies there too. Otherwise (cancelling terms,
// NaN/Inf, overflow) the sum is redone in double in the oracle's order and rounded once.
// kFromZero: the oracle's sum starts from +0.0 (collapse), so a zero result is +0 there and here.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "src/core/bf16.hpp"
#include "src/core/problem.hpp"
#include "src/cpu/fast.hpp"

namespace mhc::detail::cpu {

constexpr int64_t kLane = 64;  // columns converted and summed together (stack arrays)

/// Round to nearest even without the NaN case (a NaN is never certified, so its bits do not matter).
inline uint32_t round_bf16_finite(float f) {
  uint32_t w;
  std::memcpy(&w, &f, sizeof w);
  return (w + 0x7fffu + ((w >> 16) & 1u)) >> 16;
}

/// (2N + 3) u max_j |w[j]|: times sum_j |v[j]| it bounds the error of the N-term fp32 chain.
template <int N>
inline float sum_error_scale(const float* w) {
  float m = std::fabs(w[0]);
  for (int j = 1; j < N; ++j) m = std::fmax(m, std::fabs(w[j]));
  return m * (static_cast<float>(2 * N + 3) * 0x1p-24f);
}

/// The oracle's float64 sum in its order, rounded once (out of line: the rare path).
template <int N, bool kFromZero>
__attribute__((noinline)) bf16_t oracle_sum(const float* w, const float* v) {
  double acc = kFromZero ? 0.0 + static_cast<double>(w[0]) * static_cast<double>(v[0])
                         : static_cast<double>(w[0]) * static_cast<double>(v[0]);
  for (int j = 1; j < N; ++j) acc += static_cast<double>(w[j]) * static_cast<double>(v[j]);
  return double_to_bf16(acc);
}

/// Widens columns [h0, h0 + len) (len <= kLane) of N bf16 rows into v[j][i], with abs_sum[i] =
/// sum_j |v[j][i]| in j order.
template <int N>
__attribute__((target("avx2,fma"))) inline void load_lane_avx2(const bf16_t* const* rows, int64_t h0, float (&v)[N][kLane],
                                                              float (&abs_sum)[kLane]) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < kLane; i += 8) {
    __m256 a = _mm256_setzero_ps();
    for (int j = 0; j < N; ++j) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + h0 + i));
      const __m256 x = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      _mm256_storeu_ps(v[j] + i, x);
      a = j == 0 ? _mm256_and_ps(x, absmask) : _mm256_add_ps(a, _mm256_and_ps(x, absmask));
    }
    _mm256_storeu_ps(abs_sum + i, a);
  }
}

template <int N>
inline void load_lane(const bf16_t* const* rows, int64_t h0, int64_t len, float (&v)[N][kLane],
                      float (&abs_sum)[kLane]) {
  if (len == kLane && use_avx2()) return load_lane_avx2<N>(rows, h0, v, abs_sum);
  for (int64_t i = 0; i < len; ++i) {
    v[0][i] = bf16_to_float(rows[0][h0 + i]);
    float a = std::fabs(v[0][i]);
    for (int j = 1; j < N; ++j) {
      v[j][i] = bf16_to_float(rows[j][h0 + i]);
      a = a + std::fabs(v[j][i]);
    }
    abs_sum[i] = a;
  }
}

/// The AVX2 form of exact_sum_lane's certified part for len = kLane: the same fp32 operations
/// (no contraction) 8 columns at a time; returns a bit per column that needs the double path.
template <int N, bool kFromZero>
__attribute__((target("avx2,fma"))) inline uint64_t exact_sum_lane_avx2(const float* w, float scale,
                                                                        const float (&v)[N][kLane],
                                                                        const float (&abs_sum)[kLane], bf16_t* dst) {
  uint64_t redo = 0;
  const __m256 vscale = _mm256_set1_ps(scale), tiny = _mm256_set1_ps(0x1p-126f), fmax = _mm256_set1_ps(FLT_MAX);
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  for (int64_t i = 0; i < kLane; i += 8) {
    __m256 sum = _mm256_mul_ps(_mm256_set1_ps(w[0]), _mm256_loadu_ps(v[0] + i));
    for (int j = 1; j < N; ++j) sum = _mm256_add_ps(sum, _mm256_mul_ps(_mm256_set1_ps(w[j]), _mm256_loadu_ps(v[j] + i)));
    if (kFromZero) sum = _mm256_add_ps(sum, _mm256_setzero_ps());
    const __m256 e = _mm256_add_ps(_mm256_mul_ps(vscale, _mm256_loadu_ps(abs_sum + i)), tiny);
    const __m256i a = _mm256_castps_si256(_mm256_sub_ps(sum, e));
    const __m256i b = _mm256_castps_si256(_mm256_add_ps(sum, e));
    const __m256i lo = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, bias), _mm256_and_si256(_mm256_srli_epi32(a, 16), one)), 16);
    const __m256i hi = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, bias), _mm256_and_si256(_mm256_srli_epi32(b, 16), one)), 16);
    const __m256 fin = _mm256_cmp_ps(_mm256_add_ps(_mm256_and_ps(sum, absmask), e), fmax, _CMP_LE_OQ);
    const __m256 ok = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(lo, hi)), fin);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), packed);
    redo |= static_cast<uint64_t>(~_mm256_movemask_ps(ok) & 0xff) << i;
  }
  return redo;
}

/// dst[i] = bf16(sum_j w[j] * v[j][i]) exactly, i < len; scale = sum_error_scale<N>(w).
template <int N, bool kFromZero>
inline void exact_sum_lane(const float* w, float scale, const float (&v)[N][kLane], const float (&abs_sum)[kLane],
                           int64_t len, bf16_t* dst) {
  if (len == kLane && use_avx2()) {
    uint64_t bits = exact_sum_lane_avx2<N, kFromZero>(w, scale, v, abs_sum, dst);
    while (bits != 0) {
      const int i = __builtin_ctzll(bits);
      bits &= bits - 1;
      float terms[N];
      for (int j = 0; j < N; ++j) terms[j] = v[j][i];
      dst[i] = oracle_sum<N, kFromZero>(w, terms);
    }
    return;
  }
  uint8_t redo[kLane];
  int any_redo = 0;
  for (int64_t i = 0; i < len; ++i) {
    float s = w[0] * v[0][i];
    for (int j = 1; j < N; ++j) s = s + w[j] * v[j][i];
    if (kFromZero) s = s + 0.0f;  // -0 -> +0, as the oracle's 0.0 + ...
    const float e = scale * abs_sum[i] + 0x1p-126f;
    const uint32_t lo = round_bf16_finite(s - e);
    const uint32_t hi = round_bf16_finite(s + e);
    const bool ok = lo == hi && std::fabs(s) + e <= FLT_MAX;
    dst[i] = static_cast<bf16_t>(lo);
    redo[i] = static_cast<uint8_t>(!ok);
    any_redo |= !ok;
  }
  if (any_redo == 0) return;
  for (int64_t i = 0; i < len; ++i) {
    if (redo[i] == 0) continue;
    float terms[N];
    for (int j = 0; j < N; ++j) terms[j] = v[j][i];
    dst[i] = oracle_sum<N, kFromZero>(w, terms);
  }
}

}  // namespace mhc::detail::cpu
