// src/cuda/n4/post_gemm_kernel.cu - the post stage fused with the GEMM stage of the staged
// post_pre (src/cuda/n4/staged.cu): for p.T tokens, residual_out = post (post8's exact sums
// rounded once, the bits of post_kernel.cu) and the partials [chunk][token][25] of the new
// residual (the bits of gemm_kernel.cu), the GEMM's operand taken from shared memory where the
// post stage has just formed it.
//
// Why: in the staged plan post_bulk_kernel (91-94% of copy) writes the new residual and
// gemm_kernel reads all of it back from DRAM (a slice's residual does not fit L2): 26H bytes a
// token. Here the GEMM costs no DRAM bytes beyond its partials: 18H a token.
//
// Grid mapping: one block per multiprocessor (persistent), each with an equal contiguous range
// of the (chunk, 16-token tile) items in chunk-major order (ChunkTileItems). Two groups of 8
// warps, group g taking the items i = g mod 2, each with its own ring, A buffer and partial sums
// (one group alone kept too few post8 chains in flight); per item:
//   post: thread (token tt, 8-column vector cv) has copied its own 16-byte vectors of the 4
//     streams (and lanes cv < 5 the token's 80 bytes of mixes) with cp.async into the group's
//     ring of kPgRaw stages two items ahead, and loaded its vector of the layer output into
//     registers one item ahead; it runs post8, stores the new residual to residual_out and into
//     the group's A buffer (rows padded to kRowPitch bytes: the ldmatrix reads are free of bank
//     conflicts), forms its vector's sum of squares and, with the butterfly over its token's 16
//     lanes, the chunk's; it refills its stage with the group's item kPgRaw ahead. A thread reads
//     only the raw bytes it copied (the mixes: its warp's), so the ring needs no barrier.
//   dots: after a barrier of the group, warp j < 4 of the group forms the 24 dots of the tile
//     over stream j's 128 columns (72 mma.m16n8k16 against the chunk's B fragments, which stay in
//     shared memory for the block's items of that chunk: 72 KB; both groups reload them at a
//     chunk boundary between two __syncthreads); after a second barrier the group sums the 4
//     warps' values in stream order and stores them with the squares as the item's run of
//     16 x 25 floats.
// The mma in the post warps, not in warps of their own, keeps the block at 16 warps, 128
// registers a thread: with 4 more warps (96 registers) post8 spilled (session 18 call 4: 760
// against 657 us for the staged post_pre). Bulk copies of 256-byte rows were tried first: about
// 80 copies an item kept the copy engine busy 3.6 us an item (calls 2-3).
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/gemm_step.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kPgTile = 16;                                   // tokens per item: one m16 tile
constexpr int kPgGroupThreads = kPgTile * (kChunkCols / 8);   // 256: one per (token, 8 columns)
constexpr int kPgGroups = 2;                                  // groups, alternate items
constexpr int kPgThreads = kPgGroups * kPgGroupThreads;       // 512: 4 warps a scheduler, 128 registers
constexpr int kPgRaw = 3;                                     // raw stages a group: one read, two in flight
constexpr int kRowBytes = kChunkCols * 2;                     // a token's 128 columns of one row
constexpr int kRowPitch = kRowBytes + 16;                     // an A row, padded: 8 rows hit 32 banks
constexpr int kPostMixBytes = kN * 4, kCombMixBytes = kN * kN * 4;
// A raw stage: the streams [j][tt][256 B], post [tt][4], comb [tt][16]. (The layer output goes
// to registers, one item ahead: with it the stages would not fit.)
constexpr int kRawMix = kN * kPgTile * kRowBytes;
constexpr int kRawBytes = kRawMix + kPgTile * (kPostMixBytes + kCombMixBytes);
constexpr int kABytes = kN * kPgTile * kRowPitch;             // an A buffer: [j][tt][pitch]
constexpr int kRedFloats = kN * kPgTile * kRows;              // [warp][token][24]
// Shared memory: the B fragments, then per group its raw ring, A buffer, red and squares [2][16].
constexpr int kGroupBytes = kPgRaw * kRawBytes + kABytes + kRedFloats * 4 + 2 * kPgTile * 4;
constexpr int kPgSmem = kFragBytes + kPgGroups * kGroupBytes;
static_assert(kFragBytes % 16 == 0 && kRawBytes % 16 == 0 && kGroupBytes % 16 == 0, "16-byte copies");
static_assert(kPgSmem <= 227 * 1024, "post_gemm_kernel shared memory");

