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
};

__device__ __forceinline__ PostWeights post_weights(const float* post, const float* comb) {
  PostWeights pw;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    pw.w[k][0] = post[k];
#pragma unroll
    for (int j = 0; j < kN; ++j) pw.w[k][j + 1] = comb[j * kN + k];
    pw.scale[k] = sum_error_scale(pw.w[k]);
  }
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

/// Per column pair, the 4 outputs run the branch-free fast path together (8 independent chains)
/// and are tested once; the rare uncertified ones (about 1 pair in 500) are redone in double.
__device__ __forceinline__ void post8(const PostWeights& pw, const uint4 (&res)[kN], const uint4& lo,
                                      uint4 (&out)[kN]) {
  // the terms in the order of the weights: layer output, then the 4 streams
  const uint4 terms[kN + 1] = {lo, res[0], res[1], res[2], res[3]};
  uint32_t w[kN][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float v0[kN + 1], v1[kN + 1], abs0, abs1;
    column_pair(terms, i, v0, v1, abs0, abs1);
    bool certified[kN];
    bool all = true;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      w[k][i] = sum_bf16x2_fast(pw.w[k], v0, v1, sum_error_bound(pw.scale[k], abs0),
                                sum_error_bound(pw.scale[k], abs1), certified[k]);
      all = all && certified[k];
    }
    if (!all) {
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        if (!certified[k]) w[k][i] = exact_sum_bf16x2_redo(pw.w[k], v0, v1);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kN; ++k) out[k] = make_uint4(w[k][0], w[k][1], w[k][2], w[k][3]);
}

}  // namespace mhc::cuda::n4
