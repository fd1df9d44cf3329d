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
// of the (chunk, 16-token tile) items in chunk-major order (ChunkTileItems). Two roles:
//   16 post warps in two groups of 8, group g taking the items i = g mod 2 (one group alone
//     kept too few post8 chains in flight). Thread (token tt, 8-column vector cv) copies its own
//     16-byte vectors of the 4 streams (and lanes cv < 5 the token's 80 bytes of mixes) with
//     cp.async into its group's ring of kPgRaw stages, two items ahead, and loads its vector of
//     the layer output into registers one item ahead;
//     once they have landed it runs post8, stores the new residual to residual_out and into its
//     group's A buffer (rows padded to kRowPitch bytes, so the ldmatrix reads are free of bank
//     conflicts), forms its vector's sum of squares and, with the butterfly over its token's 16
//     lanes, the chunk's, and arrives on the buffer's `posted` barrier. A thread reads only the
//     raw bytes it copied (the mixes: its warp's), so it refills its stage as soon as it has
//     read it. (Bulk copies of 256-byte rows were tried first: ~80 copies an item kept the copy
//     engine busy 3.6 us an item, session 18 calls 2-3.)
//   4 mma warps: warp j waits on `posted`, forms the 24 dots of the tile over stream j's 128
//     columns (72 mma.m16n8k16 against the chunk's B fragments, which stay in shared memory for
//     the block's items of that chunk: 72 KB); the 4 warps' values meet in shared memory, are
//     summed in stream order and stored with the squares as the item's run of 16 x 25 floats;
//     then the warps release the A buffer (`empty`), which the group waits for two items later.
// Accumulation: the canonical order of config.cuh, as gemm_kernel: per token and stream one mma
// chain per n-tile from zero over the 8 k16 steps, v = hi + (mid + lo), ((v_0 + v_1) + v_2) + v_3;
// the squares vector_squares then chunk_squares_butterfly (canonical.cuh). finalize_kernel then
// reads the partials as it reads gemm_kernel's.
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows and 16-byte aligned mixes rows
// (post_mix, comb_mix), a post stage with its residual_out; sm_90+ (mbarriers; the staged plan
// picks it there), 221.7 KB of dynamic shared memory.
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
constexpr int kPgRaw = 3;                                     // raw stages a group: one read, two in flight
constexpr int kPgMmaBar = 1;                                  // the mma warps' named barrier
constexpr int kRowBytes = kChunkCols * 2;                     // a token's 128 columns of one row
constexpr int kRowPitch = kRowBytes + 16;                     // an A row, padded: 8 rows hit 32 banks
constexpr int kPostMixBytes = kN * 4, kCombMixBytes = kN * kN * 4;
// A raw stage: the streams [j][tt][256 B], post [tt][4], comb [tt][16]. (The layer output goes
// to registers, one item ahead: with it the stages would not fit.)
constexpr int kRawMix = kN * kPgTile * kRowBytes;
constexpr int kRawBytes = kRawMix + kPgTile * (kPostMixBytes + kCombMixBytes);
constexpr int kABytes = kN * kPgTile * kRowPitch;             // an A buffer: [j][tt][pitch]
constexpr int kPgRedFloats = kN * kPgTile * kRows;            // [warp][token][24]
// Shared memory: the barriers, the B fragments, the raw rings, the A buffers, red[2], squares.
constexpr int kPgFragOff = 64;  // after the barriers
constexpr int kPgRawOff = kPgFragOff + kFragBytes;
constexpr int kPgAOff = kPgRawOff + kPgGroups * kPgRaw * kRawBytes;
constexpr int kPgRedOff = kPgAOff + kPgGroups * kABytes;
constexpr int kPgSqOff = kPgRedOff + 2 * kPgRedFloats * 4;
constexpr int kPgSmem = kPgSqOff + kPgGroups * kPgTile * 4;
static_assert(2 * kPgGroups * 8 <= kPgFragOff, "barriers");
static_assert(kPgRawOff % 16 == 0 && kRawBytes % 16 == 0 && kPgAOff % 16 == 0 && kABytes % 16 == 0, "16-byte copies");
static_assert(kPgSmem <= 227 * 1024, "post_gemm_kernel shared memory");

