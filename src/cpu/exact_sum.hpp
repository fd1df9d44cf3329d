// src/cpu/exact_sum.hpp - the exact bf16 sums of the fast CPU path (post and collapse stages):
// bf16(sum_j w[j] * v[j]) for fp32 weights and bf16 values, rounded once from the exact sum, which
// is what the float64 oracle gives (the CPU twin of src/cuda/exact_sum.cuh).
//
// Per output: the fp32 chain s = w0*v0, then s = s + w_j*v_j in j order, and the a-priori bound
// e = (2N + 3) u max|w| sum|v| + 2^-126 (u = 2^-24: 2N - 1 roundings of products and partial
// sums, each <= u max|w| sum|v|; the spare cover the rounding of e and of s -/+ e, and a contracted
// FMA chain; 2^-126, the least normal fp32, covers underflow and keeps the bound out of the
// subnormal range, whose arithmetic costs a microcode assist per operation on x86). The AVX-512
// loop over 32 columns (exact_sums_avx512) runs s = fma(w_j, v_j, s), N roundings, and uses the
// tighter (N + 3) u max|w| sum|v| + 2^-126 (sum_error_scale, Chain::kFma): fewer sums go to the
// double path. When s - e and s + e round to one bf16 and |s| + e is finite, that bf16 is the
// answer: rounding is monotone and the exact sum lies in [s - e, s + e]; the oracle's float64 sum
// (every product exact, at most N roundings of 2^-53) lies there too. Otherwise (cancelling terms,
// NaN/Inf, overflow) the sum is redone in double in the oracle's order and rounded once.
// kFromZero: the oracle's sum starts from +0.0 (collapse), so a zero result is +0 there and here.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/cpu/simd.hpp"

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

/// Which fp32 chain a bound is for: kMulAdd (s = w0*v0, then s = s + w_j*v_j: 2N - 1 roundings,
/// or fewer where the compiler contracts) or kFma (s = w0*v0, then s = fma(w_j, v_j, s): N roundings).
enum class Chain { kMulAdd, kFma };

/// c u max_j |w[j]|: times sum_j |v[j]| it bounds the error of the N-term fp32 chain, with
/// c = 2N + 3 (kMulAdd) or N + 3 (kFma). The FMA chain's error is <= N u (1 + u)^N max|w| sum|v|
/// (each of its N roundings <= u times a partial sum <= (1 + u)^N max|w| sum|v|); of the 3 spare,
/// about 1 covers the rounding of s -/+ e and under 1 the roundings of the scale, of sum|v|
/// (computed) and of e, which are each relative u.
template <int N, Chain kChain = Chain::kMulAdd>
inline float sum_error_scale(const float* w) {
  float m = std::fabs(w[0]);
  for (int j = 1; j < N; ++j) {
    // std::fmax's result (a NaN loses to a number), inline: without -ffinite-math-only GCC calls
    // libm's fmaxf for std::fmax, through the PLT.
    const float a = std::fabs(w[j]);
    m = (a > m || m != m) ? a : m;
  }
  constexpr int c = kChain == Chain::kFma ? N + 3 : 2 * N + 3;
  return m * (static_cast<float>(c) * 0x1p-24f);
}

/// double_to_bf16 (round to nearest even) by integer arithmetic where v is in bf16's normal range
/// (2^-126 <= |v| < 2^128, the rounding carry included: a result of 2^128 is inf, as there); the
/// other cases (zero, subnormal, inf, NaN, beyond the range) by double_to_bf16 itself.
inline bf16_t round_double_bf16(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  const uint64_t e = (b >> 52) & 0x7ffu;
  if (e < 1023 - 126 || e >= 1023 + 128) return double_to_bf16(v);
  const uint64_t r = (b + ((uint64_t{1} << 44) - 1u) + ((b >> 45) & 1u)) >> 45;  // sign | exp11 | 7 bits
  const uint64_t sign = r >> 18, exp = ((r >> 7) & 0x7ffu) - (1023 - 127), mant = r & 0x7fu;
  return static_cast<bf16_t>((sign << 15) | (exp << 7) | mant);
}

