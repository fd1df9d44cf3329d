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
// of the (chunk, 16-token tile) items in chunk-major order (ChunkTileItems). Three roles, one
// stage of a ring of kPgStages per item, handed on through three mbarriers per stage:
//   the copies: mma warp 0 fills the stage with bulk copies (`full`): the tile's 256-byte rows
//     of the chunk's 128 columns of the 4 streams (rows padded to kRowPitch bytes, so the
//     ldmatrix reads below are free of bank conflicts) and of the layer output, and the tokens'
//     mixes; it refills a stage once the 4 mma warps have released it (`empty`). (A warp of its
//     own for the copies would make 21 warps, 5 or 6 a scheduler, and cap the registers at 80:
//     post8 spilled there.)
//   16 post warps in two groups of 8, group g taking the items i = g mod 2 (a post thread is a
//     long dependent chain: one group alone kept too few units in flight, session 18 call 2):
//     thread (token tt, 8-column vector cv) runs post8 on its vector of the 4 streams, stores
//     the new residual to residual_out and in place into the stage (the mma A operand), and
//     forms its vector's sum of squares, then the token's with the butterfly over its 16 lanes;
//     then arrives on `posted`.
//   4 mma warps: warp j forms the 24 dots of the tile over stream j's 128 columns (72
//     mma.m16n8k16 against the chunk's B fragments, which stay in shared memory for the block's
//     items of that chunk: 72 KB); the 4 warps' values meet in shared memory, are summed in
//     stream order and stored with the squares as the item's run of 16 x 25 floats; then the
//     warps release the stage.
// Accumulation: the canonical order of config.cuh, as gemm_kernel: per token and stream one mma
// chain per n-tile from zero over the 8 k16 steps, v = hi + (mid + lo), ((v_0 + v_1) + v_2) + v_3;
// the squares vector_squares then chunk_squares_butterfly (canonical.cuh). finalize_kernel then
// reads the partials as it reads gemm_kernel's.
// Envelope: sm_90+ (bulk copies, mbarriers), n = 4, H % 512 == 0, H <= 16384, 16-byte aligned
// rows and 16-byte aligned mixes rows (post_mix, comb_mix), a post stage with its residual_out;
// 218.1 KB of dynamic shared memory.
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
constexpr int kPgGroups = 2;                                  // post groups, alternate items
constexpr int kPgPostThreads = kPgGroups * kPgGroupThreads;
constexpr int kPgMmaThreads = kN * 32;                        // 128: warp j, stream j
constexpr int kPgThreads = kPgPostThreads + kPgMmaThreads;    // 640: 5 warps a scheduler, 96 registers
constexpr int kPgStages = 6;
constexpr int kPgMmaBar = 1;                                  // the mma warps' named barrier
constexpr int kRowBytes = kChunkCols * 2;                     // a token's 128 columns of one row
constexpr int kRowPitch = kRowBytes + 16;                     // padded: 8 rows hit 32 banks
constexpr int kPgRes = kN * kPgTile * kRowPitch;              // a stage's streams [j][tt][pitch]
constexpr int kPgMixOff = kPgRes + kPgTile * kRowBytes;       // after the layer output [tt][256 B]
constexpr int kPostMixBytes = kN * 4, kCombMixBytes = kN * kN * 4;
constexpr int kPgStageBytes = kPgMixOff + kPgTile * (kPostMixBytes + kCombMixBytes);  // + post [tt][4], comb [tt][16]
constexpr int kPgRedFloats = kN * kPgTile * kRows;            // [warp][token][24]
// Shared memory: the barriers, the B fragments, the ring, red[2], the stages' squares.
constexpr int kPgFragOff = 256;
constexpr int kPgStageOff = kPgFragOff + kFragBytes;
constexpr int kPgRedOff = kPgStageOff + kPgStages * kPgStageBytes;
constexpr int kPgSqOff = kPgRedOff + 2 * kPgRedFloats * 4;
constexpr int kPgSmem = kPgSqOff + kPgStages * kPgTile * 4;
static_assert(3 * kPgStages * 8 <= kPgFragOff, "barriers");
static_assert(kPgStageOff % 128 == 0 && kPgStageBytes % 128 == 0 && kRowPitch % 16 == 0, "16-byte copies");
static_assert(kPgSmem <= 227 * 1024, "post_gemm_kernel shared memory");

struct Ring {
  unsigned char* smem;
  uint32_t base;  // smem as a shared-memory address
  __device__ uint32_t full(int s) const { return base + 8 * s; }
  __device__ uint32_t posted(int s) const { return base + 8 * (kPgStages + s); }
  __device__ uint32_t empty(int s) const { return base + 8 * (2 * kPgStages + s); }
  __device__ unsigned char* stage(int s) const { return smem + kPgStageOff + s * kPgStageBytes; }
  __device__ float* squares(int s) const { return reinterpret_cast<float*>(smem + kPgSqOff) + s * kPgTile; }
};

