// src/cuda/n4/post8.cuh - the post stage of 8 hidden columns of one token, all 4 streams:
// new[k] = bf16(post[k]*o + sum_j comb[j,k]*x[j]), each output rounded once from the exact sum
// (the same bits as the float64 reference and as the generic path).
#pragma once

#include "src/cuda/exact_sum.cuh"
#include "src/cuda/n4/config.cuh"

namespace mhc::cuda::n4 {

/// Per-token weights of the post sum new[k] = post[k]*o + sum_j comb[j,k]*x[j], in the order of
/// its terms, with the error scale of each output (exact_sum_bf16, src/cuda/exact_sum.cuh).
struct PostWeights {
  float w[kN][kN + 1];  // w[k] = (post[k], comb[0,k], .., comb[3,k])
  float scale[kN];
  float scale_all;      // max_k scale[k], NaN where a weight is NaN: one bound (post8_fast), and
                        // post8's guard against chains that could overflow or meet NaN / Inf
};

__device__ __forceinline__ PostWeights post_weights(const float* post, const float* comb) {
  PostWeights pw;
  float all = 0.0f;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    pw.w[k][0] = post[k];
#pragma unroll
    for (int j = 0; j < kN; ++j) pw.w[k][j + 1] = comb[j * kN + k];
    float m = fabsf(post[k]);  // sum_error_scale's maximum, NaN where a weight is
#pragma unroll
    for (int j = 1; j <= kN; ++j) m = max_nan(m, fabsf(pw.w[k][j]));
    pw.scale[k] = m * sum_error_unit<kN + 1>();
    all = max_nan(all, m);
  }
  pw.scale_all = all * sum_error_unit<kN + 1>();
  return pw;
}

/// The post weights of token t from its post_mix and comb_mix rows (L2 loads: another kernel
/// wrote them).
__device__ __forceinline__ PostWeights token_post_weights(const N4Params& p, int64_t t) {
  float mix[kN + kN * kN];
#pragma unroll
  for (int s = 0; s < kN; ++s) mix[s] = __ldcg(p.post_mix + t * p.post_mix_stride + s);
#pragma unroll
  for (int s = 0; s < kN * kN; ++s) mix[kN + s] = __ldcg(p.comb_mix + t * p.comb_mix_stride + s);
  return post_weights(mix, mix + kN);
}

/// Value j of token t's mixes in the order post (4), comb (16), carried pre (4): kPostMixes values
/// for a post, kPostMixes + kN for a post and a collapse with the carried pre (post_collapse_kernel
/// loads them a token ahead, one value a thread, into shared memory).
constexpr int kPostMixes = kN + kN * kN;
__device__ __forceinline__ float token_mix_value(const N4Params& p, int64_t t, int j) {
  if (j < kN) return __ldcg(p.post_mix + t * p.post_mix_stride + j);
  if (j < kPostMixes) return __ldcg(p.comb_mix + t * p.comb_mix_stride + (j - kN));
  return __ldcg(p.pre_mix_in + t * p.pre_mix_in_stride + (j - kPostMixes));
}

/// Column pair i (columns 2i, 2i + 1) of 8 columns of one token, all 4 outputs: w[k] is output
/// k's bf16x2 word, from the terms in the order of the weights (layer output, then the 4 streams).
/// A column pair is self-contained (its own guard, its own redo), so a caller may give each pair
/// its own thread (decode_phase1.cuh's column-pair mode) and get post8's bits.
/// The 4 outputs run the branch-free fast path together (8 independent chains)
/// and are tested once; the rare uncertified ones (about 1 pair in 500) are redone in double.
/// One guard a column pair stands for the finiteness tests of its 4 pairs: where scale_all *
/// (abs0 + abs1) < 2^100, every weight and value is finite and every chain's partial sums stay
/// below 2^122, so the chains cannot overflow, their bounds hold and both interval ends are finite
/// (pair_failure's exponent test can only fail where the guard does); the pairs themselves need
/// only the comparison of their ends. A NaN or Inf anywhere fails the guard (scale_all is NaN
/// for a NaN weight, Inf times anything is not below 2^100), and the column pair is redone.
__device__ __forceinline__ void post8_column(const PostWeights& pw, const uint4 (&terms)[kN + 1], int i,
                                             uint32_t (&w)[kN]) {
  float v0[kN + 1], v1[kN + 1], abs0, abs1;
  column_pair(terms, i, v0, v1, abs0, abs1);
  const bool guarded = pw.scale_all * (abs0 + abs1) < 0x1p100f;
  uint32_t upper[kN], apart = guarded ? 0u : 1u;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    float s0, s1;
    sum_bf16x2_interval(pw.w[k], v0, v1, sum_error_bound(pw.scale[k], abs0), sum_error_bound(pw.scale[k], abs1), s0, s1,
                        w[k], upper[k]);
    apart |= w[k] ^ upper[k];
  }
  if (apart != 0) {
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      if (!guarded || w[k] != upper[k]) w[k] = exact_sum_bf16x2_redo(pw.w[k], v0, v1);
    }
  }
}

