// src/cpu/fast_mixes.cpp - the dot products and the sum of squares of the fast CPU mixes
// (m = (x @ fn^T) * r, spec section 3): AVX-512, AVX2 + FMA or portable scalar code, chosen at
// run time (fast.hpp: cpu::isa), every level with the same bits.
//
// Canonical order (the same bits for every SIMD level, any token tile, any row split and so any
// thread count or T; cpu::dots in fast.hpp): K is cut into chunks of kChunk = 256; within a chunk
// 8 fp32 lanes (lane l takes k = l mod 8, in k order) run an FMA chain from +0, the 8 lanes are
// widened to double and summed in the fixed tree ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) = P(c), and
// the dot is 0.0 + P(0) + P(1) + ... in double. The mixes' sum of squares is the same dot of x with
// itself (cpu::selfdot; the AVX-512 dots form it in the same pass over x); cpu::sumsq, its double
// fallback and the fold's sum, is formed in double (exact products, 32 lanes in k order, a fixed
// tree: fast.hpp).
//
// The AVX-512 code holds two tokens in one 16-lane register (lanes 0..7: token 2p's 8 lanes,
// 8..15: token 2p + 1's), so each lane still runs the canonical chain; one broadcast weight load
// feeds both tokens. After a chunk the 8-lane trees of 8 (row, token) pairs are summed together by
// a butterfly of double registers whose adds are the tree's adds: level 1 adds lanes (0,1), (2,3),
// ...; level 2 the pairs; level 3 the halves.
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
#include "src/cpu/simd.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "src/core/bf16.hpp"
#include "src/cpu/fast.hpp"