__device__ __forceinline__ int tile_rows(const N4Params& p, int64_t t0) {
  return static_cast<int>(p.T - t0 < kPgTile ? p.T - t0 : kPgTile);
}

// Item i's copies into its stage (free: its previous item released it), by the 32 lanes of mma
// warp 0. Lane (half, tt) copies token tt's rows: half 0 streams 0-2 and post_mix, half 1
// stream 3, the layer output and comb_mix.
__device__ __forceinline__ void produce(const N4Params& p, const ChunkTileItems& items, const Ring& ring, int i, int lane) {
  const int tt = lane & 15, half = lane >> 4;
  const int s = i % kPgStages;
  const int64_t t0 = items.tile(i) * kPgTile;
  const int rows = tile_rows(p, t0);
  constexpr int kTokenBytes = (kN + 1) * kRowBytes + kPostMixBytes + kCombMixBytes;
  if (lane == 0) mbar_expect_tx(ring.full(s), static_cast<uint32_t>(rows * kTokenBytes));
  if (tt >= rows) return;
  const int64_t t = t0 + tt, col = static_cast<int64_t>(items.chunk(i)) * kChunkCols;
  const uint32_t st = ring.base + kPgStageOff + s * kPgStageBytes;
  const bf16_t* res = p.residual + t * p.residual_stride + col;
  for (int j = half * 3; j < (half == 0 ? 3 : kN); ++j) {
    bulk_load(st + (j * kPgTile + tt) * kRowPitch, res + j * p.res_stream_stride, kRowBytes, ring.full(s));
  }
  const uint32_t mix = st + kPgMixOff;
  if (half == 0) {
    bulk_load(mix + tt * kPostMixBytes, p.post_mix + t * p.post_mix_stride, kPostMixBytes, ring.full(s));
  } else {
    bulk_load(st + kPgRes + tt * kRowBytes, p.layer_output + t * p.layer_output_stride + col, kRowBytes, ring.full(s));
    bulk_load(mix + kPgTile * kPostMixBytes + tt * kCombMixBytes, p.comb_mix + t * p.comb_mix_stride, kCombMixBytes,
              ring.full(s));
  }
}

// A post thread of group `group` (thread gt of it): its (token, vector) of the group's items.
__device__ __forceinline__ void post_items(const N4Params& p, const ChunkTileItems& items, const Ring& ring, int group,
                                           int gt) {
  const int tt = gt >> 4, cv = gt & 15;
  for (int i = group; i < items.count; i += kPgGroups) {
    const int s = i % kPgStages;
    const int chunk = items.chunk(i);
    const int64_t t = items.tile(i) * kPgTile + tt;
    const bool valid = t < p.T;
    mbar_wait(ring.full(s), static_cast<uint32_t>((i / kPgStages) & 1));
    unsigned char* st = ring.stage(s);
    uint4 x[kN];
    if (valid) {
      uint4 r[kN];
#pragma unroll
      for (int j = 0; j < kN; ++j) r[j] = *reinterpret_cast<const uint4*>(st + (j * kPgTile + tt) * kRowPitch + cv * 16);
      const uint4 lo = *reinterpret_cast<const uint4*>(st + kPgRes + tt * kRowBytes + cv * 16);
      const float* mix = reinterpret_cast<const float*>(st + kPgMixOff);
      post8(post_weights(mix + tt * kN, mix + kPgTile * kN + tt * kN * kN), r, lo, x);
      bf16_t* out = p.residual_out + t * p.residual_out_stride + static_cast<int64_t>(chunk) * kChunkCols + cv * 8;
#pragma unroll
      for (int j = 0; j < kN; ++j) st16(out + j * p.H, x[j]);
    } else {
      // A padding row (not copied): zeros for the mma, whose rows past p.T are never stored.
#pragma unroll
      for (int j = 0; j < kN; ++j) x[j] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) *reinterpret_cast<uint4*>(st + (j * kPgTile + tt) * kRowPitch + cv * 16) = x[j];
    // The token's 16 threads are 16 consecutive lanes: the fixed-order butterfly.
    const float sq = chunk_squares_butterfly(vector_squares(x));
    if (cv == 0) ring.squares(s)[tt] = sq;
    fence_proxy_async_shared();  // these writes before the bulk copies that refill the stage
    mbar_arrive(ring.posted(s));
  }
}