/// The post of 8 columns: post8_column for the 4 column pairs in order. w is pair-major, w[i] the
/// words of pair i: the layout that compiles to the same PTX as the loop before post8_column was
/// its own function (a [k][i] array filled through a copy changed ptxas's register allocation).
__device__ __forceinline__ void post8(const PostWeights& pw, const uint4 (&res)[kN], const uint4& lo,
                                      uint4 (&out)[kN]) {
  // the terms in the order of the weights: layer output, then the 4 streams
  const uint4 terms[kN + 1] = {lo, res[0], res[1], res[2], res[3]};
  uint32_t w[4][kN];
#pragma unroll
  for (int i = 0; i < 4; ++i) post8_column(pw, terms, i, w[i]);
#pragma unroll
  for (int k = 0; k < kN; ++k) out[k] = make_uint4(w[0][k], w[1][k], w[2][k], w[3][k]);
}

/// post8 in two parts, for a caller that can reload its terms (the diagnostics forms of
/// post_flat_kernel; session 14 measured the form with all three changes slower than post8).
/// post8_fast: per column one error bound for the 4 outputs (from the largest weight of the 4,
/// valid for each) and the 32 fp32 chains; returns the mask of output pairs (bit 4 i + k: pair i
/// of output k) whose interval test failed; a bound of 2^100 or more, NaN or Inf (a non-finite
/// weight or value, or a sum that could overflow) fails every pair of its column.
__device__ __forceinline__ uint32_t post8_fast(const PostWeights& pw, const uint4 (&res)[kN], const uint4& lo,
                                               uint32_t (&w)[kN][4]) {
  const uint4 terms[kN + 1] = {lo, res[0], res[1], res[2], res[3]};
  uint32_t failed = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float v0[kN + 1], v1[kN + 1], abs0, abs1;
    column_pair(terms, i, v0, v1, abs0, abs1);
    const float e0 = sum_error_bound(pw.scale_all, abs0), e1 = sum_error_bound(pw.scale_all, abs1);
    const bool bounded = fmaxf(e0, e1) < 0x1p100f && e0 == e0 && e1 == e1;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      bool certified = bounded;
      w[k][i] = sum_bf16x2_unchecked(pw.w[k], v0, v1, e0, e1, certified);
      failed |= certified ? 0u : 1u << (4 * i + k);
    }
  }
  return failed;
}

/// Pair i of output k redone as post8 does it (its own bound, else double): the exact sums
/// rounded once, for a pair post8_fast did not certify.
__device__ __forceinline__ uint32_t post8_pair(const PostWeights& pw, const uint4 (&res)[kN], const uint4& lo, int i,
                                               int k) {
  const uint4 terms[kN + 1] = {lo, res[0], res[1], res[2], res[3]};
  float v0[kN + 1], v1[kN + 1], abs0, abs1;
  column_pair(terms, i, v0, v1, abs0, abs1);
  bool certified;
  const uint32_t w = sum_bf16x2_fast(pw.w[k], v0, v1, sum_error_bound(pw.scale[k], abs0),
                                     sum_error_bound(pw.scale[k], abs1), certified);
  return certified ? w : exact_sum_bf16x2_redo(pw.w[k], v0, v1);
}

}  // namespace mhc::cuda::n4
