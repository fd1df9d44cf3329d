// src/cuda/n4/finalize_run.cuh - finalize_kernel's work on one run of tokens (its header says
// what it computes, the layouts and the order): the canonical sums of the run's partials into
// shared memory, then each token's mixes epilogue on one thread. finalize_kernel runs it once a
// block; overlap_tail_kernel's finalize role once a 32-token tile, after take_tile. One code, so
// the same bits.
#pragma once

#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/config.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

constexpr int kFinTokens = 32;       // tokens per block at most over chunk partials (one warp of epilogues)
constexpr int kFinGroupTokens = 64;  // ... over group runs (8 loads a token and row: two warps of epilogues)
constexpr int kFinThreads = 256;
constexpr int kFinRoundTokens = kFinThreads / kPartial;  // 10: one element a thread (the round-batched form)
constexpr int kRoundBatch = 8;      // the round-batched form's rounds in flight at once (8 x 8 loads)
// Elements (token, row) a thread sums for a block of kTokens tokens.
constexpr int elems_of(int tokens) { return (tokens * kPartial + kFinThreads - 1) / kFinThreads; }
constexpr int kGroupTerms = kMaxChunks / kPartialSplit; // 16 terms per group

struct FinalizeParams {
  N4Params p;
  float* pre;         // [p.T][4] fresh pre for the collapse, or null
  int32_t per_block;  // tokens per block, 1 .. the kernel's kTokens
};

// Group g's sum once its real terms (chunks g, g + 8, .. < chunks, n_real of them) are added in
// order: collapse_kernel adds all 16 terms, the missing ones as 0.0f; adding +0.0f k >= 1 times
// equals adding it once (x + 0 = x except -0 + 0 = +0, and a NaN stays the canonical NaN), so
// one +0.0f where a zero term exists, and 0.0f for a group without real terms. (No nsz: without
// fast-math the compiler keeps x + 0.0f.)
__device__ __forceinline__ float finish_group(float s, int n_real) {
  if (n_real == 0) return 0.0f;
  return n_real < kGroupTerms ? s + 0.0f : s;
}

