// src/cpu/exact_sum.hpp - the exact bf16 sums of the fast CPU path (post and collapse stages):
// bf16(sum_j w[j] * v[j]) for fp32 weights and bf16 values, rounded once from the exact sum, which
// is what the float64 oracle gives (the CPU twin of src/cuda/exact_sum.cuh).
//
// Per output: the fp32 chain s = w0*v0, then s = s + w_j*v_j in j order, and the a-priori bound
// e = (2N + 3) u max|w| sum|v| + 2^-140 (u = 2^-24: 2N - 1 roundings of products and partial
// sums, each <= u max|w| sum|v|; the spare cover the rounding of e and of s -/+ e, and a contracted
// FMA chain). When s - e and s + e round to one bf16 and |s| + e is finite, that bf16 is the
// answer: rounding is monotone and the exact sum lies in [s - e, s + e]; the oracle's float64 sum
// (every product exact, at most N roundings of 2^-53) lies there too. Otherwise (cancelling terms,
// NaN/Inf, overflow) the sum is redone in double in the oracle's order and rounded once.
// kFromZero: the oracle's sum starts from +0.0 (collapse), so a zero result is +0 there and here.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/core/bf16.hpp"
#include "src/core/problem.hpp"

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
inline void load_lane(const bf16_t* const* rows, int64_t h0, int64_t len, float (&v)[N][kLane],
                      float (&abs_sum)[kLane]) {
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

/// dst[i] = bf16(sum_j w[j] * v[j][i]) exactly, i < len; scale = sum_error_scale<N>(w).
template <int N, bool kFromZero>
inline void exact_sum_lane(const float* w, float scale, const float (&v)[N][kLane], const float (&abs_sum)[kLane],
                           int64_t len, bf16_t* dst) {
  uint8_t redo[kLane];
  int any_redo = 0;
  for (int64_t i = 0; i < len; ++i) {
    float s = w[0] * v[0][i];
    for (int j = 1; j < N; ++j) s = s + w[j] * v[j][i];
    if (kFromZero) s = s + 0.0f;  // -0 -> +0, as the oracle's 0.0 + ...
    const float e = scale * abs_sum[i] + 0x1p-140f;
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