/// The oracle's float64 sum in its order, rounded once.
template <int N, bool kFromZero>
inline bf16_t oracle_sum_inline(const float* w, const float* v) {
  double acc = kFromZero ? 0.0 + static_cast<double>(w[0]) * static_cast<double>(v[0])
                         : static_cast<double>(w[0]) * static_cast<double>(v[0]);
  for (int j = 1; j < N; ++j) acc += static_cast<double>(w[j]) * static_cast<double>(v[j]);
  return round_double_bf16(acc);
}

/// The same, out of line: the rare path of the SIMD loops, whose vector registers it would spill.
template <int N, bool kFromZero>
__attribute__((noinline)) bf16_t oracle_sum(const float* w, const float* v) {
  return oracle_sum_inline<N, kFromZero>(w, v);
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

#define MHC_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

/// The word indices of widen32's permutes: lane i of the result takes bf16 i (lo) or 16 + i (hi)
/// into its high half; the low halves are zeroed by the mask.
MHC_AVX512_BF16 inline __m512i widen32_index(int first) {
  alignas(64) int16_t idx[32];
  for (int i = 0; i < 16; ++i) {
    idx[2 * i] = 0;
    idx[2 * i + 1] = static_cast<int16_t>(first + i);
  }
  return _mm512_load_si512(idx);
}

/// 32 bf16 values at p to fp32 in two registers (columns 0..15, then 16..31): one load and one
/// zero-masking word permute per 16 values (bf16 -> fp32 is the bits shifted up by 16), instead of
/// a zero extension and a shift. idx_lo, idx_hi: widen32_index(0), widen32_index(16).
MHC_AVX512_BF16 inline void widen32(const bf16_t* p, __m512i idx_lo, __m512i idx_hi, __m512& lo, __m512& hi) {
  const __m512i b = _mm512_loadu_si512(p);
  lo = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx_lo, b));
  hi = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx_hi, b));
}

/// 32 bf16 (64-byte aligned, both) to dst by a non-temporal store.
MHC_AVX512_BF16 inline void store_stream_32(bf16_t* dst, const bf16_t* src) {
  _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), _mm512_load_si512(src));
}

template <int N>
MHC_AVX512_BF16 inline void load_lane_avx512(const bf16_t* const* rows, int64_t h0, float (&v)[N][kLane],
                                             float (&abs_sum)[kLane]) {
  for (int64_t i = 0; i < kLane; i += 16) {
    __m512 a = _mm512_setzero_ps();
    for (int j = 0; j < N; ++j) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j] + h0 + i));
      const __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      _mm512_storeu_ps(v[j] + i, x);
      a = j == 0 ? _mm512_abs_ps(x) : _mm512_add_ps(a, _mm512_abs_ps(x));
    }
    _mm512_storeu_ps(abs_sum + i, a);
  }
}

