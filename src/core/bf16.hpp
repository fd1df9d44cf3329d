// src/core/bf16.hpp - bf16 conversions on the host: exact widening, round-to-nearest-even narrowing.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mhc::detail {

/// Exact value of a bf16 bit pattern.
inline float bf16_to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

/// float -> bf16, round to nearest even (NaN stays NaN).
inline uint16_t float_to_bf16(float f) {
  uint32_t word;
  std::memcpy(&word, &f, sizeof word);
  if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((word >> 16) | 0x0040u);
  word += 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>(word >> 16);
}

/// double -> bf16 with a single rounding (to nearest, ties to even); no intermediate float.
inline uint16_t double_to_bf16(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  if (std::isnan(v)) return static_cast<uint16_t>(sign | 0x7fc0u);
  const double a = std::fabs(v);
  if (std::isinf(a)) return static_cast<uint16_t>(sign | 0x7f80u);
  if (a == 0.0) return sign;
  int e = 0;
  std::frexp(a, &e);                         // a = m * 2^e, m in [0.5, 1)
  const int ulp_exp = e - 8 > -133 ? e - 8 : -133;  // 8 significant bits; subnormal spacing 2^-133
  const double q = std::nearbyint(std::ldexp(a, -ulp_exp));  // default mode: ties to even
  const float r = static_cast<float>(std::ldexp(q, ulp_exp));  // exact, or inf past the range
  uint32_t word;
  std::memcpy(&word, &r, sizeof word);
  return static_cast<uint16_t>(sign | (word >> 16));
}

}  // namespace mhc::detail
