// src/cuda/n4/config.cuh - every constant of the n = 4 kernels (mix_kernel, collapse_kernel,
// post_kernel, decode_kernel) with its meaning, the shared-memory layout of mix_kernel, and
// N4Params, the plain params struct the n = 4 launchers take.
//
// The canonical order of the mixes (every n = 4 variant gives the same bits): a chunk is
// kChunkCols hidden columns of all 4 streams (kSliceK = 512 k's). For each token, chunk and
// stream j, the 24 dots over the chunk's 128 columns of stream j are mma.m16n8k16 chains
// (bf16 x against the three bf16 parts of fn, kMmaSteps k16 steps in order, one accumulator per
// part, v = hi + (mid + lo)); the chunk partial is ((v_0 + v_1) + v_2) + v_3. The sum of squares
// of a chunk: per (token, 8-column vector) a fmaf chain over streams then elements, then a
// butterfly over the 16 vectors (xor 8, 4, 2, 1). Chunk partials are summed in kPartialSplit
// interleaved groups (group g: chunks g, g + 8, ... in order), then the groups in order.
#pragma once

#include <cstdint>

#include "src/cuda/epilogue.cuh"

namespace mhc::cuda::n4 {

using detail::bf16_t;

constexpr int kN = 4;
constexpr int kRows = 24;             // (n+2)*n
constexpr int kChunkCols = 128;       // hidden columns per chunk
constexpr int kSliceK = kN * kChunkCols;  // 512: the K of a chunk; H must be a multiple of it
constexpr int kTile = 32;             // tokens per block iteration (two m16 mma tiles)
constexpr int kMTiles = kTile / 16;
constexpr int kNTiles = 9;            // 3 parts x 24 rows / 8
constexpr int kXStride = kSliceK + 8; // padded smem row (conflict-free 32-bit fragment loads)
constexpr int kPartial = kRows + 1;   // 24 dots + sum of squares
constexpr int kThreadsB = 256;       // collapse_kernel / post_kernel block
constexpr int kMaxH = 16384;          // the largest H of this path (partials sum, fragments)
constexpr int kMaxChunks = kMaxH / kChunkCols;  // 128
constexpr int kSliceTokens = 1920;   // default tokens per slice where a collapse follows (Workspace option)
constexpr int kScratchTokens = 16384; // tokens of partials the default workspace holds at kScratchChunks
constexpr int kScratchChunks = 7168 / kChunkCols;  // 56: the chunks of the largest shipped H
constexpr int kDecodeThreads = 256;   // decode_kernel block (= kThreadsB: collapse_row)
constexpr int kDecodeDefaultTokens = 128;  // its default T limit (session 8 call 3: faster than the plan up to 128)
constexpr int kPartialSplit = 8;      // chunk groups the collapse sums in parallel

// mix_kernel (src/cuda/n4/mix_kernel.cu): roles, ring and shared-memory layout.
constexpr int kPostWarps = 16;
constexpr int kPostThreads = kPostWarps * 32;
constexpr int kMmaWarps = kN;          // one per stream of the chunk
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kThreadsA = kPostThreads + kMmaThreads;  // 640
constexpr int kMmaSteps = kChunkCols / 16;             // k16 steps per mma warp
constexpr int kStages = 3;
constexpr int kMmaBar = 1;  // the mma warps' named barrier (0 is __syncthreads)
// A stage: the streams [32 tokens][kXStride] (bf16, row = the 512 k's of the chunk, padded),
// layer_output [32][16 vectors], mixes [32][20] (post[4], comb[16]).
constexpr int kStageRes = kTile * kXStride * 2;            // 32.5 KB
constexpr int kStageLo = kTile * kChunkCols * 2;           // 8 KB
constexpr int kStageMix = kTile * (kN + kN * kN) * 4;      // 2.5 KB
constexpr int kStageBytes = kStageRes + kStageLo + kStageMix;
constexpr int kFragWords = kMmaWarps * kMmaSteps * kNTiles * 32;  // uint2 per chunk (72 KB)
constexpr int kFragBytes = kFragWords * 8;
constexpr int kRedFloats = kMmaWarps * kTile * kRows;      // [4 warps][32 tokens][24]
constexpr int kMixSmem = kStages * kStageBytes + kFragBytes + 2 * kRedFloats * 4;
static_assert(kStageBytes % 16 == 0 && kFragBytes % 16 == 0, "smem layout");
static_assert(kMixSmem <= 227 * 1024, "mix_kernel shared memory");
static_assert(kPostThreads == kTile * (kChunkCols / 8), "one post thread per (token, 8 columns)");

struct N4Params {
  int64_t T;                 // tokens in this launch (a slice)
  int64_t H;
  int32_t chunks;            // H / 128
  // phase A inputs
  bool has_post;
  const bf16_t* residual; int64_t residual_stride; int64_t res_stream_stride;  // 0: broadcast
  const bf16_t* layer_output; int64_t layer_output_stride;
  const float* post_mix; int64_t post_mix_stride;
  const float* comb_mix; int64_t comb_mix_stride;
  const uint2* fn_frag;      // [chunks][4 mma warps][8 k16 steps][9 ntiles][32 lanes]
  bf16_t* residual_out; int64_t residual_out_stride;  // post output, or materialised copies
  float* partials;           // [chunks][T][25] (partial_at)
  // The overlapped plan (staged.cu, cuda_n4_overlap): one counter per 32-token tile of the
  // slice, zero between launches; the GEMM stage adds 1 per (chunk, tile) item once its partials
  // are stored, overlap_tail_kernel waits for `chunks` and puts the 0 back. Null elsewhere.
  uint32_t* tile_arrivals;
  // phase B
  bool has_mixes, has_collapse;
  PreSource pre_source;
  bool head_mean;
  const float* pre_mix_in; int64_t pre_mix_in_stride;
  // collapse_stream_kernel: pre_mix_in is the staged plan's pre mailbox, which finalize_kernel
  // (the kernel before, writing the mailbox first and then the mixes) fills token by token: the
  // collapse polls its token's pre instead of waiting for finalize_kernel to complete, and orders
  // its own completion after it at the end (src/cuda/n4/staged.cu).
  bool pre_poll;
  bool x_keep;               // overlap_tail_kernel's collapse role: the streams' loads without the streaming hint
  const bf16_t* x; int64_t x_stride; int64_t x_stream_stride;  // the streams the collapse reads
  bool copy_x_out;           // collapse_stream_kernel also writes its broadcast x to residual_out's n streams
  const bf16_t* rmsnorm_weight; float rmsnorm_eps;
  bf16_t* layer_input; int64_t layer_input_stride;
  EpilogueParams epi;
  float inv_k;
};
#ifdef __CUDACC__
// The (chunk, token tile) items of this block when a kernel gives each block an equal
// contiguous range of them in chunk-major order: [begin, begin + count) (32-bit: the launchers
// keep tiles x chunks below 2^31, item_grid). Tiles of kTile tokens unless a kernel says.
struct ChunkTileItems {
  int tiles, begin, count;
  __device__ ChunkTileItems(int64_t T, int chunks, int tile_tokens = kTile) {
    tiles = static_cast<int>((T + tile_tokens - 1) / tile_tokens);
    const int64_t items = static_cast<int64_t>(tiles) * chunks;
    begin = static_cast<int>(items * blockIdx.x / gridDim.x);
    count = static_cast<int>(items * (blockIdx.x + 1) / gridDim.x) - begin;
  }
  __device__ int chunk(int i) const { return (begin + i) / tiles; }
  __device__ int64_t tile(int i) const { return begin + i - chunk(i) * tiles; }
};

/// The 25 partials of (token t, chunk) among p.T tokens: the layout is [chunk][T][25], so the
/// partials of a (chunk, tile) item are one contiguous run (3200 bytes for 32 tokens), and so
/// are the partials of one chunk that a finalize_kernel block reads (a token-major layout
/// scatters each item's stores 100 bytes apart; docs/performance-history.md, session 13).
__device__ __forceinline__ float* partial_at(const N4Params& p, int64_t t, int chunk) {
  return p.partials + (static_cast<int64_t>(chunk) * p.T + t) * kPartial;
}
#endif

}  // namespace mhc::cuda::n4
