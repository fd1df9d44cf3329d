// src/cuda/n4/finalize.cuh - the canonical sums of the mixes partials, shared by finalize_kernel
// (the staged plan) and tail_kernel (the overlap plan): for `count` consecutive tokens from t0,
// each token's 24 dots and its sum of squares from the partials [chunk][token][25] (partial_at),
// into s_dot[token - t0][row], by the block's kFinThreads threads.
//
// Thread tid sums the elements e = tid, tid + 256, .. of the tokens' run of count x 25 floats
// (element e is row e % 25 of token e / 25) over every chunk, kept as 8 group sums, so each load
// instruction of the block reads consecutive floats and a thread has a group's worth of chunks
// (8 loads an element) in flight.
// Accumulation: the sums of collapse_kernel, bit for bit: group g is the 16 terms chunk g,
// g + 8, ... in order with 0.0f for chunks >= p.chunks, then the 8 groups in order from group 0
// (see finish_group for the zero terms).
#pragma once

#include "src/cuda/n4/config.cuh"

namespace mhc::cuda::n4 {

constexpr int kFinTokens = 32;                          // tokens per finalize block at most (one warp of epilogues)
constexpr int kFinThreads = 256;
constexpr int kGroupTerms = kMaxChunks / kPartialSplit; // 16 terms per group

/// Elements a thread sums for `tokens` tokens.
constexpr int fin_elems(int tokens) { return (tokens * kPartial + kFinThreads - 1) / kFinThreads; }

// Group g's sum once its real terms (chunks g, g + 8, .. < chunks, n_real of them) are added in
// order: collapse_kernel adds all 16 terms, the missing ones as 0.0f; adding +0.0f k >= 1 times
// equals adding it once (x + 0 = x except -0 + 0 = +0, and a NaN stays the canonical NaN), so
// one +0.0f where a zero term exists, and 0.0f for a group without real terms. (No nsz: without
// fast-math the compiler keeps x + 0.0f.)
// The real terms of group g: chunks g, g + 8, .. below `chunks`.
__device__ __forceinline__ int group_terms(int g, int chunks) {
  return g < chunks ? (chunks - g + kPartialSplit - 1) / kPartialSplit : 0;
}

__device__ __forceinline__ float finish_group(float s, int n_real) {
  if (n_real == 0) return 0.0f;
  return n_real < kGroupTerms ? s + 0.0f : s;
}

/// The sums of tokens [t0, t0 + count) into s_dot (count <= kElemsT x 256 / 25), kBatch of the
/// thread's kElemsT elements at a time (kBatch x 8 loads in flight). The partials are read
/// through L2 (another kernel or block wrote them). The caller syncs before reading s_dot.
template <int kElemsT, int kBatch>
__device__ __forceinline__ void finalize_sums(const N4Params& p, int64_t t0, int count, float (*s_dot)[kPartial]) {
  static_assert(kElemsT % kBatch == 0, "finalize_sums: whole element batches");
  const int tid = static_cast<int>(threadIdx.x);
  const int run = count * kPartial;                  // the tokens' floats of one chunk
  const float* base = partial_at(p, t0, 0);
  const int64_t chunk_stride = p.T * kPartial;       // floats from one chunk's run to the next
  // Chunks in rounds of 8 (one per group): round i holds chunks 8 i .. 8 i + 7, term i of each group.
  const int rounds = (p.chunks + kPartialSplit - 1) / kPartialSplit;
#pragma unroll 1
  for (int e0 = 0; e0 < kElemsT; e0 += kBatch) {
    float g[kBatch][kPartialSplit];                  // group sums of this batch's elements
    for (int i = 0; i < rounds; ++i) {
      float v[kBatch][kPartialSplit];
#pragma unroll
      for (int k = 0; k < kPartialSplit; ++k) {
        const int c = i * kPartialSplit + k;
#pragma unroll
        for (int e = 0; e < kBatch; ++e) {
          const int idx = tid + (e0 + e) * kFinThreads;
          v[e][k] = c < p.chunks && idx < run ? __ldcg(base + c * chunk_stride + idx) : 0.0f;
        }
      }
#pragma unroll
      for (int e = 0; e < kBatch; ++e) {
#pragma unroll
        for (int k = 0; k < kPartialSplit; ++k) g[e][k] = i == 0 ? v[e][k] : g[e][k] + v[e][k];
      }
    }
#pragma unroll
    for (int e = 0; e < kBatch; ++e) {
      const int idx = tid + (e0 + e) * kFinThreads;
      if (idx < run) {
        // The 8 group sums in order from group 0.
        float s = finish_group(g[e][0], group_terms(0, p.chunks));
#pragma unroll
        for (int k = 1; k < kPartialSplit; ++k) s += finish_group(g[e][k], group_terms(k, p.chunks));
        s_dot[idx / kPartial][idx % kPartial] = s;
      }
    }
  }
}

}  // namespace mhc::cuda::n4