// The block's shared memory by part. Item i belongs to group i % 2 and uses its A buffer.
struct Smem {
  unsigned char* smem;
  uint32_t base;  // smem as a shared-memory address
  __device__ uint32_t posted(int a) const { return base + 8 * a; }
  __device__ uint32_t empty(int a) const { return base + 8 * (kPgGroups + a); }
  __device__ unsigned char* raw(int group, int stage) const {
    return smem + kPgRawOff + (group * kPgRaw + stage) * kRawBytes;
  }
  __device__ unsigned char* a_buffer(int a) const { return smem + kPgAOff + a * kABytes; }
  __device__ uint32_t a_addr(int a) const { return base + kPgAOff + a * kABytes; }
  __device__ float* squares(int a) const { return reinterpret_cast<float*>(smem + kPgSqOff) + a * kPgTile; }
};

__device__ __forceinline__ int tile_rows(const N4Params& p, int64_t t0) {
  return static_cast<int>(p.T - t0 < kPgTile ? p.T - t0 : kPgTile);
}

// Thread (tt, cv)'s copies of item i into `raw` (one cp.async group, committed by the caller):
// its vector of the 4 streams and, for cv < 5, a 16-byte piece of the token's mixes (cv 0
// post_mix, cv 1..4 comb_mix). Nothing for a token past p.T.
__device__ __forceinline__ void copy_unit(const N4Params& p, const ChunkTileItems& items, int i, unsigned char* raw,
                                          int tt, int cv) {
  const int64_t t = items.tile(i) * kPgTile + tt;
  if (t >= p.T) return;
  const bf16_t* res = p.residual + t * p.residual_stride + static_cast<int64_t>(items.chunk(i)) * kChunkCols + cv * 8;
#pragma unroll
  for (int j = 0; j < kN; ++j) cp_async16_keep(raw + (j * kPgTile + tt) * kRowBytes + cv * 16, res + j * p.res_stream_stride);
  if (cv == 0) {
    cp_async16_keep(raw + kRawMix + tt * kPostMixBytes, p.post_mix + t * p.post_mix_stride);
  } else if (cv <= kN) {
    cp_async16_keep(raw + kRawMix + kPgTile * kPostMixBytes + tt * kCombMixBytes + (cv - 1) * 16,
                    p.comb_mix + t * p.comb_mix_stride + (cv - 1) * kN);
  }
}

// Thread (tt, cv)'s vector of item i's layer output (another kernel wrote it: through L2),
// zeros past p.T.
__device__ __forceinline__ uint4 load_lo(const N4Params& p, const ChunkTileItems& items, int i, int tt, int cv) {
  const int64_t t = items.tile(i) * kPgTile + tt;
  if (i >= items.count || t >= p.T) return make_uint4(0, 0, 0, 0);
  return ldcg16(p.layer_output + t * p.layer_output_stride + static_cast<int64_t>(items.chunk(i)) * kChunkCols + cv * 8);
}

