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

/// Which SIMD code the fast path runs, chosen at run time from what the CPU has: AVX-512 (F, BW,
/// VL, DQ and BF16, 16 fp32 lanes), else AVX2 + FMA, else portable scalar code. Every level gives
/// the same bits. force_isa (tests and benchmarks only) caps every later call at a level; not for
/// concurrent use with running calls.
enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
Isa isa();         // the level calls run now: min(best_isa(), the cap)
Isa best_isa();    // the best level this CPU has
void force_isa(Isa cap);
const char* isa_name(Isa level);
inline bool use_avx2() { return isa() >= Isa::kAvx2; }
inline bool use_avx512() { return isa() == Isa::kAvx512; }

constexpr int kTile = 8;         // tokens per tile of the mixes dot products (at most)
constexpr int kMaxDotRows = 24;  // weight rows per cpu::dots call (at most): M for n = 4
constexpr int64_t kChunk = 256;  // K elements per fp32 chunk of a dot product (32 per lane)
/// From this many bytes of bf16 activations read by one call (post's residual, head's residual),
/// the call's bf16 output goes past the caches by non-temporal stores (AVX-512, 64-byte aligned
/// rows): no read for ownership of lines that nothing reads soon.
constexpr int64_t kStreamMinBytes = int64_t{16} << 20;

/// The canonical dot products of the fast mixes (fast_mixes.cpp): for tokens i < tb (x[i]: K bf16
/// values) and weight rows r in [r0, r1) (fn: [rows, K] fp32), dot[i * ld + r] =
/// sum over the chunks c of P(c) in c order (double, from +0), where P(c) is the fixed tree sum
/// of the 8 fp32 lanes of chunk c (lane l: fma chain over the chunk's k = l mod 8, from +0).
/// The same bits for any tb <= kTile, r0, r1 (r1 - r0 <= kMaxDotRows) and every SIMD level.
/// ss (optional, may be null): ss[i] = selfdot(x[i], K) as well, from the same pass over x.
/// between (optional): called with ctx after each chunk of the AVX-512 code (other levels never call
/// it), so that a caller can run other work from the caches while this call's x streams in; it
/// must not touch dot, ss or x.
void dots(const bf16_t* const* x, int tb, const float* fn, int64_t K, int r0, int r1, double* dot, int ld,
          double* ss = nullptr, void (*between)(void*) = nullptr, void* ctx = nullptr);
/// The canonical dot of x with itself (K bf16 values), in the order of dots: the sum of squares
/// the mixes' r is formed from (fast_ops.cpp: ss_of). Each square of a bf16 value is exact in fp32
/// unless it overflows or underflows, which ss_of catches.
double selfdot(const bf16_t* x, int64_t K);
/// sum(x^2) of K bf16 values in double: 32 lanes (lane l: k = l mod 32, in k order, from +0), then
/// the fixed tree s[i] = (a[i] + a[i+8]) + (a[i+16] + a[i+24]), ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)).
double sumsq(const bf16_t* x, int64_t K);

}  // namespace cpu

}  // namespace mhc::detail