namespace mhc::detail::cpu {

namespace {

std::atomic<int> g_isa_cap{static_cast<int>(Isa::kAvx512)};

Isa detect_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kScalar;
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

double selfdot_scalar(const bf16_t* x, int64_t K) {
  double dot = 0.0;
  for (int64_t c0 = 0; c0 < K; c0 += kChunk) {
    const int64_t len = K - c0 < kChunk ? K - c0 : kChunk;
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t k = 0; k < len; ++k) {
      const float v = bf16_to_float(x[c0 + k]);
      a[k & 7] = std::fma(v, v, a[k & 7]);
    }
    dot += lane_tree(a);
  }
  return dot;
}

inline double sumsq_tree(const double* a) {
  double s[8];
  for (int i = 0; i < 8; ++i) s[i] = (a[i] + a[i + 8]) + (a[i + 16] + a[i + 24]);
  return lane_tree_d(s);
}

double sumsq_scalar(const bf16_t* x, int64_t K) {
  double a[32] = {};
  for (int64_t k = 0; k < K; ++k) {
    const double v = bf16_to_float(x[k]);
    a[k & 31] += v * v;
  }
  return sumsq_tree(a);
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

MHC_AVX2 double selfdot_avx2(const bf16_t* x, int64_t K) {
  double dot = 0.0;
  for (int64_t c0 = 0; c0 < K; c0 += kChunk) {
    const int64_t len = K - c0 < kChunk ? K - c0 : kChunk;
    const int64_t len8 = len & ~int64_t{7};
    __m256 a = _mm256_setzero_ps();
    for (int64_t k = 0; k < len8; k += 8) {
      const __m256 v = widen8(x + c0 + k);
      a = _mm256_fmadd_ps(v, v, a);
    }
    if (len8 < len) {
      alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t k = len8; k < len; ++k) t[k - len8] = bf16_to_float(x[c0 + k]);
      const __m256 v = _mm256_load_ps(t);
      a = _mm256_fmadd_ps(v, v, a);
    }
    dot += tree8(a);
  }
  return dot;
}

MHC_AVX2 double sumsq_avx2(const bf16_t* x, int64_t K) {
  __m256d a[8];
  for (__m256d& v : a) v = _mm256_setzero_pd();
  const int64_t K32 = K & ~int64_t{31};
  for (int64_t k = 0; k < K32; k += 32) {
    for (int q = 0; q < 4; ++q) {
      const __m256 v = widen8(x + k + 8 * q);
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
      const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
      a[2 * q] = _mm256_fmadd_pd(lo, lo, a[2 * q]);  // x^2 is exact in double: fma == add of the product
      a[2 * q + 1] = _mm256_fmadd_pd(hi, hi, a[2 * q + 1]);
    }
  }
  alignas(32) double s[32];
  for (int i = 0; i < 8; ++i) _mm256_store_pd(s + 4 * i, a[i]);
  for (int64_t k = K32; k < K; ++k) {
    const double v = bf16_to_float(x[k]);
    s[k & 31] += v * v;
  }
  return sumsq_tree(s);
}

#undef MHC_AVX2

// ---------------------------------------------------------------------------------------------
// AVX-512: two tokens per register (see the top of this file).

#define MHC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

static_assert(kTile <= 8, "dots() instantiates dots_avx512_p for 1 to 4 token pairs");
constexpr int kSteps = static_cast<int>(kChunk / 8);
constexpr int kRowSteps = kSteps / 4;  // steps per row of the prefetch of the next 4 rows' chunk
static_assert(kSteps % 4 == 0, "chunk_rows prefetches 4 rows of a chunk over its steps");

MHC_AVX512 inline __m512 widen16(const bf16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Level 1 of the butterfly: [a0+a1, b0+b1, a2+a3, b2+b3, a4+a5, b4+b5, a6+a7, b6+b7].
MHC_AVX512 inline __m512d bfly1(__m512d a, __m512d b) {
  return _mm512_add_pd(_mm512_unpacklo_pd(a, b), _mm512_unpackhi_pd(a, b));
}
// Levels 2 and 3: the even 128-bit blocks of u then v, plus the odd ones.
MHC_AVX512 inline __m512d bfly2(__m512d u, __m512d v) {
  return _mm512_add_pd(_mm512_shuffle_f64x2(u, v, 0x88), _mm512_shuffle_f64x2(u, v, 0xdd));
}

// sum[q] (8 doubles: row 0 token 2q, row 0 token 2q + 1, row 1 token 2q, ...) += the 8-lane trees of
// one chunk's accumulators acc[r][q] (lanes 0..7: token 2q, 8..15: token 2q + 1), by the butterfly.
template <int P, int R>
MHC_AVX512 inline void add_row_trees(const __m512 (&acc)[R][P], __m512d* sum) {
  for (int q = 0; q < P; ++q) {
    __m512d d[8];
    for (int r = 0; r < 4; ++r) {
      if (r < R) {
        d[2 * r] = _mm512_cvtps_pd(_mm512_castps512_ps256(acc[r][q]));
        d[2 * r + 1] = _mm512_cvtps_pd(_mm512_extractf32x8_ps(acc[r][q], 1));
      } else {
        d[2 * r] = d[2 * r + 1] = _mm512_setzero_pd();
      }
    }
    const __m512d l2a = bfly2(bfly1(d[0], d[1]), bfly1(d[2], d[3]));
    const __m512d l2b = bfly2(bfly1(d[4], d[5]), bfly1(d[6], d[7]));
    sum[q] = _mm512_add_pd(sum[q], bfly2(l2a, l2b));
  }
}

// ss (8 doubles: tokens 0..7) += the 8-lane trees of the self-dot accumulators acc[q].
template <int P>
MHC_AVX512 inline void add_self_trees(const __m512 (&acc)[P], __m512d& ss) {
  __m512d d[8];
  for (int q = 0; q < 4; ++q) {
    if (q < P) {
      d[2 * q] = _mm512_cvtps_pd(_mm512_castps512_ps256(acc[q]));
      d[2 * q + 1] = _mm512_cvtps_pd(_mm512_extractf32x8_ps(acc[q], 1));
    } else {
      d[2 * q] = d[2 * q + 1] = _mm512_setzero_pd();
    }
  }
  const __m512d l2a = bfly2(bfly1(d[0], d[1]), bfly1(d[2], d[3]));
  const __m512d l2b = bfly2(bfly1(d[4], d[5]), bfly1(d[6], d[7]));
  ss = _mm512_add_pd(ss, bfly2(l2a, l2b));
}

// Chunk partials of rows r0 .. r0 + R - 1 (R <= 4) for P token pairs; xp: [kSteps][P][16] fp32 of
// this chunk (zero past len), f: the rows' weights at the chunk start, steps8 whole 8-steps and a
// tail of rem weights. sum[p] (8 doubles: row 0 token 2p, row 0 token 2p + 1, row 1 token 2p, ...)
// += the 8 tree sums.
template <int P, int R>
MHC_AVX512 void chunk_rows(const float* xp, const float* const* f, const float* const* next, int steps8, int rem,
                           __m512d* sum) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < P; ++q) acc[r][q] = _mm512_setzero_ps();
  }
  for (int st = 0; st < steps8; ++st) {
    __m512 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm512_broadcast_f32x8(_mm256_loadu_ps(f[r] + 8 * st));
    // The next 4 rows' chunk (kChunk / 16 lines each) into L1 meanwhile, two lines a step: row
    // st / kRowSteps, lines 2 (st % kRowSteps) and 2 (st % kRowSteps) + 1.
    _mm_prefetch(reinterpret_cast<const char*>(next[st / kRowSteps] + 32 * (st % kRowSteps)), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(next[st / kRowSteps] + 32 * (st % kRowSteps) + 16), _MM_HINT_T0);
    for (int q = 0; q < P; ++q) {
      const __m512 xv = _mm512_load_ps(xp + (st * P + q) * 16);
      for (int r = 0; r < R; ++r) acc[r][q] = _mm512_fmadd_ps(xv, w[r], acc[r][q]);
    }
  }
  if (rem > 0) {
    const __mmask8 m = static_cast<__mmask8>((1u << rem) - 1u);
    __m512 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(m, f[r] + 8 * steps8));
    for (int q = 0; q < P; ++q) {
      const __m512 xv = _mm512_load_ps(xp + (steps8 * P + q) * 16);
      for (int r = 0; r < R; ++r) acc[r][q] = _mm512_fmadd_ps(xv, w[r], acc[r][q]);
    }
  }
  add_row_trees<P, R>(acc, sum);
}

