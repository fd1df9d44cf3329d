// src/cuda/epilogue.cuh - the per-token mixes epilogue shared by every CUDA variant: from the
// 24 raw dot products and the sum of squares of a token, the stream RMS, the sigmoids of pre and
// post, and the Sinkhorn projection of comb (spec section 3), in registers on one thread.
//
// Numerics: fp32 throughout with IEEE exp/sqrt; divisions are multiplications by a reciprocal
// from rcp.approx (relative error <= 2^-23, so x * rcp(d) is within ~2 ulp of x / d), which
// keeps the epilogue within ~1e-6 of the float64 reference. Every variant runs this one code
// path, so variants that feed it the same sums give the same bits.
#pragma once

#include <cstdint>

#include "src/core/prepared.hpp"
#include "src/core/problem.hpp"

namespace mhc::cuda {

/// 1/x by the multi-function unit (rcp.approx.ftz: relative error <= 2^-23, one instruction; a
/// subnormal input or result becomes zero, which moves a sigmoid below 1e-38 by less than the
/// spec's absolute tolerance). The epilogue's serial chain (Sinkhorn: 8 reciprocals per
/// iteration) runs on one thread per token, so its latency is the decode latency: __frcp_rn cost
/// ~10 us per token there, and the non-ftz form a subnormal fix-up per reciprocal.
__device__ __forceinline__ float fast_rcp(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float sigmoid(float x) { return fast_rcp(1.0f + expf(-x)); }

/// The sum of the elements c[first + b * kStep], b in [kLo, kHi), as a balanced tree (the two
/// halves summed first, then added): for N = 4, (x0 + x1) + (x2 + x3). The Sinkhorn chain is
/// serial per token, so its sums are trees (two dependent adds for N = 4, not four). `first`
/// is a constant wherever the callers' loops are unrolled, so c stays in registers.
template <int kStep, int kLo, int kHi, int M>
__device__ __forceinline__ float tree_sum(const float (&c)[M], int first) {
  if constexpr (kHi - kLo == 1) {
    return c[first + kLo * kStep];
  } else {
    constexpr int kMid = kLo + (kHi - kLo) / 2;
    return tree_sum<kStep, kLo, kMid>(c, first) + tree_sum<kStep, kMid, kHi>(c, first);
  }
}

/// Divides each line of the N x N matrix c by (its sum + eps): line a is the elements
/// c[a * kLine + b * kStep], b = 0..N-1, summed as tree_sum.
template <int N, int kLine, int kStep>
__device__ __forceinline__ void normalise_lines(float (&c)[N * N], float eps) {
#pragma unroll
  for (int a = 0; a < N; ++a) {
    const float r = fast_rcp(tree_sum<kStep, 0, N>(c, a * kLine) + eps);
#pragma unroll
    for (int b = 0; b < N; ++b) c[a * kLine + b * kStep] *= r;
  }
}

/// The first step of the spec's Sinkhorn: each row j of c[j*N + k] to softmax + eps.
template <int N>
__device__ __forceinline__ void sinkhorn_rows_softmax(float (&c)[N * N], float eps) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float mx = c[j * N];
#pragma unroll
    for (int k = 1; k < N; ++k) mx = (c[j * N + k] > mx || isnan(c[j * N + k])) ? c[j * N + k] : mx;
#pragma unroll
    for (int k = 0; k < N; ++k) c[j * N + k] = expf(c[j * N + k] - mx);
    const float r = fast_rcp(tree_sum<1, 0, N>(c, j * N));
#pragma unroll
    for (int k = 0; k < N; ++k) c[j * N + k] = fmaf(c[j * N + k], r, eps);
  }
}

