// src/cpu/fast_post.cpp - post on the CPU for n = 4 (post.cpu_fast), bit-equal to the oracle.
//
// new[k,h] = bf16(post[k]*out[h] + sum_j comb[j,k]*res[j,h]), rounded once from the exact sum.
// Each output is the fp32 chain s = w0*v0, then s = s + w_j*v_j (term order: the layer output,
// then streams 0..3), with the a-priori bound e = (2N + 3) u max|w| sum|v| + 2^-126 (N = 5 terms,
// u = 2^-24; 2N - 1 roundings of products and partial sums, each <= u max|w| sum|v|, the spare
// cover the rounding of the bound and of s -/+ e, and also a contracted FMA chain); the AVX-512
// loop's FMA chain (N roundings) uses (N + 3) u max|w| sum|v| + 2^-126 (exact_sum.hpp). When s - e
// and s + e round to one bf16 and |s| + e is finite, that bf16 is the answer (certified: rounding
// is monotone and the exact sum lies in the interval). Otherwise (cancelling terms, NaN/Inf,
// overflow) the sum is redone in double exactly as the oracle does it (every product of an fp32
// weight and a bf16 value is exact there) and rounded once.
//
// Work items are (token, block of kBlock columns), split statically over the OpenMP threads;
// each output's arithmetic does not depend on the split, so the bits do not depend on the thread
// count, T, or the token's position (batch invariance).
#include "src/cpu/fast.hpp"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "src/core/bf16.hpp"
#include "src/cpu/exact_sum.hpp"


namespace mhc::detail {

namespace {

using cpu::kLane;

constexpr int kN = 4;              // streams
constexpr int kTerms = kN + 1;     // the layer output, then the streams
constexpr int64_t kBlock = 256;    // columns per work item
constexpr int64_t kParallelMin = 16384;  // below this many outputs, one thread

struct TokenRows {
  float w[kN][kTerms];   // per output stream k: post[k], comb[0..3, k]
  float scale[kN];       // sum_error_scale of w[k] for the lanes' chain (Chain::kMulAdd)
  float scale_fma[kN];   // and for exact_sums_avx512's (Chain::kFma)
  const bf16_t* out;     // [H]
  const bf16_t* res[kN]; // stream j's row (all the same row for a broadcast residual)
  bf16_t* dst[kN];       // output stream k's row
};

TokenRows token_rows(const Problem& p, int64_t t) {
  TokenRows r{};
  const float* post = p.post_mix + t * p.post_mix_stride;
  const float* comb = p.comb_mix + t * p.comb_mix_stride;
  for (int k = 0; k < kN; ++k) {
    r.w[k][0] = post[k];
    for (int j = 0; j < kN; ++j) r.w[k][1 + j] = comb[j * kN + k];
    r.scale[k] = cpu::sum_error_scale<kTerms>(r.w[k]);
    r.scale_fma[k] = cpu::sum_error_scale<kTerms, cpu::Chain::kFma>(r.w[k]);
  }
  r.out = p.layer_output + t * p.layer_output_stride;
  const bf16_t* row = p.residual + t * p.residual_stride;
  for (int j = 0; j < kN; ++j) r.res[j] = p.residual_broadcast ? row : row + j * p.H;
  bf16_t* dst = p.residual_out + t * p.residual_out_stride;
  for (int k = 0; k < kN; ++k) r.dst[k] = dst + k * p.H;
  return r;
}

// Columns [h0, h0 + len) of one token, len <= kLane.
void post_lane(const TokenRows& r, int64_t h0, int64_t len) {
  const bf16_t* rows[kTerms] = {r.out, r.res[0], r.res[1], r.res[2], r.res[3]};
  float v[kTerms][kLane];
  float abs_sum[kLane];
  cpu::load_lane<kTerms>(rows, h0, len, v, abs_sum);
  for (int k = 0; k < kN; ++k) cpu::exact_sum_lane<kTerms, false>(r.w[k], r.scale[k], v, abs_sum, len, r.dst[k] + h0);
}

// Columns [h_begin, h_end) of one token: AVX-512 over the whole multiples of 32 (stream: by
// non-temporal stores where the rows are 64-byte aligned), then lanes.
void post_columns(const TokenRows& r, int64_t h_begin, int64_t h_end, bool stream) {
  if (cpu::use_avx512()) {
    const int64_t h32 = h_begin + ((h_end - h_begin) & ~int64_t{31});
    const bf16_t* rows[kTerms] = {r.out, r.res[0], r.res[1], r.res[2], r.res[3]};
    bool aligned = true;
    for (bf16_t* d : r.dst) aligned = aligned && reinterpret_cast<uintptr_t>(d + h_begin) % 64 == 0;
    cpu::exact_sums_avx512<kTerms, kN, false>(rows, r.w, r.scale_fma, r.dst, h_begin, h32, stream && aligned);
    h_begin = h32;
  }
  for (int64_t h = h_begin; h < h_end; h += kLane) post_lane(r, h, h_end - h < kLane ? h_end - h : kLane);
}

// Work items [begin, end) in order: the token's rows and weights are formed once per token, not
// once per block (a thread's static share of the items is contiguous).
void post_items(const Problem& p, int64_t begin, int64_t end, int64_t blocks_per_token, bool stream) {
  TokenRows r{};
  int64_t row_token = -1;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / blocks_per_token;
    if (t != row_token) {
      r = token_rows(p, t);
      row_token = t;
    }
    const int64_t h_begin = (item % blocks_per_token) * kBlock;
    const int64_t h_end = h_begin + kBlock < p.H ? h_begin + kBlock : p.H;
    post_columns(r, h_begin, h_end, stream);
  }
}

}  // namespace

void fast_post_token(const Problem& p, int64_t t) { post_columns(token_rows(p, t), 0, p.H, false); }

bool fast_post_supports(const Problem& p) {
  return p.device.type == DeviceType::kCPU && p.op == Op::kPost && p.n == kN;
}

void fast_post_run(const Problem& p) {
  if (p.T <= 0 || p.H <= 0) return;
  const int64_t blocks_per_token = (p.H + kBlock - 1) / kBlock;
  const int64_t items = p.T * blocks_per_token;
  // The post op's residual_out goes past the caches by non-temporal stores when it is large (no
  // read for ownership: 18H instead of 26H bytes a token); post_pre's stays in cache for its mixes.
  const bool stream = p.op == Op::kPost && p.T * p.K() * static_cast<int64_t>(sizeof(bf16_t)) >= cpu::kStreamMinBytes;
#ifdef _OPENMP
  const bool parallel = p.T * p.H * kN >= kParallelMin;
#pragma omp parallel if (parallel)
  {
    // The static split of omp for schedule(static), by hand: thread i takes the i-th of
    // nthreads nearly equal contiguous ranges.
    const int64_t nthreads = omp_get_num_threads(), i = omp_get_thread_num();
    const int64_t base = items / nthreads, extra = items % nthreads;
    const int64_t begin = i * base + (i < extra ? i : extra);
    post_items(p, begin, begin + base + (i < extra ? 1 : 0), blocks_per_token, stream);
    if (stream) _mm_sfence();  // each thread's own non-temporal stores, before the region's end
  }
#else
  post_items(p, 0, items, blocks_per_token, stream);
  if (stream) _mm_sfence();
#endif
}

}  // namespace mhc::detail