// A post thread of group `group` (thread gt of it): its (token, vector) of the group's items
// i = group, group + 2, ..; its k-th item in raw stage k % kPgRaw, refilled with the group's item
// kPgRaw ahead once post8 has read it.
__device__ __forceinline__ void post_items(const N4Params& p, const ChunkTileItems& items, const Smem& sm, int group,
                                           int gt) {
  const int tt = gt >> 4, cv = gt & 15;
#pragma unroll
  for (int k = 0; k < kPgRaw; ++k) {
    const int i = group + kPgGroups * k;
    if (i < items.count) copy_unit(p, items, i, sm.raw(group, k), tt, cv);
    cp_async_commit();
  }
  uint4 lo_next = load_lo(p, items, group, tt, cv);
  for (int i = group, k = 0; i < items.count; i += kPgGroups, ++k) {
    const int chunk = items.chunk(i);
    const int64_t t = items.tile(i) * kPgTile + tt;
    const bool valid = t < p.T;
    unsigned char* raw = sm.raw(group, k % kPgRaw);
    const uint4 lo = lo_next;
    lo_next = load_lo(p, items, i + kPgGroups, tt, cv);
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
    if (next < items.count) copy_unit(p, items, next, raw, tt, cv);
    cp_async_commit();
    // The token's 16 threads are 16 consecutive lanes: the fixed-order butterfly.
    const float sq = chunk_squares_butterfly(vector_squares(x));
    // The group's A buffer: free once the mma warps are done with the group's previous item.
    if (k > 0) mbar_wait(sm.empty(group), static_cast<uint32_t>((k - 1) & 1));
    unsigned char* a = sm.a_buffer(group);
#pragma unroll
    for (int j = 0; j < kN; ++j) *reinterpret_cast<uint4*>(a + (j * kPgTile + tt) * kRowPitch + cv * 16) = x[j];
    if (cv == 0) sm.squares(group)[tt] = sq;
    mbar_arrive(sm.posted(group));
  }
}

// An mma thread (mt = 0..127; warp mw = stream mw): the dots of every item, then the item's
// partials and the release of its A buffer.
__device__ __forceinline__ void mma_items(const N4Params& p, const ChunkTileItems& items, const Smem& sm, int mt) {
  const int lane = mt & 31, mw = mt >> 5;
  const int g = lane >> 2, q = lane & 3;
  const uint2* frag = reinterpret_cast<const uint2*>(sm.smem + kPgFragOff) + mw * kMmaSteps * kNTiles * 32;
  float* red_base = reinterpret_cast<float*>(sm.smem + kPgRedOff);
  int loaded = items.chunk(0);  // its fragments were requested before pdl_wait
  cp_async_wait<0>();
  named_sync(kPgMmaBar, kPgMmaThreads);
  for (int i = 0; i < items.count; ++i) {
    const int a = i % kPgGroups;
    const int chunk = items.chunk(i);
    if (chunk != loaded) {
      // Every mma warp read the old fragments before the previous item's barrier below.
      gemm_step::load_fragments<kPgMmaThreads>(p, sm.smem + kPgFragOff, chunk, mt);
      cp_async_commit();
      cp_async_wait<0>();
      named_sync(kPgMmaBar, kPgMmaThreads);
      loaded = chunk;
    }
    mbar_wait(sm.posted(a), static_cast<uint32_t>((i / kPgGroups) & 1));
    // A: row lane % 16 of stream mw, k-vector 2 ks + lane / 16 (ldmatrix x4: a0..a3 of m16k16).
    const uint32_t a_row = sm.a_addr(a) + (mw * kPgTile + (lane & 15)) * kRowPitch + (lane >> 4) * 16;
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
    const float* sq = sm.squares(a);
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
    mbar_arrive(sm.empty(a));
  }
}

__global__ void __launch_bounds__(kPgThreads, 1) post_gemm_kernel(const N4Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const ChunkTileItems items(p.T, p.chunks, kPgTile);
  if (items.count <= 0) return;  // block-uniform
  const Smem sm{smem, static_cast<uint32_t>(__cvta_generic_to_shared(smem))};
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    for (int a = 0; a < kPgGroups; ++a) {
      mbar_init(sm.posted(a), kPgGroupThreads);
      mbar_init(sm.empty(a), kPgMmaThreads);
    }
    mbar_init_fence();
  }
  const bool post = tid < kPgPostThreads;  // warp-uniform
  if (!post) {
    // The first chunk's fragments are weights: their copies overlap the end of the kernel before.
    gemm_step::load_fragments<kPgMmaThreads>(p, smem + kPgFragOff, items.chunk(0), tid - kPgPostThreads);
    cp_async_commit();
  }
  __syncthreads();  // the barriers are initialised
  pdl_wait();       // the residual, the layer output and the mixes may come from the kernel before
  if (post) {
    post_items(p, items, sm, tid / kPgGroupThreads, tid % kPgGroupThreads);
  } else {
    mma_items(p, items, sm, tid - kPgPostThreads);
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
