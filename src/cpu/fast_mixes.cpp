// src/cpu/fast_mixes.cpp - the dot products and the sum of squares of the fast CPU mixes
// (m = (x @ fn^T) * r, spec section 3), AVX2 + FMA or portable scalar code, chosen at run time.
//
// Canonical order (the same bits for either SIMD path, any token tile, any row split and so any
// thread count or T; cpu::dots in fast.hpp): K is cut into chunks of kChunk = 256; within a chunk
// 8 fp32 lanes (lane l takes k = l mod 8, in k order) run an FMA chain from +0, the 8 lanes are
// widened to double and summed in the fixed tree ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) = P(c), and
// the dot is 0.0 + P(0) + P(1) + ... in double. sum(x^2) is formed in double (exact products,
// 8 lanes in k order, the same tree).
//
// Accuracy (spec section 6: the mixes within 1e-5 relative of float64). Each product of a bf16 x
// and an fp32 weight is rounded once by the FMA; a lane's chain has at most 32 terms, so a
// chunk's error is <= 32 u sum_chunk |x f| (u = 2^-24) and the double sums add < 2^-45 of
// sum |x f|: |dot - exact| <= 1.9e-6 sum_k |x_k f_k|, against the GPU's fp32 split-K chains of
// thousands of terms. The error is a random walk in practice (about sqrt(32) u of the lanes'
// magnitude, 3e-7), so a dot that does not cancel by more than ~20x below sum |x f| has
// m within 1e-6 relative; sum(x^2) and everything after the dots (r, the sigmoids, Sinkhorn: the
// oracle's own code, reference_mixes_epilogue) are double, rounded to fp32 once at the end. The
// oracle suite (tests/test_cpu_fast.cpp) measures the worst error over the shared grid.
// The one case this does not bound is a dot that cancels to far below its terms (m ~ 0 where
// its terms are large), as on the GPU; there the absolute error stays ~1e-7 of the row's scale.
#include <immintrin.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "src/core/bf16.hpp"
#include "src/cpu/fast.hpp"

namespace mhc::detail::cpu {

namespace {

std::atomic<bool> g_force_scalar{false};

bool cpu_has_avx2_fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

inline double lane_tree(const float* a) {
  return ((static_cast<double>(a[0]) + static_cast<double>(a[1])) +
          (static_cast<double>(a[2]) + static_cast<double>(a[3]))) +
         ((static_cast<double>(a[4]) + static_cast<double>(a[5])) +
          (static_cast<double>(a[6]) + static_cast<double>(a[7])));
}

inline double lane_tree_d(const double* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// ---------------------------------------------------------------------------------------------
// Scalar code: the canonical order written out lane by lane.

void dots_scalar(const bf16_t* const* x, int tb, const float* fn, int64_t K, int r0, int r1, double* dot, int ld) {
  float xs[kTile][kChunk];
  for (int i = 0; i < tb; ++i) {
    for (int r = r0; r < r1; ++r) dot[i * ld + r] = 0.0;
  }
  for (int64_t c0 = 0; c0 < K; c0 += kChunk) {
    const int64_t len = K - c0 < kChunk ? K - c0 : kChunk;
    for (int i = 0; i < tb; ++i) {
      for (int64_t k = 0; k < len; ++k) xs[i][k] = bf16_to_float(x[i][c0 + k]);
    }
    for (int r = r0; r < r1; ++r) {
      const float* f = fn + r * K + c0;
      for (int i = 0; i < tb; ++i) {
        float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t k = 0; k < len; ++k) a[k & 7] = std::fma(xs[i][k], f[k], a[k & 7]);
        dot[i * ld + r] += lane_tree(a);
      }
    }
  }
}

double sumsq_scalar(const bf16_t* x, int64_t K) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t k = 0; k < K; ++k) {
    const double v = bf16_to_float(x[k]);
    a[k & 7] += v * v;
  }
  return lane_tree_d(a);
}

// ---------------------------------------------------------------------------------------------
// AVX2 + FMA.

#define MHC_AVX2 __attribute__((target("avx2,fma")))

MHC_AVX2 inline __m256 widen8(const bf16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

MHC_AVX2 inline double tree8(__m256 acc) {
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(acc));    // a0..a3
  const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(acc, 1));  // a4..a7
  const __m256d h = _mm256_hadd_pd(lo, hi);  // a0+a1, a4+a5, a2+a3, a6+a7
  const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
  return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
}