template <int N>
inline void load_lane(const bf16_t* const* rows, int64_t h0, int64_t len, float (&v)[N][kLane],
                      float (&abs_sum)[kLane]) {
  if (len == kLane && use_avx512()) return load_lane_avx512<N>(rows, h0, v, abs_sum);
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

/// The AVX-512 form for len = kLane, 16 columns at a time: s by an FMA chain (the bound covers
/// it), s -/+ e rounded by the BF16 instruction (round to nearest even; it flushes subnormal inputs
/// to zero, which only ever makes the two ends differ: |s| > e >= 2^-126 when both have one sign).
/// The certified bf16 is the same as the other levels'. Returns a bit per column to redo.
template <int N, bool kFromZero>
MHC_AVX512_BF16 inline uint64_t exact_sum_lane_avx512(const float* w, float scale, const float (&v)[N][kLane],
                                                      const float (&abs_sum)[kLane], bf16_t* dst) {
  uint64_t redo = 0;
  const __m512 vscale = _mm512_set1_ps(scale), tiny = _mm512_set1_ps(0x1p-126f), fmax = _mm512_set1_ps(FLT_MAX);
  __m512 wv[N];
  for (int j = 0; j < N; ++j) wv[j] = _mm512_set1_ps(w[j]);
  for (int64_t i = 0; i < kLane; i += 16) {
    __m512 sum = _mm512_mul_ps(wv[0], _mm512_loadu_ps(v[0] + i));
    for (int j = 1; j < N; ++j) sum = _mm512_fmadd_ps(wv[j], _mm512_loadu_ps(v[j] + i), sum);
    if (kFromZero) sum = _mm512_add_ps(sum, _mm512_setzero_ps());
    const __m512 e = _mm512_fmadd_ps(vscale, _mm512_loadu_ps(abs_sum + i), tiny);
    const __m256i lo = (__m256i)(_mm512_cvtneps_pbh(_mm512_sub_ps(sum, e)));
    const __m256i hi = (__m256i)(_mm512_cvtneps_pbh(_mm512_add_ps(sum, e)));
    const __mmask16 fin = _mm512_cmp_ps_mask(_mm512_add_ps(_mm512_abs_ps(sum), e), fmax, _CMP_LE_OQ);
    const __mmask16 ok = _mm256_mask_cmpeq_epi16_mask(fin, lo, hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), lo);
    redo |= static_cast<uint64_t>(static_cast<uint16_t>(~ok)) << i;
  }
  return redo;
}

/// The groups of 32 columns whose certified bf16 failed somewhere, kept back by exact_sums_avx512
/// until it redoes them together: the calls to oracle_sum (which clobber every vector register)
/// stay off its loop. Each entry: the 32 bf16 of output k at column h, with a bit per column to redo.
struct PendingGroups {
  static constexpr int kCapacity = 16;
  alignas(64) bf16_t out[kCapacity][32];
  int64_t h[kCapacity];
  uint32_t bad[kCapacity];
  int k[kCapacity];
  int count = 0;
};

/// Redoes the pending groups' bad columns by oracle_sum and stores each group (non-temporal where
/// stream), then empties the list.
template <int N, bool kFromZero>
__attribute__((noinline)) void redo_pending(PendingGroups& pend, const bf16_t* const* rows, const float (*w)[N],
                                            bf16_t* const* dst, bool stream) {
  for (int e = 0; e < pend.count; ++e) {
    const int64_t h = pend.h[e];
    const int k = pend.k[e];
    bf16_t* out = pend.out[e];
    for (uint32_t bad = pend.bad[e]; bad != 0; bad &= bad - 1) {
      const int i = __builtin_ctz(bad);
      float terms[N];
      for (int j = 0; j < N; ++j) terms[j] = bf16_to_float(rows[j][h + i]);
      out[i] = oracle_sum_inline<N, kFromZero>(w[k], terms);
    }
    if (stream) {
      store_stream_32(dst[k] + h, out);
    } else {
      std::memcpy(dst[k] + h, out, 32 * sizeof(bf16_t));
    }
  }
  pend.count = 0;
}

