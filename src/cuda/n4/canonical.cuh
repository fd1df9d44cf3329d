// src/cuda/n4/canonical.cuh - the pieces of the canonical order of the n = 4 mixes that several
// kernels compute (config.cuh's header says the whole order). Every kernel that forms one of
// these values calls the function here, so the values are one computation wherever they come
// from.
#pragma once

#include "src/cuda/exact_sum.cuh"
#include "src/cuda/n4/config.cuh"

namespace mhc::cuda::n4 {

/// A fmaf chain of squares continued over the 8 bf16 of one 16-byte vector, in element order:
/// the step of every sum of squares (the mixes' chains below and in the GEMM stages, the fold's).
__device__ __forceinline__ void add_squares(const uint4& u, float& sq) {
  float f[8];
  unpack8(u, f);
#pragma unroll
  for (int e = 0; e < 8; ++e) sq = fmaf(f[e], f[e], sq);
}

/// The sum of squares of one (token, 8-column vector) over the 4 streams: a fmaf chain over
/// streams, then elements.
__device__ __forceinline__ float vector_squares(const uint4 (&x)[kN]) {
  float sq = 0.0f;
#pragma unroll
  for (int s = 0; s < kN; ++s) add_squares(x[s], sq);
  return sq;
}

/// A chunk's sum of squares from its 16 vectors' values, held by 16 consecutive lanes (lane & 15
/// = the vector): the butterfly xor 8, 4, 2, 1. Every lane of the warp calls it.
__device__ __forceinline__ float chunk_squares_butterfly(float sq) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
  return sq;
}

/// The butterfly of chunk_squares_butterfly evaluated by one thread: b[i] = the value of vector
/// 2 i + parity; the result is that parity's half of the butterfly, ((b0 + b4) + (b2 + b6)) +
/// ((b1 + b5) + (b3 + b7)), and the chunk's sum is even half + odd half (the same bits as the
/// butterfly's result in every lane).
__device__ __forceinline__ float butterfly_half(const float (&b)[8]) {
  return ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

/// The real terms of chunk group g: chunks g, g + 8, .. below `chunks`.
__host__ __device__ __forceinline__ int group_chunks(int g, int chunks) {
  return g < chunks ? (chunks - g + kPartialSplit - 1) / kPartialSplit : 0;
}

/// Group `group` of the chunk sum: chunks group, group + 8, ... in order, kMaxChunks / 8 terms
/// with 0.0f for chunks >= chunks. chunk(c) returns the chunk's value.
template <typename ChunkValue>
__device__ __forceinline__ float chunk_group_sum(int group, int chunks, ChunkValue chunk) {
  float v[kMaxChunks / kPartialSplit];
#pragma unroll
  for (int i = 0; i < kMaxChunks / kPartialSplit; ++i) {
    const int c = group + i * kPartialSplit;
    v[i] = c < chunks ? chunk(c) : 0.0f;
  }
  float s = v[0];
#pragma unroll
  for (int i = 1; i < kMaxChunks / kPartialSplit; ++i) s += v[i];
  return s;
}

/// The total of row r from its 8 group sums, in group order.
__device__ __forceinline__ float groups_total(const float (*s_part)[kPartial], int r) {
  float s = s_part[0][r];
#pragma unroll
  for (int i = 1; i < kPartialSplit; ++i) s += s_part[i][r];
  return s;
}

}  // namespace mhc::cuda::n4