template <int TB>
MHC_AVX2 void dots_avx2_tb(const bf16_t* const* x, const float* fn, int64_t K, int r0, int r1, double* dot, int ld) {
  alignas(32) float xs[TB][kChunk];
  for (int i = 0; i < TB; ++i) {
    for (int r = r0; r < r1; ++r) dot[i * ld + r] = 0.0;
  }
  for (int64_t c0 = 0; c0 < K; c0 += kChunk) {
    const int64_t len = K - c0 < kChunk ? K - c0 : kChunk;
    const int64_t len8 = len & ~int64_t{7};
    const int rem = static_cast<int>(len - len8);
    for (int i = 0; i < TB; ++i) {
      for (int64_t k = 0; k < len8; k += 8) _mm256_store_ps(xs[i] + k, widen8(x[i] + c0 + k));
      if (rem > 0) {
        for (int k = 0; k < 8; ++k) xs[i][len8 + k] = k < rem ? bf16_to_float(x[i][c0 + len8 + k]) : 0.0f;
      }
    }
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    int r = r0;
    for (; r + 1 < r1; r += 2) {
      const float* f0 = fn + r * K + c0;
      const float* f1 = f0 + K;
      __m256 a0[TB], a1[TB];
      for (int i = 0; i < TB; ++i) a0[i] = a1[i] = _mm256_setzero_ps();
      for (int64_t k = 0; k < len8; k += 8) {
        const __m256 w0 = _mm256_loadu_ps(f0 + k), w1 = _mm256_loadu_ps(f1 + k);
        for (int i = 0; i < TB; ++i) {
          const __m256 xv = _mm256_load_ps(xs[i] + k);
          a0[i] = _mm256_fmadd_ps(xv, w0, a0[i]);
          a1[i] = _mm256_fmadd_ps(xv, w1, a1[i]);
        }
      }
      if (rem > 0) {
        const __m256 w0 = _mm256_maskload_ps(f0 + len8, mask), w1 = _mm256_maskload_ps(f1 + len8, mask);
        for (int i = 0; i < TB; ++i) {
          const __m256 xv = _mm256_load_ps(xs[i] + len8);
          a0[i] = _mm256_fmadd_ps(xv, w0, a0[i]);
          a1[i] = _mm256_fmadd_ps(xv, w1, a1[i]);
        }
      }
      for (int i = 0; i < TB; ++i) {
        dot[i * ld + r] += tree8(a0[i]);
        dot[i * ld + r + 1] += tree8(a1[i]);
      }
    }
    if (r < r1) {  // an odd row
      const float* f0 = fn + r * K + c0;
      __m256 a0[TB];
      for (int i = 0; i < TB; ++i) a0[i] = _mm256_setzero_ps();
      for (int64_t k = 0; k < len8; k += 8) {
        const __m256 w0 = _mm256_loadu_ps(f0 + k);
        for (int i = 0; i < TB; ++i) a0[i] = _mm256_fmadd_ps(_mm256_load_ps(xs[i] + k), w0, a0[i]);
      }
      if (rem > 0) {
        const __m256 w0 = _mm256_maskload_ps(f0 + len8, mask);
        for (int i = 0; i < TB; ++i) a0[i] = _mm256_fmadd_ps(_mm256_load_ps(xs[i] + len8), w0, a0[i]);
      }
      for (int i = 0; i < TB; ++i) dot[i * ld + r] += tree8(a0[i]);
    }
  }
}

MHC_AVX2 double sumsq_avx2(const bf16_t* x, int64_t K) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  const int64_t K8 = K & ~int64_t{7};
  for (int64_t k = 0; k < K8; k += 8) {
    const __m256 v = widen8(x + k);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a0 = _mm256_fmadd_pd(lo, lo, a0);  // x^2 is exact in double: fma == add of the product
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  }
  alignas(32) double a[8];
  _mm256_store_pd(a, a0);
  _mm256_store_pd(a + 4, a1);
  for (int64_t k = K8; k < K; ++k) {
    const double v = bf16_to_float(x[k]);
    a[k & 7] += v * v;
  }
  return lane_tree_d(a);
}

#undef MHC_AVX2

}  // namespace

bool use_avx2() {
  static const bool has = cpu_has_avx2_fma();
  return has && !g_force_scalar.load(std::memory_order_relaxed);
}

void force_scalar(bool on) { g_force_scalar.store(on, std::memory_order_relaxed); }

void dots(const bf16_t* const* x, int tb, const float* fn, int64_t K, int r0, int r1, double* dot, int ld) {
  if (!use_avx2()) return dots_scalar(x, tb, fn, K, r0, r1, dot, ld);
  switch (tb) {
    case 1: return dots_avx2_tb<1>(x, fn, K, r0, r1, dot, ld);
    case 2: return dots_avx2_tb<2>(x, fn, K, r0, r1, dot, ld);
    case 3: return dots_avx2_tb<3>(x, fn, K, r0, r1, dot, ld);
    default: return dots_avx2_tb<4>(x, fn, K, r0, r1, dot, ld);
  }
}

double sumsq(const bf16_t* x, int64_t K) { return use_avx2() ? sumsq_avx2(x, K) : sumsq_scalar(x, K); }

}  // namespace mhc::detail::cpu