// The chunk partials of x with itself for P token pairs: ss (8 doubles: tokens 0..7) += the trees.
template <int P>
MHC_AVX512 void chunk_self(const float* xp, int steps, __m512d& ss) {
  __m512 acc[P];
  for (int q = 0; q < P; ++q) acc[q] = _mm512_setzero_ps();
  for (int st = 0; st < steps; ++st) {
    for (int q = 0; q < P; ++q) {
      const __m512 xv = _mm512_load_ps(xp + (st * P + q) * 16);
      acc[q] = _mm512_fmadd_ps(xv, xv, acc[q]);
    }
  }
  add_self_trees<P>(acc, ss);
}

// The word indices of chunk_direct's pair permute: lane i < 8 of the result takes bf16 i of the
// first token's 8 values (table a), lane 8 + i bf16 i of the second's (table b, index 32 + i), each
// into the high half of its fp32 lane (the low halves are zeroed by the mask).
MHC_AVX512 inline __m512i pair_index() {
  alignas(64) int16_t idx[32];
  for (int i = 0; i < 16; ++i) {
    idx[2 * i] = 0;
    idx[2 * i + 1] = static_cast<int16_t>((i < 8 ? 0 : 32) + (i & 7));
  }
  return _mm512_load_si512(idx);
}

// A whole chunk (kChunk values) of rows f[0..R) (R <= 4: the call's only row group) for P token
// pairs straight from the bf16 rows xc[0..2P) at the chunk start, without the staging buffer: each
// step's two-token register is one zero-masking two-source word permute of the two tokens' 8
// values (a 16-byte load each). One index register and no values held across steps, so the R P
// accumulators, the P self-dot accumulators and the R weights stay in registers (P = R = 4: 25 of
// the 32). The same FMA chains in the same order as chunk_rows and chunk_self (kWithSs), so the
// same bits.
template <int P, int R, bool kWithSs>
MHC_AVX512 void chunk_direct(const bf16_t* const* xc, const float* const* f, const float* const* next, __m512d* sum,
                             __m512d& ss) {
  const __m512i idx = pair_index();
  __m512 acc[R][P], self[P];
  for (int q = 0; q < P; ++q) {
    self[q] = _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) acc[r][q] = _mm512_setzero_ps();
  }
  for (int st = 0; st < kSteps; ++st) {
    __m512 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm512_broadcast_f32x8(_mm256_loadu_ps(f[r] + 8 * st));
    _mm_prefetch(reinterpret_cast<const char*>(next[st / kRowSteps] + 32 * (st % kRowSteps)), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(next[st / kRowSteps] + 32 * (st % kRowSteps) + 16), _MM_HINT_T0);
    for (int q = 0; q < P; ++q) {
      const __m512i a = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xc[2 * q] + 8 * st)));
      const __m512i b =
          _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xc[2 * q + 1] + 8 * st)));
      const __m512 xv = _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi16(0xAAAAAAAAu, a, idx, b));
      for (int r = 0; r < R; ++r) acc[r][q] = _mm512_fmadd_ps(xv, w[r], acc[r][q]);
      if (kWithSs) self[q] = _mm512_fmadd_ps(xv, xv, self[q]);
    }
  }
  add_row_trees<P, R>(acc, sum);
  if (kWithSs) add_self_trees<P>(self, ss);
}