/// KO exact sums over N bf16 rows for the columns [h_begin, h_end) ((h_end - h_begin) % 32 == 0),
/// all in registers (AVX-512): dst[k][h] = bf16(sum_j w[k][j] * rows[j][h]), scale[k] =
/// sum_error_scale<N, Chain::kFma>(w[k]). 32 columns at a time: the N rows widened once for the KO
/// sums; each sum an FMA chain; both ends s -/+ e of 32 columns rounded by one BF16
/// instruction each (round to nearest even; subnormal inputs flushed to zero, which only ever
/// makes the two ends differ, since |s| > e >= 2^-126 when both have one sign). Certified where
/// the ends agree and are finite (an inf or NaN end has exponent 0xff); the rest by oracle_sum,
/// after the loop or whenever PendingGroups is full (redo_pending).
/// The certified bf16 is the exact sum's rounding, as at every level.
/// stream: the outputs go out by non-temporal stores (every dst[k] + h_begin 64-byte aligned; the
/// caller fences with _mm_sfence before anything reads them).
template <int N, int KO, bool kFromZero>
MHC_AVX512_BF16 void exact_sums_avx512(const bf16_t* const* rows, const float (*w)[N], const float* scale,
                                       bf16_t* const* dst, int64_t h_begin, int64_t h_end, bool stream = false) {
  const __m512 tiny = _mm512_set1_ps(0x1p-126f);
  const __m512i expmask = _mm512_set1_epi16(0x7f80);
  const __m512i idx_lo = widen32_index(0), idx_hi = widen32_index(16);
  PendingGroups pend;
  for (int64_t h = h_begin; h < h_end; h += 32) {
    __m512 v[N][2];
    __m512 a[2];
    for (int j = 0; j < N; ++j) widen32(rows[j] + h, idx_lo, idx_hi, v[j][0], v[j][1]);
    for (int g = 0; g < 2; ++g) {
      for (int j = 0; j < N; ++j) a[g] = j == 0 ? _mm512_abs_ps(v[j][g]) : _mm512_add_ps(a[g], _mm512_abs_ps(v[j][g]));
    }
    for (int k = 0; k < KO; ++k) {
      __m512 lo_end[2], hi_end[2];
      for (int g = 0; g < 2; ++g) {
        __m512 sum = _mm512_mul_ps(_mm512_set1_ps(w[k][0]), v[0][g]);
        for (int j = 1; j < N; ++j) sum = _mm512_fmadd_ps(_mm512_set1_ps(w[k][j]), v[j][g], sum);
        if (kFromZero) sum = _mm512_add_ps(sum, _mm512_setzero_ps());
        const __m512 e = _mm512_fmadd_ps(_mm512_set1_ps(scale[k]), a[g], tiny);
        lo_end[g] = _mm512_sub_ps(sum, e);
        hi_end[g] = _mm512_add_ps(sum, e);
      }
      const __m512i lo = (__m512i)(_mm512_cvtne2ps_pbh(lo_end[1], lo_end[0]));  // columns 0..15, then 16..31
      const __m512i hi = (__m512i)(_mm512_cvtne2ps_pbh(hi_end[1], hi_end[0]));
      const __mmask32 ok = _mm512_mask_cmpneq_epi16_mask(_mm512_cmpeq_epi16_mask(lo, hi),
                                                          _mm512_and_si512(lo, expmask), expmask);
      const uint32_t bad = ~static_cast<uint32_t>(ok);
      if (__builtin_expect(bad == 0, 1)) {
        if (stream) {
          _mm512_stream_si512(reinterpret_cast<__m512i*>(dst[k] + h), lo);
        } else {
          _mm512_storeu_si512(dst[k] + h, lo);
        }
        continue;
      }
      const int e = pend.count++;
      _mm512_store_si512(pend.out[e], lo);
      pend.h[e] = h;
      pend.bad[e] = bad;
      pend.k[e] = k;
      if (pend.count == PendingGroups::kCapacity) redo_pending<N, kFromZero>(pend, rows, w, dst, stream);
    }
  }
  if (pend.count > 0) redo_pending<N, kFromZero>(pend, rows, w, dst, stream);
}

/// dst[i] = bf16(sum_j w[j] * v[j][i]) exactly, i < len; scale = sum_error_scale<N>(w).
template <int N, bool kFromZero>
inline void exact_sum_lane(const float* w, float scale, const float (&v)[N][kLane], const float (&abs_sum)[kLane],
                           int64_t len, bf16_t* dst) {
  if (len == kLane && use_avx2()) {
    uint64_t bits = use_avx512() ? exact_sum_lane_avx512<N, kFromZero>(w, scale, v, abs_sum, dst)
                                 : exact_sum_lane_avx2<N, kFromZero>(w, scale, v, abs_sum, dst);
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

#undef MHC_AVX512_BF16

}  // namespace mhc::detail::cpu