// A group's part of shared memory.
struct GroupSmem {
  unsigned char* base;
  __device__ unsigned char* raw(int stage) const { return base + stage * kRawBytes; }
  __device__ unsigned char* a() const { return base + kPgRaw * kRawBytes; }
  __device__ float* red() const { return reinterpret_cast<float*>(base + kPgRaw * kRawBytes + kABytes); }
  __device__ float* squares(int k) const { return red() + kRedFloats + (k & 1) * kPgTile; }
};

/// An item (chunk, tile) of the block, stepped forward without a division (a group's items are
/// every kPgGroups-th: three of these walk a group's current item and its two prefetches).
struct ItemWalk {
  int chunk, tile;
  __device__ ItemWalk(const ChunkTileItems& items, int i) {
    chunk = items.chunk(i);
    tile = static_cast<int>(items.tile(i));
  }
  __device__ void next(const ChunkTileItems& items) {
    tile += kPgGroups;
    while (tile >= items.tiles) {
      tile -= items.tiles;
      ++chunk;
    }
  }
};

// Thread (tt, cv)'s copies of item w into `raw` (one cp.async group, committed by the caller):
// its vector of the 4 streams and, for cv < 5, a 16-byte piece of the token's mixes (cv 0
// post_mix, cv 1..4 comb_mix). Nothing for a token past p.T.
__device__ __forceinline__ void copy_unit(const N4Params& p, const ItemWalk& w, unsigned char* raw, int tt, int cv) {
  const int64_t t = static_cast<int64_t>(w.tile) * kPgTile + tt;
  if (t >= p.T) return;
  const bf16_t* res = p.residual + t * p.residual_stride + static_cast<int64_t>(w.chunk) * kChunkCols + cv * 8;
#pragma unroll
  for (int j = 0; j < kN; ++j) cp_async16_keep(raw + (j * kPgTile + tt) * kRowBytes + cv * 16, res + j * p.res_stream_stride);
  if (cv == 0) {
    cp_async16_keep(raw + kRawMix + tt * kPostMixBytes, p.post_mix + t * p.post_mix_stride);
  } else if (cv <= kN) {
    cp_async16_keep(raw + kRawMix + kPgTile * kPostMixBytes + tt * kCombMixBytes + (cv - 1) * 16,
                    p.comb_mix + t * p.comb_mix_stride + (cv - 1) * kN);
  }
}

// Thread (tt, cv)'s vector of item w's layer output (another kernel wrote it: through L2),
// zeros past p.T.
__device__ __forceinline__ uint4 load_lo(const N4Params& p, const ItemWalk& w, int tt, int cv) {
  const int64_t t = static_cast<int64_t>(w.tile) * kPgTile + tt;
  if (t >= p.T) return make_uint4(0, 0, 0, 0);
  return ldcg16(p.layer_output + t * p.layer_output_stride + static_cast<int64_t>(w.chunk) * kChunkCols + cv * 8);
}