template <int P, bool kWithSs>
MHC_AVX512 void chunk_direct_rows(int R, const bf16_t* const* xc, const float* const* f, const float* const* next,
                                  __m512d* sum, __m512d& ss) {
  switch (R) {
    case 1: return chunk_direct<P, 1, kWithSs>(xc, f, next, sum, ss);
    case 2: return chunk_direct<P, 2, kWithSs>(xc, f, next, sum, ss);
    case 3: return chunk_direct<P, 3, kWithSs>(xc, f, next, sum, ss);
    default: return chunk_direct<P, 4, kWithSs>(xc, f, next, sum, ss);
  }
}

// Row group g of [r0, r1) at chunk c0: f, its rows' weights there (up to 4); next, the rows after
// them for the prefetch hints (the same chunk's next group, else the next chunk's first group;
// clamped to this row range and to K).
inline void group_rows(const float* fn, int64_t K, int r0, int r1, int g, int groups, int64_t c0, const float** f,
                       const float** next) {
  const int ra = r0 + 4 * g;
  const int R = r1 - ra < 4 ? r1 - ra : 4;
  for (int r = 0; r < R; ++r) f[r] = fn + static_cast<int64_t>(ra + r) * K + c0;
  const bool last = g + 1 == groups;
  const int rn = last ? r0 : ra + 4;
  const int64_t cn = last && c0 + kChunk < K ? c0 + kChunk : c0;
  for (int r = 0; r < 4; ++r) next[r] = fn + static_cast<int64_t>(std::min(rn + r, r1 - 1)) * K + cn;
}