/// One element's canonical sum over the runs: element idx of each run c < runs (c * chunk_stride
/// floats from base), in rounds of 8 runs (round i: runs 8 i .. 8 i + 7, one term of each group),
/// kRounds rounds' loads at a time so that a round does not wait for the one before, 0.0f for a
/// run past `runs`; then the groups finished (finish_group) and added in order. The round-batched
/// form of finalize_run and early_pre both sum this way.
template <int kRounds>
__device__ __forceinline__ float element_sum(const float* base, int64_t chunk_stride, int idx, int rounds, int runs,
                                             int chunks) {
  float g[kPartialSplit];                        // the element's group sums
#pragma unroll 1
  for (int i0 = 0; i0 < rounds; i0 += kRounds) {
    float v[kRounds][kPartialSplit];
#pragma unroll
    for (int b = 0; b < kRounds; ++b) {
#pragma unroll
      for (int k = 0; k < kPartialSplit; ++k) {
        const int c = (i0 + b) * kPartialSplit + k;
        v[b][k] = i0 + b < rounds && c < runs ? __ldcg(base + c * chunk_stride + idx) : 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kRounds; ++b) {
#pragma unroll
      for (int k = 0; k < kPartialSplit; ++k) {
        if (i0 + b < rounds) g[k] = i0 + b == 0 ? v[b][k] : g[k] + v[b][k];
      }
    }
  }
  float s = finish_group(g[0], group_chunks(0, chunks));
#pragma unroll
  for (int k = 1; k < kPartialSplit; ++k) s += finish_group(g[k], group_chunks(k, chunks));
  return s;
}

/// The run [t0, t0 + count) of f.p's tokens (1 <= count <= kTokens), by every thread of a
/// kFinThreads block: the sums into s_dot, a block barrier, then thread t's epilogue of token
/// t0 + t, writing the mixes and, where f.pre is set, the fresh pre before the comb's chain.
template <int kTokens, int kBatch, bool kGrouped, int kRounds>
__device__ __forceinline__ void finalize_run(const FinalizeParams& f, int64_t t0, int count,
                                             float (*s_dot)[kPartial]) {
  constexpr int kElems = elems_of(kTokens);
  const N4Params& p = f.p;
  const int tid = threadIdx.x;
  const int run = count * kPartial;                  // the block's floats of one chunk
  const float* base = partial_at(p, t0, 0);
  // Chunk partials: chunks in rounds of 8 (one per group), round i holding chunks 8 i .. 8 i + 7,
  // term i of each group. Group runs: one round, run k holding group k's real terms summed.
  const int64_t run_tokens = kGrouped ? (p.T + kTile - 1) / kTile * kTile : p.T;
  const int64_t chunk_stride = run_tokens * kPartial;  // floats from one run to the next
  const int rounds = kGrouped ? 1 : (p.chunks + kPartialSplit - 1) / kPartialSplit;
  const int runs = kGrouped && p.chunks > kPartialSplit ? kPartialSplit : p.chunks;
  if constexpr (kRounds > 0) {
    if (tid < run) s_dot[tid / kPartial][tid % kPartial] = element_sum<kRounds>(base, chunk_stride, tid, rounds, runs, p.chunks);
  }
#pragma unroll 1
  for (int e0 = 0; e0 < (kRounds > 0 ? 0 : kElems); e0 += kBatch) {
    float g[kBatch][kPartialSplit];                  // group sums of this batch's elements
    for (int i = 0; i < rounds; ++i) {
      float v[kBatch][kPartialSplit];
#pragma unroll
      for (int k = 0; k < kPartialSplit; ++k) {
        const int c = i * kPartialSplit + k;
#pragma unroll
        for (int e = 0; e < kBatch; ++e) {
          const int idx = tid + (e0 + e) * kFinThreads;
          v[e][k] = c < runs && idx < run ? __ldcg(base + c * chunk_stride + idx) : 0.0f;
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
        float s = finish_group(g[e][0], group_chunks(0, p.chunks));
#pragma unroll
        for (int k = 1; k < kPartialSplit; ++k) s += finish_group(g[e][k], group_chunks(k, p.chunks));
        s_dot[idx / kPartial][idx % kPartial] = s;
      }
    }
  }
  __syncthreads();
  if (tid < count) {
    const int64_t t = t0 + tid;
    // The pre and post outputs, then the fresh pre into the buffer, then the comb's Sinkhorn
    // chain: a collapse may be polling for the pre (the pre mailbox: a NaN is stored as the
    // canonical NaN, never the mailbox's poison).
    float pre[kN];
    mixes_epilogue<kN>(p.epi, s_dot[tid], s_dot[tid][kRows], p.inv_k, t, pre, kEpiPrePost);
    if (f.pre != nullptr) {
#pragma unroll
      for (int j = 0; j < kN; ++j) pre[j] = isnan(pre[j]) ? __int_as_float(0x7fffffff) : pre[j];
      st16_relaxed_gpu(f.pre + t * kN, __float_as_uint(pre[0]), __float_as_uint(pre[1]), __float_as_uint(pre[2]),
                       __float_as_uint(pre[3]));
    }
    mixes_epilogue<kN>(p.epi, s_dot[tid], s_dot[tid][kRows], p.inv_k, t, pre, kEpiComb);
  }
}

/// The overlap rows' early pre: the fresh pre of the run [t0, t0 + count) of f.p's tokens into
/// f.pre, before finalize_run sums the run's other rows, so that a collapse polling the mailbox
/// waits for 5 of a token's 25 sums rather than all 25 and the epilogue. Thread e < 5 count sums
/// element (token e / 5, row e % 5, row 4 standing for the sum of squares, row 24) exactly as
/// finalize_run sums it (the same rounds, groups and zero terms), kRounds rounds of its loads at
/// a time; then thread t < count forms token t0 + t's pre by mixes_pre, the epilogue's own first
/// part, so the bits are finalize_run's. The caller runs finalize_run with f.pre = null after it.
/// s_pre: count x 5 floats of shared memory.
template <int kRounds>
__device__ __forceinline__ void early_pre(const FinalizeParams& f, int64_t t0, int count, float (*s_pre)[kN + 1]) {
  const N4Params& p = f.p;
  const int tid = threadIdx.x;
  const float* base = partial_at(p, t0, 0);
  const int64_t chunk_stride = p.T * kPartial;
  const int rounds = (p.chunks + kPartialSplit - 1) / kPartialSplit;
  if (tid < count * (kN + 1)) {
    const int tok = tid / (kN + 1), q = tid % (kN + 1);
    s_pre[tok][q] = element_sum<kRounds>(base, chunk_stride, tok * kPartial + (q < kN ? q : kRows), rounds, p.chunks,
                                         p.chunks);
  }
  __syncthreads();
  if (tid < count) {
    float pre[kN];
    mixes_pre<kN>(p.epi, s_pre[tid], s_pre[tid][kN], p.inv_k, pre);
    // as finalize_run's store: a NaN as the canonical NaN, never the mailbox's poison
#pragma unroll
    for (int j = 0; j < kN; ++j) pre[j] = isnan(pre[j]) ? __int_as_float(0x7fffffff) : pre[j];
    st16_relaxed_gpu(f.pre + (t0 + tid) * kN, __float_as_uint(pre[0]), __float_as_uint(pre[1]),
                     __float_as_uint(pre[2]), __float_as_uint(pre[3]));
  }
}

/// The overlap rows: thread 0 waits until tile `tile`'s counter (p.tile_arrivals, added to by the
/// GEMM stage's overlapped form once an item's partials are stored) counts every chunk, with an
/// acquire at GPU scope, and puts 0 back (nothing else touches the counter in this launch; the
/// next launch finds it 0). The caller's block barrier then orders the tile's loads after it.
__device__ __forceinline__ void take_tile(const N4Params& p, int64_t tile) {
  if (threadIdx.x == 0) {
    uint32_t* counter = p.tile_arrivals + tile;
    while (ld_acquire_gpu(counter) < static_cast<uint32_t>(p.chunks)) {
    }
    *counter = 0u;
  }
}

constexpr int kTileBatch = 2;      // finalize_tile: element batches of 2 (finalize_kernel<32, 4, 2>'s)
constexpr int kTilePreRounds = 4;  // ... early_pre's rounds of 8 loads in flight (1 round trip at H = 4096, 2 at 7168)

/// The overlap rows' work on tile `tile` of f.p's tokens, by a kFinThreads block: take_tile,
/// then, where f.pre is set, the tile's pre into it first (early_pre) and the rest of
/// finalize_run's work (`rest`: f with pre null), else finalize_run on f. counted() and pre_stored() run at the two points the diagnostics build's
/// timeline records (no-ops elsewhere).
template <typename Counted, typename PreStored>
__device__ __forceinline__ void finalize_tile(const FinalizeParams& f, const FinalizeParams& rest, int64_t tile,
                                              float (*s_dot)[kPartial], float (*s_pre)[kN + 1], Counted counted,
                                              PreStored pre_stored) {
  take_tile(f.p, tile);
  __syncthreads();  // the tile's loads after thread 0's acquire; s_dot's and s_pre's last readers are done
  const int64_t t0 = tile * kTile;
  const int count = static_cast<int>(f.p.T - t0 < kTile ? f.p.T - t0 : kTile);
  counted();
  if (f.pre != nullptr) {
    early_pre<kTilePreRounds>(f, t0, count, s_pre);  // ends with the pre stored by threads < count
    pre_stored();
    finalize_run<kTile, kTileBatch, false, 0>(rest, t0, count, s_dot);
  } else {
    finalize_run<kTile, kTileBatch, false, 0>(f, t0, count, s_dot);
  }
}

}  // namespace mhc::cuda::n4