// Warp w (< 4) of a group: the 24 dots of the tile in `a` over stream w's 128 columns, v = hi +
// (mid + lo) per row, into red[w][token][row].
__device__ __forceinline__ void stream_dots16(const uint2* frag, uint32_t a, float* red, int w, int lane) {
  const int g = lane >> 2, q = lane & 3;
  const uint2* bw = frag + w * kMmaSteps * kNTiles * 32;
  // A: row lane % 16 of stream w, k-vector 2 ks + lane / 16 (ldmatrix x4: a0..a3 of m16k16).
  const uint32_t a_row = a + (w * kPgTile + (lane & 15)) * kRowPitch + (lane >> 4) * 16;
  float acc[kNTiles][4];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kMmaSteps; ++ks) {
    uint32_t a0, a1, a2, a3;
    ldmatrix_x4(a_row + ks * 32, a0, a1, a2, a3);
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      const uint2 b = bw[(ks * kNTiles + nt) * 32 + lane];
      mma_bf16(acc[nt], a0, a1, a2, a3, b.x, b.y);
    }
  }
  // n-tile nt is part nt / 3 of rows (nt % 3) * 8 ..
#pragma unroll
  for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float2 v;
      v.x = acc[blk][2 * h] + (acc[3 + blk][2 * h] + acc[6 + blk][2 * h]);
      v.y = acc[blk][2 * h + 1] + (acc[3 + blk][2 * h + 1] + acc[6 + blk][2 * h + 1]);
      *reinterpret_cast<float2*>(&red[(w * kPgTile + g + 8 * h) * kRows + blk * 8 + 2 * q]) = v;
    }
  }
}