template <int P>
MHC_AVX512 void dots_avx512_p(const bf16_t* const* x, int tb, const float* fn, int64_t K, int r0, int r1, double* dot,
                              int ld, double* ss, void (*between)(void*), void* ctx) {
  __m512d ss_sum = _mm512_setzero_pd();
  alignas(64) float xp[kSteps * P * 16];
  constexpr int kGroups = (kMaxDotRows + 3) / 4;
  __m512d sum[kGroups][P];
  const int groups = (r1 - r0 + 3) / 4;
  for (int g = 0; g < groups; ++g) {
    for (int q = 0; q < P; ++q) sum[g][q] = _mm512_setzero_pd();
  }
  for (int64_t c0 = 0; c0 < K; c0 += kChunk) {
    const int len = static_cast<int>(K - c0 < kChunk ? K - c0 : kChunk);
    const int len8 = len & ~7;
    const int rem = len - len8;
    const int steps = (len + 7) / 8;
    // This token's x two chunks ahead into the caches (a hint: x may come from DRAM, as in pre and
    // head; past the row's end it touches nothing that matters).
    auto prefetch_x = [&](int i) {
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(x[i] + c0) + 2 * kChunk * sizeof(bf16_t);
      for (uintptr_t line = 0; line < kChunk * sizeof(bf16_t); line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
      }
    };
    if (groups == 1 && len == kChunk) {
      // One group of rows (head, or a decode item): whole chunks straight from the bf16 rows. A
      // token missing from the last pair repeats the last one; its lanes are never read back. No
      // software prefetch of x here: the hardware's streams alone read head's rows from memory
      // faster (bench/results/2026-12-02-cpu-s11: 3.6-4.1 -> 3.4-3.6 ms at T = 1024, two threads).
      const bf16_t* xc[2 * P];
      for (int i = 0; i < 2 * P; ++i) xc[i] = x[i < tb ? i : tb - 1] + c0;
      const float* f[4];
      const float* next[4];
      group_rows(fn, K, r0, r1, 0, 1, c0, f, next);
      if (ss != nullptr) {
        chunk_direct_rows<P, true>(r1 - r0, xc, f, next, sum[0], ss_sum);
      } else {
        chunk_direct_rows<P, false>(r1 - r0, xc, f, next, sum[0], ss_sum);
      }
      if (between != nullptr) between(ctx);
      continue;
    }
    for (int i = 0; i < 2 * P; ++i) {
      float* dst = xp + (i / 2) * 16 + (i % 2) * 8;
      if (i >= tb) {
        for (int st = 0; st < steps; ++st) _mm256_store_ps(dst + st * P * 16, _mm256_setzero_ps());
        continue;
      }
      const bf16_t* src = x[i] + c0;
      prefetch_x(i);
      int k = 0;
      for (; k + 16 <= len8; k += 16) {
        const __m512 v = widen16(src + k);
        _mm256_store_ps(dst + (k / 8) * P * 16, _mm512_castps512_ps256(v));
        _mm256_store_ps(dst + (k / 8 + 1) * P * 16, _mm512_extractf32x8_ps(v, 1));
      }
      for (; k < len8; k += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k)));
        _mm256_store_ps(dst + (k / 8) * P * 16, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
      }
      if (rem > 0) {
        float* t = dst + (len8 / 8) * P * 16;
        for (int j = 0; j < 8; ++j) t[j] = j < rem ? bf16_to_float(src[len8 + j]) : 0.0f;
      }
    }
    for (int g = 0; g < groups; ++g) {
      const int R = r1 - (r0 + 4 * g) < 4 ? r1 - (r0 + 4 * g) : 4;
      const float* f[4];
      const float* next[4];
      group_rows(fn, K, r0, r1, g, groups, c0, f, next);
      switch (R) {
        case 1: chunk_rows<P, 1>(xp, f, next, len8 / 8, rem, sum[g]); break;
        case 2: chunk_rows<P, 2>(xp, f, next, len8 / 8, rem, sum[g]); break;
        case 3: chunk_rows<P, 3>(xp, f, next, len8 / 8, rem, sum[g]); break;
        default: chunk_rows<P, 4>(xp, f, next, len8 / 8, rem, sum[g]); break;
      }
    }
    if (ss != nullptr) chunk_self<P>(xp, steps, ss_sum);  // the zero padding adds +0 (x * x = +0)
    if (between != nullptr) between(ctx);
  }
  if (ss != nullptr) {
    alignas(64) double v[8];
    _mm512_store_pd(v, ss_sum);
    for (int i = 0; i < tb; ++i) ss[i] = v[i];
  }
  for (int g = 0; g < groups; ++g) {
    for (int q = 0; q < P; ++q) {
      alignas(64) double v[8];
      _mm512_store_pd(v, sum[g][q]);
      for (int r = 0; r < 4 && r0 + 4 * g + r < r1; ++r) {
        for (int h = 0; h < 2; ++h) {
          if (2 * q + h < tb) dot[(2 * q + h) * ld + r0 + 4 * g + r] = v[2 * r + h];
        }
      }
    }
  }
}