/// The alternating normalisations: columns; then (rows, columns) iters - 1 times.
///
/// For N = 4 and eps <= kProductEpsMax, each (rows, columns) pair runs with N reciprocals, not
/// 2N: with s_j = rowsum_j + eps, P_j = prod_{i != j} s_i and D = prod_i s_i, dividing the rows
/// by s_j and then the columns by (colsum + eps) is, in exact arithmetic,
/// c[j,k] <- c[j,k] P_j / (sum_j c[j,k] P_j + eps D). That takes one reciprocal (a multi-function
/// unit latency) and two products off the serial chain of each iteration (bench/probes/
/// sinkhorn_forms.cu: 3717 cycles against 4372 on one thread, the same error against float64).
/// Range: after a column step every element is at most 1 and every row sums to at least about
/// 1 / (N + eps) of what it summed to before, so for eps <= 1e-2 each s_j is in about [1/5, N]
/// and P_j, D stay far inside fp32's range; a larger eps (no shipped model: all use 1e-6) takes
/// the line-by-line form. The loops stay rolled: unrolled, the chain ran faster warm on one
/// thread but the decode kernel, whose phase 2 runs it once per launch from a cold instruction
/// cache, got slower (session 8 calls 4 and 5: the V4-Flash decode step 806 us against 729).
constexpr float kProductEpsMax = 1e-2f;

template <int N>
__device__ __forceinline__ void sinkhorn_iterations(float (&c)[N * N], int iters, float eps) {
  if constexpr (N == 4) {
    if (eps <= kProductEpsMax) {
      if (iters >= 1) normalise_lines<N, 1, N>(c, eps);  // iteration 0: the column step alone
      for (int it = 1; it < iters; ++it) {
        float s[N];
#pragma unroll
        for (int j = 0; j < N; ++j) s[j] = tree_sum<1, 0, N>(c, j * N) + eps;
        const float s01 = s[0] * s[1], s23 = s[2] * s[3];
        const float p[N] = {s[1] * s23, s[0] * s23, s[3] * s01, s[2] * s01};
        const float d_eps = (s01 * s23) * eps;
#pragma unroll
        for (int i = 0; i < N * N; ++i) c[i] *= p[i / N];
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const float q = fast_rcp(tree_sum<N, 0, N>(c, k) + d_eps);
#pragma unroll
          for (int j = 0; j < N; ++j) c[j * N + k] *= q;
        }
      }
      return;
    }
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0) normalise_lines<N, N, 1>(c, eps);  // rows: c[j, :] / (rowsum + eps)
    normalise_lines<N, 1, N>(c, eps);              // columns: c[:, k] / (colsum + eps)
  }
}

/// The spec's Sinkhorn (section 3), in registers, on an N x N matrix c[j*N + k].
template <int N>
__device__ __forceinline__ void sinkhorn(float (&c)[N * N], int iters, float eps) {
  sinkhorn_rows_softmax<N>(c, eps);
  sinkhorn_iterations<N>(c, iters, eps);
}

/// Everything the mixes epilogue needs: scalars, weights' scale/base, output pointers.
struct EpilogueParams {
  const float* scale;  // [3] (head: [1])
  const float* base;   // [rows]
  float pre_eps, sinkhorn_eps, post_scale, norm_eps;
  int32_t sinkhorn_iters;
  bool head;           // learned head: pre only
  float* pre_mix_out;  int64_t pre_mix_out_stride;
  float* post_mix_out; int64_t post_mix_out_stride;
  float* comb_mix_out; int64_t comb_mix_out_stride;
};

/// The stream RMS factor r = 1 / sqrt(mean(x^2) + eps) of the mixes (one expression for every
/// caller: the same bits).
__device__ __forceinline__ float mixes_rms_factor(const EpilogueParams& e, float sumsq, float inv_k) {
  return 1.0f / sqrtf(sumsq * inv_k + e.norm_eps);
}

/// The first part of mixes_epilogue: the stream RMS factor r (returned) and the fresh pre, the
/// one computation of both wherever a kernel needs only the pre (the same bits as the epilogue).
template <int N>
__device__ __forceinline__ float mixes_pre(const EpilogueParams& e, const float* dot, float sumsq, float inv_k,
                                           float (&pre)[N]) {
  const float r = mixes_rms_factor(e, sumsq, inv_k);
#pragma unroll
  for (int j = 0; j < N; ++j) pre[j] = sigmoid(dot[j] * r * e.scale[0] + e.base[j]) + e.pre_eps;
  return r;
}

/// Which outputs a mixes_epilogue call writes: a kernel may run the comb's Sinkhorn chain on one
/// warp and the pre and post outputs on another, at the same time.
enum EpilogueParts : int { kEpiPrePost = 1, kEpiComb = 2, kEpiAll = 3 };