// An mma thread (mt = 0..127; warp mw = stream mw): the dots of every item, then the item's
// partials and the release of its stage.
__device__ __forceinline__ void mma_items(const N4Params& p, const ChunkTileItems& items, const Ring& ring, int mt) {
  const int lane = mt & 31, mw = mt >> 5;
  const int g = lane >> 2, q = lane & 3;
  const uint2* frag = reinterpret_cast<const uint2*>(ring.smem + kPgFragOff) + mw * kMmaSteps * kNTiles * 32;
  float* red_base = reinterpret_cast<float*>(ring.smem + kPgRedOff);
  if (mw == 0) {
    for (int i = 0; i < kPgStages && i < items.count; ++i) produce(p, items, ring, i, lane);
  }
  int loaded = items.chunk(0);  // its fragments were requested before pdl_wait
  cp_async_wait<0>();
  named_sync(kPgMmaBar, kPgMmaThreads);
  for (int i = 0; i < items.count; ++i) {
    const int s = i % kPgStages;
    const int chunk = items.chunk(i);
    if (chunk != loaded) {
      // Every mma warp read the old fragments before the previous item's barrier below.
      gemm_step::load_fragments<kPgMmaThreads>(p, ring.smem + kPgFragOff, chunk, mt);
      cp_async_commit();
      cp_async_wait<0>();
      named_sync(kPgMmaBar, kPgMmaThreads);
      loaded = chunk;
    }
    mbar_wait(ring.posted(s), static_cast<uint32_t>((i / kPgStages) & 1));
    // A: row lane % 16 of stream mw, k-vector 2 ks + lane / 16 (ldmatrix x4: a0..a3 of m16k16).
    const uint32_t a_row = ring.base + kPgStageOff + s * kPgStageBytes + (mw * kPgTile + (lane & 15)) * kRowPitch + (lane >> 4) * 16;
    float acc[kNTiles][4];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kMmaSteps; ++ks) {
      uint32_t a0, a1, a2, a3;
      ldmatrix_x4(a_row + ks * 32, a0, a1, a2, a3);
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const uint2 b = frag[(ks * kNTiles + nt) * 32 + lane];
        mma_bf16(acc[nt], a0, a1, a2, a3, b.x, b.y);
      }
    }
    // n-tile nt is part nt / 3 of rows (nt % 3) * 8 ..: v = hi + (mid + lo); red[i % 2][mw][token][row].
    float* red = red_base + (i & 1) * kPgRedFloats;
#pragma unroll
    for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float2 v;
        v.x = acc[blk][2 * h] + (acc[3 + blk][2 * h] + acc[6 + blk][2 * h]);
        v.y = acc[blk][2 * h + 1] + (acc[3 + blk][2 * h + 1] + acc[6 + blk][2 * h + 1]);
        *reinterpret_cast<float2*>(&red[(mw * kPgTile + g + 8 * h) * kRows + blk * 8 + 2 * q]) = v;
      }
    }
    // red[i % 2] is written again by item i + 2, after this barrier of item i + 1, which every
    // mma thread reaches after its reads below.
    named_sync(kPgMmaBar, kPgMmaThreads);
    const int64_t t0 = items.tile(i) * kPgTile;
    const int run = tile_rows(p, t0) * kPartial;
    float* dst = partial_at(p, t0, chunk);
    const float* sq = ring.squares(s);
    for (int idx = mt; idx < run; idx += kPgMmaThreads) {
      const int token = idx / kPartial, row = idx - token * kPartial;
      float v;
      if (row < kRows) {
        v = red[token * kRows + row];
#pragma unroll
        for (int w = 1; w < kN; ++w) v += red[(w * kPgTile + token) * kRows + row];
      } else {
        v = sq[token];
      }
      dst[idx] = v;
    }
    mbar_arrive(ring.empty(s));
    if (mw == 0 && i + kPgStages < items.count) {
      mbar_wait(ring.empty(s), static_cast<uint32_t>((i / kPgStages) & 1));  // the other warps' reads
      produce(p, items, ring, i + kPgStages, lane);
    }
  }
}

__global__ void __launch_bounds__(kPgThreads, 1) post_gemm_kernel(const N4Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const ChunkTileItems items(p.T, p.chunks, kPgTile);
  if (items.count <= 0) return;  // block-uniform
  const Ring ring{smem, static_cast<uint32_t>(__cvta_generic_to_shared(smem))};
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    for (int s = 0; s < kPgStages; ++s) {
      mbar_init(ring.full(s), 1);
      mbar_init(ring.posted(s), kPgGroupThreads);
      mbar_init(ring.empty(s), kPgMmaThreads);
    }
    mbar_init_fence();
  }
  const bool mma = tid >= kPgPostThreads;  // warp-uniform
  if (mma) {
    // The first chunk's fragments are weights: their copies overlap the end of the kernel before.
    gemm_step::load_fragments<kPgMmaThreads>(p, smem + kPgFragOff, items.chunk(0), tid - kPgPostThreads);
    cp_async_commit();
  }
  __syncthreads();  // the barriers are initialised
  pdl_wait();       // the residual, the layer output and the mixes may come from the kernel before
  if (tid < kPgPostThreads) {
    post_items(p, items, ring, tid / kPgGroupThreads, tid % kPgGroupThreads);
  } else {
    mma_items(p, items, ring, tid - kPgPostThreads);
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
