// src/cpu/fast.hpp - the fast CPU backend (fp32 SIMD, OpenMP), beside the float64 oracle.
//
// Every variant here is n = 4, any H >= 1, CPU tensors. post and every collapse with a carried,
// identity or mean pre give the oracle's bits (certified fp32 sums, float64 fallback:
// src/cpu/exact_sum.hpp); the mixes are fp32-level (src/cpu/fast_mixes.cpp).
#pragma once

#include <cstdint>

#include "src/core/problem.hpp"

namespace mhc::detail {

/// post for n = 4, any H >= 1, CPU tensors (full or broadcast residual). Every output is the
/// oracle's (reference_run's) bits: the certified fp32 sum, else the oracle's float64 sum.
bool fast_post_supports(const Problem& p);
void fast_post_run(const Problem& p);
/// The post stage of token t alone (all H columns), one thread; the same bits as fast_post_run.
void fast_post_token(const Problem& p, int64_t t);

/// mixes, collapse, pre, pre_broadcast, post_pre and head (every kind) for n = 4, any H >= 1,
/// CPU tensors (src/cpu/fast_ops.cpp).
bool fast_ops_supports(const Problem& p);
void fast_ops_run(const Problem& p);

namespace cpu {

/// Which SIMD code the fast path runs: AVX2 + FMA where the CPU has them (checked at run time),
/// else portable scalar code. Both give the same bits. force_scalar (tests and benchmarks only)
/// makes every later call take the scalar code; not for concurrent use with running calls.
bool use_avx2();
void force_scalar(bool on);

constexpr int kTile = 4;         // tokens per tile of the mixes dot products
constexpr int64_t kChunk = 256;  // K elements per fp32 chunk of a dot product (32 per lane)

/// The canonical dot products of the fast mixes (fast_mixes.cpp): for tokens i < tb (x[i]: K bf16
/// values) and weight rows r in [r0, r1) (fn: [rows, K] fp32), dot[i * ld + r] =
/// sum over the chunks c of P(c) in c order (double, from +0), where P(c) is the fixed tree sum
/// of the 8 fp32 lanes of chunk c (lane l: fma chain over the chunk's k = l mod 8, from +0).
/// The same bits for any tb, r0, r1 and either SIMD path.
void dots(const bf16_t* const* x, int tb, const float* fn, int64_t K, int r0, int r1, double* dot, int ld);
/// sum(x^2) of K bf16 values in double: 8 lanes (k mod 8) in k order, then a fixed tree.
double sumsq(const bf16_t* x, int64_t K);

}  // namespace cpu

}  // namespace mhc::detail