MHC_AVX512 double sumsq_avx512(const bf16_t* x, int64_t K) {
  __m512d a[4];
  for (__m512d& v : a) v = _mm512_setzero_pd();
  const int64_t K32 = K & ~int64_t{31};
  for (int64_t k = 0; k < K32; k += 32) {
    const __m512 v0 = widen16(x + k), v1 = widen16(x + k + 16);
    const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v0));
    const __m512d d1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v0, 1));
    const __m512d d2 = _mm512_cvtps_pd(_mm512_castps512_ps256(v1));
    const __m512d d3 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v1, 1));
    a[0] = _mm512_fmadd_pd(d0, d0, a[0]);  // x^2 is exact in double: fma == add of the product
    a[1] = _mm512_fmadd_pd(d1, d1, a[1]);
    a[2] = _mm512_fmadd_pd(d2, d2, a[2]);
    a[3] = _mm512_fmadd_pd(d3, d3, a[3]);
  }
  alignas(64) double s[32];
  for (int i = 0; i < 4; ++i) _mm512_store_pd(s + 8 * i, a[i]);
  for (int64_t k = K32; k < K; ++k) {
    const double v = bf16_to_float(x[k]);
    s[k & 31] += v * v;
  }
  return sumsq_tree(s);
}

#undef MHC_AVX512

}  // namespace

Isa best_isa() {
  static const Isa best = detect_isa();
  return best;
}

Isa isa() {
  const int cap = g_isa_cap.load(std::memory_order_relaxed);
  const Isa best = best_isa();
  return static_cast<int>(best) < cap ? best : static_cast<Isa>(cap);
}

void force_isa(Isa cap) { g_isa_cap.store(static_cast<int>(cap), std::memory_order_relaxed); }

const char* isa_name(Isa level) {
  switch (level) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

double selfdot(const bf16_t* x, int64_t K) { return use_avx2() ? selfdot_avx2(x, K) : selfdot_scalar(x, K); }

void dots(const bf16_t* const* x, int tb, const float* fn, int64_t K, int r0, int r1, double* dot, int ld,
          double* ss, void (*between)(void*), void* ctx) {
  if (tb <= 0) return;
  const Isa level = isa();
  if (level == Isa::kAvx512) {
    switch ((tb + 1) / 2) {
      case 1: return dots_avx512_p<1>(x, tb, fn, K, r0, r1, dot, ld, ss, between, ctx);
      case 2: return dots_avx512_p<2>(x, tb, fn, K, r0, r1, dot, ld, ss, between, ctx);
      case 3: return dots_avx512_p<3>(x, tb, fn, K, r0, r1, dot, ld, ss, between, ctx);
      default: return dots_avx512_p<4>(x, tb, fn, K, r0, r1, dot, ld, ss, between, ctx);
    }
  }
  if (ss != nullptr) {
    for (int i = 0; i < tb; ++i) ss[i] = selfdot(x[i], K);
  }
  if (r1 <= r0) return;
  if (level == Isa::kScalar) return dots_scalar(x, tb, fn, K, r0, r1, dot, ld);
  for (int i0 = 0; i0 < tb; i0 += 4) {  // AVX2: token tiles of up to 4
    const int n = tb - i0 < 4 ? tb - i0 : 4;
    double* d = dot + i0 * ld;
    switch (n) {
      case 1: dots_avx2_tb<1>(x + i0, fn, K, r0, r1, d, ld); break;
      case 2: dots_avx2_tb<2>(x + i0, fn, K, r0, r1, d, ld); break;
      case 3: dots_avx2_tb<3>(x + i0, fn, K, r0, r1, d, ld); break;
      default: dots_avx2_tb<4>(x + i0, fn, K, r0, r1, d, ld); break;
    }
  }
}

double sumsq(const bf16_t* x, int64_t K) {
  switch (isa()) {
    case Isa::kAvx512: return sumsq_avx512(x, K);
    case Isa::kAvx2: return sumsq_avx2(x, K);
    default: return sumsq_scalar(x, K);
  }
}

}  // namespace mhc::detail::cpu