/// From the raw dot products dot[r] = x . fn[r] and sum(x^2) of one token, computes
/// m = dot * r and then pre/post/comb; writes the requested outputs of token t (those of
/// `parts`) and returns the fresh pre in `pre` (with kEpiPrePost). Runs on one thread.
template <int N>
__device__ __forceinline__ void mixes_epilogue(const EpilogueParams& e, const float* dot, float sumsq,
                                               float inv_k, int64_t t, float (&pre)[N], int parts = kEpiAll) {
  float r;
  if (parts & kEpiPrePost) {
    r = mixes_pre<N>(e, dot, sumsq, inv_k, pre);
  } else {
    r = mixes_rms_factor(e, sumsq, inv_k);
  }
  if (e.head) return;
  if ((parts & kEpiPrePost) && e.pre_mix_out != nullptr) {
#pragma unroll
    for (int j = 0; j < N; ++j) e.pre_mix_out[t * e.pre_mix_out_stride + j] = pre[j];
  }
  if ((parts & kEpiPrePost) && e.post_mix_out != nullptr) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      e.post_mix_out[t * e.post_mix_out_stride + j] =
          e.post_scale * sigmoid(dot[N + j] * r * e.scale[1] + e.base[N + j]);
    }
  }
  if ((parts & kEpiComb) && e.comb_mix_out != nullptr) {
    float c[N * N];
#pragma unroll
    for (int i = 0; i < N * N; ++i) c[i] = dot[2 * N + i] * r * e.scale[2] + e.base[2 * N + i];
    sinkhorn<N>(c, e.sinkhorn_iters, e.sinkhorn_eps);
#pragma unroll
    for (int i = 0; i < N * N; ++i) e.comb_mix_out[t * e.comb_mix_out_stride + i] = c[i];
  }
}

/// The fields every CUDA params struct shares, filled from a problem (one copy for all of
/// them): sizes, stage flags, the pre source, the token-indexed tensors and their row strides,
/// the RMSNorm weight and the epilogue. Each launcher adds what only its kernels use.
template <typename Params>
void fill_common_params(Params& k, const detail::Problem& p);

/// Builds the epilogue params of a problem.
inline EpilogueParams make_epilogue(const detail::Problem& p) {
  EpilogueParams e{};
  if (p.weights != nullptr) {
    e.scale = p.weights->d_scale;
    e.base = p.weights->d_base;
    e.head = p.weights->head;
  }
  e.pre_eps = p.pre_eps;
  e.sinkhorn_eps = p.sinkhorn_eps;
  e.post_scale = p.post_scale;
  e.norm_eps = p.norm_eps;
  e.sinkhorn_iters = p.sinkhorn_iters;
  e.pre_mix_out = p.pre_mix_out;
  e.pre_mix_out_stride = p.pre_mix_out_stride;
  e.post_mix_out = p.post_mix_out;
  e.post_mix_out_stride = p.post_mix_out_stride;
  e.comb_mix_out = p.comb_mix_out;
  e.comb_mix_out_stride = p.comb_mix_out_stride;
  return e;
}

template <typename Params>
void fill_common_params(Params& k, const detail::Problem& p) {
  k.T = p.T;
  k.H = p.H;
  k.has_post = p.has_post_stage();
  k.has_mixes = p.has_mixes_stage();
  k.has_collapse = p.has_collapse_stage();
  k.pre_source = p.pre_source;
  k.head_mean = p.mean_head();
  k.residual = p.residual;
  k.residual_stride = p.residual_stride;
  k.layer_output = p.layer_output;
  k.layer_output_stride = p.layer_output_stride;
  k.post_mix = p.post_mix;
  k.post_mix_stride = p.post_mix_stride;
  k.comb_mix = p.comb_mix;
  k.comb_mix_stride = p.comb_mix_stride;
  k.pre_mix_in = p.pre_mix_in;
  k.pre_mix_in_stride = p.pre_mix_in_stride;
  k.rmsnorm_weight = p.rmsnorm_weight;
  k.rmsnorm_eps = p.rmsnorm_eps;
  k.residual_out = p.residual_out;
  k.residual_out_stride = p.residual_out_stride;
  k.layer_input = p.layer_input;
  k.layer_input_stride = p.layer_input_stride;
  k.epi = make_epilogue(p);
}

}  // namespace mhc::cuda