__global__ void __launch_bounds__(kPgThreads, 1) post_gemm_kernel(const N4Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const ChunkTileItems items(p.T, p.chunks, kPgTile);
  if (items.count <= 0) return;  // block-uniform
  const int tid = static_cast<int>(threadIdx.x);
  const int group = tid / kPgGroupThreads, gt = tid % kPgGroupThreads;
  const int tt = gt >> 4, cv = gt & 15, w = gt >> 5, lane = tid & 31;
  const GroupSmem gs{smem + kFragBytes + group * kGroupBytes};
  const uint2* frag = reinterpret_cast<const uint2*>(smem);
  const uint32_t a_addr = static_cast<uint32_t>(__cvta_generic_to_shared(gs.a()));
  // The first chunk's fragments are weights: their copies overlap the end of the kernel before.
  gemm_step::load_fragments<kPgThreads>(p, smem, items.chunk(0), tid);
  cp_async_commit();
  pdl_wait();  // the residual, the layer output and the mixes may come from the kernel before
#pragma unroll
  for (int k = 0; k < kPgRaw; ++k) {
    const int i = group + kPgGroups * k;
    if (i < items.count) copy_unit(p, ItemWalk(items, i), gs.raw(k), tt, cv);
    cp_async_commit();
  }
  uint4 lo_next = load_lo(p, ItemWalk(items, group), tt, cv);
  cp_async_wait<kPgRaw>();  // the fragments (the ring's copies may still be in flight)
  __syncthreads();
  const int first_chunk = items.chunk(0), last_chunk = items.chunk(items.count - 1);
  int i = group, k = 0;  // the group's next item and its count
  // The group's item i, the item whose layer output is loaded next (i + kPgGroups) and the one
  // copied next (i + kPgGroups kPgRaw); the walks start inside the block's range.
  ItemWalk cur(items, i < items.count ? i : 0);
  ItemWalk lo_walk(items, i + kPgGroups < items.count ? i + kPgGroups : 0);
  ItemWalk copy_walk(items, i + kPgGroups * kPgRaw < items.count ? i + kPgGroups * kPgRaw : 0);
  for (int chunk = first_chunk; chunk <= last_chunk; ++chunk) {
    if (chunk != first_chunk) {
      // Both groups are past the old chunk's items (every thread passes each chunk, with items
      // of its group in it or not).
      __syncthreads();
      gemm_step::load_fragments<kPgThreads>(p, smem, chunk, tid);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    }
    for (; i < items.count && cur.chunk == chunk; i += kPgGroups, ++k, cur.next(items)) {
      const int64_t t0 = static_cast<int64_t>(cur.tile) * kPgTile, t = t0 + tt;
      const bool valid = t < p.T;
      unsigned char* raw = gs.raw(k % kPgRaw);
      const uint4 lo = lo_next;
      lo_next = i + kPgGroups < items.count ? load_lo(p, lo_walk, tt, cv) : make_uint4(0, 0, 0, 0);
      lo_walk.next(items);
      cp_async_wait<kPgRaw - 1>();  // this thread's copies of item i have landed
      __syncwarp();                 // and its token's mixes, copied by lanes cv < 5
      uint4 x[kN];
      if (valid) {
        uint4 r[kN];
#pragma unroll
        for (int j = 0; j < kN; ++j) r[j] = *reinterpret_cast<const uint4*>(raw + (j * kPgTile + tt) * kRowBytes + cv * 16);
        const float* mix = reinterpret_cast<const float*>(raw + kRawMix);
        post8(post_weights(mix + tt * kN, mix + kPgTile * kN + tt * kN * kN), r, lo, x);
        bf16_t* out = p.residual_out + t * p.residual_out_stride + static_cast<int64_t>(chunk) * kChunkCols + cv * 8;
#pragma unroll
        for (int j = 0; j < kN; ++j) st16(out + j * p.H, x[j]);
      } else {
        // A padding row: zeros for the mma, whose rows past p.T are never stored.
#pragma unroll
        for (int j = 0; j < kN; ++j) x[j] = make_uint4(0, 0, 0, 0);
      }
      __syncwarp();  // every lane of the warp has read the stage's mixes: refill it
      const int next = i + kPgGroups * kPgRaw;
      if (next < items.count) copy_unit(p, copy_walk, raw, tt, cv);
      copy_walk.next(items);
      cp_async_commit();
      // The token's 16 threads are 16 consecutive lanes: the fixed-order butterfly.
      const float sq = chunk_squares_butterfly(vector_squares(x));
      if (cv == 0) gs.squares(k)[tt] = sq;
#pragma unroll
      for (int j = 0; j < kN; ++j) *reinterpret_cast<uint4*>(gs.a() + (j * kPgTile + tt) * kRowPitch + cv * 16) = x[j];
      // The A buffer is complete; the previous item's reads of red are done.
      named_sync(1 + group, kPgGroupThreads);
      if (w < kN) stream_dots16(frag, a_addr, gs.red(), w, lane);
      // red is complete; the A buffer is free for the group's next item.
      named_sync(1 + group, kPgGroupThreads);
      const int rows = static_cast<int>(p.T - t0 < kPgTile ? p.T - t0 : kPgTile);
      float* dst = partial_at(p, t0, chunk);
      const float* red = gs.red();
      const float* sqs = gs.squares(k);
      for (int idx = gt; idx < rows * kPartial; idx += kPgGroupThreads) {
        const int token = idx / kPartial, row = idx - token * kPartial;
        float v;
        if (row < kRows) {
          // The 4 streams' values in stream order: ((v_0 + v_1) + v_2) + v_3.
          v = red[token * kRows + row];
#pragma unroll
          for (int s = 1; s < kN; ++s) v += red[(s * kPgTile + token) * kRows + row];
        } else {
          v = sqs[token];
        }
        dst[idx] = v;
      }
    }
  }
}

}  // namespace

bool configure_post_gemm_kernel(int device) { return allow_dynamic_smem(post_gemm_kernel, device, kPgSmem); }

void launch_post_gemm_kernel(const N4Params& p, const LaunchCtx& ctx) {
  MHC_CHECK(p.has_post && p.residual_out != nullptr, "post_gemm_kernel: needs a post stage and its residual_out");
  MHC_CHECK(p.H % kSliceK == 0 && p.H <= kMaxH, "post_gemm_kernel: H = ", p.H, " outside the n4 envelope");
  if (p.T <= 0) return;
  // One block per multiprocessor, each with an equal range of the (chunk, tile) items.
  const unsigned blocks = item_grid((p.T + kPgTile - 1) / kPgTile * p.chunks, ctx.num_sms, "post_gemm_kernel");
  launch_kernel(post_gemm_kernel, dim3(blocks), kPgThreads, kPgSmem, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_post_gemm_kernels(KernelList& out) { add_kernel(out, post_gemm_kernel, "n4::post_gemm_kernel"); }
